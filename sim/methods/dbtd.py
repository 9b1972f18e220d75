"""DBTD + stochastic pruning (Ye et al., ECCV 2020) and the top-k (meProp) baseline, unstructured.

One pass estimates sigma from mean |g|; tau = Phi^-1((1 + p) / 2) * sigma_hat; a second pass keeps
|g| >= tau and promotes each smaller value to sign(g) * tau with probability |g| / tau, which keeps
the estimate unbiased. The sigma estimator is an explicit option because the paper is ambiguous
(METHODS.md 1): `paper` sqrt(2/pi)*mean|g| (as printed), `unbiased` sqrt(pi/2)*mean|g|, `meanabs`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sim.methods.base import CSR, MethodResult, WorkAccount
from sim.methods.rng import block_key, uniform_at, uniform_in_block, uniform_np
from sim.methods.shared import SIGMA_FACTORS, dbtd_tau

# ---- kernels --------------------------------------------------------------------------------


LANES = 16  # independent float64 partial sums: a fixed order that LLVM can vectorize


@njit(cache=True)
def abs_sum(g):
    """Sum of |g| over a flat float32 array in float64, with LANES interleaved partial sums."""
    acc = np.zeros(LANES, np.float64)
    n = g.size
    full = n - n % LANES
    for i in range(0, full, LANES):
        for k in range(LANES):
            acc[k] += abs(np.float64(g[i + k]))
    for i in range(full, n):
        acc[i - full] += abs(np.float64(g[i]))
    s = 0.0
    for k in range(LANES):
        s += acc[k]
    return s


@njit(cache=True, parallel=True)
def abs_sum_parallel(g):
    """abs_sum over 64 blocks in parallel, each summed in abs_sum's order, then the blocks in order."""
    nblocks = 64
    n = g.size
    part = np.zeros(nblocks, np.float64)
    for b in prange(nblocks):
        part[b] = abs_sum(g[n * b // nblocks:n * (b + 1) // nblocks])
    s = 0.0
    for b in range(nblocks):
        s += part[b]
    return s


@njit(cache=True, inline="always")
def _pruned(x, tau, r):
    # keep |x| >= tau; below it, sign(x) * tau with probability |x| / tau, else 0 (no branches)
    a = abs(x)
    promoted = np.float32(tau) if x > 0 else np.float32(-tau)
    return x if a >= tau else (promoted if a > r * tau else np.float32(0.0))


@njit(cache=True)
def _prune_block(g, tau, key, out, offset):
    # Every element draws its uniform (cheaper than mispredicting which need one). offset is
    # g[0]'s index in the whole tensor, so a block draws the same numbers as a full pass.
    nnz = 0
    below = 0
    n = g.size
    if n == 0:
        return nnz, below
    straddles = (offset >> 32) != ((offset + n - 1) >> 32)
    bkey = block_key(key, offset)
    for i in range(n):
        x = g[i]
        # within one 2^32 run of indices half of the hashing is the same for every element
        r = uniform_at(key, offset + i) if straddles else uniform_in_block(bkey, offset + i)
        v = _pruned(x, tau, r)
        out[i] = v
        nnz += v != 0
        below += abs(x) < tau
    return nnz, below


@njit(cache=True)
def stochastic_prune(g, tau, key, out):
    """Stochastic pruning of flat float32 g into out; returns (nonzeros, sub-threshold draws)."""
    return _prune_block(g, tau, key, out, 0)


@njit(cache=True, parallel=True)
def stochastic_prune_parallel(g, tau, key, out):
    """Multi-threaded stochastic_prune (same result: each draw depends only on its index).

    Blocks call the serial kernel on contiguous slices: a loop body inlined into the parfor lost
    vectorization and ran several times slower than one thread.
    """
    nblocks = 64
    n = g.size
    counts = np.zeros((nblocks, 2), np.int64)
    for b in prange(nblocks):
        lo = n * b // nblocks
        hi = n * (b + 1) // nblocks
        c, d = _prune_block(g[lo:hi], tau, key, out[lo:hi], lo)
        counts[b, 0] = c
        counts[b, 1] = d
    return counts[:, 0].sum(), counts[:, 1].sum()


def stochastic_prune_np(g: np.ndarray, tau: np.float32, key: int) -> np.ndarray:
    """Plain-NumPy reference of stochastic_prune."""
    g = np.asarray(g, dtype=np.float32).reshape(-1)
    a = np.abs(g)
    r = uniform_np(key, np.arange(g.size))
    promote = (a < tau) & (a > r * tau)
    return np.where(a >= tau, g, np.where(promote, np.sign(g) * tau, np.float32(0))).astype(np.float32)


@njit(cache=True)
def csr_from_dense(x2d):
    """CSR arrays of a C-contiguous 2-D float32 array."""
    rows, cols = x2d.shape
    indptr = np.zeros(rows + 1, np.int64)
    for r in range(rows):
        c = 0
        for j in range(cols):
            if x2d[r, j] != 0:
                c += 1
        indptr[r + 1] = indptr[r] + c
    nnz = indptr[rows]
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    k = 0
    for r in range(rows):
        for j in range(cols):
            v = x2d[r, j]
            if v != 0:
                indices[k] = j
                data[k] = v
                k += 1
    return indptr, indices, data


def to_csr(pruned: np.ndarray) -> CSR:
    """CSR of an NCHW (or N x F) tensor viewed as (N*C) x (H*W): one row per (sample, channel)."""
    x = np.ascontiguousarray(pruned, dtype=np.float32)
    rows = x.shape[0] * x.shape[1] if x.ndim == 4 else x.shape[0]
    x2 = x.reshape(rows, -1)
    indptr, indices, data = csr_from_dense(x2)
    return CSR(indptr, indices, data, (int(x2.shape[0]), int(x2.shape[1])))


# ---- methods --------------------------------------------------------------------------------


def dbtd(g: np.ndarray, p: float, key: int, sigma: str = "paper", build_csr: bool = True,
         parallel: bool = False, relu_masked: bool = False) -> MethodResult:
    """DBTD threshold + stochastic pruning of one tensor (any layout; element order = memory order).

    relu_masked: g is the dO of a Conv-ReLU layer, i.e. ReLU' times the gradient DBTD really
    targets (the next layer's dI, METHODS.md 1), which a dO trace does not hold. Pruning that dI
    and then masking equals pruning g's nonzeros with tau from the mean |dI|; the masked-out
    positions are taken to be like the rest, so the mean runs over g's nonzeros only. Zeros stay.
    """
    flat = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
    n = flat.size
    # the parallel sum groups terms differently: tau may differ from the serial one in its last bit
    total = abs_sum_parallel(flat) if parallel else abs_sum(flat)
    count = max(1, int(np.count_nonzero(flat))) if relu_masked else n
    mean_abs = total / count
    tau = dbtd_tau(mean_abs, p, sigma)
    out = np.empty_like(flat)
    nnz, draws = (stochastic_prune_parallel if parallel else stochastic_prune)(flat, tau, key, out)
    pruned = out.reshape(np.shape(g))
    work = WorkAccount(elems_read=2 * n, elems_written=n, compares=n + draws, random_draws=draws,
                       flops=2 * n + draws, passes=2)
    # The CSR is attached for engines that run sparse x dense; building it is their kernel (its
    # cost depends on the layout they need), so it is not in this work account.
    # the threshold-and-draw pass needs tau, i.e. mean |g| over the whole tensor: a fused producer
    # epilogue can only add its tile's |g| sum (the first pass), this pass stays separate
    after = WorkAccount(elems_read=n, elems_written=n, compares=n + draws, random_draws=draws,
                        flops=draws, passes=1)
    csr = to_csr(pruned) if build_csr else None
    return MethodResult("dbtd", {"p": p, "sigma": sigma}, "csr", nnz / n, work, pruned=pruned,
                        csr=csr, after_reduction=after, extra={"tau": float(tau), "mean_abs": float(mean_abs),
                                        **({"tau_from": "nonzeros (Conv-ReLU dO)"}
                                           if relu_masked else {})})


@njit(cache=True, nogil=True)
def _kth_largest(a, k):
    """(the k-th largest of a, how many are larger) for a float32 array of values >= 0 (|g|), the
    value np.partition(a, n - k)[n - k] gives: a radix select on the bit patterns, which order
    non-negative floats as their values do (NaNs above +inf, as numpy sorts them). Two counting
    passes (high 16 bits, then the low 16 within the k-th's bucket) instead of an introselect."""
    bits = a.view(np.uint32)
    n = bits.size
    hist = np.zeros(65536, np.int64)
    for i in range(n):
        hist[bits[i] >> 16] += 1
    above, hi = 0, 65535
    while above + hist[hi] < k:
        above += hist[hi]
        hi -= 1
    hist[:] = 0
    for i in range(n):
        if bits[i] >> 16 == hi:
            hist[bits[i] & 0xFFFF] += 1
    lo = 65535
    while above + hist[lo] < k:
        above += hist[lo]
        lo -= 1
    kth = np.empty(1, np.uint32)
    kth[0] = (np.uint32(hi) << np.uint32(16)) | np.uint32(lo)
    return kth.view(np.float32)[0], above


@njit(cache=True, nogil=True)
def _topk_mask(a, k):
    """Indices of the k largest a (float32 >= 0; ties to the lower index), via a radix select
    (_kth_largest) and one scan."""
    n = a.size
    if k >= n:
        return np.arange(n)
    kth, above = _kth_largest(a, k)
    need_eq = k - above
    keep = np.empty(k, np.int64)
    j = 0
    for i in range(n):
        if a[i] > kth:
            keep[j] = i
            j += 1
        elif a[i] == kth and need_eq > 0:
            keep[j] = i
            j += 1
            need_eq -= 1
    return keep


def topk_np(g: np.ndarray, k: int) -> np.ndarray:
    """Plain-NumPy reference: keep the k largest |g| (ties to the lower index)."""
    flat = np.asarray(g, dtype=np.float32).reshape(-1)
    order = np.argsort(-np.abs(flat), kind="stable")[:k]
    out = np.zeros_like(flat)
    out[order] = flat[order]
    return out.reshape(np.shape(g))


def _csr_of_kept(idx: np.ndarray, vals: np.ndarray, shape) -> CSR:
    """to_csr of a tensor that is zero except `vals` at the ascending flat indices `idx` (all
    nonzero), from those k entries instead of a scan of the dense tensor."""
    rows = shape[0] * shape[1] if len(shape) == 4 else shape[0]
    cols = int(np.prod(shape)) // rows if rows else 0
    r, c = np.divmod(idx, cols) if cols else (idx, idx)
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
    return CSR(indptr, c.astype(np.int32), vals.astype(np.float32), (int(rows), int(cols)))


def topk(g: np.ndarray, keep: float, build_csr: bool = True) -> MethodResult:
    """meProp-style baseline: keep the fraction `keep` of elements with the largest |g| per layer."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    flat = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
    n = flat.size
    k = max(1, int(math.ceil(keep * n)))
    idx = _topk_mask(np.abs(flat), k)
    vals = flat[idx]
    out = np.zeros_like(flat)
    out[idx] = vals
    pruned = out.reshape(np.shape(g))
    nz = vals != 0
    nnz = int(nz.sum())
    # partition (introselect, ~2n compares on average) + a selection scan
    work = WorkAccount(elems_read=3 * n, elems_written=n, compares=3 * n, flops=n, passes=3)
    csr = _csr_of_kept(idx[nz], vals[nz], np.shape(g)) if build_csr else None
    return MethodResult("topk", {"keep": keep}, "csr", nnz / n, work, pruned=pruned, csr=csr,
                        extra={"k": k})


# ---- the registered methods -----------------------------------------------------------------

from sim.methods.base import dense_result  # noqa: E402
from sim.methods.info import MethodInfo  # noqa: E402
from sim.methods.registry import (FUSED, NOT_MODELLED, TIME_ONLY, Method, Param,  # noqa: E402
                                  choice, fraction, rate)

# Ye et al. prune conv-layer gradients only; fc=prune opts the FC layers in
_FC = {"fc": Param(choice("dense", "prune"), "dense", quiet=True)}


class _Unstructured(Method):
    """DBTD and top-k: FC layers stay dense unless fc=prune; `prune` does the rest."""

    def apply(self, spec, layer, g, **ctx):
        p = dict(spec.params)
        if layer.op == "fc" and p["fc"] == "dense":
            return dense_result(g, self.id, p, "not pruned: DBTD / top-k leave FC layers dense "
                                "(fc=prune)")
        return self.prune(p, layer, g, **ctx)

    def prune(self, p, layer, g, **ctx):
        raise NotImplementedError


class Dbtd(_Unstructured):
    def prune(self, p, layer, g, *, key, build_csr=True, **ctx):
        # a Conv-ReLU layer's dO is ReLU'-masked: DBTD's real target is the dI behind it
        return dbtd(g, p["p"], key, p["sigma"], build_csr=build_csr,
                    relu_masked=layer.dbtd_target == "dI")

    def torch_twin(self, spec, layer):
        from sim.methods import torch_ops as T
        return T.DbtdMethod(spec.get("p"), spec.get("sigma"), target=layer.dbtd_target)

    def torch_fc_prune(self, spec, layer):
        """fc=prune: prune the Linear output's gradient as the offline kernel prunes an FC dO
        (for a ReLU FC layer without BN, tau from the mean |dO| over its nonzeros)."""
        if spec.get("fc") != "prune":
            return None
        from sim.methods import torch_ops as T
        torch = T.torch
        p, sigma, masked = spec.get("p"), spec.get("sigma"), layer.dbtd_target == "dI"

        def prune(g, key):
            g32 = g.to(torch.float32)
            nz = g32[g32 != 0] if masked else g32
            tau = T.dbtd_tau_torch(nz if nz.numel() else g32, p, sigma)
            return T.stochastic_prune_torch(g32, tau, key).to(g.dtype)
        return prune


class Topk(_Unstructured):
    def prune(self, p, layer, g, *, build_csr=True, **ctx):
        return topk(g, p["keep"], build_csr=build_csr)

    def torch_twin(self, spec, layer):
        from sim.methods import torch_ops as T
        return T.DbtdMethod(0.5, target=layer.dbtd_target, topk=spec.get("keep"))

    def torch_fc_prune(self, spec, layer):
        if spec.get("fc") != "prune":
            return None
        from sim.methods import torch_ops as T
        keep = spec.get("keep")
        return lambda g, key: T.topk_torch(g, keep)


FAMILY = (
    Dbtd(MethodInfo("dbtd", "dbtd", "dO", ("agbp", "wgc"), "not-modelled", fc_option=True),
         {"p": Param(rate, 0.99), "sigma": Param(choice(*SIGMA_FACTORS), "paper"), **_FC,
          **FUSED},
         {"train": {k: NOT_MODELLED for k in ("p", "sigma", "fc", "fused")},
          "prune": {"fused": TIME_ONLY}, "capture": {"fused": TIME_ONLY}}),
    Topk(MethodInfo("topk", "topk", "dO", ("agbp", "wgc"), "not-modelled", fc_option=True),
         {"keep": Param(fraction, 0.01), **_FC},
         {"train": {k: NOT_MODELLED for k in ("keep", "fc")}}),
)
