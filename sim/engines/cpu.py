"""The CPU engine: Caffe's dense backward pass and Ye et al.'s CSR sparse path on x86 and ARM cores.

What is modeled (docs/engines/cpu.md has the derivations):

- Dense baseline, per sample as Caffe runs it: im2col + GEMM (WGC: dW += dO_n col^T, M = C_out,
  N = C_in R S, K = P Q) and GEMM + col2im (AGBP: col = W^T dO_n, M = C_in R S, N = P Q, K = C_out);
  1x1 stride-1 convolutions skip im2col/col2im as Caffe does. The GEMM is a Goto/BLIS-style model:
  a register micro-kernel (mr x nr tile; FMA units, FMA latency, load ports and issue width bound
  each k step), edge tiles padded, packing of A and B blocks, C tile traffic, operands served by the
  cache level their footprint fits. No per-network factor: the only library constant is
  gemm_library_efficiency, 1.0 on datasheet configs and measured by `prunesim calibrate` on a host.
- Ye's sparse path (METHODS.md 1): WGC dW = sdmm(dO_n, im2col_trans(I_n)) with the CSR of dO_n
  built first; AGBP dI = col2im_trans(sdmm(im2col_trans(dO_n), W)) where im2col_trans(dO_n) is dO_n
  laid out as (P Q) x C_out (a transpose), its CSR is built, W (C_out x C_in R S) is transposed once
  per layer as the paper's formula does, and col2im_trans scatters the (P Q) x (C_in R S) result.
- The sparse x dense kernel is cycle-level: sim.engines.cache replays the exact cache-line stream of
  the CSR product for the real sparsity pattern through set-associative LRU L1/L2/L3 with an L2
  stream prefetcher; the counts become time through the core's pipeline bounds (per nonzero: FMA,
  load/store ports, issue width, the FMA or store-forward dependency chain), latency / memory-level
  parallelism, and per-level and shared DRAM bandwidth. Large products are sampled (SMARTS-style
  systematic sampling of row groups with warm-up), small ones run exhaustively.
- Element-wise passes (im2col, col2im, transposes, CSR construction) are scalar loops: per element
  loads, stores and uops bound by the ports and the issue width, data-dependent branches of the CSR
  build pay the misprediction penalty, and the bytes cost the bandwidth of the level they live in.
"""
from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from sim.engines import cache as cs
from sim.engines.base import Unsupported
from sim.engines import reuse as rs
from sim.engines.base import KernelResult
from sim.errors import ConfigError
from sim.hwconfig import Field, HwConfig
from sim.workload import Gemm, Layer

ENGINE = "cpu"
F32 = 4

HW_FIELDS: dict[str, Field] = {
    "isa": Field("text", "instruction set family: x86 broadcasts A from memory, arm multiplies by "
                 "vector lane", choices=("x86", "arm")),
    "cores": Field("count", "cores per socket", minimum=1),
    "clock": Field("frequency", "core clock the kernels run at", minimum=1e6),
    "simd_width": Field("count", "fp32 lanes per SIMD register", minimum=1),
    "vector_registers": Field("count", "architectural SIMD registers", minimum=4),
    "fma_units": Field("count", "SIMD FMA pipes per core", minimum=1),
    "fma_latency": Field("cycles", "FMA latency", minimum=1),
    "issue_width": Field("count", "uops issued per cycle", minimum=1),
    "load_ports": Field("count", "SIMD loads per cycle", minimum=1),
    "store_ports": Field("count", "SIMD stores per cycle", minimum=1),
    "branch_mispredict_penalty": Field("cycles", "cycles lost per mispredicted branch", minimum=0),
    "line_size": Field("size", "cache line", minimum=16),
    "l1_size": Field("size", "L1 data cache per core", minimum=1024),
    "l1_ways": Field("count", "L1 associativity", minimum=1),
    "l1_latency": Field("cycles", "L1 load-to-use latency", minimum=1),
    "l1_bandwidth": Field("bytes_per_cycle", "L1 load bandwidth per core", minimum=1),
    "l2_size": Field("size", "L2 size (per L2 instance)", minimum=1024),
    "l2_ways": Field("count", "L2 associativity", minimum=1),
    "l2_latency": Field("cycles", "L2 hit latency", minimum=1),
    "l2_bandwidth": Field("bytes_per_cycle", "L2 to L1 bandwidth per core", minimum=0.1),
    "l2_shared_by": Field("count", "cores sharing one L2 (1: private)", minimum=1),
    "l3_size": Field("size", "last-level cache (0 B: none)", minimum=0),
    "l3_ways": Field("count", "L3 associativity", minimum=1),
    "l3_latency": Field("cycles", "L3 hit latency", minimum=1),
    "l3_bandwidth": Field("bytes_per_cycle", "L3 to L2 bandwidth per core", minimum=0.1),
    "prefetch_streams": Field("count", "streams the L2 prefetcher tracks per core", minimum=0),
    "prefetch_distance": Field("count", "lines the prefetcher runs ahead of a stream", minimum=0),
    "prefetch_degree": Field("count", "prefetches issued per stream access", minimum=0),
    "dram_bandwidth": Field("bandwidth", "peak DRAM bandwidth of the socket", minimum=1e6),
    "dram_latency": Field("time", "DRAM load latency", minimum=1e-9),
    "mlp": Field("count", "outstanding L1 misses per core (fill buffers)", minimum=1),
    "gemm_mr": Field("count", "BLAS micro-kernel rows (broadcast operand)", minimum=1),
    "gemm_nr": Field("count", "BLAS micro-kernel columns (vector operand)", minimum=1),
    "gemm_mc": Field("count", "BLAS L2 block rows", minimum=1),
    "gemm_kc": Field("count", "BLAS depth block", minimum=1),
    "gemm_nc": Field("count", "BLAS L3 block columns", minimum=1),
    "gemm_library_efficiency": Field("fraction", "measured fraction of the modeled GEMM speed the "
                                     "BLAS reaches (1: model alone)", minimum=0.01, maximum=1.5),
    "spmm_style": Field("text", "CSR x dense inner loop: register (MKL: C row chunk in registers) "
                        "or axpy (Eigen, SciPy: C row streamed per nonzero)",
                        choices=("register", "axpy")),
    "spmm_simd_width": Field("count", "fp32 lanes the CSR x dense kernel vectorizes over", minimum=1),
    "spmm_library_efficiency": Field("fraction", "measured fraction of the modeled SpMM speed the "
                                     "library reaches (1: model alone)", minimum=0.01, maximum=1.5),
}


# ---- hardware view -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cpu:
    """The hwconfig as plain numbers (cycles and bytes), for `threads` threads of one socket."""

    name: str
    isa: str
    clock: float
    cores: int
    threads: int
    simd: int
    vregs: int
    fma_units: int
    fma_lat: float
    issue: int
    ld_ports: int
    st_ports: int
    mispredict: float
    line: int
    l1: tuple[int, int, float, float]      # size, ways, latency, bandwidth (B/cycle)
    l2: tuple[int, int, float, float]
    l2_shared_by: int
    l3: tuple[int, int, float, float]
    pf_streams: int
    pf_dist: int
    pf_degree: int
    dram_bw: float                          # B/cycle, whole socket
    dram_lat: float                         # cycles
    mlp: int
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    gemm_eff: float
    spmm_style: str
    spmm_simd: int
    spmm_eff: float

    @property
    def core_dram_bw(self) -> float:
        """One core's DRAM bandwidth: the socket's, or what its fill buffers sustain (Little's law)."""
        return min(self.dram_bw, self.mlp * self.line / self.dram_lat)

    @property
    def l2_private(self) -> bool:
        return self.l2_shared_by == 1

    def l2_share(self) -> float:
        """L2 capacity one thread can count on (a shared L2 is split among the threads on it)."""
        return self.l2[0] / (1 if self.l2_private else min(self.threads, self.l2_shared_by))

    def level_of(self, footprint: float) -> tuple[str, float]:
        """(level, bytes per cycle per thread) that serves data of this footprint."""
        if footprint <= self.l1[0]:
            return "l1", self.l1[3]
        if footprint <= self.l2_share():
            return "l2", self.l2[3]
        if self.l3[0] > 0 and footprint <= self.l3[0]:
            return "l3", self.l3[3]
        return "dram", min(self.core_dram_bw, self.dram_bw / self.threads)


def cpu_view(hw: HwConfig, threads: int = 1) -> Cpu:
    v = hw.value
    if threads < 1:
        raise ConfigError(hw.path, "threads", f"must be >= 1, got {threads}")
    if threads > v("cores"):
        raise ConfigError(hw.path, "params.cores", f"{threads} threads asked, the config has "
                          f"{v('cores')} cores")
    clock = v("clock")
    line = int(v("line_size"))
    if line & (line - 1):
        raise ConfigError(hw.path, "params.line_size.value", f"must be a power of two, got {line}")
    lvl = lambda p: (int(v(f"{p}_size")), int(v(f"{p}_ways")), float(v(f"{p}_latency")),
                     float(v(f"{p}_bandwidth")))
    return Cpu(hw.name, v("isa"), clock, int(v("cores")), threads, int(v("simd_width")),
               int(v("vector_registers")), int(v("fma_units")), float(v("fma_latency")),
               int(v("issue_width")), int(v("load_ports")), int(v("store_ports")),
               float(v("branch_mispredict_penalty")), line, lvl("l1"), lvl("l2"),
               int(v("l2_shared_by")), lvl("l3"), int(v("prefetch_streams")),
               int(v("prefetch_distance")), int(v("prefetch_degree")), v("dram_bandwidth") / clock, v("dram_latency") * clock,
               int(v("mlp")), int(v("gemm_mr")), int(v("gemm_nr")), int(v("gemm_mc")),
               int(v("gemm_kc")), int(v("gemm_nc")), float(v("gemm_library_efficiency")),
               v("spmm_style"), int(v("spmm_simd_width")), float(v("spmm_library_efficiency")))


def _kr(cpu: Cpu, layer: str, phase: str, kernel: str, cycles: float, flops: int,
        breakdown_cycles: dict[str, float], bytes_: dict[str, int] | None = None,
        details: dict | None = None) -> KernelResult:
    total = max(cycles, 0.0)
    # breakdown in seconds, scaled to sum to the kernel time
    s = sum(breakdown_cycles.values()) or 1.0
    bd = {k: total * v / s / cpu.clock for k, v in breakdown_cycles.items()}
    return KernelResult(ENGINE, cpu.name, layer, phase, kernel, float(total), cpu.clock, int(flops), bd,
                        {k: int(b) for k, b in (bytes_ or {}).items()}, details or {})


# ---- element-wise passes -----------------------------------------------------------------------


def stream_pass(cpu: Cpu, elems: float, *, loads: float, stores: float, uops: float,
                read_footprint: float, read_bytes: float, write_footprint: float, write_bytes: float,
                mispredicts: float = 0.0) -> tuple[float, dict[str, float], dict[str, int]]:
    """A scalar loop over `elems` elements: per-element loads/stores/uops, plus the bytes moved.

    The core bound (ports, issue) and the memory bound (bytes over the bandwidth of the level the
    data lives in) overlap; branch mispredictions do not (they flush the pipeline).
    """
    core = elems * max(loads / cpu.ld_ports, stores / cpu.st_ports, uops / cpu.issue)
    rl, rbw = cpu.level_of(read_footprint)
    wl, wbw = cpu.level_of(write_footprint)
    mem = read_bytes / rbw + write_bytes / wbw
    flush = mispredicts * cpu.mispredict
    by: dict[str, int] = {}
    by[rl] = by.get(rl, 0) + int(read_bytes)
    by[wl] = by.get(wl, 0) + int(write_bytes)
    if core >= mem:
        bd = {"core": core, "branch-mispredict": flush}
    else:
        bd = {"memory-" + (rl if read_bytes >= write_bytes else wl): mem, "branch-mispredict": flush}
    return core if core >= mem else mem, bd, by


def im2col_pass(cpu: Cpu, src_elems: int, col_elems: int) -> tuple[float, dict, dict]:
    # Caffe's im2col: per output element an index update, a padding test, a load and a store
    return _fin(stream_pass(cpu, col_elems, loads=1, stores=1, uops=5, read_footprint=src_elems * F32,
                            read_bytes=src_elems * F32, write_footprint=col_elems * F32,
                            write_bytes=col_elems * F32))


def col2im_pass(cpu: Cpu, col_elems: int, dst_elems: int) -> tuple[float, dict, dict]:
    # col2im accumulates: load col, load dst, add, store dst, plus index and padding work
    return _fin(stream_pass(cpu, col_elems, loads=2, stores=1, uops=7, read_footprint=col_elems * F32,
                            read_bytes=col_elems * F32, write_footprint=dst_elems * F32,
                            write_bytes=2 * dst_elems * F32))


def transpose_pass(cpu: Cpu, elems: int) -> tuple[float, dict, dict]:
    return _fin(stream_pass(cpu, elems, loads=1, stores=1, uops=4, read_footprint=elems * F32,
                            read_bytes=elems * F32, write_footprint=elems * F32,
                            write_bytes=elems * F32))


def csr_build_pass(cpu: Cpu, rows: int, cols: int, nnz: int) -> tuple[float, dict, dict]:
    """Dense -> CSR in two passes (count, then fill), as MKL's dnscsr and Eigen's sparseView do.

    The count pass is branch-free; the fill pass branches on every element, and a branch taken with
    probability d is mispredicted about min(d, 1 - d) of the time by a bimodal predictor.
    """
    elems = rows * cols
    d = nnz / elems if elems else 0.0
    cyc, bd, by = stream_pass(cpu, elems, loads=2, stores=2 * d, uops=6 + 3 * d,
                              read_footprint=elems * F32, read_bytes=2 * elems * F32,
                              write_footprint=nnz * 8, write_bytes=nnz * 8 + (rows + 1) * 4,
                              mispredicts=elems * min(d, 1.0 - d))
    return _fin((cyc, bd, by))


def _fin(res):
    cyc, bd, by = res
    return cyc + bd.get("branch-mispredict", 0.0), bd, by


# ---- dense GEMM (Goto/BLIS) --------------------------------------------------------------------


def kstep_cycles(cpu: Cpu) -> tuple[float, dict[str, float]]:
    """Cycles of one k step of the mr x nr micro-kernel, and each bound (the largest wins)."""
    nvec = max(1, math.ceil(cpu.nr / cpu.simd))
    fmas = cpu.mr * nvec
    a_loads = cpu.mr if cpu.isa == "x86" else math.ceil(cpu.mr / cpu.simd)
    loads = nvec + a_loads
    bounds = {"fma": fmas / cpu.fma_units, "load": loads / cpu.ld_ports,
              "issue": (fmas + loads + 1) / cpu.issue,
              # each accumulator takes one FMA per k step: steps are at least one latency apart
              "fma-latency": cpu.fma_lat}
    return max(bounds.values()), bounds


def gemm_model(cpu: Cpu, m: int, n: int, k: int, *, a_bytes_src: float | None = None,
               b_bytes_src: float | None = None) -> tuple[float, dict[str, float], dict[str, int], dict]:
    """Cycles of C[m,n] (+)= A[m,k] B[k,n] in fp32 on `cpu.threads` threads, BLIS loop order."""
    mr, nr, mc, kc, nc = cpu.mr, cpu.nr, cpu.mc, cpu.kc, cpu.nc
    ck, bounds = kstep_cycles(cpu)
    # the A micro-panel streams from L2 (mr floats per k step): L2 bandwidth can bound the step
    ck = max(ck, mr * F32 / cpu.l2[3])
    mt, nt = math.ceil(m / mr), math.ceil(n / nr)
    kernel = mt * nt * k * ck
    # C tile: load and store mr x nr once per kc block, from the level C lives in
    c_bytes = m * n * F32
    c_lvl, c_bw = cpu.level_of(c_bytes)
    c_updates = mt * nt * math.ceil(k / kc)
    tile_vec = mr * max(1, math.ceil(nr / cpu.simd))
    c_traffic = c_updates * mr * nr * F32 * 2
    c_cycles = max(c_updates * 2 * tile_vec / min(cpu.ld_ports, cpu.st_ports), c_traffic / c_bw)
    # packing: B (k x n) once; A (m x k) once per nc block of columns; vector copies
    a_src = float(m * k * F32 if a_bytes_src is None else a_bytes_src)
    b_src = float(k * n * F32 if b_bytes_src is None else b_bytes_src)
    a_lvl, a_bw = cpu.level_of(a_src)
    b_lvl, b_bw = cpu.level_of(b_src)
    a_packs = math.ceil(n / nc)
    pack_a = a_packs * max(m * k / cpu.simd * 2 / cpu.issue, m * k * F32 / a_bw)
    pack_b = max(k * n / cpu.simd * 2 / cpu.issue, k * n * F32 / b_bw)
    # B panels (kc x nc, packed) are re-read from L3 (or DRAM) once per mc block of rows
    b_rereads = math.ceil(m / mc)
    b_panel_lvl, b_panel_bw = cpu.level_of(min(k, kc) * min(n, nc) * F32)
    b_stream = b_rereads * k * n * F32 / b_panel_bw
    kernel_t = max(kernel, b_stream)
    par = min(cpu.threads, mt * nt)
    # threads split the jr/ir loops; packing is shared work split the same way
    cycles = (kernel_t + c_cycles + pack_a + pack_b) / par / cpu.gemm_eff
    dram = sum(b for lvl, b in ((a_lvl, a_src * a_packs), (b_lvl, b_src), (c_lvl, c_traffic))
               if lvl == "dram")
    cycles = max(cycles, dram / cpu.dram_bw)
    peak = 2 * cpu.simd * cpu.fma_units
    flops = 2 * m * n * k
    details = {"micro_kernel": f"{mr}x{nr}", "kstep_cycles": ck, "kstep_bounds": bounds,
               "tile_utilization": (m * n) / (mt * mr * nt * nr),
               "efficiency": flops / (cycles * peak * cpu.threads) if cycles else 0.0,
               "c_level": c_lvl, "a_level": a_lvl, "b_level": b_lvl}
    bd = {"micro-kernel": kernel_t, "c-update": c_cycles, "pack-a": pack_a, "pack-b": pack_b}
    by = {"l2": int(mt * nt * k * mr * F32), b_panel_lvl: int(b_rereads * k * n * F32)}
    by[c_lvl] = by.get(c_lvl, 0) + int(c_traffic)
    if dram:
        by["dram"] = by.get("dram", 0) + int(dram)
    return cycles, bd, by, details


# ---- CSR x dense, cycle-level ------------------------------------------------------------------


@dataclass(frozen=True)
class SpmmJob:
    """A CSR sparse (rows of recorded units) x dense (K x N) product, and what it stands for.

    The A rows of unit u are [u*m, (u+1)*m) of indptr/indices (one unit = one sample's GEMM, as
    Caffe runs them, or the whole GEMM). `scale` = real units / recorded units: a trace records a
    sub-sample of the batch and each recorded sample stands for batch / recorded samples.
    """

    indptr: np.ndarray
    indices: np.ndarray
    m: int
    k: int
    n: int
    units: int
    scale: float


def pipeline_costs(cpu: Cpu, n_b: int) -> tuple[float, float]:
    """Core cycles (pipeline bounds only, data in L1) per nonzero and per row of a CSR x dense."""
    lanes = cpu.spmm_simd
    if cpu.spmm_style == "register":
        # MKL-style: the C row is processed in chunks held in registers (all but 4 registers:
        # B vector, broadcast value, index and address temporaries)
        chunk_vec = max(1, cpu.vregs - 4)
        nvec_total = math.ceil(n_b / lanes)
        chunks = []
        left = nvec_total
        while left > 0:
            chunks.append(min(chunk_vec, left))
            left -= chunk_vec
        per_nnz = 0.0
        per_row = 0.0
        for v in chunks:
            per_nnz += max(v / cpu.fma_units, (v + 2) / cpu.ld_ports, (2 * v + 4) / cpu.issue,
                           cpu.fma_lat)
            per_row += max(2 * v / cpu.issue, v / cpu.st_ports, v / cpu.ld_ports) + 4 / cpu.issue
    else:
        # axpy (Eigen, SciPy): per nonzero, y[0:N] += a * B[j, 0:N]; the C row goes through L1
        v, rem = divmod(n_b, lanes) if lanes > 1 else (n_b, 0)
        vec_ops = v + rem                      # the remainder runs one scalar op per element
        per_nnz = max(vec_ops / cpu.fma_units, (2 * vec_ops + 2) / cpu.ld_ports,
                      vec_ops / cpu.st_ports, (4 * vec_ops + 6) / cpu.issue,
                      # the same C element is updated by consecutive nonzeros: FMA then the
                      # store-to-load forward (about an L1 hit) bound the chain
                      cpu.fma_lat + cpu.l1[2])
        per_row = 6 / cpu.issue
    return per_nnz, per_row


def _memory_cycles(cpu: Cpu, cnt: np.ndarray) -> dict[str, np.ndarray]:
    """Memory bounds per (group, thread) from the cache counters (last axis = cache.N_COUNTS)."""
    line = cpu.line
    lat = (cnt[..., cs.L2_HIT] * cpu.l2[2] + cnt[..., cs.L3_HIT] * cpu.l3[2]
           + cnt[..., cs.DRAM] * cpu.dram_lat) / cpu.mlp
    into_l1 = (cnt[..., cs.L2_HIT] + cnt[..., cs.L3_HIT] + cnt[..., cs.DRAM]) * line
    into_l2 = (cnt[..., cs.L3_HIT] + cnt[..., cs.DRAM] + cnt[..., cs.PF_L3] + cnt[..., cs.PF_DRAM]) * line
    from_dram = (cnt[..., cs.DRAM] + cnt[..., cs.PF_DRAM]) * line
    return {"latency": lat, "l2-bandwidth": into_l1 / cpu.l2[3],
            "l3-bandwidth": into_l2 / cpu.l3[3] if cpu.l3[0] > 0 else into_l2 * 0.0,
            "dram-bandwidth": from_dram / cpu.core_dram_bw, "dram_bytes": from_dram}


# how the SpMM's cache misses are obtained: "exact" (set-associative LRU simulation per hwconfig,
# the reference) or "profile" (reuse-distance profile built once per pattern, misses derived per
# geometry; docs/engines/cpu.md gives its measured error); `--cache` sets it for a command
CACHE_MODELS = ("profile", "exact")
CACHE_MODEL: ContextVar[str] = ContextVar("prunesim_cpu_cache_model", default="exact")


@contextmanager
def cache_model(name: str):
    """Run the enclosed CPU simulations with this cache model."""
    if name not in CACHE_MODELS:
        raise ValueError(f"unknown cache model {name!r} (one of {', '.join(CACHE_MODELS)})")
    tok = CACHE_MODEL.set(name)
    try:
        yield
    finally:
        CACHE_MODEL.reset(tok)


# products with at most this many simulated line accesses run exhaustively
EXHAUSTIVE_ACCESSES = 3_000_000
CHAINS = 2                   # independent cache hierarchies the samples alternate between
SAMPLE_UNITS = 60            # sampled row groups per product (each with one warm-up group before)
UNIT_ACCESSES = 12_000       # target line accesses per sampled group


def _counts_exact(cpu: Cpu, job: SpmmJob, indptr, indices, starts_c, nrows_c, meas_c) -> np.ndarray:
    """Counters per (chain, group, thread) from the exact set-associative LRU simulation."""
    C, Gc, T = starts_c.shape
    n_b = job.n
    chunk = max(1, cpu.vregs - 4) * cpu.spmm_simd if cpu.spmm_style == "register" else 0
    levels = []
    for c in range(C):
        l1 = cs.make_level(T, cpu.l1[0], cpu.l1[1], cpu.line)
        l2 = cs.make_level(T if cpu.l2_private else 1, cpu.l2[0], cpu.l2[1], cpu.line)
        l3 = cs.make_level(1, cpu.l3[0], cpu.l3[1], cpu.line)
        levels.append((l1, l2, l3))
    stack = lambda i, j: np.stack([lv[i][j] for lv in levels])   # noqa: E731
    l1t, l1s, l2t, l2s, l3t, l3s = stack(0, 0), stack(0, 1), stack(1, 0), stack(1, 1), stack(2, 0), stack(2, 1)
    pf_last = np.full((C, T, cpu.pf_streams), -10, np.int64)
    pf_next = np.full((C, T, cpu.pf_streams), -10, np.int64)
    pf_stamp = np.zeros((C, T, cpu.pf_streams), np.int64)
    # B was just written (im2col_trans) or is the weight matrix in use: start with it cached
    now0 = np.array([cs.warm_region(cs.B_BASE, job.k * n_b * F32, cpu.line, T, l1t[c], l1s[c],
                                    l2t[c], l2s[c], l3t[c], l3s[c], cpu.l2_private, False, 0)
                     for c in range(C)], np.int64)
    counts_c = np.zeros((C, Gc, T, cs.N_COUNTS), np.int64)
    if C == 1:
        cs.spmm_stream(indptr, indices, starts_c[0], nrows_c[0], meas_c[0], n_b, chunk, cpu.line,
                       l1t[0], l1s[0], l2t[0], l2s[0], l3t[0], l3s[0], cpu.l2_private, False,
                       pf_last[0], pf_next[0], pf_stamp[0], cpu.pf_dist, cpu.pf_degree,
                       counts_c[0], now0[0])
    else:
        cs.spmm_chains(indptr, indices, starts_c, nrows_c, meas_c, n_b, chunk, cpu.line,
                       l1t, l1s, l2t, l2s, l3t, l3s, cpu.l2_private, False,
                       pf_last, pf_next, pf_stamp, cpu.pf_dist, cpu.pf_degree, counts_c, now0)
    return counts_c



def _accesses_per_row(cpu: Cpu, nnz_mean: float, n_b: int) -> float:
    lines = math.ceil(n_b * F32 / cpu.line) + 1
    per = lines * (2 if cpu.spmm_style == "axpy" else 1)
    return max(1.0, nnz_mean * per + lines)


def simulate_spmm(cpu: Cpu, job: SpmmJob, *, exhaustive: bool | None = None, seed: int = 0,
                  unit_rows: int | None = None, n_sample: int = SAMPLE_UNITS,
                  cache: str | None = None) -> tuple[float, dict[str, float], dict[str, int], dict]:
    """Cycles of the whole product (all real units) with the cache hierarchy simulated.

    cache: "profile" (misses derived from the stream's reuse-distance profile, which is built once
    per pattern and reused by every cache geometry) or "exact" (the set-associative LRU
    simulation); None: the current CACHE_MODEL.
    """
    T = cpu.threads
    m, n_b = job.m, job.n
    indptr = np.ascontiguousarray(job.indptr, np.int64)
    indices = np.ascontiguousarray(job.indices, np.int32)
    nnz_row = np.diff(indptr)
    part = [(m * t) // T for t in range(T + 1)]          # thread t: rows [part[t], part[t+1])
    part_rows = max(part[t + 1] - part[t] for t in range(T))
    nnz_mean = float(nnz_row.mean()) if nnz_row.size else 0.0
    acc_row = _accesses_per_row(cpu, nnz_mean, n_b)
    total_acc = acc_row * m * job.units
    if exhaustive is None:
        exhaustive = total_acc <= EXHAUSTIVE_ACCESSES
    if unit_rows is None:
        unit_rows = max(1, min(part_rows, int(UNIT_ACCESSES / (acc_row * T)))) if not exhaustive \
            else max(1, min(part_rows, 64))
    per_unit = math.ceil(part_rows / unit_rows)
    population = job.units * per_unit                    # groups: (recorded unit, block)
    if exhaustive or population <= 2 * n_sample:
        chosen = np.arange(population)
        measured = np.ones(population, bool)
        sampled = False
    else:
        # systematic sampling with a random start; each sample is preceded by a warm-up group
        rng = np.random.default_rng(seed)
        step = population / n_sample
        picks = np.unique((rng.random() * step + step * np.arange(n_sample)).astype(np.int64))
        picks = picks[picks < population]
        sampled = True
    chunk = 0
    if cpu.spmm_style == "register":
        chunk = max(1, cpu.vregs - 4) * cpu.spmm_simd
    if not sampled:
        chains = [[(int(g), True) for g in chosen]]
    else:
        # the samples alternate between CHAINS independent cache hierarchies simulated in
        # parallel; each sample keeps its own warm-up group right before it
        chains = [[] for _ in range(CHAINS)]
        for i, p in enumerate(picks):
            ch = chains[i % CHAINS]
            if p > 0 and (not ch or ch[-1][0] != p - 1):
                ch.append((int(p) - 1, False))
            ch.append((int(p), True))
        chains = [ch for ch in chains if ch]
    C, Gc = len(chains), max(len(ch) for ch in chains)
    starts_c = np.zeros((C, Gc, T), np.int64)
    nrows_c = np.zeros((C, Gc, T), np.int64)          # padding groups have no rows: no-ops
    meas_c = np.zeros((C, Gc), np.bool_)
    for c, ch in enumerate(chains):
        for gi, (g, meas) in enumerate(ch):
            u, blk = divmod(g, per_unit)
            meas_c[c, gi] = meas
            for t in range(T):
                lo = part[t] + blk * unit_rows
                hi = min(part[t + 1], lo + unit_rows)
                starts_c[c, gi, t] = u * m + lo
                nrows_c[c, gi, t] = max(0, hi - lo)
    model = cache if cache is not None else CACHE_MODEL.get()
    profile_info = None
    if model == "exact":
        counts_c = _counts_exact(cpu, job, indptr, indices, starts_c, nrows_c, meas_c)
    elif model == "profile":
        key = rs.pattern_key(indptr, indices, m, job.k, n_b, job.units, T, cpu.line, chunk,
                             starts_c.tobytes(), nrows_c.tobytes(), meas_c.tobytes())
        prof = rs.cached_profile(key, lambda: rs.build_profile(indptr, indices, starts_c, nrows_c,
                                                               meas_c, n_b, job.k, chunk, cpu.line))
        counts_c = rs.misses_from_profile(
            prof, line=cpu.line, l1=cpu.l1, l2=cpu.l2, l2_private=cpu.l2_private, l3=cpu.l3,
            pf_streams=cpu.pf_streams, pf_dist=cpu.pf_dist, pf_degree=cpu.pf_degree
        ).reshape(C, Gc, T, cs.N_COUNTS)
        profile_info = {"accesses_walked": prof.accesses_walked,
                        "accesses_measured": prof.accesses_measured,
                        "histogram_rows": int(prof.slots.size)}
    else:
        raise ValueError(f"unknown cache model {model!r} (profile or exact)")
    keep = (nrows_c.sum(axis=2) > 0).reshape(-1)
    starts = starts_c.reshape(C * Gc, T)[keep]
    nrows = nrows_c.reshape(C * Gc, T)[keep]
    measured = meas_c.reshape(-1)[keep]
    counts = counts_c.reshape(C * Gc, T, cs.N_COUNTS)[keep]
    G = int(keep.sum())
    # per (group, thread) pipeline cycles from the real nonzero counts of its rows
    cs_nnz = np.concatenate([[0], np.cumsum(nnz_row)])
    rows_nnz = cs_nnz[starts + nrows] - cs_nnz[starts]
    per_nnz, per_row = pipeline_costs(cpu, n_b)
    pipe = rows_nnz * per_nnz + nrows * per_row
    mem = _memory_cycles(cpu, counts.astype(np.float64))
    thread_bounds = {"pipeline": pipe, "latency": mem["latency"], "l2-bandwidth": mem["l2-bandwidth"],
                     "l3-bandwidth": mem["l3-bandwidth"], "dram-bandwidth": mem["dram-bandwidth"]}
    stack = np.stack(list(thread_bounds.values()))             # (bounds, G, T)
    thread_t = stack.max(axis=0)
    group_t = thread_t.max(axis=1)
    shared_dram = mem["dram_bytes"].sum(axis=1) / cpu.dram_bw
    group_t = np.maximum(group_t, shared_dram) / cpu.spmm_eff
    y = group_t[measured]
    # which bound limited each measured group (by cycles, for the breakdown)
    bd = {k: 0.0 for k in thread_bounds}
    winner = stack.argmax(axis=0)                               # (G, T)
    slow_t = thread_t.argmax(axis=1)
    for gi in np.nonzero(measured)[0]:
        key = list(thread_bounds)[winner[gi, slow_t[gi]]]
        bd[key] += group_t[gi]
    n_meas = y.size
    if sampled:
        est = population * y.mean()
        sd = y.std(ddof=1) if n_meas > 1 else 0.0
        half = 1.96 * population * sd / math.sqrt(n_meas) * math.sqrt(max(0.0, 1 - n_meas / population))
        frac = est / max(y.sum(), 1e-30)
    else:
        est, half, frac = float(y.sum()), 0.0, 1.0
    total = est * job.scale
    bd = {k: v * frac * job.scale for k, v in bd.items() if v > 0}
    ctot = counts[measured].sum(axis=(0, 1)).astype(np.float64) * frac * job.scale
    by = {"l1": int(ctot[cs.L1_HIT] * cpu.line),
          "l2": int((ctot[cs.L2_HIT]) * cpu.line),
          "l3": int((ctot[cs.L3_HIT] + ctot[cs.PF_L3]) * cpu.line),
          "dram": int((ctot[cs.DRAM] + ctot[cs.PF_DRAM]) * cpu.line)}
    demand = ctot[:4].sum()
    details = {"simulation": "sampled" if sampled else "exhaustive", "cache_model": model,
               "groups_simulated": int(G), "groups_measured": int(n_meas),
               "population_groups": int(population), "rows_per_group": int(unit_rows),
               "ci95_cycles": [float((est - half) * job.scale), float((est + half) * job.scale)],
               "ci95_rel": float(half / est) if est else 0.0,
               "hit_rates": {"l1": float(ctot[cs.L1_HIT] / demand) if demand else 0.0,
                             "l2": float(ctot[cs.L2_HIT] / demand) if demand else 0.0,
                             "l3": float(ctot[cs.L3_HIT] / demand) if demand else 0.0,
                             "dram": float(ctot[cs.DRAM] / demand) if demand else 0.0},
               "prefetched_lines": float(ctot[cs.PF_L3] + ctot[cs.PF_DRAM]),
               "style": cpu.spmm_style, "threads": T, "scale": job.scale,
               "density": float(indptr[-1] / max(1, indptr.size - 1) / max(1, job.k))}
    if profile_info is not None:
        details["profile"] = profile_info
    return total, bd, by, details


# ---- sparsity patterns -------------------------------------------------------------------------


def random_csr(m: int, k: int, density: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random m x k pattern at `density` (CSR indptr, indices), row by row."""
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    if m * k > 400_000_000:
        raise ValueError(f"{m} x {k} is too large for an explicit random pattern")
    rng = np.random.default_rng(seed)
    indptr = np.zeros(m + 1, np.int64)
    chunks = []
    step = max(1, 4_000_000 // max(k, 1))
    for r0 in range(0, m, step):
        r1 = min(m, r0 + step)
        mask = rng.random((r1 - r0, k), dtype=np.float32) < density
        indptr[r0 + 1:r1 + 1] = np.cumsum(mask.sum(axis=1))
        chunks.append(np.nonzero(mask)[1].astype(np.int32))
    for r0 in range(step, m, step):
        indptr[r0 + 1:min(m, r0 + step) + 1] += indptr[r0]
    return indptr, np.concatenate(chunks) if chunks else np.zeros(0, np.int32)


def _mask_from_result(method_result, rows: int, cols: int) -> np.ndarray:
    """The nonzero mask of the pruned dO as (N*C, H*W) from the method's CSR (or its tensor)."""
    csr = getattr(method_result, "csr", None)
    if csr is not None:
        if csr.shape != (rows, cols):
            raise ValueError(f"the method's CSR is {csr.shape[0]} x {csr.shape[1]}, expected "
                             f"{rows} x {cols}")
        mask = np.zeros((rows, cols), bool)
        r = np.repeat(np.arange(rows), np.diff(csr.indptr))
        mask[r, csr.indices] = True
        return mask
    if method_result.pruned is not None:
        return (np.asarray(method_result.pruned) != 0).reshape(rows, cols)
    raise ValueError("a csr method result carries neither a CSR nor the pruned tensor")


def _csr_of_mask(mask2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.zeros(mask2d.shape[0] + 1, np.int64)
    indptr[1:] = np.cumsum(mask2d.sum(axis=1))
    return indptr, np.nonzero(mask2d)[1].astype(np.int32)


# ---- per layer ---------------------------------------------------------------------------------


def _is_csr(method_result) -> bool:
    return method_result is not None and method_result.structure == "csr"


def simulate_layer_phase(layer: Layer, batch: int, phase: str, method_result, hw: HwConfig,
                         threads: int = 1, seed: int = 0) -> list[KernelResult]:
    """AGBP or WGC of one conv/FC layer as Caffe (dense) or Ye's sparse path (CSR) runs it."""
    cpu = cpu_view(hw, threads)
    if phase not in ("agbp", "wgc", "fwd"):
        raise ValueError(f"unknown phase {phase!r}")
    if phase == "agbp" and not layer.needs_agbp:
        return []
    sparse = _is_csr(method_result) and phase in getattr(method_result, "phases", ("agbp", "wgc"))
    note = None
    if method_result is not None and not sparse and method_result.structure not in ("dense", "csr"):
        note = f"structure {method_result.structure!r} has no CPU kernel here: modeled dense"
    if layer.op == "fc":
        return _fc_phase(cpu, layer, batch, phase, method_result if sparse else None, seed, note)
    if getattr(layer, "transposed", False):
        raise Unsupported(None, phase, f"layer {layer.name}: transposed conv on {hw.name}: the cpu "
                          "engine models conv kernels only (its per-sample im2col/Caffe path has no "
                          "deconv)")
    g = layer.groups
    if sparse and g > 1:
        # checked before the CSR's mask is built: nothing is computed for a path that is not there
        raise Unsupported(None, phase, f"layer {layer.name}: {method_result.method} on {hw.name}: "
                          f"the CPU engine's sparse (CSR) path models ungrouped convs only "
                          f"(groups={g})")
    cin, cout = layer.c_in // g, layer.c_out // g
    rs, pq, hw_in = layer.r * layer.s, layer.p * layer.q, layer.h * layer.w
    crs = cin * rs
    one_by_one = layer.r == 1 and layer.s == 1 and layer.stride == 1 and layer.pad == 0
    out: list[KernelResult] = []
    name = layer.name

    def add(kernel, res, flops=0, details=None, reps=batch * g):
        cyc, bd, by = res
        d = dict(details or {})
        d.setdefault("per_sample_calls", reps)
        if note:
            d["note"] = note
        out.append(_kr(cpu, name, phase, kernel, cyc * reps, flops, {k: v * reps for k, v in bd.items()},
                       {k: v * reps for k, v in by.items()}, d))

    if phase == "fwd":
        if not one_by_one:
            add("im2col", im2col_pass(cpu, layer.c_in * hw_in, crs * pq))
        cyc, bd, by, det = gemm_model(cpu, cout, pq, crs)
        add("gemm", (cyc, bd, by), 2 * cout * pq * crs * batch * g, det)
        return out
    if not sparse:
        if phase == "wgc":
            if not one_by_one:
                add("im2col", im2col_pass(cpu, layer.c_in * hw_in, crs * pq))
            cyc, bd, by, det = gemm_model(cpu, cout, crs, pq)
            add("gemm", (cyc, bd, by), 2 * cout * crs * pq * batch * g, {**det, "shape": [cout, crs, pq]})
        else:
            cyc, bd, by, det = gemm_model(cpu, crs, pq, cout)
            add("gemm", (cyc, bd, by), 2 * cout * crs * pq * batch * g, {**det, "shape": [crs, pq, cout]})
            if not one_by_one:
                add("col2im", col2im_pass(cpu, crs * pq, layer.c_in * hw_in))
        return out

    # Ye's sparse path; the trace holds `rec` samples, each standing for batch / rec of them
    n_rec = method_result.csr.shape[0] // layer.c_out if method_result.csr is not None \
        else np.shape(method_result.pruned)[0]
    mask = _mask_from_result(method_result, n_rec * layer.c_out, pq)          # (n*C_out, PQ)
    scale = batch / n_rec
    nnz_total = int(mask.sum())
    sparse_flops = int(2 * nnz_total * crs * scale)
    if phase == "wgc":
        mean_nnz = nnz_total / n_rec
        add("csr-build", csr_build_pass(cpu, layer.c_out, pq, int(mean_nnz)), reps=batch)
        add("im2col-trans" if not one_by_one else "transpose-I",
            im2col_pass(cpu, layer.c_in * hw_in, crs * pq) if not one_by_one
            else transpose_pass(cpu, layer.c_in * hw_in))
        indptr, indices = _csr_of_mask(mask)
        job = SpmmJob(indptr, indices, layer.c_out, pq, crs, n_rec, scale)
        cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
        out.append(_kr(cpu, name, phase, "spmm", cyc, sparse_flops, bd, by,
                       {**det, "shape": [layer.c_out, crs, pq], "dense_flops": 2 * cout * crs * pq * batch * g}))
        return out
    # agbp: dO_n^T ((P Q) x C_out) as CSR, times W (C_out x C_in R S)
    maskT = mask.reshape(n_rec, layer.c_out, pq).transpose(0, 2, 1).reshape(n_rec * pq, layer.c_out)
    mean_nnz = nnz_total / n_rec
    add("transpose-dO", transpose_pass(cpu, layer.c_out * pq), reps=batch)
    add("csr-build", csr_build_pass(cpu, pq, layer.c_out, int(mean_nnz)), reps=batch)
    add("transpose-W", transpose_pass(cpu, layer.weight_count), reps=1)
    indptr, indices = _csr_of_mask(maskT)
    job = SpmmJob(indptr, indices, pq, layer.c_out, crs, n_rec, scale)
    cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
    out.append(_kr(cpu, name, phase, "spmm", cyc, sparse_flops, bd, by,
                   {**det, "shape": [pq, crs, layer.c_out], "dense_flops": 2 * cout * crs * pq * batch * g}))
    if one_by_one:
        add("col2im-trans", transpose_pass(cpu, layer.c_in * hw_in), reps=batch)
    else:
        add("col2im-trans", col2im_pass(cpu, crs * pq, layer.c_in * hw_in), reps=batch)
    return out


def _fc_phase(cpu: Cpu, layer: Layer, batch: int, phase: str, method_result, seed: int,
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
        return [_kr(cpu, name, phase, "gemm", cyc, 2 * cin * cout * batch, bd, by, {**det, **det0})]
    n_rec = method_result.csr.shape[0]
    mask = _mask_from_result(method_result, n_rec, cout)
    out = []
    if phase == "agbp":
        cyc, bd, by = csr_build_pass(cpu, batch, cout, int(mask.sum() * batch / n_rec))
        out.append(_kr(cpu, name, phase, "csr-build", cyc, 0, bd, by))
        indptr, indices = _csr_of_mask(mask)
        job = SpmmJob(indptr, indices, n_rec, cout, cin, 1, batch / n_rec)
    else:
        # dW = dO^T I: the sparse operand is dO^T (C_out x batch); the recorded samples tile the batch
        reps = math.ceil(batch / n_rec)
        tiled = np.tile(mask, (reps, 1))[:batch]
        cyc, bd, by = transpose_pass(cpu, batch * cout)
        out.append(_kr(cpu, name, phase, "transpose-dO", cyc, 0, bd, by))
        cyc, bd, by = csr_build_pass(cpu, cout, batch, int(tiled.sum()))
        out.append(_kr(cpu, name, phase, "csr-build", cyc, 0, bd, by))
        indptr, indices = _csr_of_mask(np.ascontiguousarray(tiled.T))
        job = SpmmJob(indptr, indices, cout, batch, cin, 1, 1.0)
    cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
    out.append(_kr(cpu, name, phase, "spmm", cyc, int(2 * job.indptr[-1] * cin * job.scale), bd, by, det))
    return out


# ---- the engine contract -----------------------------------------------------------------------


def simulate_phase(gemm: Gemm, method_result, hw: HwConfig, *, layer: Layer | None = None,
                   batch: int | None = None, threads: int = 1, seed: int = 0,
                   charge_method: bool | None = None) -> list[KernelResult]:
    """One layer phase. With `layer` and `batch`: Caffe's per-sample kernels (the faithful path).

    Without them only the lowered GEMM is known: it is modeled as one dense GEMM, or as one CSR x
    dense product whose pattern is the method's CSR when that is m x k, else uniformly random at the
    method's density.
    """
    out = method_overhead(gemm, method_result, hw, threads, charge_method)
    if layer is not None and batch is not None:
        return simulate_layer_phase(layer, batch, gemm.phase, method_result, hw, threads, seed) + out
    return _gemm_only(gemm, method_result, hw, threads, seed) + out


def method_overhead(gemm: Gemm, method_result, hw: HwConfig, threads: int = 1,
                    charge_method: bool | None = None) -> list[KernelResult]:
    """The method's own passes (DBTD's |g| sum and pruning, SDGP's selection, ...) from its
    WorkAccount, as element-wise streaming loops; charged once, on the first phase the method
    names (charge_method overrides). The sparse path's CSR build and transposes are separate."""
    mr = method_result
    if mr is None or mr.work.elems_read + mr.work.elems_written == 0:
        return []
    first = next((ph for ph in ("fwd", "agbp", "wgc") if ph in mr.phases), None)
    if not (charge_method if charge_method is not None else gemm.phase == first):
        return []
    cpu = cpu_view(hw, threads)
    w = mr.work
    elems = max(w.elems_read, w.elems_written, 1)
    tensor_bytes = F32 * elems / max(1, w.passes)
    # a counter-based random draw is ~8 integer ops (two multiplies, shifts, xors, a convert)
    uops = (w.compares + w.flops + 8 * w.random_draws) / elems + 2.0
    cyc, bd, by = stream_pass(cpu, elems, loads=w.elems_read / elems, stores=w.elems_written / elems,
                              uops=uops, read_footprint=tensor_bytes, read_bytes=F32 * w.elems_read,
                              write_footprint=tensor_bytes,
                              write_bytes=F32 * w.elems_written + w.bytes_metadata)
    bd = {"method_overhead": sum(bd.values())}
    return [_kr(cpu, gemm.layer, gemm.phase, f"{mr.method}-overhead", cyc, 0, bd, by,
                {"work": w.as_dict()})]


def _gemm_only(gemm: Gemm, method_result, hw: HwConfig, threads: int, seed: int) -> list[KernelResult]:
    """Only the lowered GEMM is known: one dense GEMM, or one CSR x dense product."""
    cpu = cpu_view(hw, threads)
    if not _is_csr(method_result):
        cyc, bd, by, det = gemm_model(cpu, gemm.m, gemm.n, gemm.k)
        return [_kr(cpu, gemm.layer, gemm.phase, "gemm", cyc * gemm.groups, gemm.flops,
                    {k: v * gemm.groups for k, v in bd.items()}, by, det)]
    csr = method_result.csr
    if csr is not None and csr.shape == (gemm.m, gemm.k):
        indptr, indices, pattern = csr.indptr, csr.indices, "method CSR"
    else:
        indptr, indices = random_csr(gemm.m, gemm.k, max(method_result.density, 1e-6), seed)
        pattern = "uniform random at the method's density"
    job = SpmmJob(indptr, indices, gemm.m, gemm.k, gemm.n, 1, float(gemm.groups))
    cyc, bd, by, det = simulate_spmm(cpu, job, seed=seed)
    return [_kr(cpu, gemm.layer, gemm.phase, "spmm", cyc, int(2 * indptr[-1] * gemm.n * gemm.groups),
                bd, by, {**det, "pattern": pattern})]


def gemm_command(args, hw: HwConfig) -> int:
    """`prunesim gemm --hw CPU.yaml --m M --n N --k K [--density D] [--threads T] [--json]`."""
    if args.sparse is not None:
        raise ConfigError(hw.path, "--sparse", "N:M sparsity is a GPU option; a CPU config takes "
                          "--density for CSR")
    if args.dtype not in ("fp32", "fp16"):
        raise ConfigError(hw.path, "--dtype", f"the CPU engine models fp32 (Caffe), not {args.dtype}")
    cpu = cpu_view(hw, args.threads)
    if args.density is None:
        cyc, bd, by, det = gemm_model(cpu, args.m, args.n, args.k)
        res = _kr(cpu, "gemm", "-", "gemm", cyc, 2 * args.m * args.n * args.k, bd, by, det)
    else:
        if not 0.0 < args.density <= 1.0:
            raise ConfigError(hw.path, "--density", f"must be in (0, 1], got {args.density}")
        try:
            indptr, indices = random_csr(args.m, args.k, args.density, getattr(args, "seed", 0) or 0)
        except ValueError as e:
            raise ConfigError(hw.path, "--m/--k", str(e)) from None
        job = SpmmJob(indptr, indices, args.m, args.k, args.n, 1, 1.0)
        cyc, bd, by, det = simulate_spmm(cpu, job)
        res = _kr(cpu, "gemm", "-", "spmm", cyc, int(2 * indptr[-1] * args.n), bd, by,
                  {**det, "pattern": "uniform random"})
    doc = {"hw": hw.name, "m": args.m, "n": args.n, "k": args.k, "density": args.density,
           "threads": args.threads, "seconds": res.seconds, "cycles": res.cycles,
           "clock_hz": res.clock_hz, "gflops": res.flops / res.seconds / 1e9 if res.seconds else 0.0,
           "kernel": res.to_json()}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        kind = "dense" if args.density is None else f"CSR density {args.density:g}"
        print(f"{hw.name}: {args.m}x{args.n}x{args.k} {kind}, {args.threads} thread(s): "
              f"{res.seconds * 1e3:.4f} ms, {res.cycles:.4g} cycles, {doc['gflops']:.2f} GFLOP/s")
        for k, v in res.breakdown.items():
            print(f"  {k:<16} {v * 1e3:.4f} ms")
    return 0


# ---- `prunesim layer` --------------------------------------------------------------------------


def _one_conv_workload(spec: str):
    from sim.errors import WorkloadError
    from sim.workload import workload_from_dict
    try:
        n, cin, cout, h, w, r, s, stride, pad = (int(x) for x in spec.split(","))
    except ValueError:
        raise WorkloadError(None, "--conv", f"expected N,C_in,C_out,H,W,R,S,stride,pad, got {spec!r}") \
            from None
    doc = {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
           "tensors": {"t0": [cin, h, w]},
           "layers": [{"name": "conv", "op": "conv", "in": "t0", "out": "y", "c_out": cout,
                       "kernel": [r, s], "stride": stride, "pad": pad, "bn": True, "relu": True}]}
    return workload_from_dict(doc, "--conv"), n


def synthetic_dO(workload, samples: int, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """dO of every layer from the shipped gradient statistics (sim.traces.synth), `samples` deep."""
    from sim.traces import gradmodel as gm
    from sim.traces.synth import generate_layer, load_stats
    stats = load_stats(None)
    mapped, _ = gm.map_params(stats.layers, workload)
    out = {}
    for l in workload.layers:
        a = np.empty(l.tensor_shapes(samples)["dO"], np.float32)
        generate_layer(a, mapped[l.name], batch, seed, 0, l.index)
        out[l.name] = a
    return out


def layer_command(args, hw: HwConfig) -> int:
    from sim.methods import apply_method, parse_method, stream_key
    from sim.workload import load_workload
    if bool(args.workload) == bool(args.conv):
        raise ConfigError(None, "--workload/--conv", "give exactly one of --workload or --conv")
    if args.conv:
        wl, batch = _one_conv_workload(args.conv)
        batch = args.batch or batch
    else:
        wl = load_workload(args.workload)
        batch = args.batch or 128
    layers = [l for l in wl.layers]
    if args.layer != "all":
        sel = [l for l in layers if l.name == args.layer or str(l.index) == args.layer]
        if not sel:
            raise ConfigError(None, "--layer", f"no layer {args.layer!r} in {wl.name}")
        layers = sel
    phases = ("agbp", "wgc") if args.phase == "all" else (args.phase,)
    methods = []
    for m in args.method or ["dense"]:
        try:
            methods.append(parse_method(m))
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
    samples = min(batch, getattr(args, "samples", None) or 2)
    grads: dict[str, np.ndarray] = {}
    trace_iter = None
    if getattr(args, "trace", None):
        from sim.traces.format import open_trace
        tr = open_trace(args.trace)
        trace_iter = tr.iterations[0]
        batch = args.batch or tr.batch
        for l in layers:
            grads[l.name] = np.asarray(tr.tensor(trace_iter, l.name), np.float32)
        grad_source = f"trace {args.trace} iteration {trace_iter}"
    elif any(m.id != "dense" for m in methods):
        grads = synthetic_dO(wl, samples, batch, args.seed)
        grad_source = f"synthetic dO ({samples} samples, sim/data/synth-default.yaml)"
    else:
        grad_source = "none needed (dense)"
    rows = []
    for spec in methods:
        for l in layers:
            mr = None
            if spec.id != "dense":
                mr = apply_method(spec, l, grads[l.name], key=stream_key(args.seed, l.index, 0),
                                  batch=batch)
            for ph in phases:
                ks = simulate_layer_phase(l, batch, ph, mr, hw, args.threads, args.seed)
                if not ks:
                    continue
                rows.append({"method": spec.label, "layer": l.name, "phase": ph,
                             "seconds": sum(k.seconds for k in ks),
                             "cycles": sum(k.cycles for k in ks),
                             "density": None if mr is None else mr.density,
                             "kernels": [k.to_json() for k in ks]})
    if args.json:
        print(json.dumps({"hw": hw.name, "workload": wl.name, "batch": batch, "threads": args.threads,
                          "gradients": grad_source, "layers": rows}, indent=1))
        return 0
    print(f"{hw.name}, {wl.name}, batch {batch}, {args.threads} thread(s); gradients: {grad_source}")
    for r in rows:
        dens = "" if r["density"] is None else f"  density {r['density']:.3f}"
        print(f"{r['method']:<24} {r['layer']:<16} {r['phase']:<5} {r['seconds'] * 1e3:10.3f} ms"
              f"{dens}  (" + ", ".join(f"{k['kernel']} {k['seconds'] * 1e3:.3f}" for k in r["kernels"])
              + ")", file=sys.stdout)
    for spec in methods:
        tot = sum(r["seconds"] for r in rows if r["method"] == spec.label)
        print(f"total {spec.label}: {tot:.4f} s")
    return 0
