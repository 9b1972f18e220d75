"""The engine interface: a PhaseJob in, KernelResults out, and the registry of engine families.

An engine is built from one hwconfig (`engine_for(hw)`). A `PhaseJob` is one layer phase: its
lowered GEMM, the method's result on the layer's dO, whether the method's own work is charged here.

    supports(job) -> str | None       why it cannot model the job (known before any work), or None
    simulate(job) -> list[KernelResult]
        the GEMM plus the kernels around it (the method's passes, transposes, col2im ...), each a
        KernelResult with a `category`; raises `Unsupported` for a limit found while running.
    stream(op, dispatch_s, threads) -> KernelResult
        one non-GEMM kernel of the training step (sim.stepops.StreamOp: BN, ReLU, pooling, adds,
        the loss, the optimizer) on the engine's streaming model (#13).
    gemm(m, n, k, ...) -> list[KernelResult]
        one stand-alone GEMM (`prunesim gemm`).

Engines never decide where a method's work is charged (the driver does: `job.charge_method`), never
synthesize gradients and never open traces. All times are seconds; cycles are in the engine's own
clock (named in `clock_hz`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from sim.errors import PrunesimError

# what a kernel's time is spent on; replaces telling kernels apart by their names
CATEGORIES = (
    "math",             # the GEMM / SpMM / patch kernel a phase exists for
    "memory",           # data movement the phase needs: im2col, col2im, transposes, CSR build
    "method-overhead",  # the method's own passes (thresholds, selection, compression)
    "generate",         # a method's generated result (random dW)
    "step-op",          # non-GEMM work of the training step: BN, ReLU, pool, add, loss, optimizer
    "framework",        # the framework's fixed per-step overhead (a framework profile's)
)


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
    category: str = "math"       # one of CATEGORIES

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
                "category": self.category, "breakdown": self.breakdown, "bytes": self.bytes,
                "details": self.details}


def total_seconds(results: list[KernelResult]) -> float:
    return sum(r.seconds for r in results)


class Unsupported(PrunesimError):
    """A (layer, method, hardware) combination the engine does not model.

    Not bad input: a replay or sweep records the point as "not run" with this reason and goes on
    with the others; a command that simulates one layer (`prunesim layer`) reports it as an error.
    """


def fallback_of(kernels) -> str | None:
    """Why a phase's kernels ran dense although the method asked for sparsity, or None.

    kernels: a list of KernelResult, or a {phase: [KernelResult]} dict. The engines put the reason
    in `details`: `sparse_fallback` (no sparse tensor cores for the pattern), `fallback` (a
    structure the tensor cores cannot skip), or a `note` that says the phase was modeled dense
    (the CPU engine on a structure it has no kernel for).
    """
    ks = [k for kl in kernels.values() for k in kl] if isinstance(kernels, dict) else kernels
    for k in ks:
        d = k.details
        why = d.get("sparse_fallback") or d.get("fallback")
        if not why and "modeled dense" in str(d.get("note", "")):
            why = d["note"]
        if why:
            return str(why)
    return None


@dataclass(frozen=True)
class PhaseJob:
    """One layer phase for an engine: the lowered GEMM, the layer's geometry, the method's result.

    method: the method's MethodResult on this layer's dO with its work scaled to `batch`, or None
    (dense). charge_method: the driver's decision that the method's own passes are timed in this
    phase (once per layer, on the first phase the method names). dtype None: the engine's default.
    """

    layer: Any                   # sim.workload.Layer
    phase: str                   # fwd | agbp | wgc
    gemm: Any                    # sim.workload.Gemm of this phase
    batch: int
    method: Any = None           # sim.methods.base.MethodResult | None
    charge_method: bool = False
    dtype: str | None = None
    threads: int = 1             # CPU engines: threads of the kernels
    seed: int = 0


class Engine(Protocol):
    """What the driver needs of an engine family (see the module docstring)."""

    kind: ClassVar[str]          # the hwconfig `kind` it reads
    hw: Any                      # sim.hwconfig.HwConfig

    def supports(self, job: PhaseJob) -> str | None: ...

    def simulate(self, job: PhaseJob) -> list[KernelResult]: ...

    def stream(self, op, dispatch_s: float = 0.0, threads: int = 1) -> KernelResult:
        """One non-GEMM kernel of the training step (a sim.stepops.StreamOp); dispatch_s is the
        framework's host time per launch (it costs where it exceeds the device's own time)."""
        ...

    def step_dtype_bytes(self) -> int:
        """Bytes per activation element of the step's non-GEMM ops on this engine."""
        ...

    def gemm(self, m: int, n: int, k: int, *, sparse: str | None = None,
             density: float | None = None, dtype: str | None = None, threads: int = 1,
             seed: int = 0) -> list[KernelResult]:
        """One stand-alone GEMM (`prunesim gemm`): N:M `sparse` (GPUs) or CSR `density` (CPUs);
        each family refuses the other's option with a one-line error."""
        ...


# hwconfig kind -> "module:Class" of its engine; the one place an engine family is registered
ENGINES: dict[str, str] = {
    "gpu": "sim.engines.gpu.engine:GpuEngine",
    "cpu": "sim.engines.cpu.engine:CpuEngine",
}


def engine_for(hw) -> Engine:
    """The engine of a loaded hwconfig (its `kind` picks the family)."""
    mod, _, cls = ENGINES[hw.kind].partition(":")
    return getattr(importlib.import_module(mod), cls)(hw)
