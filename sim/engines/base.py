"""The engine interface: KernelResult, the record every engine returns for one kernel.

Every engine module exposes
    HW_FIELDS: dict[str, sim.hwconfig.Field]            the parameters its hwconfigs take
    simulate_phase(gemm, method_result, hw, *, layer=None, batch=None, seed=0,
                   charge_method=None) -> list[KernelResult]
        one layer phase: the GEMM itself plus the kernels the method adds (prune, compress,
        transposes, ...), each a KernelResult; method_result None means dense. The method's own
        work is charged once, on the first phase it names, unless charge_method says otherwise.
        layer/batch let an engine model per-sample kernels (Caffe's CPU path).
    gemm_command(args, hw) / layer_command(args, hw)      the `prunesim gemm` / `layer` back-ends
All times are seconds; cycles are in the engine's own clock (named in `clock_hz`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KernelResult:
    """One simulated kernel: its time, where the time went, and the bytes it moved per level."""

    engine: str                  # "tensorcore", "cpu", "patch"
    hw: str                      # hwconfig name
    layer: str
    phase: str                   # fwd | agbp | wgc
    kernel: str                  # e.g. "gemm", "sdgp-prune", "csr-build", "transpose-I"
    cycles: float
    clock_hz: float
    flops: int                   # useful math (dense-equivalent flops are in details if different)
    breakdown: dict[str, float]  # seconds by cause; sums to `seconds`
    bytes: dict[str, int] = field(default_factory=dict)   # per memory level, e.g. {"dram": .., "l2": ..}
    details: dict[str, Any] = field(default_factory=dict)  # tile chosen, waves, confidence interval ...

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12 if self.cycles > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "hw": self.hw, "layer": self.layer, "phase": self.phase,
                "kernel": self.kernel, "cycles": self.cycles, "seconds": self.seconds,
                "clock_hz": self.clock_hz, "flops": self.flops, "tflops": self.tflops,
                "breakdown": self.breakdown, "bytes": self.bytes, "details": self.details}


def total_seconds(results: list[KernelResult]) -> float:
    return sum(r.seconds for r in results)
