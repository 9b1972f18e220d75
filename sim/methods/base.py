"""What every method hands to the engines: an operand structure, its density and its own work.

Engines never see method names: they see one of the structures below (dense, CSR, N:M with
metadata, one-per-(n, c), skipped, generated, channel-pruned) and a WorkAccount to charge.
"""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Any

import numpy as np


@dataclass(frozen=True)
class WorkAccount:
    """A method's own work on one tensor, in elements and operations (engines turn it into time).

    passes counts full sweeps over the input tensor (each a streaming read the hardware pays for).
    """

    elems_read: int = 0
    elems_written: int = 0
    bytes_metadata: int = 0
    compares: int = 0
    random_draws: int = 0
    flops: int = 0
    passes: int = 0

    def __add__(self, other: "WorkAccount") -> "WorkAccount":
        return WorkAccount(**{k: getattr(self, k) + getattr(other, k) for k in asdict(self)})

    def as_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class CSR:
    """Compressed sparse rows of a 2-D view of the pruned tensor (rows x cols)."""

    indptr: np.ndarray   # int64, rows + 1
    indices: np.ndarray  # int32 column of each nonzero
    data: np.ndarray     # float32 values
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


@dataclass(frozen=True)
class NMStructure:
    """n kept values out of every m consecutive channels (channels-last groups).

    values/indices: (N, H, W, G, n) with G = ceil(C / m) groups; indices ascend within a group.
    metadata: the packed index bits as hardware stores them (for 2:4, two 2-bit indices per group,
    eight groups per uint32 word as PTX mma.sp expects); bits_per_index = ceil(log2 m).
    """

    n: int
    m: int
    values: np.ndarray
    indices: np.ndarray
    metadata: np.ndarray
    bits_per_index: int
    channel_scale: np.ndarray | None = None  # resmag: (N, C) or (C,) rescale applied


@dataclass(frozen=True)
class PerChannelPick:
    """Wang's approx: k (spatial index, value) pairs per (sample, output channel)."""

    index: np.ndarray   # int32 (N, C, k): flattened p*Q + q
    value: np.ndarray   # float32 (N, C, k): the value standing for the whole channel's sum
    k: int


@dataclass(frozen=True)
class MethodResult:
    """The outcome of applying a method to one layer's tensor in one iteration."""

    method: str
    params: dict[str, Any]
    structure: str               # dense | csr | nm | per-channel | skipped | generated | channels
    density: float               # nonzero fraction of the operand the engines will see
    work: WorkAccount
    pruned: np.ndarray | None = None   # the pruned tensor, same layout as the input
    csr: CSR | None = None
    nm: NMStructure | None = None
    pick: PerChannelPick | None = None
    phases: tuple[str, ...] = ("agbp", "wgc")  # which GEMMs see the structure
    extra: dict[str, Any] = field(default_factory=dict)
    # fused=true: the work runs in the epilogue of the kernel that produces dO, not as its own
    # passes (engines that model it: GPU, sim/engines/gpu/stream.fused_epilogue)
    fused: bool = False
    # the part of `work` that needs a reduction over the whole tensor before it can start (DBTD's
    # threshold pass after the mean |g|, resmag's rescale after the L1 sums): no tile of the
    # producer's epilogue has that reduction yet, so it stays a separate pass when fused
    after_reduction: WorkAccount = field(default_factory=WorkAccount)

    @property
    def epilogue_work(self) -> WorkAccount:
        """The part of `work` a fused producer's epilogue can do: work minus after_reduction."""
        a = self.after_reduction.as_dict()
        return WorkAccount(**{k: v - a[k] for k, v in self.work.as_dict().items()})

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params, "structure": self.structure,
                "density": self.density, "phases": list(self.phases), "work": self.work.as_dict(),
                **self.extra}


def scale_work(result: MethodResult, factor: float) -> MethodResult:
    """The same result with its work account scaled by `factor` (e.g. a trace's recorded sub-batch
    standing for the full training batch: every method's work is linear in the batch)."""
    from dataclasses import replace
    if factor == 1:
        return result
    def scaled(w: WorkAccount) -> WorkAccount:
        return WorkAccount(**{k: (v if k == "passes" else int(round(v * factor)))
                              for k, v in w.as_dict().items()})
    return replace(result, work=scaled(result.work), after_reduction=scaled(result.after_reduction),
                   extra={**result.extra, "work_scaled_by": factor})


def dense_result(g: np.ndarray, method: str = "dense", params: dict | None = None,
                 note: str | None = None) -> MethodResult:
    """The result of a method that leaves this tensor as it is (dense, or a layer it skips; `note`
    says why): the tensor's own density, no work."""
    n = int(np.size(g))
    density = float(np.count_nonzero(g)) / n if n else 0.0
    extra = {"note": note} if note else {}
    return MethodResult(method, params or {}, "dense", density, WorkAccount(), pruned=None,
                        phases=(), extra=extra)
