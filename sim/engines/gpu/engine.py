"""GpuEngine: the GPU family behind the Engine interface (sim/engines/base.py).

Routes one PhaseJob: structures Wang's kernels run (per-channel, skipped, generated WGC) go to
sim/engines/gpu/patch.py, everything else to the GEMM pipeline (sim/engines/gpu/gemm.py); the
method's own passes are one streaming kernel, added only where the driver says (`charge_method`);
with fused=true, the producer-epilogue share plus what waits on a reduction (stream.method_passes).
"""
from __future__ import annotations

from typing import ClassVar

from sim.engines.base import KernelResult, PhaseJob
from sim.engines.gpu import patch
from sim.engines.gpu.gemm import gemm_phase, simulate_gemm
from sim.engines.gpu.spec import DTYPE_BYTES, gpu_spec
from sim.engines.gpu.stream import method_passes, step_op_kernel
from sim.errors import PrunesimError


class GpuEngine:
    """The tensor-core GEMM pipeline, streaming kernels and patch kernels of one GPU hwconfig."""

    kind: ClassVar[str] = "gpu"

    def __init__(self, hw):
        self.hw = hw
        self.spec = gpu_spec(hw)

    def supports(self, job: PhaseJob) -> str | None:
        """Limits known from the layer and the method alone: a transposed conv's WGC is modeled
        dense only (it takes dO as its im2col operand), and Wang's patch kernel gathers the
        patches of ungrouped convs only."""
        layer, mr = job.layer, job.method
        if mr is None or job.phase not in mr.phases:
            return None
        if getattr(layer, "transposed", False) and job.phase == "wgc":
            return (f"layer {layer.name}: {mr.method} on a transposed conv: a sparse WGC is "
                    "modeled for convs only (a deconv's WGC takes dO as its im2col operand)")
        return patch.unsupported_reason(layer, mr, job.phase)

    def simulate(self, job: PhaseJob) -> list[KernelResult]:
        """The phase's GEMM (or Wang's WGC kernels) and the kernels around it.

        method None or dense: the dense GEMM. nm on a phase the method names: sparse A (dense
        with a warning where the GPU lacks the pattern). csr / channels: tensor cores cannot skip
        the zeros, so the GEMM runs dense (noted). per-channel / skipped / generated: the patch
        engine's kernels, which need `job.layer` and `job.batch`. dtype None: fp16 with tensor
        cores, else fp32.
        """
        dtype = job.dtype or self.spec.default_dtype()
        mr, g = job.method, job.gemm
        structure = mr.structure if mr is not None and g.phase in mr.phases else "dense"
        if structure in patch.STRUCTURES:
            return patch.simulate_wgc(self.hw, g, mr, layer=job.layer, batch=job.batch,
                                      dtype=dtype, seed=job.seed)
        if structure == "nm-w":
            out = weight_sparse_gemm(self.hw, g, mr, dtype)
        else:
            out = gemm_phase(self.hw, g, mr, structure, dtype)
        if job.charge_method and mr is not None:
            out += method_passes(self.hw, g, mr, dtype)
        return out

    def stream(self, op, dispatch_s: float = 0.0, threads: int = 1) -> KernelResult:
        """A non-GEMM kernel of the training step (sim.stepops.StreamOp) as a streaming kernel
        (threads: a CPU notion, ignored)."""
        return step_op_kernel(self.hw, op, dispatch_s)

    def step_dtype_bytes(self) -> int:
        """Bytes per activation element of the non-GEMM ops: those of the default GEMM dtype."""
        return DTYPE_BYTES[self.spec.default_dtype()]

    def gemm(self, m: int, n: int, k: int, *, sparse: str | None = None,
             density: float | None = None, dtype: str | None = None, threads: int = 1,
             seed: int = 0) -> list[KernelResult]:
        """One GEMM for `prunesim gemm`; sparse: an "n:m" pattern of A, None dense. density
        (unstructured CSR, a CPU notion) is refused; threads and seed do not apply to a GPU."""
        if density is not None:
            raise PrunesimError(self.hw.path, "--density", "CSR density is a CPU option; a GPU "
                                "config takes --sparse N:M")
        dtype = dtype or self.spec.default_dtype()
        if dtype not in DTYPE_BYTES:
            raise PrunesimError(None, "--dtype", f"unknown GPU dtype {dtype!r} (known: "
                                f"{', '.join(DTYPE_BYTES)})")
        if sparse is not None:
            from sim.methods.nm import parse_nm
            try:
                parse_nm(sparse)
            except ValueError as e:
                raise PrunesimError(None, "--sparse", str(e)) from None
        return [simulate_gemm(self.hw, m, n, k, dtype=dtype, sparse=sparse)]


def weight_sparse_gemm(hw, g, mr, dtype: str) -> list:
    """A phase whose weight operand (B) is n:m sparse (structure "nm-w", sim/methods/weight24.py).

    The tensor cores' sparse operand is A, so C = A B runs as C^T = B^T A^T: M and N swap, the
    weight becomes A with the pattern along K (FWD: W's rows along C_in; AGBP: W^T's rows along
    C_out, which a transposable mask provides). K, the FLOPs and the operand bytes are unchanged;
    only the tile shapes see the transposed M x N. A strided conv's AGBP still needs its col2im."""
    from sim.engines.gpu.gemm import _sparse_operand
    from sim.engines.gpu.stream import col2im
    c_out = g.m * g.n * g.groups if g.form == "scatter" else g.c_elems
    kr = simulate_gemm(hw, g.n, g.m, g.k, groups=g.groups, dtype=dtype,
                       sparse=_sparse_operand(mr), a_unique=g.b_elems, b_unique=g.a_elems,
                       c_out=c_out, layer=g.layer, phase=g.phase)
    kr.details["operand"] = "weights (B) sparse: run transposed, C^T = B^T A^T"
    out = [kr]
    if g.form == "scatter":
        out.append(col2im(hw, g, dtype))
    return out
