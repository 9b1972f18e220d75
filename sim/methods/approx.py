"""Approximate weight gradients (Wang, Nelaturu, Amarasinghe 2019): zero, random, approx, approx-topk.

Only WGC of scheduled (layer, batch) pairs changes; AGBP stays exact. `approx` keeps, per (sample,
output channel), the position of max |dO| and stands the channel's signed sum there: dO becomes
one-hot per (n, c) (density 1/(P*Q)) and dW is a sum of input patches scaled by those sums.
`approx-topk` keeps the k largest, scaled so they sum to the channel sum.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.methods.base import MethodResult, PerChannelPick, WorkAccount
from sim.methods.rng import uniform_np


@njit(cache=True)
def channel_picks(g, k, index, value):
    """Per (n, c) of g (N, C, PQ): the k largest |g| positions (ties to the lower position) and
    values scaled so they sum to the channel's signed sum. Returns nothing; fills index/value."""
    N, C, PQ = g.shape
    best = np.empty(k, np.int64)
    for b in range(N):
        for c in range(C):
            total = 0.0
            for t in range(k):
                best[t] = -1
            for s in range(PQ):
                v = g[b, c, s]
                total += v
                a = abs(v)
                # insertion into a descending top-k list; strict > keeps the lower position on ties
                t = k
                while t > 0 and (best[t - 1] < 0 or a > abs(g[b, c, best[t - 1]])):
                    t -= 1
                if t < k:
                    for u in range(k - 1, t, -1):
                        best[u] = best[u - 1]
                    best[t] = s
            kept = 0.0
            for t in range(k):
                kept += g[b, c, best[t]]
            for t in range(k):
                index[b, c, t] = best[t]
                if k == 1:
                    value[b, c, t] = np.float32(total)
                elif kept != 0.0:
                    value[b, c, t] = np.float32(g[b, c, best[t]] * (total / kept))
                else:  # kept values cancel: share the sum equally
                    value[b, c, t] = np.float32(total / k)


def channel_picks_np(g: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain-NumPy reference of channel_picks for (N, C, PQ) float32."""
    g = np.asarray(g, dtype=np.float32)
    order = np.argsort(-np.abs(g), axis=2, kind="stable")[:, :, :k]
    total = g.astype(np.float64).sum(axis=2)
    kept_v = np.take_along_axis(g, order, axis=2).astype(np.float64)
    kept = kept_v.sum(axis=2)
    if k == 1:
        val = total[:, :, None]
    else:
        safe = np.where(kept != 0, kept, 1.0)
        val = np.where(kept[:, :, None] != 0, kept_v * (total / safe)[:, :, None],
                       (total / k)[:, :, None])
    return order.astype(np.int32), val.astype(np.float32)


def picks_to_dense(pick: PerChannelPick, shape: tuple[int, ...]) -> np.ndarray:
    """The approximated dO as a dense (N, C, P, Q) tensor (for checks and reference convolutions)."""
    N, C = shape[:2]
    out = np.zeros((N, C, int(np.prod(shape[2:]))), np.float32)
    np.put_along_axis(out, pick.index.astype(np.int64), pick.value, axis=2)
    return out.reshape(shape)


def approx(g: np.ndarray, k: int = 1) -> MethodResult:
    """`approx` (k=1) or `approx-topk` on one layer's dO (N, C, P, Q)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    arr = np.ascontiguousarray(g, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    N, C = arr.shape[:2]
    x = arr.reshape(N, C, -1)
    k_eff = min(k, x.shape[2])
    index = np.empty((N, C, k_eff), np.int32)
    value = np.empty((N, C, k_eff), np.float32)
    channel_picks(x, k_eff, index, value)
    pick = PerChannelPick(index, value, k_eff)
    n = x.size
    work = WorkAccount(elems_read=n, elems_written=2 * N * C * k_eff, compares=n * k_eff,
                       flops=n, passes=1)
    name = "approx" if k == 1 else "approx-topk"
    nnz = int(np.count_nonzero(value))
    return MethodResult(name, {"k": k}, "per-channel", nnz / n, work, pick=pick, phases=("wgc",))


def approx_nominal(layer, batch: int, k: int = 1, seed: int = 0) -> MethodResult:
    """`approx` / `approx-topk` on a layer without its gradient (the system level records none):
    the work account of `approx` on a dense dO of this shape (it depends on the shape alone) and a
    deterministic synthetic pick: per (sample, output channel) k distinct positions drawn
    uniformly from a generator seeded by (seed, layer index). The patch engine's time depends on
    the positions (they are its input gathers, so its L2 hits), not on the values: the values are
    placeholders (one per pick)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    shape = layer.tensor_shapes(batch)["dO"]
    N, C = shape[0], shape[1]
    pq = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    k_eff = min(k, pq)
    rng = np.random.default_rng([seed, layer.index, 0x57])
    if k_eff == 1:
        index = rng.integers(0, pq, size=(N, C, 1)).astype(np.int32)
    else:   # a uniform k-subset per (n, c): the k smallest of pq random keys
        keys = rng.random((N, C, pq), dtype=np.float32)
        index = np.sort(np.argpartition(keys, k_eff - 1, axis=2)[:, :, :k_eff], axis=2)
        index = index.astype(np.int32)
    pick = PerChannelPick(index, np.ones((N, C, k_eff), np.float32), k_eff)
    n = N * C * pq
    work = WorkAccount(elems_read=n, elems_written=2 * N * C * k_eff, compares=n * k_eff,
                       flops=n, passes=1)
    return MethodResult("approx" if k == 1 else "approx-topk", {"k": k}, "per-channel",
                        N * C * k_eff / n, work, pick=pick, phases=("wgc",),
                        extra={"nominal": True, "positions_source": "seeded uniform positions "
                               "(no recorded gradient)"})


def random_nominal(w_shape: tuple[int, ...], batch: int) -> MethodResult:
    """`random`'s result without drawing dW: the generation's work follows from the weight shape
    (the same account `random_dw` reports)."""
    size = int(np.prod(w_shape))
    work = WorkAccount(elems_written=size, random_draws=2 * size, flops=6 * size, passes=1)
    return MethodResult("random", {"batch": batch}, "generated", 1.0, work, phases=("wgc",),
                        extra={"nominal": True})


def zero(g_shape: tuple[int, ...]) -> MethodResult:
    """`zero`: dW = 0, the WGC is skipped entirely (and its all-reduce can be too)."""
    return MethodResult("zero", {}, "skipped", 0.0, WorkAccount(), phases=("wgc",))


def random_dw(w_shape: tuple[int, ...], batch: int, key: int) -> MethodResult:
    """`random`: dW ~ N(0, (1/B)^2), regenerated every batch (Box-Muller on the counter stream)."""
    size = int(np.prod(w_shape))
    u1 = uniform_np(key, np.arange(0, 2 * size, 2))
    u2 = uniform_np(key, np.arange(1, 2 * size, 2))
    # float64 throughout: the draws are float32, and NumPy 2 would keep 2*pi*u2 in float32
    z = np.sqrt(-2.0 * np.log1p(-u1.astype(np.float64))) * np.cos(2 * np.pi * u2.astype(np.float64))
    dw = (z / batch).astype(np.float32).reshape(w_shape)
    work = WorkAccount(elems_written=size, random_draws=2 * size, flops=6 * size, passes=1)
    return MethodResult("random", {"batch": batch}, "generated", 1.0, work, pruned=dw,
                        phases=("wgc",))


@njit(cache=True)
def approx_wgc(I, index, value, Q, R, S, stride, pad, dw):
    """dW[c] += sum over (n, kept) of value * I-patch at the kept output position (NCHW input)."""
    N, Cin, H, W = I.shape
    C = index.shape[1]
    k = index.shape[2]
    for b in range(N):
        for c in range(C):
            for t in range(k):
                v = value[b, c, t]
                if v == 0:
                    continue
                p = index[b, c, t] // Q
                q = index[b, c, t] % Q
                for ci in range(Cin):
                    for r in range(R):
                        h = p * stride - pad + r
                        if h < 0 or h >= H:
                            continue
                        for s in range(S):
                            w = q * stride - pad + s
                            if 0 <= w < W:
                                dw[c, ci, r, s] += v * I[b, ci, h, w]


# ---- the registered methods -----------------------------------------------------------------

from sim.methods.base import dense_result  # noqa: E402
from sim.methods.info import MethodInfo  # noqa: E402
from sim.methods.registry import ONE_TENSOR, Method, Param, pos_int  # noqa: E402
from sim.methods.schedule import PAPER_SCHEDULES, applies, paper_schedule  # noqa: E402


def _schedule(v: str) -> int:
    x = int(v)
    if x not in PAPER_SCHEDULES:
        raise ValueError("paper schedules are 1, 2 and 3")
    return x


_SCHED = {"schedule": Param(_schedule, 1)}
_NO_KERNEL = (("cpu", "Wang et al.'s kernels are GPU kernels (patch engine)"),)


class Wang(Method):
    """Wang et al.'s schedules: a scheduled (conv, batch) pair gets `approximate`, every other
    layer and batch stays dense."""

    def apply(self, spec, layer, g, *, key, batch, conv_index=0, batch_index=0, n_conv=1,
              scheduled=None, **ctx):
        p = dict(spec.params)
        if layer.op != "conv":
            return dense_result(g, self.id, p, "not approximated: the schedule covers conv layers")
        if scheduled is None:
            scheduled = applies(paper_schedule(p["schedule"], n_conv), conv_index, batch_index)
        if not scheduled:
            return dense_result(g, self.id, p, "not scheduled for this (layer, batch)")
        return self.approximate(p, layer, g, batch, key)

    def approximate(self, p, layer, g, batch, key) -> MethodResult:
        raise NotImplementedError

    def system_result(self, spec, layer, batch: int) -> MethodResult | None:
        """The result of a scheduled (conv, batch) pair without its gradient (sim.system: the
        schedule itself is applied there); None for a layer the schedule does not cover."""
        if layer.op != "conv":
            return None
        return self.scheduled_nominal(dict(spec.params), layer, batch)

    def scheduled_nominal(self, p, layer, batch: int) -> MethodResult:
        raise NotImplementedError

    def torch_twin(self, spec, layer):
        from sim.methods import torch_ops as T
        return T.WangMethod(self.id, spec.get("k") if "k" in self.params else 1)


class Zero(Wang):
    def approximate(self, p, layer, g, batch, key):
        return zero(np.shape(g))

    def scheduled_nominal(self, p, layer, batch):
        return zero(layer.tensor_shapes(batch)["dO"])


class RandomDW(Wang):
    def approximate(self, p, layer, g, batch, key):
        return random_dw(layer.tensor_shapes(1)["W"], batch, key)

    def scheduled_nominal(self, p, layer, batch):
        return random_nominal(layer.tensor_shapes(1)["W"], batch)


class Approx(Wang):
    def approximate(self, p, layer, g, batch, key):
        return approx(g, p.get("k", 1))

    def scheduled_nominal(self, p, layer, batch):
        return approx_nominal(layer, batch, p.get("k", 1))


def _wang(mid: str, cls, params=_SCHED, ignored_by=None, **kw) -> Wang:
    info = MethodInfo(mid, "wang", "dW", ("wgc",), kw.pop("system_effect", "not-modelled"),
                      scheduled=True, no_kernel=_NO_KERNEL, **kw)
    return cls(info, params, ignored_by)


_PRUNE = {"prune": {"schedule": ONE_TENSOR}}
FAMILY = (
    _wang("zero", Zero, ignored_by=_PRUNE, system_effect="skip-wgc", skips_allreduce=True),
    _wang("random", RandomDW, system_effect="wgc-kernels", transforms_tensor=False),
    _wang("approx", Approx, ignored_by=_PRUNE, system_effect="wgc-kernels"),
    _wang("approx-topk", Approx, {**_SCHED, "k": Param(pos_int, 2)}, _PRUNE,
          system_effect="wgc-kernels"),
)
