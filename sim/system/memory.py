"""Training memory footprint per device, and the largest mini-batch (in steps of 32) that fits.

Counted from the workload's tensor shapes, as PyTorch autograd keeps them for the backward:
  activations: every conv/FC input (WGC needs I); the pre-BN conv output of a conv with BN (BN's
    backward needs its input); the output of every ReLU (in-place ReLU keeps its result); a max
    pool's input and its argmax indices (int64 per output element). A tensor kept by several ops
    is counted once (by name).
  backward transients: the largest layer's dO plus dI alive at once.
  workspace: the explicit-GEMM (im2col) buffer of the largest layer: N*P*Q*C*R*S elements, the
    upper end of what cuDNN's algorithms ask for.
  weights, gradients, optimizer state: fp32 master weights, gradients and SGD momentum (4 B each).
  peak extra: what a framework's peak allocation holds beyond all of the above, as a share of the
    activations (FrameworkProfile.activation_overhead, measured by research.prunetrain.measure_memory and
    fitted by research.prunetrain.memory_fit; 0 where a profile has no measurement).
  reserved: CUDA context and allocator slack, from the cluster's device section.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.workload import Workload, tensor_chw

PARAM_BYTES = 4
INDEX_BYTES = 8   # max-pool argmax indices are int64 in PyTorch
BATCH_STEP = 32


@dataclass(frozen=True)
class Footprint:
    batch: int
    activations: int
    transients: int
    workspace: int
    weights: int
    gradients: int
    optimizer: int
    reserved: int
    peak_extra: int = 0

    @property
    def total(self) -> int:
        return (self.activations + self.transients + self.workspace + self.weights
                + self.gradients + self.optimizer + self.peak_extra + self.reserved)

    def to_json(self) -> dict:
        return {**{k: getattr(self, k) for k in ("batch", "activations", "transients", "workspace",
                                                "weights", "gradients", "optimizer", "peak_extra",
                                                "reserved")},
                "total": self.total}


def tensor_elems(workload: Workload) -> dict[str, int]:
    """Elements per sample of every named tensor, following the ops with the layers' widths."""
    return {t: a * b * d for t, (a, b, d) in tensor_chw(workload).items()}


def footprint(workload: Workload, batch: int, activation_bytes: int, reserved: int = 0,
              overhead: float = 0.0) -> Footprint:
    """The footprint at `batch`; overhead: the framework's peak extra as a share of the
    activations (FrameworkProfile.activation_overhead)."""
    el = tensor_elems(workload)
    layers = {l.name: l for l in workload.layers}
    kept: set[str] = set()
    extra = 0            # per-sample elements not named in the graph (pre-BN outputs)
    index_elems = 0
    for op in workload.ops:
        kind = op["op"]
        if kind in ("conv", "fc"):
            kept.add(op["in"])
            if kind == "conv" and layers[op["name"]].bn:
                extra += el[op["out"]]
        elif kind == "pool" and op["kind"] == "max":
            kept.add(op["in"])
            index_elems += el[op["out"]]
        if op.get("relu", False):
            kept.add(op["out"])
    act = batch * ((sum(el[t] for t in kept) + extra) * activation_bytes + index_elems * INDEX_BYTES)
    trans = max(batch * (el[l.in_tensor] + el[l.out_tensor]) * activation_bytes
                for l in workload.layers)
    # im2col buffer; a deconv's is its scatter GEMM's product, C_out*R*S per input pixel
    ws = max(batch * (l.h * l.w * l.c_out if l.transposed else l.p * l.q * l.c_in) * l.r * l.s
             * activation_bytes for l in workload.layers)
    params = workload.params()
    return Footprint(batch, act, trans, ws, params * PARAM_BYTES, params * PARAM_BYTES,
                     params * PARAM_BYTES, int(reserved), int(round(overhead * act)))


def max_batch(workload: Workload, capacity: float, activation_bytes: int, reserved: int = 0,
              step: int = BATCH_STEP, limit: int = 1 << 16, overhead: float = 0.0) -> int:
    """Largest multiple of `step` whose footprint fits `capacity` bytes (0 if not even one step)."""
    best = 0
    b = step
    while b <= limit and footprint(workload, b, activation_bytes, reserved,
                                   overhead).total <= capacity:
        best = b
        b += step
    return best
