"""Streaming kernels on the GPU: launch + max(bytes / DRAM bandwidth, ops / CUDA rate) + latency.

They serve GEMM epilogues (col2im, the zero-filled C of a K = 0 GEMM), the methods' own passes, the
patch engine's memsets and transposes, and direct grouped convs; soon the non-GEMM ops of a step.
"""
from __future__ import annotations

from dataclasses import replace

from sim.engines.base import KernelResult
from sim.engines.gpu.spec import DTYPE_BYTES, gpu_spec
from sim.hwconfig import HwConfig

ENGINE = "tensorcore"


def stream_kernel(hw: HwConfig, kernel: str, *, read_bytes: float, write_bytes: float,
                  ops: float = 0.0, launches: int = 1, layer: str = "", phase: str = "",
                  cause: str = "memory", category: str = "memory",
                  details: dict | None = None) -> KernelResult:
    """An elementwise/streaming pass (method prune/compress, statistics, col2im, ...).

    cause: the breakdown key its body is filed under (stored records keep these names);
    category: the KernelResult category (sim.engines.base.CATEGORIES).
    """
    s = gpu_spec(hw)
    mem = (read_bytes + write_bytes) / s.stream_bpc
    alu = ops / (s.sm * s.cuda_rate * s.cuda_ratio)   # one op per CUDA-core lane per clock
    body = max(mem, alu) + s.dram_lat * launches
    launch = s.launch * max(1, launches)
    if cause == "method_overhead":
        bd = {"method_overhead": (body + launch) / s.clock}
    else:
        bd = {cause: body / s.clock, "launch": launch / s.clock}
    return KernelResult(ENGINE, s.name, layer, phase, kernel, body + launch, s.clock, 0, bd,
                        {"dram": int(read_bytes + write_bytes), "l2": int(read_bytes + write_bytes)},
                        dict(details or {}, bound="alu" if alu > mem else "memory", launches=launches),
                        category=category)


def col2im(hw: HwConfig, gemm, dtype: str) -> KernelResult:
    """A strided ("scatter") AGBP's col2im: read the im2col-space product, accumulate overlapping
    windows into dI."""
    eb = DTYPE_BYTES[dtype]
    c_out = gemm.m * gemm.n * gemm.groups
    return stream_kernel(hw, "col2im", read_bytes=c_out * eb, write_bytes=gemm.c_elems * eb,
                         ops=c_out, layer=gemm.layer, phase=gemm.phase)


def method_overhead(hw: HwConfig, gemm, mr, dtype: str) -> KernelResult:
    """The method's own passes (its WorkAccount) as one streaming kernel of `passes` launches."""
    eb = DTYPE_BYTES.get(dtype, 2)
    w = mr.work
    return stream_kernel(hw, f"{mr.method}-overhead", read_bytes=w.elems_read * eb,
                         write_bytes=w.elems_written * eb + w.bytes_metadata,
                         ops=w.compares + w.flops + w.random_draws, launches=max(1, w.passes),
                         layer=gemm.layer, phase=gemm.phase, cause="method_overhead",
                         category="method-overhead", details={"work": w.as_dict()})


def fused_epilogue(hw: HwConfig, gemm, mr, dtype: str) -> KernelResult:
    """The method's prune/compress inside the epilogue of the kernel that produces dO (fused=true).

    What the fusion saves and what it still costs (docs/explanation/engines/tensorcore.md, "Fused pruning"):
    - no launch and no DRAM latency of its own: it is part of a kernel that runs anyway;
    - no read of dO: the producer holds dO's tile in registers when it stores it;
    - extra bytes: what the method writes beyond the dense dO the producer stores anyway (SDGP:
      the compressed values and the metadata, since WGC still reads the dense dO; DBTD's |g|
      statistic: nothing but per-tile partial sums, negligible);
    - the compare/select/draw ops at the CUDA-core rate, overlapped with the producer's store:
      they cost only where they outlast the dense store plus the extra bytes.
    The part of the work that needs a reduction over the whole tensor first (mr.after_reduction)
    cannot run in any tile's epilogue and stays a separate streaming pass (method_overhead).
    """
    s = gpu_spec(hw)
    eb = DTYPE_BYTES.get(dtype, 2)
    w = mr.epilogue_work
    dense_store = w.elems_read * eb            # the dO elements the producer writes anyway
    extra = w.elems_written * eb + w.bytes_metadata
    alu = (w.compares + w.flops + w.random_draws) / (s.sm * s.cuda_rate * s.cuda_ratio)
    store = (dense_store + extra) / s.stream_bpc
    cycles = max(store, alu) - dense_store / s.stream_bpc
    return KernelResult(ENGINE, s.name, gemm.layer, gemm.phase, f"{mr.method}-fused-epilogue",
                        cycles, s.clock, 0, {"method_overhead": cycles / s.clock},
                        {"dram": int(extra), "l2": int(extra)},
                        {"work": w.as_dict(), "bound": "alu" if alu > store else "memory",
                         "launches": 0, "fused": True}, category="method-overhead")


def method_passes(hw: HwConfig, gemm, mr, dtype: str) -> list[KernelResult]:
    """The method's own work where the driver charges it: one streaming kernel of its passes, or
    (fused) the producer-epilogue share plus a separate pass for what waits on a reduction."""
    w = mr.work
    if w.passes + w.elems_read + w.elems_written == 0:
        return []
    if not mr.fused:
        return [method_overhead(hw, gemm, mr, dtype)]
    out = [fused_epilogue(hw, gemm, mr, dtype)]
    if mr.after_reduction.passes:
        from dataclasses import replace as _replace
        out.append(method_overhead(hw, gemm, _replace(mr, work=mr.after_reduction), dtype))
    return out


def step_op_kernel(hw: HwConfig, op, dispatch_s: float = 0.0) -> KernelResult:
    """A non-GEMM kernel of the training step (sim.stepops.StreamOp) as a streaming kernel.

    StreamOp counts an FMA as 2 flops, stream_kernel one op per lane per clock: ops = flops / 2.
    The host enqueues launches asynchronously, so the framework's dispatch time per launch costs
    only where it exceeds the GPU's own time (small kernels: host-bound), filed as "dispatch".
    """
    kr = stream_kernel(hw, op.kernel, read_bytes=op.read_bytes, write_bytes=op.write_bytes,
                       ops=op.flops / 2, launches=max(1, op.launches), layer=op.layer,
                       phase=op.phase, category="step-op", details={"op": op.op, "note": op.note})
    host = dispatch_s * max(1, op.launches) * kr.clock_hz
    if host <= kr.cycles:
        return kr
    bd = dict(kr.breakdown, dispatch=(host - kr.cycles) / kr.clock_hz)
    return replace(kr, cycles=host, breakdown=bd)
