"""SDGP (McDanel et al. 2022): N:M structured pruning of dO along channels, before AGBP only.

Groups are m consecutive channels at one (sample, h, w) position (channels-last view, as sparse
tensor cores want the reduction dimension grouped); n are kept: `random` (no rescale), `mag` (n
largest |x|, ties to the lower channel), `resmag` (mag, then rescale so the L1 norm over the spatial
dimensions is preserved per (sample, channel) as in the authors' code, or per channel over batch and
space as the paper's text says: `rescale=channel`). C not divisible by m: the last group holds the
remaining channels and keeps min(n, its size) of them.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.methods.base import MethodResult, NMStructure, WorkAccount
from sim.methods.rng import block_key, uniform_at, uniform_in_block, uniform_np
from sim.methods.shared import parse_nm

MODES = {"random": 0, "mag": 1, "resmag": 1}
RESCALE_EPS = np.float32(1e-4)


def bits_per_index(m: int) -> int:
    return max(1, math.ceil(math.log2(m)))


@njit(cache=True)
def _abs_sum_f64(x, b, c):
    # 8 interleaved float64 partial sums: a fixed order that still vectorizes
    acc = np.zeros(8, np.float64)
    HW = x.shape[2]
    full = HW - HW % 8
    for s in range(0, full, 8):
        for k in range(8):
            acc[k] += abs(np.float64(x[b, c, s + k]))
    for s in range(full, HW):
        acc[s - full] += abs(np.float64(x[b, c, s]))
    return acc.sum()


@njit(cache=True)
def _abs_sum_kept_f64(x, rank, j, keep, b, c):
    # _abs_sum_f64 of the pruned row (kept values, zeros elsewhere), in the same order
    acc = np.zeros(8, np.float64)
    HW = x.shape[2]
    full = HW - HW % 8
    for s in range(0, full, 8):
        for k in range(8):
            # a multiply by the 0/1 mask (not a select) keeps this loop vectorized
            acc[k] += abs(np.float64(x[b, c, s + k])) * np.float64(rank[j, s + k] < keep)
    for s in range(full, HW):
        acc[s - full] += abs(np.float64(x[b, c, s])) * np.float64(rank[j, s] < keep)
    return acc.sum()


@njit(cache=True)
def nm_prune(x, n, m, mode, key, out, vals, idxs, meta, bits, l1_in, l1_kept, want_l1, write_out):
    """Prune x (N, C, HW) float32 into out, in one pass over x.

    mode 0 draws one uniform per element (by its NCHW flat index) and keeps the n largest draws;
    mode 1 keeps the n largest |x|. Ties go to the lower channel. Kept values and channel offsets
    go to vals/idxs (N, G, n, HW); packed offsets to meta, laid out (N, words, HW) so the packing
    loop runs along HW (the caller transposes to pack_metadata_np's (N, HW, words)); with want_l1, per-(sample, channel) L1 sums of x and of the kept values to
    l1_in/l1_kept. Ranks come from all-pairs comparisons along HW and slots from prefix counts, so every
    inner loop runs along HW without branches and vectorizes.
    Returns the count of nonzeros kept.
    """
    N, C, HW = x.shape
    G = (C + m - 1) // m
    keyv = np.empty((m, HW), np.float32)
    rank = np.empty((m, HW), np.int32)
    pos = np.empty((m, HW), np.int32)    # kept channels before j at s: j's slot if j is kept
    cnt = np.empty(HW, np.int32)
    vrow = np.empty(HW, np.float32)
    irow = np.empty(HW, np.uint32)
    nnz = 0
    for b in range(N):
        for g in range(G):
            c0 = g * m
            mm = min(m, C - c0)
            keep = min(n, mm)
            for j in range(mm):
                if mode == 0:
                    base = (b * C + c0 + j) * HW
                    if (base >> 32) == ((base + HW - 1) >> 32):   # the usual case: one hash each
                        bkey = block_key(key, base)
                        for s in range(HW):
                            keyv[j, s] = uniform_in_block(bkey, base + s)
                    else:
                        for s in range(HW):
                            keyv[j, s] = uniform_at(key, base + s)
                else:
                    for s in range(HW):
                        keyv[j, s] = abs(x[b, c0 + j, s])
                rank[j, :] = 0
            for j in range(mm):
                for i in range(mm):
                    if i < j:
                        for s in range(HW):
                            rank[j, s] += keyv[i, s] >= keyv[j, s]
                    elif i > j:
                        for s in range(HW):
                            rank[j, s] += keyv[i, s] > keyv[j, s]
            # slots by prefix count of kept channels; a dropped channel gets slot n (no match below)
            cnt[:] = 0
            for j in range(mm):
                for s in range(HW):
                    k = rank[j, s] < keep
                    pos[j, s] = cnt[s] if k else n
                    cnt[s] += k
            if write_out:  # the pruned dense tensor: for checks; hardware uses vals + meta
                for j in range(mm):
                    for s in range(HW):
                        out[b, c0 + j, s] = x[b, c0 + j, s] if rank[j, s] < keep else np.float32(0.0)
            for t in range(n):
                if t >= keep:  # short last group: padding slots
                    vals[b, g, t, :] = 0
                    idxs[b, g, t, :] = 0
                    continue
                vrow[:] = 0
                irow[:] = 0
                for j in range(mm):
                    for s in range(HW):
                        hit = pos[j, s] == t
                        vrow[s] += x[b, c0 + j, s] if hit else np.float32(0.0)
                        irow[s] += np.uint32(j) if hit else np.uint32(0)
                off = (g * n + t) * bits
                w = off // 32
                sh = np.uint32(off % 32)
                for s in range(HW):
                    vals[b, g, t, s] = vrow[s]
                    idxs[b, g, t, s] = irow[s]
                    nnz += vrow[s] != 0
                    meta[b, w, s] |= irow[s] << sh
                if off % 32 + bits > 32:
                    sh2 = np.uint32(32 - off % 32)
                    for s in range(HW):
                        meta[b, w + 1, s] |= irow[s] >> sh2
            if want_l1:
                for j in range(mm):
                    l1_in[b, c0 + j] = _abs_sum_f64(x, b, c0 + j)
                    l1_kept[b, c0 + j] = _abs_sum_kept_f64(x, rank, j, keep, b, c0 + j)
    return nnz


def nm_prune_np(x: np.ndarray, n: int, m: int, mode: str, key: int) -> np.ndarray:
    """Plain-NumPy reference of nm_prune's pruned tensor (x is N, C, HW)."""
    x = np.asarray(x, dtype=np.float32)
    N, C, HW = x.shape
    G = -(-C // m)
    if mode == "random":
        keys = uniform_np(key, np.arange(N * C * HW)).reshape(N, C, HW)
    else:
        keys = np.abs(x)
    padded = np.full((N, G * m, HW), -1.0, np.float32)  # padding never beats a real channel
    padded[:, :C] = keys
    grp = padded.reshape(N, G, m, HW)
    order = np.argsort(-grp, axis=2, kind="stable")[:, :, :n]
    mask = np.zeros_like(grp, dtype=bool)
    np.put_along_axis(mask, order, True, axis=2)
    mask = mask.reshape(N, G * m, HW)[:, :C] & (np.arange(C)[None, :, None] < C)
    return np.where(mask, x, np.float32(0))


def pack_metadata_np(idxs: np.ndarray, bits: int) -> np.ndarray:
    """Plain-NumPy reference of the metadata nm_prune packs: idxs (N, G, n, HW) -> (N, HW, words).

    Group g's t-th index sits at bit (g*n + t)*bits of its (sample, position) row, little-endian,
    straddling words when bits does not divide 32; for 2:4 that is PTX mma.sp's 4 bits per group.
    """
    N, G, n, HW = idxs.shape
    words = (G * n * bits + 31) // 32
    wide = np.zeros((N, HW, words + 1), np.uint64)
    for g in range(G):
        for t in range(n):
            off = (g * n + t) * bits
            w, sh = divmod(off, 32)
            v = idxs[:, g, t, :].astype(np.uint64)
            wide[:, :, w] |= (v << np.uint64(sh)) & np.uint64(0xFFFFFFFF)
            if sh + bits > 32:
                wide[:, :, w + 1] |= v >> np.uint64(32 - sh)
    return wide[:, :, :words].astype(np.uint32)


def unpack_metadata(meta: np.ndarray, G: int, n: int, bits: int) -> np.ndarray:
    """Channel offsets (N, G, n, HW) back from packed metadata (N, HW, words)."""
    N, HW, words = meta.shape
    out = np.zeros((N, G, n, HW), np.uint8)
    wide = np.concatenate([meta.astype(np.uint64), np.zeros((N, HW, 1), np.uint64)], axis=2)
    for g in range(G):
        for t in range(n):
            off = (g * n + t) * bits
            w, sh = divmod(off, 32)
            v = wide[:, :, w] >> np.uint64(sh)
            if sh + bits > 32:
                v |= wide[:, :, w + 1] << np.uint64(32 - sh)
            out[:, g, t, :] = (v & np.uint64((1 << bits) - 1)).astype(np.uint8)
    return out


@njit(cache=True)
def apply_channel_scale(out, vals, idxs, scale, m):
    """Multiply pruned values by their channel's scale (scale is (N, C), or (1, C) for all samples);
    `out` may be empty (no dense output kept)."""
    N, G, n, HW = vals.shape
    C = scale.shape[1]
    for b in range(N):
        row = b if scale.shape[0] == N else 0
        if out.shape[0] == N:
            for c in range(C):
                f = scale[row, c]
                for s in range(HW):
                    out[b, c, s] *= f
        for g in range(G):
            for t in range(n):
                for s in range(HW):
                    c = min(g * m + idxs[b, g, t, s], C - 1)
                    vals[b, g, t, s] *= scale[row, c]


def resmag_scale_np(x: np.ndarray, pruned: np.ndarray, per_sample: bool = True) -> np.ndarray:
    """Plain-NumPy reference of the resmag rescale factors for (N, C, HW) tensors."""
    num = np.abs(x.astype(np.float64)).sum(axis=2)
    den = np.abs(pruned.astype(np.float64)).sum(axis=2)
    if per_sample:
        return (num / (den + 1e-4)).astype(np.float32)
    return (num.sum(0) / (den.sum(0) + 1e-4)).astype(np.float32)[None, :]


def sdgp(g: np.ndarray, nm: str | tuple[int, int], mode: str, key: int, layout: str = "nchw",
         rescale: str = "sample-channel", dense_output: bool = True) -> MethodResult:
    """SDGP pruning of one dO tensor. layout: nchw (traces) or nhwc; 2-D (N, F) FC tensors are
    treated as N x F x 1 x 1 (the authors never prune linear layers; callers decide).

    The hardware operand is the compressed structure (values + metadata); dense_output=False
    skips writing the pruned tensor in dense form (result.pruned is then None)."""
    if mode not in MODES:
        raise ValueError(f"SDGP mode must be random, mag or resmag, got {mode!r}")
    if rescale not in ("sample-channel", "channel"):
        raise ValueError(f"rescale must be sample-channel or channel, got {rescale!r}")
    n, m = parse_nm(nm) if isinstance(nm, str) else nm
    arr = np.asarray(g, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None, None]
    if arr.ndim != 4:
        raise ValueError(f"expected a 4-D tensor, got shape {arr.shape}")
    if layout == "nhwc":
        arr = arr.transpose(0, 3, 1, 2)
    elif layout != "nchw":
        raise ValueError(f"layout must be nchw or nhwc, got {layout!r}")
    N, C, H, W = arr.shape
    HW = H * W
    x = np.ascontiguousarray(arr).reshape(N, C, HW)
    G = -(-C // m)
    bits = bits_per_index(m)
    out = np.empty_like(x) if dense_output else np.empty((0, 0, 0), np.float32)
    vals = np.empty((N, G, n, HW), np.float32)
    idxs = np.empty((N, G, n, HW), np.uint8)
    meta_t = np.zeros((N, (G * n * bits + 31) // 32, HW), np.uint32)
    l1_in = np.empty((N, C), np.float64)
    l1_kept = np.empty((N, C), np.float64)
    nnz = nm_prune(x, n, m, MODES[mode], key, out, vals, idxs, meta_t, bits, l1_in, l1_kept,
                   mode == "resmag", dense_output)
    meta = np.ascontiguousarray(meta_t.transpose(0, 2, 1))
    total = x.size
    kept_slots = N * HW * sum(min(n, C - g * m) for g in range(G))
    work = WorkAccount(elems_read=total, elems_written=kept_slots, bytes_metadata=meta.nbytes,
                       compares=kept_slots * m, random_draws=total if mode == "random" else 0,
                       passes=1)
    scale = None
    after = WorkAccount()
    if mode == "resmag":
        if rescale == "sample-channel":
            scale = (l1_in / (l1_kept + 1e-4)).astype(np.float32)
        else:
            scale = (l1_in.sum(0) / (l1_kept.sum(0) + 1e-4)).astype(np.float32)[None, :]
        apply_channel_scale(out, vals, idxs, scale, m)
        # the L1 sums ride on the pruning pass; scaling is a second pass over the kept values
        work = work + WorkAccount(elems_read=kept_slots, elems_written=2 * kept_slots,
                                  flops=2 * total + kept_slots, passes=1)
        # the multiply needs the finished L1 sums (a fused epilogue only adds its partial sums)
        after = resmag_after_reduction(kept_slots)
    pruned = None
    if dense_output:
        pruned = out.reshape(N, C, H, W)
        if layout == "nhwc":
            pruned = pruned.transpose(0, 2, 3, 1)
        if np.ndim(g) == 2:
            pruned = pruned.reshape(np.shape(g))
    struct = NMStructure(n, m, vals, idxs, meta, bits, scale)
    return MethodResult(f"sdgp-{mode}", {"nm": f"{n}:{m}", "rescale": rescale},
                        "nm", nnz / total, work, pruned=pruned, nm=struct, phases=("agbp",),
                        after_reduction=after)


def resmag_after_reduction(kept: int) -> WorkAccount:
    """resmag's rescale pass (read the kept values, scale, write them), which waits for the
    per-channel L1 sums over the whole tensor: the part of its work no fused epilogue can do."""
    return WorkAccount(elems_read=kept, elems_written=2 * kept, flops=kept, passes=1)


# ---- the registered methods -----------------------------------------------------------------

from dataclasses import replace as _replace  # noqa: E402

from sim.methods.base import dense_result  # noqa: E402
from sim.methods.info import NM_CPU, SPARSE_TC, MethodInfo  # noqa: E402
from sim.methods.layers import layer_selected, sdgp_prunes  # noqa: E402
from sim.methods.registry import (FUSED, LAYERS, ONE_TENSOR, TIME_ONLY, Method,  # noqa: E402
                                  Param, choice, with_fusion)


def _nm_param(v: str) -> str:
    n, m = parse_nm(v)
    return f"{n}:{m}"


def _skipped(layer, layers: str) -> str:
    """Why SDGP with layers=... leaves this layer dense."""
    if layers == "all" and layer.op != "linear":
        return "not pruned: SDGP skips the stem and linear layers"
    return f"not pruned: outside layers={layers}"


class Sdgp(Method):
    """SDGP with one n:m selection rule (MethodInfo.nm_selection)."""

    def apply(self, spec, layer, g, *, key, dense_output=True, **ctx):
        p = dict(spec.params)
        sel = spec.get("layers")
        if not layer_selected(layer, sel):
            return dense_result(g, self.id, p, _skipped(layer, sel))
        mode = self.info.nm_selection
        kw = dict(rescale=p.get("rescale", "sample-channel"), dense_output=dense_output)
        if layer.op == "linear" and np.ndim(g) == 3:
            # a linear's dO is [N, T, C_out] (PyTorch's layout): groups of m along C_out, the
            # reduction of AGBP (dI = dO W); tokens play the conv's positions
            n_, t_, c_ = np.shape(g)
            r = sdgp(np.reshape(g, (n_, t_, 1, c_)), p["nm"], mode, key, layout="nhwc", **kw)
            if r.pruned is None:
                return r
            return _replace(r, pruned=r.pruned.reshape(n_, t_, c_))
        return sdgp(g, p["nm"], mode, key, **kw)

    def nominal_result(self, spec, layer, batch: int) -> MethodResult:
        """SDGP's MethodResult without data: on a dense dO the density is exactly n/m whatever the
        values, and the work account follows from the shape (the same counts `sdgp` reports; a
        test keeps the two equal)."""
        p = dict(spec.params)
        sel = spec.get("layers")
        if not layer_selected(layer, sel):
            return dense_result(np.ones(1, np.float32), self.id, p, _skipped(layer, sel))
        n, m = parse_nm(p["nm"])
        shape = layer.tensor_shapes(batch)["dO"]
        nb, c = shape[0], shape[1]
        hw_ = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        if layer.op == "linear":    # [N, T, C_out]: groups along C_out, tokens as positions
            nb, hw_, c = shape
        total = nb * c * hw_
        groups = -(-c // m)
        bits = bits_per_index(m)
        kept = nb * hw_ * sum(min(n, c - g * m) for g in range(groups))
        meta = nb * hw_ * ((groups * n * bits + 31) // 32) * 4
        mode = self.info.nm_selection
        work = WorkAccount(elems_read=total, elems_written=kept, bytes_metadata=meta,
                           compares=kept * m, random_draws=total if mode == "random" else 0,
                           passes=1)
        after = WorkAccount()
        if mode == "resmag":
            work = work + WorkAccount(elems_read=kept, elems_written=2 * kept,
                                      flops=2 * total + kept, passes=1)
            after = resmag_after_reduction(kept)
        return with_fusion(spec, MethodResult(
            self.id, {"nm": f"{n}:{m}", **({"rescale": p["rescale"]} if "rescale" in p else {})},
            "nm", n / m, work, phases=("agbp",), extra={"nominal": True}, after_reduction=after))

    def torch_twin(self, spec, layer):
        from sim.methods import torch_ops as T
        if not sdgp_prunes(layer):      # capture's twin prunes the dO of convs only
            return T.DenseMethod()
        p = dict(spec.params)
        return T.SdgpMethod(p["nm"], self.info.nm_selection, p.get("rescale", "sample-channel"))


def nominal_nm_result(spec, layer, batch: int) -> MethodResult:
    """SDGP's result without data (Sdgp.nominal_result) for an sdgp-* spec."""
    from sim.methods.registry import method_for
    return method_for(spec).nominal_result(spec, layer, batch)


_RESCALE_VALUES = "rescaling changes values, not work or time"


def _sdgp(sel: str, extra: dict | None = None, ignored: dict | None = None) -> Sdgp:
    info = MethodInfo(f"sdgp-{sel}", "sdgp", "dO", ("agbp",), "nm-agbp", nm_selection=sel,
                      no_kernel=NM_CPU, gpu_feature=SPARSE_TC)
    return Sdgp(info, {"nm": Param(_nm_param, "2:4"), **(extra or {}), **FUSED, **LAYERS},
                {"prune": {"fused": TIME_ONLY, "layers": ONE_TENSOR},
                 "capture": {"fused": TIME_ONLY,
                             "layers": "capture's PyTorch twin prunes the dO of convs only"},
                 **(ignored or {})})


FAMILY = (
    _sdgp("random"),
    _sdgp("mag"),
    _sdgp("resmag", {"rescale": Param(choice("sample-channel", "channel"), "sample-channel")},
          {cmd: {"rescale": _RESCALE_VALUES} for cmd in ("train", "replay", "sweep")}),
)
