"""GPU tensor-core engine: each conv phase as an implicit GEMM, simulated block by block.

The model, from the outside in (docs/engines/tensorcore.md has the long form):

- A GEMM C[M,N] = A[M,K] B[K,N] (x groups) runs as thread blocks of a tile picked from a
  CUTLASS-like candidate set (thread-block tile, warp tile, pipeline stages, optional split-K).
  The pick is the candidate with the least modeled time, the way a library heuristic ranks its
  kernels by its own performance model; it is reported in `details`.
- Blocks run in waves of (SMs x resident blocks per SM); the last, partial wave is the tail.
  All blocks of a wave are identical, so one block per wave kind (full, tail) is simulated cycle by
  cycle (sim/engines/gpu_kernels.py) and multiplied.
- Inside a block, global->shared loads get the block's share of L2 and DRAM bandwidth: every
  active block on the GPU gets an equal share, and DRAM only serves L2 misses. The L2 hit rate comes
  from tile reuse: blocks of one wave that share an A row-panel or a B column-panel fetch it from
  DRAM once (or the whole operand set is fetched once when it fits in L2). Shared->register traffic
  is limited by shared-memory bandwidth, MMA issue by the tensor cores' rate, split evenly between
  the blocks resident on an SM. Whether a GEMM is memory- or compute-bound falls out of these rates.
- n:m sparsity of A (the operand whose K runs over the pruned channels): A streams n/m of its
  values plus bits_per_index metadata bits per kept value, and the math runs m/n times faster
  when the hwconfig lists the pattern (`sparse_rate: m/n`); otherwise the GEMM falls back to dense
  with a warning.
- A method's own work (WorkAccount) and the col2im of a strided ("scatter") AGBP are streaming
  kernels: launch overhead + max(bytes / DRAM bandwidth, ops / CUDA-core rate) + DRAM latency.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.engines.base import KernelResult
from sim.engines.gpu_kernels import N_OUT, block_pipeline
from sim.errors import ConfigError, PrunesimError
from sim.hwconfig import Field, HwConfig

ENGINE = "tensorcore"

HW_FIELDS: dict[str, Field] = {
    "sm_count": Field("count", "streaming multiprocessors", minimum=1),
    "clock": Field("frequency", "clock at which the tensor cores reach peak math (boost)", minimum=1e6),
    "cuda_core_clock": Field("frequency", "clock for CUDA-core FP32 peak, if it differs from clock",
                             required=False, minimum=1e6),
    "tc_fma_per_clk_fp16": Field("ops_per_cycle", "dense FP16 tensor-core FMA per clock per SM "
                                 "(absent: no tensor cores; every GEMM runs on the CUDA cores)",
                                 required=False, minimum=1),
    "tc_fma_per_clk_bf16": Field("ops_per_cycle", "dense BF16 tensor-core FMA per clock per SM "
                                 "(absent: no BF16 tensor cores)", required=False, minimum=1),
    "tc_fma_per_clk_tf32": Field("ops_per_cycle", "dense TF32 tensor-core FMA per clock per SM "
                                 "(absent: no TF32 tensor cores)", required=False, minimum=1),
    "cuda_fma_per_clk_fp32": Field("ops_per_cycle", "FP32 CUDA-core FMA per clock per SM", minimum=1),
    "sparse_patterns": Field("list", "n:m patterns the sparse tensor cores run for FP16/BF16, "
                             "e.g. [\"2:4\"]; empty: none"),
    "sparse_patterns_tf32": Field("list", "n:m patterns for TF32 (A100/H100: 1:2)", required=False),
    "sparse_rate": Field("text", "speed of a supported n:m MMA: 'm/n' = m/n times the dense rate "
                         "(dense-equivalent), 'dense' = dense rate, only traffic shrinks",
                         choices=("m/n", "dense")),
    "hbm_bandwidth": Field("bandwidth", "peak DRAM bandwidth", minimum=1e6),
    "dram_latency": Field("cycles", "global-memory load latency (L2 miss)", minimum=0),
    "l2_size": Field("size", "L2 cache capacity", minimum=1),
    "l2_bandwidth": Field("bytes_per_cycle", "L2 -> SM read bandwidth, whole GPU", minimum=1),
    "l2_latency": Field("cycles", "L2 hit latency", minimum=0),
    "smem_per_sm": Field("size", "largest shared-memory carve-out per SM", minimum=1024),
    "smem_bandwidth": Field("bytes_per_cycle", "shared-memory bandwidth per SM", minimum=1),
    "registers_per_sm": Field("count", "32-bit registers per SM", minimum=1024),
    "max_registers_per_thread": Field("count", "registers one thread may use", minimum=16),
    "max_threads_per_sm": Field("count", "resident threads per SM", minimum=32),
    "max_blocks_per_sm": Field("count", "resident thread blocks per SM", minimum=1),
    "max_pipeline_stages": Field("count", "shared-memory stages a GEMM main loop can keep in "
                                 "flight (2 without asynchronous copies)", minimum=2),
    "mma_latency": Field("cycles", "latency of one tensor-core MMA instruction (of one FFMA on a "
                         "GPU without tensor cores)", minimum=0),
    "smem_latency": Field("cycles", "shared-memory load / warp-shuffle latency (used by the patch "
                          "engine's reductions)", required=False, minimum=0),
    "launch_overhead": Field("time", "gap a dependent kernel launch adds on the GPU timeline",
                             minimum=0),
    # optional per-op energy table (sim/engines/energy.py); absent: energy reads n/a
    **{f"energy_fma_tc_{d}": Field("energy_per_op", f"energy of one {d.upper()} tensor-core FMA",
                                   required=False, minimum=0) for d in ("fp16", "bf16", "tf32")},
    "energy_fma_cuda_fp32": Field("energy_per_op", "energy of one FP32 CUDA-core FMA",
                                  required=False, minimum=0),
    **{f"energy_{lv}": Field("energy_per_byte", f"energy of one byte moved at {lv}",
                             required=False, minimum=0) for lv in ("dram", "l2", "smem")},
}

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4}
# MMA instruction K per element size (mma.m16n8k16 for 16-bit, m16n8k8 for tf32): sets how many
# fragment registers a warp double-buffers.
_INSTR_K = {2: 16, 4: 8}
# Registers for addresses, loop counters and predicates on top of accumulators and fragments.
# An estimate (not from a datasheet); it only matters where it flips a tile's occupancy.
_REG_OVERHEAD = 40
# Thread-block tiles (BM, BN) with warp tiles (WM, WN) and default stages, after CUTLASS's sm80
# tensor-op GEMM configurations; stages are capped by the hwconfig and by shared memory.
_TILES = ((256, 128, 64, 64, 3), (128, 256, 64, 64, 3), (128, 128, 64, 64, 4),
          (128, 64, 64, 32, 4), (64, 128, 32, 64, 4), (64, 64, 32, 32, 6))
# Bytes a streaming kernel keeps in flight per thread (one 16-byte vector load), for Little's law.
_STREAM_BYTES_PER_THREAD = 16
_MAX_SPLIT_K = 64
# CUDA-core (SIMT) SGEMM tiles after CUTLASS's SIMT sgemm configurations (128x128, 128x64, 64x128,
# 64x64 thread-block tiles; 32x64 / 32x32 warp tiles; 2 register-staged stages): a thread holds
# WM*WN/32 accumulators and no tensor-core fragments.
_SIMT_TILES = ((128, 128, 32, 64, 2), (128, 64, 32, 32, 2), (64, 128, 32, 32, 2),
               (64, 64, 32, 32, 2))


@dataclass(frozen=True)
class GpuSpec:
    """The hwconfig's numbers in the units the model uses (cycles of `clock`, bytes per cycle)."""

    name: str
    path: str
    sm: int
    clock: float
    cuda_ratio: float            # cuda_core_clock / clock
    tc_rate: tuple               # ((dtype, FMA/clk/SM), ...) for tensor-core dtypes
    cuda_rate: float
    sparse: tuple                # patterns for fp16/bf16
    sparse_tf32: tuple
    sparse_rate: str
    dram_bpc: float              # DRAM bytes per cycle
    dram_lat: float
    l2_size: float
    l2_bpc: float
    l2_lat: float
    smem: float
    smem_bpc: float
    regs: int
    max_regs: int
    max_threads: int
    max_blocks: int
    max_stages: int
    mma_lat: float
    launch: float                # cycles

    def on_cuda_cores(self, dtype: str) -> bool:
        """fp32, or any dtype on a GPU without tensor cores (16-bit storage with fp32 math, since
        Pascal GP102's native fp16 rate is a small fraction of its fp32 rate)."""
        return dtype == "fp32" or not self.tc_rate

    def default_dtype(self) -> str:
        return "fp16" if self.tc_rate else "fp32"

    def fma_rate(self, dtype: str) -> float:
        if self.on_cuda_cores(dtype):
            return self.cuda_rate * self.cuda_ratio
        rates = dict(self.tc_rate)
        if dtype not in rates:
            raise ConfigError(self.path, f"params.tc_fma_per_clk_{dtype}",
                              f"missing: this GPU has no {dtype} tensor cores")
        return rates[dtype]

    def patterns(self, dtype: str) -> tuple:
        if dtype in ("fp16", "bf16"):
            return self.sparse
        if dtype == "tf32":
            return self.sparse_tf32
        return ()

    @property
    def stream_bpc(self) -> float:
        """A streaming kernel's DRAM bytes per cycle: peak, unless too few bytes can be in flight
        to cover the latency (Little's law over every resident thread's 16-byte load)."""
        inflight = self.sm * self.max_threads * _STREAM_BYTES_PER_THREAD
        return min(self.dram_bpc, inflight / max(self.dram_lat, 1.0))


def _check_patterns(hw: HwConfig, key: str) -> tuple:
    from sim.methods.nm import parse_nm
    out = []
    for p in hw.value(key, ()) or ():
        try:
            n, m = parse_nm(p)
        except ValueError as e:
            raise ConfigError(hw.path, f"params.{key}.value", str(e)) from None
        out.append(f"{n}:{m}")
    return tuple(out)


_SPECS: dict[tuple, GpuSpec] = {}


def gpu_spec(hw: HwConfig) -> GpuSpec:
    """Convert (once per config checksum) and cross-check the hwconfig's values."""
    key = (hw.checksum, hw.name, hw.path)
    s = _SPECS.get(key)
    if s is not None:
        return s
    if hw.kind != "gpu":
        raise ConfigError(hw.path, "kind", f"the tensor-core engine needs a gpu config, not {hw.kind!r}")
    v = hw.value
    clock = float(v("clock"))
    rates = tuple((d, float(v(f"tc_fma_per_clk_{d}"))) for d in ("fp16", "bf16", "tf32")
                  if v(f"tc_fma_per_clk_{d}") is not None)
    s = GpuSpec(
        name=hw.name, path=hw.path, sm=int(v("sm_count")), clock=clock,
        cuda_ratio=float(v("cuda_core_clock", clock)) / clock, tc_rate=rates,
        cuda_rate=float(v("cuda_fma_per_clk_fp32")), sparse=_check_patterns(hw, "sparse_patterns"),
        sparse_tf32=_check_patterns(hw, "sparse_patterns_tf32"), sparse_rate=v("sparse_rate"),
        dram_bpc=float(v("hbm_bandwidth")) / clock, dram_lat=float(v("dram_latency")),
        l2_size=float(v("l2_size")), l2_bpc=float(v("l2_bandwidth")), l2_lat=float(v("l2_latency")),
        smem=float(v("smem_per_sm")), smem_bpc=float(v("smem_bandwidth")),
        regs=int(v("registers_per_sm")), max_regs=int(v("max_registers_per_thread")),
        max_threads=int(v("max_threads_per_sm")), max_blocks=int(v("max_blocks_per_sm")),
        max_stages=int(v("max_pipeline_stages")), mma_lat=float(v("mma_latency")),
        launch=float(v("launch_overhead")) * clock)
    _SPECS[key] = s
    return s


# ----------------------------------------------------------------------------------------------
# One GEMM


@dataclass(frozen=True)
class GemmShape:
    """What the GEMM model needs; a_unique/b_unique are the operands' distinct elements (the
    tensors, not the im2col expansion), c_out the elements the kernel writes."""

    m: int
    n: int
    k: int
    groups: int = 1
    dtype: str = "fp16"
    sparse: tuple | None = None     # (n_keep, m_group, bits_per_index) if the MMA runs sparse
    a_unique: int | None = None
    b_unique: int | None = None
    c_out: int | None = None


def _sim_block(n_iter, stages, load_bytes, load_bw, mem_lat, work, mma_frac, mma_lat, epi):
    out = np.zeros(N_OUT)
    # 2*stages+16 k-tiles reach the periodic steady state (all rates constant); the rest is
    # extrapolated inside the kernel
    block_pipeline(int(n_iter), int(stages), float(load_bytes), float(load_bw), float(mem_lat),
                   float(work), float(mma_frac), float(mma_lat), float(epi), 2 * int(stages) + 16,
                   out)
    return out


def _evaluate(s: GpuSpec, g: GemmShape, tile, split: int) -> dict | None:
    """Model one candidate kernel; None if it does not fit on an SM."""
    bm, bn, wm, wn, st = tile
    eb = DTYPE_BYTES[g.dtype]
    simt = s.on_cuda_cores(g.dtype)
    bk = 64 // eb                      # 64-byte rows of K per stage (32 fp16, 16 tf32/fp32)
    stages = min(st, s.max_stages)
    warps = (bm // wm) * (bn // wn)
    threads = 32 * warps
    if g.sparse:
        nk, mg, bits = g.sparse
        keep = nk / mg
        a_eb = eb * keep + keep * bits / 8.0          # values + metadata per dense A element
        math_keep = keep if s.sparse_rate == "m/n" else 1.0
    else:
        a_eb, math_keep = float(eb), 1.0
    a_tile, b_tile = bm * bk * a_eb, bk * bn * eb
    smem_block = stages * (a_tile + b_tile)
    if smem_block > s.smem:
        return None
    if simt:
        # accumulators + double-buffered A/B fragments (WM/8 + WN/4 values per k step)
        regs = wm * wn // 32 + 2 * (wm // 8 + wn // 4) + _REG_OVERHEAD
    else:
        regs = wm * wn // 32 + 2 * (wm + wn) * _INSTR_K[eb] * eb // 128 + _REG_OVERHEAD
    if regs > s.max_regs:
        return None
    r = min(int(s.smem // smem_block), s.max_threads // threads, s.regs // (regs * threads),
            s.max_blocks)
    if r < 1:
        return None
    tm, tn = -(-g.m // bm), -(-g.n // bn)
    k_split = -(-g.k // split)
    n_iter = -(-k_split // bk)
    blocks = tm * tn * g.groups * split
    conc = s.sm * r

    # L2 reuse: distinct bytes vs bytes requested by all blocks
    a_u = min(g.a_unique if g.a_unique is not None else g.m * g.k * g.groups,
              g.m * g.k * g.groups) * a_eb
    b_u = min(g.b_unique if g.b_unique is not None else g.k * g.n * g.groups,
              g.k * g.n * g.groups) * eb
    requested = tm * tn * g.groups * (bm * g.k * a_eb + g.k * bn * eb)
    if a_u + b_u <= s.l2_size:
        dram_rd = a_u + b_u
    else:
        # blocks of one wave cover a near-square region of the tile grid; each panel is fetched
        # from DRAM once per region that needs it
        region = max(1, conc // split)
        rm = min(tm, max(1, int(round(math.sqrt(region)))))
        rn = min(tn, max(1, region // rm))
        if rn == tn:
            rm = min(tm, max(1, region // rn))
        dram_rd = a_u * -(-tn // rn) + b_u * -(-tm // rm)
    dram_rd = min(dram_rd, requested)
    # an empty operand (K = 0, a zero-width layer) requests nothing: nothing misses either
    hit = 1.0 - dram_rd / requested if requested > 0 else 1.0
    c_eb = 4 if split > 1 else eb       # split-K writes fp32 partial sums
    c_bytes = bm * bn * c_eb
    mem_lat = hit * s.l2_lat + (1.0 - hit) * s.dram_lat
    rate = s.fma_rate(g.dtype)
    fma_tile = bm * bn * bk * math_keep
    smem_tile = warps * (wm * bk * a_eb + bk * wn * eb) + (a_tile + b_tile)  # reads + cp.async fills

    def wave(active: int, resident: int):
        load_bw = s.l2_bpc / active
        if hit < 1.0:
            load_bw = min(load_bw, s.dram_bpc / (active * (1.0 - hit)))
        mma = fma_tile / (rate / resident)
        sm_cyc = smem_tile / (s.smem_bpc / resident)
        work = max(mma, sm_cyc)
        epi = c_bytes / (s.dram_bpc / active)
        return _sim_block(n_iter, stages, a_tile + b_tile, load_bw, mem_lat, work, mma / work,
                          s.mma_lat, epi)

    full = wave(conc, r)
    n_full, tail = divmod(blocks, conc)
    t_tail = wave(tail, -(-tail // s.sm))[0] if tail else 0.0
    resource = full[2] + full[3] + full[4]
    t_stag = full[0]
    if n_full >= 2 and r > 1:
        # after the first wave the r blocks of an SM are staggered (the scheduler refills an SM as
        # soon as one of its blocks retires), so a block's prologue and epilogue overlap the other
        # blocks' main loops: a wave then takes the shared-resource time, or the latency chain
        # of a block that had the SM to itself, whichever is longer
        alone = wave(conc, 1)
        t_stag = min(full[0], max(resource, alone[0]))
    waves = blocks / conc
    if n_full >= 1:
        body = full[0] + (n_full - 1) * t_stag + t_tail
        ideal = full[0] + (waves - 1.0) * t_stag
    else:
        body, ideal = t_tail, waves * full[0]
    wave_tail = max(0.0, body - ideal)
    busy = waves * resource
    scale = 1.0
    if busy > body - wave_tail:
        scale = (body - wave_tail) / busy
    bd = {"math": waves * full[2] * scale, "smem": waves * full[3] * scale,
          "memory": waves * full[4] * scale, "fill_drain": max(0.0, body - wave_tail - busy * scale),
          "wave_tail": wave_tail, "launch": s.launch}
    c_final = g.m * g.n * g.groups if g.c_out is None else g.c_out
    total = body + s.launch
    if split > 1:
        # parallel split-K: fp32 partial tiles go to DRAM, a second kernel sums them into C
        partial = blocks * c_bytes
        red_bytes = partial + c_final * eb
        red = s.launch + red_bytes / s.stream_bpc + s.dram_lat
        bd["splitk_reduce"] = red
        total += red
        dram_wr = partial + c_final * eb
        dram_rd += partial
    else:
        dram_wr = c_final * eb
    return {"cycles": total, "breakdown": bd,
            "bytes": {"dram": int(dram_rd + dram_wr), "l2": int(requested + dram_wr),
                      "smem": int(blocks * n_iter * smem_tile)},
            "details": {"tile": f"{bm}x{bn}x{bk}", "warp_tile": f"{wm}x{wn}", "stages": stages,
                        "split_k": split, "blocks": blocks, "blocks_per_sm": r,
                        "waves": round(blocks / conc, 3), "k_tiles_per_block": n_iter,
                        "l2_hit_rate": round(hit, 4), "registers_per_thread": regs,
                        "smem_per_block": int(smem_block)}}


def _candidates(s: GpuSpec, g: GemmShape):
    eb = DTYPE_BYTES[g.dtype]
    bk = 64 // eb
    for tile in (_SIMT_TILES if s.on_cuda_cores(g.dtype) else _TILES):
        yield tile, 1
        bm, bn = tile[0], tile[1]
        tiles = -(-g.m // bm) * -(-g.n // bn) * g.groups
        k_iters = -(-g.k // bk)
        # SIMT (wgrad-style) kernels also split K when the grid leaves a ragged last wave
        want = 4 * s.sm if s.on_cuda_cores(g.dtype) else s.sm
        if tiles < want:
            # split K until the grid covers the SMs, keeping >= 8 k-tiles per block
            split = min(-(-want // tiles), k_iters // 8, _MAX_SPLIT_K)
            if split >= 2:
                yield tile, 1 << int(math.log2(split))


@lru_cache(maxsize=8192)
def _gemm_cached(s: GpuSpec, g: GemmShape) -> dict:
    best = None
    n = 0
    for tile, split in _candidates(s, g):
        res = _evaluate(s, g, tile, split)
        if res is None:
            continue
        n += 1
        if best is None or res["cycles"] < best["cycles"]:
            best = res
    if best is None:
        raise ConfigError(s.path, "params.smem_per_sm", "no GEMM tile fits in one SM's shared "
                          "memory and registers")
    best["details"]["candidates"] = n
    return best


def resolve_sparse(s: GpuSpec, dtype: str, n: int, m: int, bits: int | None = None,
                   where: str = "") -> tuple[tuple | None, str | None]:
    """The sparse operand the MMA can use, or (None, reason) after warning about the fallback."""
    if bits is None:
        from sim.methods.nm import bits_per_index
        bits = bits_per_index(m)
    pat = f"{n}:{m}"
    if pat in s.patterns(dtype):
        return (n, m, bits), None
    why = (f"{s.name} has no {dtype} sparse tensor cores for {pat} "
           f"(supported: {', '.join(s.patterns(dtype)) or 'none'}); running dense")
    warnings.warn(f"{where}{why}", RuntimeWarning, stacklevel=3)
    return None, why


def simulate_gemm(hw: HwConfig, m: int, n: int, k: int, *, groups: int = 1, dtype: str = "fp16",
                  sparse: str | tuple | None = None, a_unique: int | None = None,
                  b_unique: int | None = None, c_out: int | None = None, layer: str = "",
                  phase: str = "", kernel: str = "gemm") -> KernelResult:
    """One GEMM (x groups) on the GPU; sparse is 'n:m' or (n, m[, bits]) for the A operand."""
    s = gpu_spec(hw)
    if dtype not in DTYPE_BYTES:
        raise ConfigError(None, "dtype", f"unknown GPU dtype {dtype!r} (known: "
                          f"{', '.join(DTYPE_BYTES)})")
    s.fma_rate(dtype)  # a dtype the GPU lacks is a config error, named before any work
    sp, fallback = None, None
    if sparse is not None:
        if isinstance(sparse, str):
            from sim.methods.nm import parse_nm
            try:
                nn, mm = parse_nm(sparse)
            except ValueError as e:
                raise ConfigError(None, "sparse", str(e)) from None
            sparse = (nn, mm)
        sp, fallback = resolve_sparse(s, dtype, *sparse, where=f"{layer} {phase}: " if layer else "")
    g = GemmShape(int(m), int(n), int(k), int(groups), dtype, sp, a_unique, b_unique, c_out)
    if g.m * g.n * g.groups == 0 or g.k == 0:
        # an empty GEMM (a layer pruned to zero width): no blocks; K = 0 still zeroes C, which
        # BLAS libraries do with one streaming pass
        c_elems = g.m * g.n * g.groups if c_out is None else c_out
        if c_elems == 0:
            return KernelResult(ENGINE, s.name, layer, phase, kernel, 0.0, s.clock, 0, {}, {},
                                {"note": "empty GEMM: nothing to compute", "m": g.m, "n": g.n,
                                 "k": g.k, "groups": g.groups, "dtype": dtype})
        kr = stream_kernel(hw, kernel, read_bytes=0, write_bytes=c_elems * DTYPE_BYTES[dtype],
                           layer=layer, phase=phase, details={"note": "K = 0: C zeroed"})
        return kr
    res = _gemm_cached(s, g)
    dense_flops = 2 * g.m * g.n * g.k * g.groups
    flops = int(round(dense_flops * sp[0] / sp[1])) if sp else dense_flops
    details = dict(res["details"], dtype=dtype, m=g.m, n=g.n, k=g.k, groups=g.groups,
                   sparse=f"{sp[0]}:{sp[1]}" if sp else None, dense_equivalent_flops=dense_flops)
    if fallback:
        details["sparse_fallback"] = fallback
    return KernelResult(ENGINE, s.name, layer, phase, kernel, res["cycles"], s.clock, flops,
                        {k_: v / s.clock for k_, v in res["breakdown"].items()},
                        dict(res["bytes"]), details)


def stream_kernel(hw: HwConfig, kernel: str, *, read_bytes: float, write_bytes: float,
                  ops: float = 0.0, launches: int = 1, layer: str = "", phase: str = "",
                  category: str = "memory", details: dict | None = None) -> KernelResult:
    """An elementwise/streaming pass (method prune/compress, statistics, col2im, ...)."""
    s = gpu_spec(hw)
    mem = (read_bytes + write_bytes) / s.stream_bpc
    alu = ops / (s.sm * s.cuda_rate * s.cuda_ratio)   # one op per CUDA-core lane per clock
    body = max(mem, alu) + s.dram_lat * launches
    launch = s.launch * max(1, launches)
    if category == "method_overhead":
        bd = {"method_overhead": (body + launch) / s.clock}
    else:
        bd = {category: body / s.clock, "launch": launch / s.clock}
    return KernelResult(ENGINE, s.name, layer, phase, kernel, body + launch, s.clock, 0, bd,
                        {"dram": int(read_bytes + write_bytes), "l2": int(read_bytes + write_bytes)},
                        dict(details or {}, bound="alu" if alu > mem else "memory", launches=launches))


# ----------------------------------------------------------------------------------------------
# One layer phase with a method


def direct_grouped_conv(hw: HwConfig, gemm, dtype: str) -> KernelResult:
    """A grouped or depthwise conv phase as one direct kernel on the CUDA cores.

    cuDNN runs depthwise convs (and grouped convs too thin for tensor-core tiles) with direct
    kernels: each thread block loads an input tile with its halo into shared memory once and
    computes every output of its channels from it, so the kernel moves the compulsory bytes
    (input, weights and output once: the GEMM's operand tensors, not the im2col expansion) and
    does the FMAs on the CUDA cores. Modeled as a streaming kernel: launch + max(bytes / DRAM
    bandwidth, FMAs / CUDA-core rate) + one DRAM latency; it is memory-bound whenever the
    group's R*S*(C/g) FMAs per output are fewer than the GPU's FMA-per-byte balance. WGC's
    reduction over the batch and positions is taken as fused (partial sums in shared memory).
    """
    eb = DTYPE_BYTES[dtype]
    fmas = gemm.m * gemm.n * gemm.k * gemm.groups
    kr = stream_kernel(hw, "direct-conv", read_bytes=(gemm.a_elems + gemm.b_elems) * eb,
                       write_bytes=gemm.c_elems * eb, ops=fmas, layer=gemm.layer, phase=gemm.phase,
                       category="memory",
                       details={"algorithm": "direct (grouped/depthwise) kernel, CUDA cores",
                                "groups": gemm.groups, "dtype": dtype,
                                "dense_equivalent_flops": 2 * fmas})
    bd = dict(kr.breakdown)
    if kr.details["bound"] == "alu":
        bd["math"] = bd.pop("memory")
    return KernelResult(ENGINE, kr.hw, kr.layer, kr.phase, kr.kernel, kr.cycles, kr.clock_hz,
                        2 * fmas, bd, kr.bytes, kr.details)


def _col2im_seconds(hw: HwConfig, gemm, dtype: str) -> float:
    eb = DTYPE_BYTES[dtype]
    c_out = gemm.m * gemm.n * gemm.groups
    return stream_kernel(hw, "col2im", read_bytes=c_out * eb, write_bytes=gemm.c_elems * eb,
                         ops=c_out).seconds


def _first_phase(phases) -> str | None:
    for ph in ("fwd", "agbp", "wgc"):
        if ph in phases:
            return ph
    return None


def simulate_phase(gemm, method_result=None, hw: HwConfig = None, *, dtype: str | None = None,
                   charge_method: bool | None = None, layer=None, batch: int | None = None,
                   seed: int = 0) -> list[KernelResult]:
    """The GEMM of one layer phase plus the kernels around it.

    method_result None or dense: the dense GEMM. structure nm on a phase the method names: sparse A
    (falls back to dense if the GPU lacks the pattern). csr: tensor cores cannot use unstructured
    sparsity, so the GEMM runs dense (noted). per-channel / skipped / generated (Wang's approx,
    zero, random) go to the patch engine (sim/engines/patch.py), which needs `layer` (geometry) and
    `batch`. The method's WorkAccount is charged once, on the first phase it names (charge_method
    overrides), as streaming kernels. dtype None: fp16 with tensor cores, else fp32.
    """
    if hw is None:
        raise TypeError("simulate_phase needs a hwconfig")
    dtype = dtype or gpu_spec(hw).default_dtype()
    mr = method_result
    eb = DTYPE_BYTES.get(dtype, 2)
    applies = mr is not None and gemm.phase in mr.phases
    structure = mr.structure if applies else "dense"
    out: list[KernelResult] = []
    note = None
    common = dict(layer=gemm.layer, phase=gemm.phase)
    if structure in ("per-channel", "skipped", "generated"):
        # Wang et al.'s approximate WGC has its own kernels; the argmax is fused into the patch
        # kernel and generation is the random kernel, so the work account is not charged again
        from sim.engines import patch
        return patch.simulate_phase(gemm, mr, hw, layer=layer, batch=batch, dtype=dtype)
    if structure in ("dense", "nm", "csr", "channels"):
        sparse = None
        if structure == "nm":
            if mr.nm is not None:
                sparse = (mr.nm.n, mr.nm.m, mr.nm.bits_per_index)
            else:
                from sim.methods.nm import parse_nm
                sparse = parse_nm(mr.params["nm"])
        elif structure in ("csr", "channels"):
            note = (f"{structure} structure: tensor cores cannot skip unstructured zeros; GEMM runs "
                    "dense")
            if structure == "channels":
                warnings.warn(f"{gemm.layer} {gemm.phase}: {note}", RuntimeWarning, stacklevel=2)
        c_out = gemm.m * gemm.n * gemm.groups if gemm.form == "scatter" else gemm.c_elems
        kr = simulate_gemm(hw, gemm.m, gemm.n, gemm.k, groups=gemm.groups, dtype=dtype,
                           sparse=sparse, a_unique=gemm.a_elems, b_unique=gemm.b_elems,
                           c_out=c_out, **common)
        direct = None
        if gemm.groups > 1 and sparse is None:
            # grouped / depthwise convs: the faster of the grouped GEMM and a direct kernel, as
            # cuDNN's heuristics pick one algorithm per call
            direct = direct_grouped_conv(hw, gemm, dtype)
            gemm_s = kr.seconds + (_col2im_seconds(hw, gemm, dtype) if gemm.form == "scatter"
                                   else 0.0)
            if direct.seconds < gemm_s:
                direct.details["rejected"] = f"grouped GEMM {gemm_s * 1e6:.2f} us"
                kr = direct
            else:
                kr.details["algorithm"] = "grouped GEMM"
                kr.details["rejected"] = f"direct kernel {direct.seconds * 1e6:.2f} us"
                direct = None
        if note:
            kr.details["note"] = note
            kr.details["fallback"] = note
        out.append(kr)
        if gemm.form == "scatter" and direct is None:
            # col2im: read the im2col-space product, accumulate overlapping windows into dI
            out.append(stream_kernel(hw, "col2im", read_bytes=c_out * eb,
                                     write_bytes=gemm.c_elems * eb, ops=c_out, **common))
    if mr is not None and mr.work.passes + mr.work.elems_read + mr.work.elems_written > 0:
        charge = (gemm.phase == _first_phase(mr.phases)) if charge_method is None else charge_method
        if charge:
            w = mr.work
            out.append(stream_kernel(
                hw, f"{mr.method}-overhead", read_bytes=w.elems_read * eb,
                write_bytes=w.elems_written * eb + w.bytes_metadata,
                ops=w.compares + w.flops + w.random_draws, launches=max(1, w.passes),
                category="method_overhead", details={"work": w.as_dict()}, **common))
    return out


def _sum_phase(krs: list[KernelResult], clock: float) -> dict:
    bd: dict[str, float] = {}
    by: dict[str, int] = {}
    for r in krs:
        for k, v in r.breakdown.items():
            bd[k] = bd.get(k, 0.0) + v
        for k, v in r.bytes.items():
            by[k] = by.get(k, 0) + v
    sec = sum(r.seconds for r in krs)
    return {"seconds": sec, "cycles": sec * clock, "breakdown": bd, "bytes": by,
            "kernels": [r.to_json() for r in krs]}


# ----------------------------------------------------------------------------------------------
# Layers of a workload, with a method on (synthesized) gradients

_SYNTH_MAX_ELEMS = 1 << 20


def nominal_nm_result(spec, layer, batch: int):
    """SDGP's MethodResult without data: on a dense dO the density is exactly n/m whatever the
    values, and the work account follows from the shape (the same counts sim.methods.nm.sdgp
    reports; a test keeps the two equal)."""
    from sim.methods import dense_result, sdgp_prunes
    from sim.methods.base import MethodResult, WorkAccount
    from sim.methods.nm import bits_per_index, parse_nm
    p = dict(spec.params)
    if not sdgp_prunes(layer):
        return dense_result(np.ones(1, np.float32), spec.id, p,
                            "not pruned: SDGP skips the stem and linear layers")
    n, m = parse_nm(p["nm"])
    shape = layer.tensor_shapes(batch)["dO"]
    nb, c = shape[0], shape[1]
    hw_ = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    total = nb * c * hw_
    groups = -(-c // m)
    bits = bits_per_index(m)
    kept = nb * hw_ * sum(min(n, c - g * m) for g in range(groups))
    meta = nb * hw_ * ((groups * n * bits + 31) // 32) * 4
    mode = spec.id.split("-", 1)[1]
    work = WorkAccount(elems_read=total, elems_written=kept, bytes_metadata=meta,
                       compares=kept * m, random_draws=total if mode == "random" else 0, passes=1)
    if mode == "resmag":
        work = work + WorkAccount(elems_read=kept, elems_written=2 * kept, flops=2 * total + kept,
                                  passes=1)
    return MethodResult(spec.id, {"nm": f"{n}:{m}", **({"rescale": p["rescale"]} if "rescale" in p
                                                       else {})},
                        "nm", n / m, work, phases=("agbp",), extra={"nominal": True})


def method_result_for(spec, layer, batch: int, seed: int = 0):
    """Apply a method to this layer's dO, or None for dense.

    No trace is at hand here. SDGP (n:m) on a dO of more than 2^20 elements uses the nominal
    result (density exactly n/m, work from the shape: nominal_nm_result). Otherwise dO is
    synthesized: seeded Laplace values (heavy-tailed like real activation gradients). For other
    methods a tensor over 2^20 elements is not built whole: the method runs on the first b samples
    that fit and its WorkAccount is scaled by batch / b (every method's work is linear in the
    batch); DBTD's density is then the sub-batch's.
    """
    from dataclasses import replace

    from sim.methods import apply_method, stream_key
    from sim.methods.base import scale_work
    if spec is None or spec.id == "dense":
        return None
    shape = layer.tensor_shapes(batch)["dO"]
    per = int(np.prod(shape[1:]))
    if spec.id.startswith("sdgp-") and per * batch > _SYNTH_MAX_ELEMS:
        return nominal_nm_result(spec, layer, batch)
    b = max(1, min(batch, _SYNTH_MAX_ELEMS // max(per, 1)))
    rng = np.random.default_rng([seed, layer.index])
    g = rng.laplace(size=(b,) + tuple(shape[1:])).astype(np.float32)
    key = stream_key(seed, layer.index, 0)
    # zero/random/approx on a layer asked about alone: that layer is the approximated one (the
    # schedule decides only in replay and in whole-network estimates)
    sched = True if spec.id in ("zero", "random", "approx", "approx-topk") else None
    mr = apply_method(spec, layer, g, key=key, batch=batch, build_csr=False, scheduled=sched)
    if b != batch:
        mr = scale_work(mr, batch / b)
        mr = replace(mr, extra=dict(mr.extra, synthesized_samples=b))
    return mr


def simulate_layer(hw: HwConfig, layer, batch: int, *, method=None, phases=("fwd", "agbp", "wgc"),
                   dtype: str | None = None, seed: int = 0) -> dict[str, list[KernelResult]]:
    """Kernels per phase of one layer; AGBP is absent for a layer reading the network input."""
    from sim.workload import lower
    gemms = lower(layer, batch)
    mr = method_result_for(method, layer, batch, seed)
    run = [ph for ph in phases if ph != "agbp" or layer.needs_agbp]
    charge_at = None
    if mr is not None:
        named = [ph for ph in ("fwd", "agbp", "wgc") if ph in mr.phases and ph in run]
        charge_at = named[0] if named else None
    out = {}
    for ph in run:
        out[ph] = simulate_phase(gemms[ph], mr, hw, dtype=dtype,
                                 charge_method=(ph == charge_at) if mr is not None else None,
                                 layer=layer, batch=batch)
    return out


def simulate_workload(hw: HwConfig, workload, batch: int, *, method=None, dtype: str | None = None,
                      phases=("fwd", "agbp", "wgc"), layers=None, seed: int = 0) -> list[dict]:
    """Per layer: {"layer", "op", "phases": {phase: [KernelResult, ...]}}."""
    rows = []
    for l in (layers if layers is not None else workload.layers):
        rows.append({"layer": l.name, "op": l.op,
                     "phases": simulate_layer(hw, l, batch, method=method, phases=phases,
                                              dtype=dtype, seed=seed)})
    return rows


# ----------------------------------------------------------------------------------------------
# CLI back-ends


def _dtype(args, default: str = "fp16") -> str:
    d = getattr(args, "dtype", None) or default
    if d not in DTYPE_BYTES:
        raise PrunesimError(None, "--dtype", f"unknown GPU dtype {d!r} (known: {', '.join(DTYPE_BYTES)})")
    return d


def gemm_command(args, hw: HwConfig) -> int:
    dtype = _dtype(args, gpu_spec(hw).default_dtype())
    sparse = args.sparse
    if sparse is not None:
        from sim.methods.nm import parse_nm
        try:
            parse_nm(sparse)
        except ValueError as e:
            raise PrunesimError(None, "--sparse", str(e)) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = simulate_gemm(hw, args.m, args.n, args.k, dtype=dtype, sparse=sparse)
    eff = r.details["dense_equivalent_flops"] / r.seconds / 1e12
    if args.json:
        print(json.dumps({"hw": hw.name, "m": args.m, "n": args.n, "k": args.k, "dtype": dtype,
                          "sparse": r.details["sparse"], "seconds": r.seconds, "cycles": r.cycles,
                          "tflops": eff, "useful_tflops": r.tflops, "breakdown": r.breakdown,
                          "bytes": r.bytes, "details": r.details,
                          "warnings": [str(w.message) for w in caught]}, indent=1))
        return 0
    for w in caught:
        print(f"warning: {w.message}")
    d = r.details
    print(f"{hw.name}: GEMM {args.m}x{args.n}x{args.k} {dtype}"
          + (f" sparse {d['sparse']}" if d["sparse"] else " dense"))
    print(f"  {r.seconds * 1e6:.2f} us ({r.cycles:.0f} cycles), {eff:.1f} TFLOPS dense-equivalent")
    print(f"  tile {d['tile']} warp {d['warp_tile']} stages {d['stages']} split-K {d['split_k']}, "
          f"{d['blocks']} blocks, {d['blocks_per_sm']}/SM, {d['waves']} waves, "
          f"L2 hit {d['l2_hit_rate']:.1%}")
    print("  breakdown: " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in r.breakdown.items()))
    print("  bytes: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in r.bytes.items()))
    return 0


def _conv_workload(text: str):
    from sim.workload import workload_from_dict
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 9 or any(v < 0 for v in vals):
        raise PrunesimError(None, "--conv", f"expected N,C_in,C_out,H,W,R,S,stride,pad (9 "
                            f"non-negative integers), got {text!r}")
    nb, cin, cout, h, w, r, s_, stride, pad = vals
    doc = {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
           "layers": [{"name": "conv", "op": "conv", "in": "x", "out": "y", "c_out": cout,
                       "kernel": [r, s_], "stride": stride, "pad": pad}]}
    wl = workload_from_dict(doc, origin="--conv")
    # a one-off layer stands for a layer inside a network: its AGBP is wanted
    from dataclasses import replace
    l = replace(wl.layers[0], in_tensor="conv_input")
    return wl, [l], nb


def layer_command(args, hw: HwConfig) -> int:
    from sim.methods import parse_method
    from sim.workload import load_workload
    dtype = _dtype(args, gpu_spec(hw).default_dtype())
    if (args.workload is None) == (args.conv is None):
        raise PrunesimError(None, "--workload", "give either --workload or --conv")
    if args.conv is not None:
        wl, layers, batch = _conv_workload(args.conv)
        if args.batch is not None:
            batch = args.batch
    else:
        wl = load_workload(args.workload)
        batch = args.batch or 1
        if args.layer == "all":
            layers = list(wl.layers)
        else:
            by = {l.name: l for l in wl.layers}
            if args.layer in by:
                layers = [by[args.layer]]
            elif args.layer.isdigit() and int(args.layer) < len(wl.layers):
                layers = [wl.layers[int(args.layer)]]
            else:
                raise PrunesimError(wl.origin, "--layer", f"no layer {args.layer!r} (indices 0.."
                                    f"{len(wl.layers) - 1} or names)")
    phases = ("fwd", "agbp", "wgc") if args.phase == "all" else (args.phase,)
    specs = []
    for text in args.method or ["dense"]:
        try:
            specs.append(parse_method(text))
        except ValueError as e:
            raise PrunesimError(None, "--method", str(e)) from None
    s = gpu_spec(hw)
    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for spec in specs:
            rows = simulate_workload(hw, wl, batch, method=spec, dtype=dtype, phases=phases,
                                     layers=layers, seed=args.seed)
            lay = []
            for row in rows:
                ph = {p: _sum_phase(k, s.clock) for p, k in row["phases"].items()}
                sec = sum(v["seconds"] for v in ph.values())
                lay.append({"layer": row["layer"], "op": row["op"], "seconds": sec,
                            "cycles": sec * s.clock, "phases": ph})
            sec = sum(x["seconds"] for x in lay)
            runs.append({"method": spec.label, "seconds": sec, "cycles": sec * s.clock,
                         "layers": lay})
    msgs = sorted({str(w.message) for w in caught})
    if args.json:
        print(json.dumps({"hw": hw.name, "workload": wl.name, "batch": batch, "dtype": dtype,
                          "clock_hz": s.clock, "seconds": runs[0]["seconds"],
                          "cycles": runs[0]["cycles"], "runs": runs, "warnings": msgs}, indent=1))
        return 0
    for m_ in msgs:
        print(f"warning: {m_}")
    from sim.results.tables import format_table
    for run in runs:
        print(f"{hw.name}: {wl.name} batch {batch} {dtype}, method {run['method']}: "
              f"{run['seconds'] * 1e3:.3f} ms")
        rows = []
        for x in run["layers"]:
            cells = []
            for p in phases:
                v = x["phases"].get(p)
                if v is None:
                    cells.append("-")
                    continue
                g = next((k for k in v["kernels"] if k["kernel"] == "gemm"), None)
                tile = f" {g['details']['tile']}" + (f"/sk{g['details']['split_k']}"
                                                     if g["details"]["split_k"] > 1 else "") \
                    if g else ""
                cells.append(f"{v['seconds'] * 1e6:.1f}{tile}")
            rows.append([x["layer"], *cells, f"{x['seconds'] * 1e6:.1f}"])
        print(format_table(["layer", *(f"{p.upper()} us (tile)" for p in phases), "total us"], rows))
    return 0
