"""Energy per training step: the counts the engines already produce (FMAs, bytes per memory level)
times a per-op energy table in the GPU hwconfig (Accelergy-style: energy = sum of count x energy).

The table is optional hwconfig fields (units pJ/FMA and pJ/B, each with its source; docs/explanation/sources.md):

- ``energy_fma_tc_<dtype>``: one tensor-core FMA of that dtype (fp16, bf16, tf32);
- ``energy_fma_cuda_fp32``: one CUDA-core FMA (fp32 GEMMs, the direct grouped/depthwise kernel,
  the patch engine's approximate-WGC kernel);
- ``energy_dram``, ``energy_l2``, ``energy_smem``: one byte moved at that level.

A kernel's math energy is its FMAs (``KernelResult.flops / 2``, the useful math: an n:m sparse GEMM
counts only the kept products) times the FMA energy of the unit that runs it; its memory energy is
``KernelResult.bytes[level]`` times that level's energy. Streaming kernels (method overhead, col2im)
are charged their bytes only: their element-wise operations are not counted. No static or idle
power is added (no sourced figure for it). Where the hwconfig lacks a field a kernel needs, the
energy is None and reports print "n/a (no energy table)", never a guessed number.
"""
from __future__ import annotations

from typing import Iterable

from sim.hwconfig import HwConfig

LEVELS = ("dram", "l2", "smem")
NA = "n/a (no energy table)"


def has_table(hw: HwConfig) -> bool:
    return any(k.startswith("energy_") for k in hw.params)


def _fma_field(hw: HwConfig, kr) -> str:
    # only the tiled GEMMs of simulate_gemm (their details carry m, n, k) use the tensor cores; the
    # direct grouped/depthwise kernel and the patch engine's gathers do their FMAs on CUDA cores
    from sim.engines.gpu.spec import gpu_spec
    dtype = kr.details.get("dtype", gpu_spec(hw).default_dtype())
    if "m" not in kr.details or gpu_spec(hw).on_cuda_cores(dtype):
        return "energy_fma_cuda_fp32"
    return f"energy_fma_tc_{dtype}"


def kernel_energy(hw: HwConfig, kr) -> dict[str, float] | None:
    """Joules of one KernelResult by cause (math, dram, l2, smem); None if a field is missing."""
    if hw.kind != "gpu" or not has_table(hw):
        return None
    out = {"math": 0.0}
    if kr.flops:
        e = hw.value(_fma_field(hw, kr))
        if e is None:
            return None
        out["math"] = kr.flops / 2 * e
    for level in LEVELS:
        n = kr.bytes.get(level, 0)
        out[level] = 0.0
        if n:
            e = hw.value(f"energy_{level}")
            if e is None:
                return None
            out[level] = n * e
    return out


def kernels_energy(hw: HwConfig, kernels: Iterable) -> dict[str, float] | None:
    """Summed kernel_energy over kernels (with a 'total'); None if any kernel has none."""
    tot = {"math": 0.0, **{lv: 0.0 for lv in LEVELS}}
    for kr in kernels:
        e = kernel_energy(hw, kr)
        if e is None:
            return None
        for k, v in e.items():
            tot[k] += v
    tot["total"] = sum(tot.values())
    return tot
