"""Patch-extraction engine: Wang et al.'s approximate weight gradient (WGC) on a GPU.

The approximate WGC (METHODS.md 2) keeps, per (sample n, output channel c), one position of dO (the
argmax of |dO[n, c]|) carrying the channel's signed sum, so dW[c] is a sum over n of one input patch
each. The authors' kernel (input in NHWC, dO in N C_out P Q, dW in C_out R S C_in) is modeled at the
level of warps and memory transactions; docs/explanation/engines/patch.md has the long form.

Launch geometry (the paper gives its shape, not its sizes; the sizes below are this model's):
  one thread block per (output channel c, group of G samples); blockIdx.x = c runs fastest, so
  the blocks in flight at once work on the same few samples. In a block, one thread group of T
  threads per sample, striding along C_in (each thread covers ceil(C_in / T) input channels and
  keeps R*S partial sums per channel in registers): T = 32 (one warp), doubled until the partial
  sums fit the register limit; G = max(1, 256 // T) groups (8 for T = 32).
Per (n, c), each thread group
  1. reads dO[n, c, :, :] (P*Q values, coalesced) and reduces argmax |dO| and the signed sum: warp
     shuffles, then across warps through shared memory;
  2. gathers the R x S x C_in patch at the argmax from NHWC input: per in-bounds (r, s) one row of
     C_in contiguous values, ceil(C_in * 4 / 32) 32-byte sectors, coalesced along C_in; each
     thread keeps R*S*ceil(C_in/T) partial sums in registers;
then the block reduces its G groups' partials in one shared R*S*C_in buffer (the groups take turns,
separated by barriers) and atomically adds it to dW (fp32 reductions at L2: each sector read and
written there), so dW sees N/G atomic passes per channel, not N.

Memory: every access (dO rows, input rows, dW atomics) in launch order, blocks of one wave
interleaved, goes through an LRU model of the L2 (sim/engines/gpu/patch_kernels.py) fed by the real
argmax positions (a MethodResult's pick: from a trace in replay, or synthesized dO). Hits cost L2
bandwidth and latency; misses also DRAM.
Time: blocks run in waves of SMs x resident blocks (occupancy from threads, registers, shared
memory). A wave takes max(throughput time of its shares of L2, DRAM, issue and shared-memory
bandwidth; latency chain of one block alone). Plus the tail wave and the launch.
Around the kernel: dW zero-fill (memset, for the atomics), I NCHW->NHWC and dW C_out R S C_in ->
R S C_in C_out transposes, all memory-bound streaming kernels. `zero` skips WGC (0 s); `random`
is one bandwidth-bound generation kernel (the efficient version, not the paper's slow one).
"""
from __future__ import annotations

import numpy as np

from sim.engines.base import KernelResult, Unsupported
from sim.engines.gpu.patch_kernels import lru_hits
from sim.engines.gpu.spec import DTYPE_BYTES, gpu_spec
from sim.engines.gpu.stream import stream_kernel
from sim.errors import ConfigError
from sim.hwconfig import HwConfig

ENGINE = "patch"
SECTOR = 32                # bytes: the unit of an L2 / DRAM transaction
BLOCK_THREADS = 256        # model's block size target: G sample groups of T threads
MAX_GROUP_THREADS = 1024   # CUDA's block limit bounds one sample's thread group
# Registers besides the partial sums: addresses, loop counters, argmax/sum state. An estimate
# (not from a datasheet); it matters only where it changes occupancy.
REG_OVERHEAD = 24
# Latency of a dependent integer/float ALU op, for the argmax reduction chain (Pascal FFMA 6
# cycles, Jia et al. 2018 [U]); the shuffle itself uses the hwconfig's smem_latency.
ALU_LAT = 6
# Instructions per dO element per thread in the argmax/sum scan: load-use, |x|, compare, select,
# add (k > 1: one compare/select per kept slot more).
SCAN_OPS = 4
ACC_BYTES = 4              # partial sums and dW are fp32


# ----------------------------------------------------------------------------------------------
# Geometry and the access stream


def launch_geometry(c_in: int, c_out: int, n: int, r: int, s: int, k: int, hwspec) -> dict:
    """Threads, samples per block, registers, shared memory and occupancy of the patch kernel."""
    t = 32
    while r * s * -(-c_in // t) + REG_OVERHEAD > hwspec.max_regs and t < MAX_GROUP_THREADS:
        t *= 2                                           # partial sums must fit in registers
    cpt = -(-c_in // t)                                  # input channels per thread
    g = max(1, BLOCK_THREADS // t)
    threads = g * t
    regs = r * s * cpt + REG_OVERHEAD
    # shared memory: per-warp (max, index, sum) for the argmax reduction, and, with G > 1, the
    # block's R*S*C_in fp32 accumulator for the cross-sample reduction
    smem = g * (t // 32) * 3 * 4 * k + (r * s * t * cpt * ACC_BYTES if g > 1 else 0)
    if regs > hwspec.max_regs:
        raise ConfigError(hwspec.path, "params.max_registers_per_thread",
                          f"the patch kernel needs {regs} registers per thread for C_in={c_in}, "
                          f"R*S={r * s}")
    res = min(hwspec.max_threads // threads, hwspec.regs // (regs * threads),
              int(hwspec.smem // smem) if smem else hwspec.max_blocks, hwspec.max_blocks)
    if res < 1:
        raise ConfigError(hwspec.path, "params.smem_per_sm", f"the patch kernel's block ({threads} "
                          f"threads, {regs} registers each, {smem} B shared) does not fit an SM")
    return {"threads_per_group": t, "channels_per_thread": cpt, "samples_per_block": g,
            "threads_per_block": threads, "registers_per_thread": regs, "smem_per_block": smem,
            "blocks": c_out * -(-n // g), "blocks_per_sm": res}


def _sectors(nbytes: int) -> int:
    return -(-int(nbytes) // SECTOR) * SECTOR


def access_stream(layer, n: int, positions: np.ndarray, geo: dict, conc: int):
    """The kernel's accesses in launch order: (row ids, per-row bytes, per-access kind).

    positions: int (N, C_out, k) flattened output positions p*Q + q per (sample, channel, pick).
    Blocks are taken `conc` at a time (one wave) and interleaved inside the wave: first every
    block's dO reads, then the patch gathers step by step over (pick, r, s), then the atomics.
    kind: 0 dO read, 1 input gather, 2 dW atomic.
    """
    c_out, c_in, h, w = layer.c_out, layer.c_in, layer.h, layer.w
    q, r, s, st = layer.q, layer.r, layer.s, layer.stride
    k = positions.shape[2]
    g = geo["samples_per_block"]
    nn, cc, tt = np.meshgrid(np.arange(n), np.arange(c_out), np.arange(k), indexing="ij")
    nn, cc, tt = nn.ravel(), cc.ravel(), tt.ravel()
    pos = positions.reshape(-1).astype(np.int64)
    block = (nn // g) * c_out + cc
    # input gathers, one per in-bounds (r, s)
    rr, ss = np.divmod(np.arange(r * s), s)
    hh = (pos // q)[:, None] * st - layer.pad_h + rr[None, :]
    ww = (pos % q)[:, None] * st - layer.pad_w + ss[None, :]
    ok = (hh >= 0) & (hh < h) & (ww >= 0) & (ww < w)
    rep = np.broadcast_to(np.arange(r * s), hh.shape)
    g_row = (nn[:, None] * (h * w) + hh * w + ww)[ok]
    g_step = (tt[:, None] * (r * s) + rep)[ok]
    g_block = np.broadcast_to(block[:, None], hh.shape)[ok]
    g_n = np.broadcast_to(nn[:, None], hh.shape)[ok]
    # dO reads: one per (n, c)
    first = tt == 0
    d_row = n * h * w + (nn * c_out + cc)[first]
    d_block, d_n = block[first], nn[first]
    # dW atomics: one per (block, r, s)
    nb = geo["blocks"]
    a_block = np.repeat(np.arange(nb), r * s)
    a_step = np.tile(np.arange(r * s), nb)
    a_row = n * h * w + n * c_out + (a_block % c_out) * (r * s) + a_step
    rows = np.concatenate([d_row, g_row, a_row])
    kind = np.concatenate([np.zeros(d_row.size, np.int8), np.ones(g_row.size, np.int8),
                           np.full(a_row.size, 2, np.int8)])
    blk = np.concatenate([d_block, g_block, a_block])
    step = np.concatenate([np.zeros(d_row.size, np.int64), g_step, a_step])
    samp = np.concatenate([d_n, g_n, np.zeros(a_row.size, np.int64)])
    order = np.lexsort((samp, blk, step, kind, blk // conc))
    sizes = np.empty(n * h * w + n * c_out + c_out * r * s, np.int64)
    sizes[:n * h * w] = _sectors(c_in * 4)
    sizes[n * h * w:n * h * w + n * c_out] = _sectors(layer.p * q * 4)
    sizes[n * h * w + n * c_out:] = _sectors(c_in * ACC_BYTES)
    return rows[order].astype(np.int64), sizes, kind[order]


def l2_traffic(layer, n: int, positions: np.ndarray, geo: dict, conc: int, l2_size: float) -> dict:
    """Bytes requested from L2 and missed to DRAM, per access kind, by replaying the LRU."""
    rows, sizes, kind = access_stream(layer, n, positions, geo, conc)
    hit = np.zeros(rows.size, np.uint8)
    lru_hits(rows, sizes, int(l2_size), hit)
    b = sizes[rows]
    out = {}
    for name, kd in (("dO", 0), ("I", 1), ("dW", 2)):
        m = kind == kd
        out[name] = {"accesses": int(m.sum()), "bytes": int(b[m].sum()),
                     "miss_bytes": int(b[m & (hit == 0)].sum())}
    return out


# ----------------------------------------------------------------------------------------------
# Positions


def positions_for(layer, n: int, mr=None, seed: int = 0) -> tuple[np.ndarray, str]:
    """(N, C_out, k) output positions of the picks, and where they came from.

    From the MethodResult's pick when there is one (its samples are the recorded or synthesized
    ones; sample i of the batch uses pick row i mod recorded samples, so each sample's positions are
    a real sample's); else uniform positions from a seeded generator.
    """
    pq = layer.p * layer.q
    if mr is not None and mr.pick is not None:
        idx = np.asarray(mr.pick.index)
        if idx.shape[1] != layer.c_out:
            raise ConfigError(None, "pick", f"{layer.name}: the pick has {idx.shape[1]} channels, "
                              f"the layer {layer.c_out}")
        if idx.size and (idx.min() < 0 or idx.max() >= pq):
            raise ConfigError(None, "pick", f"{layer.name}: pick positions outside 0..{pq - 1}")
        b = idx.shape[0]
        src = mr.extra.get("positions_source", "pick")
        return idx[np.arange(n) % b], f"{src} ({b} sample{'s' if b != 1 else ''} cycled over {n})"
    # a per-channel result's k: positions kept per (sample, channel) (1 unless the method keeps more)
    k = int(mr.params.get("k", 1)) if mr is not None and mr.structure == "per-channel" else 1
    rng = np.random.default_rng([seed, layer.index, 7])
    return rng.integers(0, pq, size=(n, layer.c_out, min(k, pq))), "uniform (no pick)"


# ----------------------------------------------------------------------------------------------
# The kernels


def approx_kernel(hw: HwConfig, layer, n: int, positions: np.ndarray, *, phase: str = "wgc",
                  source: str = "") -> KernelResult:
    """The patch-extraction kernel (argmax + gather + reduce + atomics) on one layer."""
    sp = gpu_spec(hw)
    smem_lat = sp.smem_lat
    if smem_lat is None:
        raise ConfigError(hw.path, "params.smem_latency", "missing: the patch engine's reductions "
                          "need the shared-memory / shuffle latency")
    c_in, c_out, r, s = layer.c_in, layer.c_out, layer.r, layer.s
    pq = layer.p * layer.q
    k = positions.shape[2]
    geo = launch_geometry(c_in, c_out, n, r, s, k, sp)
    conc = sp.sm * geo["blocks_per_sm"]
    traffic = l2_traffic(layer, n, positions, geo, conc, sp.l2_size)
    nb = geo["blocks"]
    t, g, cpt = geo["threads_per_group"], geo["samples_per_block"], geo["channels_per_thread"]
    wg = t // 32                                    # warps per sample group
    wb = g * wg                                     # warps per block
    # --- instructions per block (warp instructions) ------------------------------------------
    scan = -(-pq // t)                              # dO values per thread
    levels = 1 + (wg > 1)                           # warp shuffle tree, then across warps
    red_steps = 5 * levels * k                      # log2(32) steps per level, per kept slot
    i_dO = wb * scan * (1 + SCAN_OPS + (k - 1) * 2) + wb * red_steps * 3 * 2
    gathers = traffic["I"]["accesses"] / nb         # (n, pick, r, s) rows per block
    i_gather = gathers * wg * cpt * 2 + gathers * wg * 2      # load + FMA, address math
    i_red = wb * r * s * cpt * 3 if g > 1 else 0    # each group: load, add, store its partials
    i_atom = wg * r * s * cpt
    instr = i_dO + i_gather + i_red + i_atom
    issue_rate = sp.cuda_rate * sp.cuda_ratio / 32.0      # warp instructions per clock per SM
    # --- bytes per block ---------------------------------------------------------------------
    l2_rd = traffic["dO"]["bytes"] + traffic["I"]["bytes"]
    l2_atom = 2 * traffic["dW"]["bytes"]           # an L2 reduction reads and writes the sector
    dram = (traffic["dO"]["miss_bytes"] + traffic["I"]["miss_bytes"]
            + traffic["dW"]["miss_bytes"] + c_out * c_in * r * s * ACC_BYTES)  # + dW write-back
    l2_b, dram_b = (l2_rd + l2_atom) / nb, dram / nb
    smem_b = (g * r * s * t * cpt * ACC_BYTES * 2 if g > 1 else 0) + g * wg * 3 * 4 * k * 2
    turn = r * s * cpt * 3 / issue_rate * 4 + 2 * smem_lat   # one group's turn (one scheduler)
    hit = 1.0 - (traffic["dO"]["miss_bytes"] + traffic["I"]["miss_bytes"]) / max(l2_rd, 1)
    mem_lat = hit * sp.l2_lat + (1.0 - hit) * sp.dram_lat
    # --- latency chain of one block alone (cycles) -------------------------------------------
    step = smem_lat + 2 * ALU_LAT
    lat = (sp.dram_lat + scan * SCAN_OPS * ALU_LAT      # dO arrives (compulsory miss), scan
           + red_steps * step + (levels - 1) * (2 * smem_lat)   # shuffles, cross-warp via smem
           + mem_lat + ALU_LAT * k * r * s * cpt          # gathers (independent), FMA chain
           + (g * turn if g > 1 else 0)                         # groups' turns, with barriers
           + sp.l2_lat)                                   # atomics retire at L2

    def wave(active: int, resident: int) -> tuple[float, dict]:
        parts = {"l2": l2_b / (sp.l2_bpc / active),
                 "dram": dram_b / (sp.dram_bpc / active),
                 "issue": instr / (issue_rate / resident),
                 "smem": smem_b / (sp.smem_bpc / resident)}
        parts["latency"] = lat + instr / issue_rate
        return max(parts.values()), parts

    t_full, parts = wave(conc, geo["blocks_per_sm"])
    n_full, tail = divmod(nb, conc)
    t_tail = wave(tail, -(-tail // sp.sm))[0] if tail else 0.0
    body = n_full * t_full + t_tail
    bound = max(parts, key=parts.get)
    launch = sp.launch
    total = body + launch
    flops = 2 * (traffic["I"]["accesses"]) * c_in           # one FMA per gathered value
    return KernelResult(
        ENGINE, sp.name, layer.name, phase, "approx-wgc", total, sp.clock, int(flops),
        {"patch_kernel": body / sp.clock, "launch": launch / sp.clock},
        {"dram": int(dram), "l2": int(l2_rd + l2_atom), "smem": int(smem_b * nb)},
        {**geo, "waves": round(nb / conc, 3), "bound": bound, "picks_per_channel": k,
         "l2_hit_rate": round(hit, 4), "positions": source,
         "wave_cycles": {kk: round(v, 1) for kk, v in parts.items()},
         "traffic": traffic}, category="math")


def transposes(hw: HwConfig, layer, n: int, dtype: str, phase: str = "wgc") -> list[KernelResult]:
    """I NCHW -> NHWC and dW C_out R S C_in -> R S C_in C_out: memory-bound tiled transposes (each
    element read and written once; both layouts' rows are long enough to fill sectors)."""
    eb = DTYPE_BYTES[dtype]
    i_b = n * layer.c_in * layer.h * layer.w * eb
    w_b = layer.c_out * layer.c_in * layer.r * layer.s * ACC_BYTES
    out = []
    for name, b in (("transpose-I", i_b), ("transpose-dW", w_b)):
        kr = stream_kernel(hw, name, read_bytes=b, write_bytes=b, layer=layer.name, phase=phase,
                           cause="transpose", category="memory")
        out.append(kr)
    return out


def _retag(kr: KernelResult) -> KernelResult:
    from dataclasses import replace
    return replace(kr, engine=ENGINE)


# structures this module's kernels run (the WGC of Wang's approx / approx-topk, zero, random)
STRUCTURES = ("per-channel", "skipped", "generated")


def unsupported_reason(layer, mr, phase: str) -> str | None:
    """Why the patch kernel cannot run this phase, known from the layer and method alone."""
    if mr is None or layer is None or phase not in mr.phases or mr.structure != "per-channel":
        return None
    return _layer_reason(layer)


def _layer_reason(layer) -> str | None:
    if layer.op != "conv" or layer.groups != 1:
        return (f"{layer.name}: approx WGC is modeled for ungrouped convs "
                f"(this layer: {layer.op}, groups={layer.groups})")
    return None


def simulate_wgc(hw: HwConfig, gemm, mr, *, layer=None, batch: int | None = None,
                 dtype: str | None = None, seed: int = 0) -> list[KernelResult]:
    """WGC of one layer under zero / random / approx / approx-topk (structures skipped /
    generated / per-channel). Other phases and structures belong to the GEMM pipeline (gemm.py).
    The argmax is fused into the patch kernel and generation is the random kernel, so the
    method's work account is never charged on top."""
    sp = gpu_spec(hw)
    dtype = dtype or sp.default_dtype()
    common = dict(layer=gemm.layer, phase=gemm.phase)
    st = mr.structure
    if st == "skipped":
        return [KernelResult(ENGINE, sp.name, gemm.layer, gemm.phase, "wgc-skipped", 0.0, sp.clock,
                             0, {}, {}, {"note": "zero: the weight-gradient kernel does not run"},
                             category="math")]
    if st == "generated":
        size = gemm.c_elems * gemm.groups if gemm.groups > 1 else gemm.c_elems
        w = mr.work
        ops = (w.random_draws + w.flops) or 8 * size
        return [_retag(stream_kernel(hw, "random-dw", read_bytes=0, write_bytes=size * ACC_BYTES,
                                     ops=ops, cause="generate", category="generate",
                                     details={"note": "B-scaled normals, one fused bandwidth-bound "
                                              "kernel (the paper's TensorFlow version was slower)"},
                                     **common))]
    if st != "per-channel":
        raise ConfigError(None, "structure", f"the patch engine models per-channel, skipped and "
                          f"generated WGC, not {st!r}")
    if layer is None:
        raise ConfigError(None, "layer", f"{gemm.layer}: the patch engine needs the layer geometry")
    why = _layer_reason(layer)
    if why:
        raise Unsupported(None, "layer", why)
    n = batch if batch is not None else gemm.k // max(1, layer.p * layer.q)
    positions, src = positions_for(layer, n, mr, seed)
    memset = _retag(stream_kernel(hw, "zero-dW", read_bytes=0,
                                  write_bytes=layer.c_out * layer.c_in * layer.r * layer.s * ACC_BYTES,
                                  cause="patch_kernel", category="memory", **common))
    kern = approx_kernel(hw, layer, n, positions, phase=gemm.phase, source=src)
    return [memset, kern] + [_retag(k) for k in transposes(hw, layer, n, dtype, gemm.phase)]
