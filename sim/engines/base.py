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

from sim.errors import PrunesimError


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


class Unsupported(PrunesimError):
    """A (layer, method, hardware) combination the engine does not model.

    Not bad input: a replay or sweep records the point as "not run" with this reason and goes on
    with the others; a command that simulates one layer (`prunesim layer`) reports it as an error.
    """


def unsupported_reason(hw, layer, method_result, phase: str) -> str | None:
    """Why an engine cannot model this phase, for limits known before it runs; None if it can.

    Engines that find a limit while running raise `Unsupported` themselves (the patch engine); this
    holds the limits known from the layer and method alone, so a replay or sweep can record "not
    run" before any engine work: the CPU engine has Ye et al.'s sparse path for ungrouped convs only
    and no deconv (sim/engines/cpu.py raises `Unsupported` for both too, for callers that go to it
    directly), and transposed convs run on the tensor-core engine only, with a dense WGC.
    """
    mr = method_result
    if getattr(layer, "transposed", False):
        if hw.kind != "gpu":
            return (f"layer {layer.name}: transposed conv on {hw.name}: the {hw.kind} engine models "
                    "conv kernels only (its per-sample im2col/Caffe path has no deconv)")
        if mr is not None and phase == "wgc" and phase in getattr(mr, "phases", ()):
            # its AGBP is an implicit GEMM with dO as A, like a conv's; its WGC is not
            return (f"layer {layer.name}: {mr.method} on a transposed conv: a sparse WGC is "
                    "modeled for convs only (a deconv's WGC takes dO as its im2col operand)")
    if mr is None or layer is None or phase not in getattr(mr, "phases", ()):
        return None
    if hw.kind == "cpu" and layer.op == "conv" and layer.groups > 1 and mr.structure == "csr" \
            and phase in ("agbp", "wgc"):
        return (f"layer {layer.name}: {mr.method} on {hw.name}: the CPU engine's sparse (CSR) path "
                f"models ungrouped convs only (groups={layer.groups})")
    return None


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
