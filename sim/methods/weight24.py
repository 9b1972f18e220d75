"""Weight-side 2:4 methods on linears and convs: `w24` (2:4 weights, FWD only) and `w24t`
(transposable 2:4 masks, FWD and AGBP), with their per-step mask search and compression work.

Both act on the weight W (C_out x K, K = C_in*R*S), not on dO: their density is 1/2 of the weight
operand whatever the gradients. The engines' sparse operand is A, so a GEMM whose weight is B is
run transposed (sim/engines/gpu/engine.py, structure "nm-w"):
    FWD  O = I W^T       ->  O^T  = W   I^T   (A = W,   2:4 along K = C_in: a row-wise 2:4 mask)
    AGBP dI = dO W       ->  dI^T = W^T dO^T  (A = W^T, 2:4 along C_out: needs 2:4 along W's
                                                columns too, i.e. a transposable mask)
Masks are recomputed from the dense weights every step (SR-STE-style training), so the search
and compression run once per layer per step:
- w24: per group of 4 along K keep the 2 largest |w| (4 compares per kept value, as SDGP counts),
  write the kept half and 2-bit indices.
- w24t, search=greedy: the 2-approximation of Hubara et al. 2021 ("Accelerated sparse neural
  training: a provable and efficient method to find N:M transposable masks", NeurIPS 2021, sec.
  4): per 4x4 block sort the 16 |w| (16*log2(16) = 64 compares), then scan them keeping an entry
  while its row and its column hold fewer than 2 (2 compares per entry).
- w24t, search=exhaustive: the best of the 90 4x4 0/1 matrices with two ones per row and column
  (NVIDIA ASP's `m4n2_2d_best`): 90 patterns x 8 adds and a compare per block.
  Two compressed copies are written (W for FWD, W^T for AGBP).
"""
from __future__ import annotations

import itertools

import numpy as np

from sim.methods.base import MethodResult, WorkAccount

_SORT16 = 64          # compares to sort 16 magnitudes (n log2 n)
_GREEDY_SCAN = 2 * 16  # row and column counter checks per entry
_N_PATTERNS = 90      # 4x4 0/1 matrices with two ones in every row and column


def weight_matrix_shape(layer) -> tuple[int, int]:
    """(C_out, K) of the layer's weight as its FWD GEMM's B operand."""
    k = (layer.c_in // max(layer.groups, 1)) * layer.r * layer.s
    return layer.c_out, k


def w24_applies(layer, transposable: bool) -> str | None:
    """None if the layer's weight can take the mask, else why not (one line)."""
    if layer.op not in ("conv", "linear") or getattr(layer, "transposed", False):
        return "not pruned: no weight GEMM the 2:4 weight methods model"
    if layer.groups > 1:
        return "not pruned: grouped convs have no 2:4 weight kernel"
    c_out, k = weight_matrix_shape(layer)
    if k % 4 or (transposable and c_out % 4):
        return "not pruned: the weight's dims are not multiples of 4"
    return None


def mask_work(c_out: int, k: int, transposable: bool, search: str = "greedy") -> WorkAccount:
    """Mask search + compression of one weight matrix, once per step."""
    total = c_out * k
    kept = total // 2
    meta = (kept * 2 + 7) // 8            # 2-bit index per kept value
    if not transposable:
        return WorkAccount(elems_read=total, elems_written=kept, bytes_metadata=meta,
                           compares=kept * 4, passes=1)
    blocks = total // 16
    if search == "greedy":
        compares, flops = blocks * (_SORT16 + _GREEDY_SCAN), 0
    else:
        compares, flops = blocks * _N_PATTERNS, blocks * _N_PATTERNS * 8
    return WorkAccount(elems_read=total, elems_written=2 * kept, bytes_metadata=2 * meta,
                       compares=compares, flops=flops, passes=1)


def weight24(spec_id: str, params: dict, layer, transposable: bool | None = None) -> MethodResult:
    """The MethodResult of w24 / w24t on one layer the mask applies to (w24_applies is None;
    the caller makes the dense result otherwise): structure "nm-w", density 1/2. transposable:
    the registered method's (None: the method registered as spec_id)."""
    if transposable is None:
        from sim.methods.registry import method_for
        transposable = method_for(spec_id).transposable
    c_out, k = weight_matrix_shape(layer)
    work = mask_work(c_out, k, transposable, params.get("search", "greedy"))
    phases = ("fwd", "agbp") if transposable else ("fwd",)
    return MethodResult(spec_id, {**params, "nm": "2:4"}, "nm-w", 0.5, work, phases=phases,
                        extra={"operand": "weights", "weight_shape": [c_out, k]})


# ---- the masks themselves (NumPy references: what the work above counts) -----------------------


def mask_24_rows(w: np.ndarray) -> np.ndarray:
    """w24's mask: the 2 largest |w| of every 4 consecutive entries along rows (ties: lower index)."""
    a = np.abs(w.reshape(w.shape[0], -1, 4))
    order = np.argsort(-a, axis=-1, kind="stable")
    m = np.zeros_like(a, bool)
    np.put_along_axis(m, order[..., :2], True, axis=-1)
    return m.reshape(w.shape)


def _blocks(w: np.ndarray) -> np.ndarray:
    r, c = w.shape
    return w.reshape(r // 4, 4, c // 4, 4).transpose(0, 2, 1, 3).reshape(-1, 4, 4)


def _unblocks(b: np.ndarray, shape) -> np.ndarray:
    r, c = shape
    return b.reshape(r // 4, c // 4, 4, 4).transpose(0, 2, 1, 3).reshape(r, c)


def mask_24t_greedy(w: np.ndarray) -> np.ndarray:
    """Hubara et al.'s 2-approximation: per 4x4 block, largest |w| first, kept while its row and
    column hold fewer than 2. May keep fewer than 8 per block (the approximation's price)."""
    bl = np.abs(_blocks(w))
    out = np.zeros(bl.shape, bool)
    for i, b in enumerate(bl):
        rows, cols = np.zeros(4, int), np.zeros(4, int)
        for f in np.argsort(-b.ravel(), kind="stable"):
            r, c = divmod(int(f), 4)
            if rows[r] < 2 and cols[c] < 2:
                out[i, r, c] = True
                rows[r] += 1
                cols[c] += 1
    return _unblocks(out, w.shape)


def _patterns() -> np.ndarray:
    rows = [p for p in itertools.product((0, 1), repeat=4) if sum(p) == 2]
    pats = [np.array(c) for c in itertools.product(rows, repeat=4)
            if all(s == 2 for s in np.array(c).sum(0))]
    return np.array(pats, bool)


def mask_24t_exhaustive(w: np.ndarray) -> np.ndarray:
    """The best transposable mask per 4x4 block: the largest kept |w| sum of the 90 patterns."""
    pats = _patterns()
    assert len(pats) == _N_PATTERNS
    bl = np.abs(_blocks(w))
    score = np.einsum("bij,pij->bp", bl, pats.astype(bl.dtype))
    return _unblocks(pats[np.argmax(score, axis=1)], w.shape)


# ---- the registered methods -----------------------------------------------------------------

from sim.methods.base import dense_result  # noqa: E402
from sim.methods.info import NM_CPU, SPARSE_TC, MethodInfo  # noqa: E402
from sim.methods.layers import layer_selected  # noqa: E402
from sim.methods.registry import LAYERS, NOT_MODELLED, Method, Param, choice  # noqa: E402


class Weight24(Method):
    """2:4 weights: the result follows from the layer alone (no gradient is read)."""

    reads_gradient = False

    def apply(self, spec, layer, g, **ctx):
        p = dict(spec.params)
        if not layer_selected(layer, spec.get("layers")):
            return dense_result(g, self.id, p, f"not pruned: outside layers={spec.get('layers')}")
        why = w24_applies(layer, self.transposable)
        if why:
            return dense_result(np.ones(1, np.float32), self.id, p, why)
        return weight24(self.id, p, layer, self.transposable)

    @property
    def transposable(self) -> bool:
        """The mask is 2:4 along both dims (AGBP sparse too)."""
        return "agbp" in self.info.phases


# the FWD GEMM's weight operand, run transposed so it is the engine's sparse A; w24t's
# transposable mask also makes AGBP sparse. No dO involved, no PyTorch twin (capture records
# dense gradients)
FAMILY = (
    Weight24(MethodInfo("w24", "w24", "weights", ("fwd",), "not-modelled",
                        transforms_tensor=False, no_kernel=NM_CPU, gpu_feature=SPARSE_TC,
                        torch_twin=False),
             LAYERS, {"train": {"layers": NOT_MODELLED}}),
    Weight24(MethodInfo("w24t", "w24", "weights", ("fwd", "agbp"), "not-modelled",
                        transforms_tensor=False, no_kernel=NM_CPU, gpu_feature=SPARSE_TC,
                        torch_twin=False),
             {**LAYERS, "search": Param(choice("greedy", "exhaustive"), "greedy")},
             {"train": {"layers": NOT_MODELLED, "search": NOT_MODELLED}}),
)
