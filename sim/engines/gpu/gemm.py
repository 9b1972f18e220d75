"""The GPU tensor-core GEMM pipeline: each conv phase as an implicit GEMM, simulated block by block.

The model, from the outside in (docs/explanation/engines/tensorcore.md has the long form):

- A GEMM C[M,N] = A[M,K] B[K,N] (x groups) runs as thread blocks of a tile picked from a
  CUTLASS-like candidate set (thread-block tile, warp tile, pipeline stages, optional split-K).
  The pick is the candidate with the least modeled time, the way a library heuristic ranks its
  kernels by its own performance model; it is reported in `details`.
- Blocks run in waves of (SMs x resident blocks per SM); the last, partial wave is the tail.
  All blocks of a wave are identical, so one block per wave kind (full, tail) is simulated cycle by
  cycle (sim/engines/gpu/kernels.py) and multiplied.
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
- Grouped / depthwise convs: the faster of the grouped GEMM and a direct CUDA-core kernel, as
  cuDNN's heuristics pick one algorithm per call; also where a method n:m-prunes the operand
  (a depthwise AGBP has nothing for the sparse tensor cores to skip; the record says so). The
  col2im of a strided ("scatter") AGBP and a method's own work are streaming kernels
  (sim/engines/gpu/stream.py).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.engines.base import KernelResult
from sim.engines.gpu.kernels import N_OUT, block_pipeline
from sim.engines.gpu.spec import DTYPE_BYTES, GpuSpec, gpu_spec
from sim.engines.gpu.stream import ENGINE, col2im, stream_kernel
from sim.errors import ConfigError
from sim.hwconfig import HwConfig

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
_MAX_SPLIT_K = 64
# The tiles real 2:4 kernels offer (CUTLASS sm80 sparse tensor-op GEMM configurations, which
# cuSPARSELt's kernels resemble): thread-block tiles with a 64-deep dense-K stage (mma.sp
# m16n8k32 consumes K twice as fast as the dense m16n8k16), 64x64 or 32x64 warp tiles, 3 stages.
# A separate, smaller list than the dense one: no 64x64 tile and no deeper pipelines. The fifth
# entry is the stage count; the sixth the dense-K depth of one stage in bytes of a B row.
_SPARSE_TILES = ((128, 256, 64, 64, 3), (256, 128, 64, 64, 3), (128, 128, 64, 64, 3),
                 (128, 64, 64, 32, 3), (64, 128, 32, 64, 3))
# Exponent of the power-limited clock: P_dyn ~ u f V^2 and V ~ f in the DVFS range, so f ~ u^(-1/3)
# at a fixed power (the textbook CMOS relation; not fitted).
_POWER_EXP = 1.0 / 3.0
# CUDA-core (SIMT) SGEMM tiles after CUTLASS's SIMT sgemm configurations (128x128, 128x64, 64x128,
# 64x64 thread-block tiles; 32x64 / 32x32 warp tiles; 2 register-staged stages): a thread holds
# WM*WN/32 accumulators and no tensor-core fragments. The narrow 128x32 and 32x128 tiles (warps
# 2x1 and 1x2) are in the same list (cutlass_library generator.py, GenerateSM50_Simt): a GEMM with
# 16 or fewer output channels (a pruned CIFAR layer) is not padded to 64 columns.
_SIMT_TILES = ((128, 128, 32, 64, 2), (128, 64, 32, 32, 2), (64, 128, 32, 32, 2),
               (64, 64, 32, 32, 2), (128, 32, 64, 32, 2), (32, 128, 32, 64, 2))


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


@dataclass(frozen=True)
class _Fit:
    """One candidate tile on one SM: its per-stage tiles, stages, registers and residency."""

    eb: int            # bytes per B (and dense A) element
    a_eb: float        # bytes per dense A element as streamed (values + n:m metadata)
    meta_eb: float     # of which n:m metadata (0 dense)
    math_keep: float   # fraction of the dense MMA work issued
    bk: int
    stages: int
    warps: int
    a_tile: float
    b_tile: float
    smem_block: float
    regs: int
    r: int             # resident blocks per SM


def _fit(s: GpuSpec, g: GemmShape, tile) -> _Fit | None:
    """Shared memory, registers and occupancy of a tile; None if it does not fit on an SM."""
    bm, bn, wm, wn, st = tile
    eb = DTYPE_BYTES[g.dtype]
    simt = s.on_cuda_cores(g.dtype)
    bk = 64 // eb                      # 64-byte rows of K per stage (32 fp16, 16 tf32/fp32)
    if g.sparse:
        bk *= 2                        # a sparse stage covers twice the dense K (mma.sp k32)
    stages = min(st, s.max_stages)
    warps = (bm // wm) * (bn // wn)
    threads = 32 * warps
    if g.sparse:
        nk, mg, bits = g.sparse
        keep = nk / mg
        meta_eb = keep * bits / 8.0
        a_eb = eb * keep + meta_eb                    # values + metadata per dense A element
        math_keep = keep if s.sparse_rate == "m/n" else 1.0
    else:
        a_eb, meta_eb, math_keep = float(eb), 0.0, 1.0
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
    return _Fit(eb, a_eb, meta_eb, math_keep, bk, stages, warps, a_tile, b_tile, smem_block, regs,
                r)


def _dram_reads(s: GpuSpec, g: GemmShape, f: _Fit, bm: int, bn: int, split: int,
                conc: int) -> tuple[float, float]:
    """(DRAM bytes read, bytes requested from L2) by all blocks: L2 reuse of operand panels."""
    tm, tn = -(-g.m // bm), -(-g.n // bn)
    a_u = min(g.a_unique if g.a_unique is not None else g.m * g.k * g.groups,
              g.m * g.k * g.groups) * f.a_eb
    b_u = min(g.b_unique if g.b_unique is not None else g.k * g.n * g.groups,
              g.k * g.n * g.groups) * f.eb
    # each A row panel is requested by every tile column, each B column panel by every tile row
    # (real extents: edge tiles' predicated-off loads request nothing)
    requested = g.groups * (tn * g.m * g.k * f.a_eb + tm * g.k * g.n * f.eb)
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
    return min(dram_rd, requested), requested


def _body(s: GpuSpec, wave, blocks: int, conc: int, r: int) -> tuple[float, dict]:
    """Cycles of all waves (full waves, staggered after the first, plus the tail) and their
    breakdown; wave(active, resident) simulates one block of a wave."""
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
    return body, bd


def _smem_per_ktile(s: GpuSpec, g: GemmShape, f: _Fit, tile) -> float:
    """Shared-memory bytes one block moves per k-tile: the cp.async fills plus the operand reads.

    mma.sync: every warp loads its own A and B fragments (ldmatrix), so a fragment is read once
    per warp that needs it. wgmma: a warpgroup (4 warps, 64 rows of A) reads its A rows and the
    whole B tile once, the tensor cores fetching straight from shared memory. A sparse MMA
    consumes B over twice the K per instruction, so at the doubled rate the same B bytes per
    dense FMA arrive in half the time: smem, not the tensor cores, can bound it. The sparse A
    fragments are the kept values plus their metadata, counted once: `sparse_meta_load` bytes
    per 16 rows of A and sparse k-step where the hwconfig gives it, else the index bits.
    """
    bm, bn, wm, wn, _ = tile
    fills = f.a_tile + f.b_tile
    a_val = f.a_eb - f.meta_eb                   # bytes of kept A values per dense A element
    if s.on_cuda_cores(g.dtype) or s.mma_route(bool(g.sparse)) == "mma.sync":
        frag = f.warps * (wm * f.bk * a_val + f.bk * wn * f.eb)
        rows = f.warps * wm
    else:
        wg = max(1, bm // 64)
        frag = bm * f.bk * a_val + wg * f.bk * bn * f.eb
        rows = bm
    if g.sparse:
        if s.meta_load is not None:
            k_steps = f.bk / (_INSTR_K[f.eb] * 2)
            frag += rows / 16 * k_steps * s.meta_load
        else:
            frag += rows * f.bk * f.meta_eb
    return frag + fills


def _evaluate(s: GpuSpec, g: GemmShape, tile, split: int) -> dict | None:
    """Model one candidate kernel; None if it does not fit on an SM."""
    f = _fit(s, g, tile)
    if f is None:
        return None
    bm, bn, wm, wn, _ = tile
    eb, bk, r = f.eb, f.bk, f.r
    tm, tn = -(-g.m // bm), -(-g.n // bn)
    k_split = -(-g.k // split)
    n_iter = -(-k_split // bk)
    blocks = tm * tn * g.groups * split
    conc = s.sm * r
    dram_rd, requested = _dram_reads(s, g, f, bm, bn, split, conc)
    # an empty operand (K = 0, a zero-width layer) requests nothing: nothing misses either
    hit = 1.0 - dram_rd / requested if requested > 0 else 1.0
    c_eb = 4 if split > 1 else eb       # split-K writes fp32 partial sums
    # a block's mean extents: an edge tile (N or M not a multiple of the tile, K not of the
    # k-tile) is padded in shared memory and in the MMAs, but its predicated-off loads and stores
    # move no bytes (CUTLASS's predicated tile iterators), so memory sees the real extents
    m_ext, n_ext = g.m / tm, g.n / tn
    k_ext = k_split / n_iter if n_iter else 0.0
    c_bytes = m_ext * n_ext * c_eb
    load_bytes = k_ext * (m_ext * f.a_eb + n_ext * eb)
    mem_lat = hit * s.l2_lat + (1.0 - hit) * s.dram_lat
    rate = s.tc_rate_for(g.dtype, bool(g.sparse))
    fma_tile = bm * bn * bk * f.math_keep
    smem_tile = _smem_per_ktile(s, g, f, tile)
    # epilogue: fp32 accumulators staged through shared memory (written, read back) per tile
    epi_smem = bm * bn * 4 * 2
    # an mma.sync mainloop (ldmatrix fragments, cp.async fills) sustains `smem_bandwidth_sustained`
    # where the hwconfig gives it; wgmma reads its operands through descriptors, SIMT kernels use
    # plain shared loads: both keep the nominal rate
    smem_main = s.smem_bpc
    if s.smem_sus is not None and not s.on_cuda_cores(g.dtype) \
            and s.mma_route(bool(g.sparse)) == "mma.sync":
        smem_main = s.smem_sus

    def wave(active: int, resident: int):
        load_bw = s.l2_bpc / active
        if hit < 1.0:
            load_bw = min(load_bw, s.dram_bpc / (active * (1.0 - hit)))
        mma = fma_tile / (rate / resident)
        sm_cyc = smem_tile / (smem_main / resident)
        work = max(mma, sm_cyc)
        epi = s.epi_lat + max(c_bytes / (s.dram_bpc / active), epi_smem / (s.smem_bpc / resident))
        out = _sim_block(n_iter, f.stages, load_bytes, load_bw, mem_lat, work, mma / work,
                          s.mma_lat, epi)
        out[0] += s.prologue
        return out

    body, bd = _body(s, wave, blocks, conc, r)
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
            "details": {"tile": f"{bm}x{bn}x{bk}", "warp_tile": f"{wm}x{wn}", "stages": f.stages,
                        "split_k": split, "blocks": blocks, "blocks_per_sm": r,
                        "waves": round(blocks / conc, 3), "k_tiles_per_block": n_iter,
                        "l2_hit_rate": round(hit, 4), "registers_per_thread": f.regs,
                        "smem_per_block": int(f.smem_block)}}


def _candidates(s: GpuSpec, g: GemmShape):
    eb = DTYPE_BYTES[g.dtype]
    bk = 64 // eb
    if s.on_cuda_cores(g.dtype):
        tiles_ = _SIMT_TILES
    elif g.sparse:
        tiles_, bk = _SPARSE_TILES, 2 * bk
    else:
        tiles_ = _TILES
    for tile in tiles_:
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
    """The best candidate; under a power limit, re-ranked at the clock the GEMM sustains.

    Dynamic power ~ u f V^2 with the voltage rising about linearly with the clock in the DVFS
    range, so ~ u f^3: a GEMM whose tensor cores are busy a fraction u of its time holds
    min(clock, sustained_clock * u^(-1/3)) (sustained_clock: the clock at u = 1). Memory-bound
    or short, latency-bound GEMMs (small u) keep the boost clock; a GEMM's idle tensor-core
    cycles (wave tail, fill) buy back only a third of their share in clock. Two fixed-point
    steps: at a lower clock DRAM is relatively faster, u rises a little.
    """
    best = _best(s, g)
    best["clock"] = s.clock
    if s.sustained_clock is None or s.sustained_clock >= s.clock or s.on_cuda_cores(g.dtype):
        return best
    res, clock = best, s.clock
    for _ in range(2):
        u = res["breakdown"]["math"] / res["cycles"] if res["cycles"] > 0 else 0.0
        f = min(s.clock, s.sustained_clock * u ** (-_POWER_EXP)) if u > 0 else s.clock
        if f >= clock - 1.0:
            break
        clock = f
        res = dict(_best(s.at_clock(clock), g), clock=clock)
    res["details"]["clock_mhz"] = round(res["clock"] / 1e6, 1)
    return res


def _best(s: GpuSpec, g: GemmShape) -> dict:
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
                           layer=layer, phase=phase, category="math",
                           details={"note": "K = 0: C zeroed"})
        return kr
    res = _gemm_cached(s, g)
    dense_flops = 2 * g.m * g.n * g.k * g.groups
    flops = int(round(dense_flops * sp[0] / sp[1])) if sp else dense_flops
    details = dict(res["details"], dtype=dtype, m=g.m, n=g.n, k=g.k, groups=g.groups,
                   sparse=f"{sp[0]}:{sp[1]}" if sp else None, dense_equivalent_flops=dense_flops)
    if fallback:
        details["sparse_fallback"] = fallback
    clk = res["clock"]
    return KernelResult(ENGINE, s.name, layer, phase, kernel, res["cycles"], clk, flops,
                        {k_: v / clk for k_, v in res["breakdown"].items()},
                        dict(res["bytes"]), details, category="math")


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
                       details={"algorithm": "direct (grouped/depthwise) kernel, CUDA cores",
                                "groups": gemm.groups, "dtype": dtype,
                                "dense_equivalent_flops": 2 * fmas})
    bd = dict(kr.breakdown)
    if kr.details["bound"] == "alu":
        bd["math"] = bd.pop("memory")
    return KernelResult(ENGINE, kr.hw, kr.layer, kr.phase, kr.kernel, kr.cycles, kr.clock_hz,
                        2 * fmas, bd, kr.bytes, kr.details, category="math")


def _sparse_operand(mr) -> tuple:
    """(n, m[, bits]) of an n:m MethodResult."""
    if mr.nm is not None:
        return (mr.nm.n, mr.nm.m, mr.nm.bits_per_index)
    from sim.methods.nm import parse_nm
    return parse_nm(mr.params["nm"])


def gemm_phase(hw: HwConfig, gemm, mr, structure: str, dtype: str) -> list[KernelResult]:
    """The GEMM of one layer phase (dense, n:m sparse A, or dense where the tensor cores cannot
    skip the structure), the direct kernel instead where it is faster, and col2im after a
    strided AGBP. structure: the method's operand structure on this phase ("dense" if none)."""
    if structure not in ("dense", "nm", "csr", "channels"):
        return []
    common = dict(layer=gemm.layer, phase=gemm.phase)
    sparse, note = None, None
    if structure == "nm":
        sparse = _sparse_operand(mr)
    elif structure in ("csr", "channels"):
        note = (f"{structure} structure: tensor cores cannot skip unstructured zeros; GEMM runs "
                "dense")
        if structure == "channels":
            warnings.warn(f"{gemm.layer} {gemm.phase}: {note}", RuntimeWarning, stacklevel=3)
    c_out = gemm.m * gemm.n * gemm.groups if gemm.form == "scatter" else gemm.c_elems
    kr = simulate_gemm(hw, gemm.m, gemm.n, gemm.k, groups=gemm.groups, dtype=dtype,
                       sparse=sparse, a_unique=gemm.a_elems, b_unique=gemm.b_elems,
                       c_out=c_out, **common)
    direct = None
    if gemm.groups > 1:
        # grouped / depthwise convs: the faster of the grouped GEMM (n:m sparse where the method
        # prunes the operand) and a direct kernel, as cuDNN's heuristics pick one algorithm per
        # call. A depthwise AGBP reduces over one channel's taps, so n:m groups along the
        # channels leave its sparse GEMM nothing to skip; the direct kernel reads the pruned
        # operand dense
        direct = direct_grouped_conv(hw, gemm, dtype)
        gemm_s = kr.seconds + (col2im(hw, gemm, dtype).seconds if gemm.form == "scatter" else 0.0)
        if direct.seconds < gemm_s:
            what = "n:m sparse grouped GEMM" if sparse is not None else "grouped GEMM"
            direct.details["rejected"] = f"{what} {gemm_s * 1e6:.2f} us"
            if sparse is not None:
                note = "n:m structure: the dense direct kernel is faster than the sparse GEMM"
                if "sparse_fallback" in kr.details:     # no sparse tensor cores: the first why
                    direct.details["sparse_fallback"] = kr.details["sparse_fallback"]
            kr = direct
        else:
            kr.details["algorithm"] = "grouped GEMM"
            kr.details["rejected"] = f"direct kernel {direct.seconds * 1e6:.2f} us"
            direct = None
    if note:
        kr.details["note"] = note
        kr.details["fallback"] = note
    out = [kr]
    if gemm.form == "scatter" and direct is None:
        out.append(col2im(hw, gemm, dtype))
    return out
