"""The CPU engine: Caffe's dense backward pass and Ye et al.'s CSR sparse path, behind the Engine
interface (sim.engines.base).

What is modeled (docs/explanation/engines/cpu.md has the derivations):

- Dense baseline, per sample as Caffe runs it: im2col + GEMM (WGC: dW += dO_n col^T, M = C_out,
  N = C_in R S, K = P Q) and GEMM + col2im (AGBP: col = W^T dO_n, M = C_in R S, N = P Q, K = C_out);
  1x1 stride-1 convolutions skip im2col/col2im as Caffe does. The GEMM is sim.engines.cpu.gemm.
- Ye's sparse path (METHODS.md 1): WGC dW = sdmm(dO_n, im2col_trans(I_n)) with the CSR of dO_n
  built first; AGBP dI = col2im_trans(sdmm(im2col_trans(dO_n), W)) where im2col_trans(dO_n) is dO_n
  laid out as (P Q) x C_out (a transpose), its CSR is built, W (C_out x C_in R S) is transposed once
  per layer as the paper's formula does, and col2im_trans scatters the (P Q) x (C_in R S) result.
  The sparse x dense product is sim.engines.cpu.spmm (cycle-level, on the real pattern).
- Element-wise passes (im2col, col2im, transposes, CSR construction, the method's own passes) are
  sim.engines.cpu.passes.

Every kernel has a category: math (gemm, spmm), memory (im2col, col2im, transposes, csr-build),
method-overhead (the method's passes, only when the driver charges them: `job.charge_method`).
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from sim.engines.base import KernelResult, PhaseJob, Unsupported
from sim.engines.cpu.gemm import gemm_model
from sim.engines.cpu.passes import (col2im_pass, csr_build_pass, im2col_pass, method_pass,
                                    stream_pass, transpose_pass)
from sim.engines.cpu.spec import F32, Cpu, cpu_spec, kernel_result
from sim.engines.cpu.spmm import (SpmmJob, csr_of_keys, csr_of_mask, csr_t_of_keys, mask_of_result,
                                  pattern_keys, random_csr, simulate_spmm)
from sim.errors import ConfigError

MATH_KERNELS = ("gemm", "spmm")


def _category(kernel: str) -> str:
    return "math" if kernel in MATH_KERNELS else "memory"


def _is_csr(method_result) -> bool:
    return method_result is not None and method_result.structure == "csr"


class CpuEngine:
    """The CPU engine family on one hwconfig (`kind: cpu`)."""

    kind = "cpu"

    def __init__(self, hw):
        self.hw = hw

    def supports(self, job: PhaseJob) -> str | None:
        """Why the CPU cannot model the job (known before any work), or None: no deconv at all,
        and Ye's sparse (CSR) path for ungrouped convs only."""
        layer, mr = job.layer, job.method
        if layer is None:
            return None
        if getattr(layer, "transposed", False):
            return (f"layer {layer.name}: transposed conv on {self.hw.name}: the {self.kind} engine "
                    "models conv kernels only (its per-sample im2col/Caffe path has no deconv)")
        if mr is None or job.phase not in getattr(mr, "phases", ()):
            return None
        if getattr(mr, "fused", False):   # refused, not "not run": the option would change nothing
            raise ConfigError(None, "--method", f"{mr.method}: fused=true is modeled on GPUs only "
                              f"({self.hw.name} is a CPU): leave it out")
        if layer.op == "conv" and layer.groups > 1 and mr.structure == "csr" \
                and job.phase in ("agbp", "wgc"):
            return (f"layer {layer.name}: {mr.method} on {self.hw.name}: the CPU engine's sparse "
                    f"(CSR) path models ungrouped convs only (groups={layer.groups})")
        return None

    def simulate(self, job: PhaseJob) -> list[KernelResult]:
        """One layer phase on `job.threads` threads: Caffe's per-sample kernels (the faithful path),
        then the method's passes when the driver charges them here. Without a layer only the
        lowered GEMM is known: one dense GEMM, or one CSR x dense product."""
        cpu = cpu_spec(self.hw, job.threads)
        over = _method_overhead(cpu, job) if job.charge_method else []
        if job.layer is None:
            return _gemm_only(cpu, job.gemm, job.method, job.seed) + over
        return self._layer_phase(cpu, job) + over

    def stream(self, op, dispatch_s: float = 0.0, threads: int = 1) -> KernelResult:
        """A non-GEMM kernel of the training step (sim.stepops.StreamOp) as a vectorized streaming
        loop through the cache model's levels (stream_pass), plus the framework's per-launch time
        (a CPU framework runs its kernels synchronously, so dispatch adds rather than overlaps)."""
        from sim.stepops import cpu_stream_args
        cpu = cpu_spec(self.hw, threads)
        cyc, bd, by = stream_pass(cpu, **cpu_stream_args(op, dtype_bytes=F32, simd_lanes=cpu.simd))
        if dispatch_s > 0:
            bd = dict(bd, dispatch=dispatch_s * max(1, op.launches) * cpu.clock)
            cyc += bd["dispatch"]
        return kernel_result(cpu, op.layer, op.phase, op.kernel, cyc, op.flops, bd, by,
                             {"op": op.op, "note": op.note}, category="step-op")

    def step_dtype_bytes(self) -> int:
        """Bytes per activation element of the non-GEMM ops: fp32 (Caffe's CPU path)."""
        return F32

    def gemm(self, m: int, n: int, k: int, *, density: float | None = None,
             sparse: str | None = None, dtype: str | None = None, threads: int = 1,
             seed: int = 0) -> list[KernelResult]:
        """One fp32 GEMM C[m,n] = A[m,k] B[k,n] (`prunesim gemm`): dense (density None) or A as a
        uniformly random CSR pattern at `density`. sparse (n:m tensor cores) is refused."""
        if sparse is not None:
            raise ConfigError(self.hw.path, "--sparse", "N:M structured sparsity needs sparse "
                              "tensor cores (a GPU config); a CPU config takes --density")
        # fp16 is the command's default for every engine: the CPU runs it as Caffe does, in fp32
        if dtype not in (None, "fp32", "fp16"):
            raise ConfigError(self.hw.path, "--dtype", f"the CPU engine models fp32 (Caffe), not "
                              f"{dtype}")
        cpu = cpu_spec(self.hw, threads)
        if density is None:
            cyc, bd, by, det = gemm_model(cpu, m, n, k)
            return [kernel_result(cpu, "gemm", "-", "gemm", cyc, 2 * m * n * k, bd, by, det)]
        if not 0.0 < density <= 1.0:
            raise ConfigError(self.hw.path, "--density", f"must be in (0, 1], got {density}")
        try:
            indptr, indices = random_csr(m, k, density, seed)
        except ValueError as e:
            raise ConfigError(self.hw.path, "--m/--k", str(e)) from None
        # the sampling seed stays 0 (as `prunesim gemm` always had it): `seed` picks the pattern
        cyc, bd, by, det = simulate_spmm(cpu, SpmmJob(indptr, indices, m, k, n, 1, 1.0))
        return [kernel_result(cpu, "gemm", "-", "spmm", cyc, int(2 * indptr[-1] * n), bd, by,
                              {**det, "pattern": "uniform random"})]

    def _layer_phase(self, cpu: Cpu, job: PhaseJob) -> list[KernelResult]:
        """AGBP, WGC or FWD of one conv/FC layer as Caffe (dense) or Ye's sparse path (CSR) runs it."""
        layer, phase, mr = job.layer, job.phase, job.method
        if phase not in ("agbp", "wgc", "fwd"):
            raise ValueError(f"unknown phase {phase!r}")
        if phase == "agbp" and not layer.needs_agbp:
            return []
        sparse = _is_csr(mr) and phase in getattr(mr, "phases", ("agbp", "wgc"))
        note = None
        if mr is not None and not sparse and mr.structure not in ("dense", "csr"):
            note = f"structure {mr.structure!r} has no CPU kernel here: modeled dense"
        if layer.op == "fc":
            return _fc_phase(cpu, layer, job.batch, phase, mr if sparse else None, job.seed, note)
        if layer.op in ("linear", "matmul"):
            # transformer GEMMs: the lowered GEMM itself (M = batch*tokens; attention's batched
            # GEMM as `groups` GEMMs), as a BLAS call over the whole batch runs it
            return _gemm_only(cpu, job.gemm, mr if sparse else None, job.seed)
        why = self.supports(job)
        if why:
            # also checked by the driver before any work; here for callers that come directly
            raise Unsupported(None, phase, why)
        if sparse:
            return _conv_sparse(cpu, layer, job.batch, phase, mr, job.seed)
        return _conv_dense(cpu, layer, job.batch, phase, note)


# ---- per layer ---------------------------------------------------------------------------------


class _Conv:
    """A conv layer's per-group sizes, and the list its kernels go to (each `reps` calls)."""

    def __init__(self, cpu: Cpu, layer, batch: int, phase: str, note: str | None):
        g = layer.groups
        self.cpu, self.layer, self.batch, self.phase, self.note = cpu, layer, batch, phase, note
        self.g = g
        self.cin, self.cout = layer.c_in // g, layer.c_out // g
        self.pq, self.hw_in = layer.p * layer.q, layer.h * layer.w
        self.crs = self.cin * layer.r * layer.s
        self.one_by_one = layer.r == 1 and layer.s == 1 and layer.stride == 1 and layer.pad == 0
        self.out: list[KernelResult] = []

    @property
    def dense_flops(self) -> int:
        return 2 * self.cout * self.crs * self.pq * self.batch * self.g

    def add(self, kernel, res, flops=0, details=None, reps=None):
        """A per-sample kernel (cycles, breakdown, bytes) repeated `reps` times (batch x groups)."""
        reps = self.batch * self.g if reps is None else reps
        cyc, bd, by = res
        d = dict(details or {})
        d.setdefault("per_sample_calls", reps)
        if self.note:
            d["note"] = self.note
        self.out.append(kernel_result(self.cpu, self.layer.name, self.phase, kernel, cyc * reps, flops,
                                      {k: v * reps for k, v in bd.items()},
                                      {k: v * reps for k, v in by.items()}, d,
                                      category=_category(kernel)))

    def add_spmm(self, job: SpmmJob, flops: int, shape: list, seed: int) -> None:
        cyc, bd, by, det = simulate_spmm(self.cpu, job, seed=seed)
        self.out.append(kernel_result(self.cpu, self.layer.name, self.phase, "spmm", cyc, flops, bd,
                                      by, {**det, "shape": shape, "dense_flops": self.dense_flops}))


def _conv_dense(cpu: Cpu, layer, batch: int, phase: str, note: str | None) -> list[KernelResult]:
    """Caffe's per-sample kernels: im2col + GEMM (FWD, WGC), GEMM + col2im (AGBP)."""
    c = _Conv(cpu, layer, batch, phase, note)
    cin_hw = layer.c_in * c.hw_in
    if phase == "fwd":
        if not c.one_by_one:
            c.add("im2col", im2col_pass(cpu, cin_hw, c.crs * c.pq))
        cyc, bd, by, det = gemm_model(cpu, c.cout, c.pq, c.crs)
        c.add("gemm", (cyc, bd, by), 2 * c.cout * c.pq * c.crs * batch * c.g, det)
    elif phase == "wgc":
        if not c.one_by_one:
            c.add("im2col", im2col_pass(cpu, cin_hw, c.crs * c.pq))
        cyc, bd, by, det = gemm_model(cpu, c.cout, c.crs, c.pq)
        c.add("gemm", (cyc, bd, by), c.dense_flops, {**det, "shape": [c.cout, c.crs, c.pq]})
    else:
        cyc, bd, by, det = gemm_model(cpu, c.crs, c.pq, c.cout)
        c.add("gemm", (cyc, bd, by), c.dense_flops, {**det, "shape": [c.crs, c.pq, c.cout]})
        if not c.one_by_one:
            c.add("col2im", col2im_pass(cpu, c.crs * c.pq, cin_hw))
    return c.out


class _SamplePattern:
    """The pruned dO's nonzero pattern, (n*C_out) x PQ, and per sample transposed, (n*PQ) x C_out,
    as CSR: built from the method's CSR without a dense mask, once per method result (every CPU
    hwconfig of a replay asks for the same one, possibly from two threads at once: sim.driver
    runs CPU hwconfigs side by side; the last KEEP results' patterns are kept)."""

    KEEP = 2                            # CSR methods of one layer (the replay waits per layer)
    _recent: "OrderedDict[int, tuple]" = OrderedDict()   # id(mr) -> (mr, its _SamplePattern)
    _lock = threading.Lock()

    def __init__(self, mr, n: int, c: int, pq: int):
        self.n, self.c, self.pq = n, c, pq
        self.keys = pattern_keys(mr, n * c, pq)
        self.mask = None
        if self.keys is None:           # no CSR: the pruned tensor's mask
            self.mask = mask_of_result(mr, n * c, pq)
        self.nnz = int(self.keys.size if self.keys is not None else self.mask.sum())
        self._csr = self._csr_t = None
        self._build = threading.Lock()  # one thread builds a CSR, the other waits for it

    @classmethod
    def of(cls, mr, n: int, c: int, pq: int) -> "_SamplePattern":
        with cls._lock:
            # the entry holds mr itself, so its id cannot be reused while it is kept
            hit = cls._recent.get(id(mr))
            if hit is not None and hit[0] is mr and (hit[1].n, hit[1].c, hit[1].pq) == (n, c, pq):
                cls._recent.move_to_end(id(mr))
                return hit[1]
            pat = cls(mr, n, c, pq)
            cls._recent[id(mr)] = (mr, pat)
            cls._recent.move_to_end(id(mr))
            while len(cls._recent) > cls.KEEP:
                cls._recent.popitem(last=False)
            return pat

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        with self._build:
            if self._csr is None:
                self._csr = csr_of_mask(self.mask) if self.keys is None else \
                    csr_of_keys(self.keys, self.n * self.c, self.pq)
            return self._csr

    def csr_t(self) -> tuple[np.ndarray, np.ndarray]:
        with self._build:
            if self._csr_t is None:
                n, c, pq = self.n, self.c, self.pq
                if self.keys is None:
                    self._csr_t = csr_of_mask(self.mask.reshape(n, c, pq).transpose(0, 2, 1)
                                              .reshape(n * pq, c))
                else:
                    self._csr_t = csr_t_of_keys(self.keys, n, c, pq)
            return self._csr_t


def _conv_sparse(cpu: Cpu, layer, batch: int, phase: str, mr, seed: int) -> list[KernelResult]:
    """Ye's sparse path; the trace holds `rec` samples, each standing for batch / rec of them."""
    c = _Conv(cpu, layer, batch, phase, None)
    pq, crs, cin_hw = c.pq, c.crs, layer.c_in * c.hw_in
    n_rec = mr.csr.shape[0] // layer.c_out if mr.csr is not None else np.shape(mr.pruned)[0]
    pat = _SamplePattern.of(mr, n_rec, layer.c_out, pq)
    scale = batch / n_rec
    nnz_total = pat.nnz
    sparse_flops = int(2 * nnz_total * crs * scale)
    mean_nnz = nnz_total / n_rec
    if phase == "wgc":
        c.add("csr-build", csr_build_pass(cpu, layer.c_out, pq, int(mean_nnz)), reps=batch)
        if c.one_by_one:
            c.add("transpose-I", transpose_pass(cpu, cin_hw))
        else:
            c.add("im2col-trans", im2col_pass(cpu, cin_hw, crs * pq))
        indptr, indices = pat.csr()
        c.add_spmm(SpmmJob(indptr, indices, layer.c_out, pq, crs, n_rec, scale), sparse_flops,
                   [layer.c_out, crs, pq], seed)
        return c.out
    # agbp: dO_n^T ((P Q) x C_out) as CSR, times W (C_out x C_in R S)
    c.add("transpose-dO", transpose_pass(cpu, layer.c_out * pq), reps=batch)
    c.add("csr-build", csr_build_pass(cpu, pq, layer.c_out, int(mean_nnz)), reps=batch)
    c.add("transpose-W", transpose_pass(cpu, layer.weight_count), reps=1)
    indptr, indices = pat.csr_t()
    c.add_spmm(SpmmJob(indptr, indices, pq, layer.c_out, crs, n_rec, scale), sparse_flops,
               [pq, crs, layer.c_out], seed)
    if c.one_by_one:
        c.add("col2im-trans", transpose_pass(cpu, cin_hw), reps=batch)
    else:
        c.add("col2im-trans", col2im_pass(cpu, crs * pq, cin_hw), reps=batch)
    return c.out


def _fc_phase(cpu: Cpu, layer, batch: int, phase: str, method_result, seed: int,
              note: str | None) -> list[KernelResult]:
    """FC layers: Caffe's inner product runs one GEMM over the whole batch."""
    cin, cout = layer.c_in, layer.c_out
    name = layer.name
    det0 = {"note": note} if note else {}
    if method_result is None:
        if phase == "wgc":
            cyc, bd, by, det = gemm_model(cpu, cout, cin, batch)
        else:
            cyc, bd, by, det = gemm_model(cpu, batch, cin, cout)
        return [kernel_result(cpu, name, phase, "gemm", cyc, 2 * cin * cout * batch, bd, by,
                              {**det, **det0})]
    n_rec = method_result.csr.shape[0]
    mask = mask_of_result(method_result, n_rec, cout)
    out = []
    def mem(kernel, res):
        return kernel_result(cpu, name, phase, kernel, res[0], 0, res[1], res[2], category="memory")
    if phase == "agbp":
        out.append(mem("csr-build", csr_build_pass(cpu, batch, cout, int(mask.sum() * batch / n_rec))))
        indptr, indices = csr_of_mask(mask)
        job = SpmmJob(indptr, indices, n_rec, cout, cin, 1, batch / n_rec)
    else:
        # dW = dO^T I: the sparse operand is dO^T (C_out x batch); the recorded samples tile the batch
        reps = math.ceil(batch / n_rec)
        tiled = np.tile(mask, (reps, 1))[:batch]
        out.append(mem("transpose-dO", transpose_pass(cpu, batch * cout)))
        out.append(mem("csr-build", csr_build_pass(cpu, cout, batch, int(tiled.sum()))))
        indptr, indices = csr_of_mask(np.ascontiguousarray(tiled.T))
        job = SpmmJob(indptr, indices, cout, batch, cin, 1, 1.0)
    cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
    out.append(kernel_result(cpu, name, phase, "spmm", cyc, int(2 * job.indptr[-1] * cin * job.scale),
                             bd, by, det))
    return out


# ---- the method's passes, and the GEMM alone ---------------------------------------------------


def _method_overhead(cpu: Cpu, job: PhaseJob) -> list[KernelResult]:
    """The method's own passes (DBTD's |g| sum and pruning, SDGP's selection, ...) from its
    WorkAccount. Called only where the driver charges them; the sparse path's CSR build and
    transposes are kernels of the phase itself."""
    mr = job.method
    if mr is None or mr.work.elems_read + mr.work.elems_written == 0:
        return []
    cyc, bd, by = method_pass(cpu, mr.work)
    g = job.gemm
    layer, phase = (g.layer, g.phase) if g is not None else (job.layer.name, job.phase)
    return [kernel_result(cpu, layer, phase, f"{mr.method}-overhead", cyc, 0, bd, by,
                          {"work": mr.work.as_dict()}, category="method-overhead")]


def _gemm_only(cpu: Cpu, gemm, method_result, seed: int) -> list[KernelResult]:
    """Only the lowered GEMM is known: one dense GEMM, or one CSR x dense product whose pattern is
    the method's CSR when that is m x k, else uniformly random at the method's density."""
    if not _is_csr(method_result):
        cyc, bd, by, det = gemm_model(cpu, gemm.m, gemm.n, gemm.k)
        return [kernel_result(cpu, gemm.layer, gemm.phase, "gemm", cyc * gemm.groups, gemm.flops,
                              {k: v * gemm.groups for k, v in bd.items()}, by, det)]
    csr = method_result.csr
    if csr is not None and csr.shape == (gemm.m, gemm.k):
        indptr, indices, pattern = csr.indptr, csr.indices, "method CSR"
    else:
        indptr, indices = random_csr(gemm.m, gemm.k, max(method_result.density, 1e-6), seed)
        pattern = "uniform random at the method's density"
    job = SpmmJob(indptr, indices, gemm.m, gemm.k, gemm.n, 1, float(gemm.groups))
    cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
    return [kernel_result(cpu, gemm.layer, gemm.phase, "spmm", cyc,
                          int(2 * indptr[-1] * gemm.n * gemm.groups), bd, by,
                          {**det, "pattern": pattern})]
