"""The CPU family's CSR sparse x dense product, cycle-level, on the real sparsity pattern.

The cache model (sim.engines.cpu.cache: the exact line stream through set-associative LRU levels
with an L2 stream prefetcher; or sim.engines.cpu.reuse: misses from a reuse-distance profile)
counts where every access is served; the counts become time through the core's pipeline bounds
(per nonzero: FMA, load/store ports, issue width, the FMA or store-forward dependency chain),
latency / memory-level parallelism, and per-level and shared DRAM bandwidth. Large products are
sampled (SMARTS-style systematic sampling of row groups with warm-up), small ones run exhaustively.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import numba
from numba import njit

from sim.engines.cpu import cache as cs
from sim.engines.cpu import reuse as rs
from sim.engines.cpu.spec import F32, Cpu


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
# geometry; docs/explanation/engines/cpu.md gives its measured error); `--cache` sets it for a command
CACHE_MODELS = ("profile", "exact")
CACHE_MODEL: ContextVar[str] = ContextVar("prunesim_cpu_cache_model", default="exact")


@contextmanager
def _scoped(var: ContextVar, choices: tuple[str, ...], what: str, name: str):
    """Set a context variable to one of its choices for the enclosed block."""
    if name not in choices:
        raise ValueError(f"unknown {what} {name!r} (one of {', '.join(choices)})")
    tok = var.set(name)
    try:
        yield
    finally:
        var.reset(tok)


def cache_model(name: str):
    """Run the enclosed CPU simulations with this cache model."""
    return _scoped(CACHE_MODEL, CACHE_MODELS, "cache model", name)


# products with at most this many simulated line accesses run exhaustively
EXHAUSTIVE_ACCESSES = 3_000_000
CHAINS = 2                   # independent cache hierarchies the samples alternate between
SAMPLE_UNITS = 60            # sampled row groups per product (each with one warm-up group before)
UNIT_ACCESSES = 12_000       # target line accesses per sampled group

# How a sampled product picks its sample size. "adaptive" (the default): the SAMPLE_UNITS systematic
# positions are simulated in rounds of ROUND_UNITS (each round a spread-out systematic subsample),
# the total is a regression estimate on the groups' line accesses (known for every group from the
# CSR), and sampling stops once the 95% confidence half-width is within TARGET_REL of the estimate
# (SMARTS: sample until the confidence interval meets the target). "fixed": all SAMPLE_UNITS groups,
# the plain mean-per-group estimate over every group (no adaptive stop).
SAMPLINGS = ("adaptive", "fixed")
SAMPLING: ContextVar[str] = ContextVar("prunesim_cpu_sampling", default="adaptive")
ROUND_UNITS = 12             # measured groups per round of the adaptive sampler
MIN_ROUNDS = 2               # rounds before the first stop (24 groups: see docs/explanation/performance.md)
TARGET_REL = 0.02            # stop once the 95% half-width / estimate is at most this
WARMUP = 0.5                 # adaptive: a warm-up group simulates the last half of its rows


def sampling(name: str):
    """Run the enclosed CPU simulations with this sampling mode ("adaptive" or "fixed")."""
    return _scoped(SAMPLING, SAMPLINGS, "sampling", name)


def _t975(df: int) -> float:
    """Student's t 97.5% quantile (Cornish-Fisher expansion; 2.201 at 11 df, exact to 1e-3)."""
    z = 1.959963984540054
    if df <= 0:
        return math.inf
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def regression_estimate(y: np.ndarray, x: np.ndarray, x_total: float, population: int,
                        ) -> tuple[float, float]:
    """Regression estimate of the population total of y from a sample (y, x) whose x has a known
    population total: N (mean y + b (mean X - mean x)), b the least-squares slope; and its 95%
    half-width (Student t on the residuals, n - 2 degrees of freedom, finite-population
    correction, as for a simple random sample: conservative for a systematic one)."""
    n = y.size
    if n == 0:
        return 0.0, math.inf
    xm, ym = float(x.mean()), float(y.mean())
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum()) / sxx if sxx > 0 else 0.0
    est = population * (ym + slope * (x_total / population - xm))
    if n < 3:
        return est, math.inf
    e = y - ym - slope * (x - xm)
    half = (_t975(n - 2) * population * math.sqrt(float((e ** 2).sum()) / (n - 2)) / math.sqrt(n)
            * math.sqrt(max(0.0, 1 - n / population)))
    return est, half


def spread_order(k: int) -> list[int]:
    """0..k-1 in an order whose every prefix is spread over the range (a golden-ratio stride
    coprime to k: 5 -> 0, 3, 1, 4, 2), so the first rounds of the adaptive sampler are systematic
    subsamples spread over the whole product, not its first rows."""
    if k <= 2:
        return list(range(k))
    s = max(1, round(k * 0.6180339887))
    while math.gcd(s, k) != 1:
        s += 1
    return [(i * s) % k for i in range(k)]


def register_chunk(cpu: Cpu) -> int:
    """Floats of the C row an MKL-style kernel keeps in registers (all but 4 registers: B vector,
    broadcast value, index and address temporaries); 0 for the axpy style."""
    return max(1, cpu.vregs - 4) * cpu.spmm_simd if cpu.spmm_style == "register" else 0


def _hierarchy(cpu: Cpu, job: SpmmJob, C: int, T: int) -> list:
    """C empty cache hierarchies (L1, L2, L3, prefetch tables) with B warmed in, and their clocks."""
    l1 = cs.make_level(T, cpu.l1[0], cpu.l1[1], cpu.line, chains=C)
    l2 = cs.make_level(T if cpu.l2_private else 1, cpu.l2[0], cpu.l2[1], cpu.line, chains=C)
    l3 = cs.make_level(1, cpu.l3[0], cpu.l3[1], cpu.line, chains=C)
    pf_last = np.full((C, T, cpu.pf_streams), -10, np.int64)
    pf_next = np.full((C, T, cpu.pf_streams), -10, np.int64)
    pf_stamp = np.zeros((C, T, cpu.pf_streams), np.int64)
    # B was just written (im2col_trans) or is the weight matrix in use: start with it cached
    now0 = np.array([cs.warm_region_empty(cs.B_BASE, job.k * job.n * F32, cpu.line, T, l1[c],
                                          l2[c], l3[c], cpu.l2_private, False, 0)
                     for c in range(C)], np.int64)
    return [l1, l2, l3, pf_last, pf_next, pf_stamp, now0]


def _run_exact(cpu: Cpu, job: SpmmJob, indptr, indices, hier: list, starts_c, nrows_c,
               meas_c) -> np.ndarray:
    """Counters per (chain, group, thread) of the groups laid out per chain, simulated on `hier`
    (left in the state the groups leave it in, clocks included)."""
    C, Gc, T = starts_c.shape
    l1, l2, l3, pf_last, pf_next, pf_stamp, now0 = hier
    chunk = register_chunk(cpu)
    counts_c = np.zeros((C, Gc, T, cs.N_COUNTS), np.int64)
    if C == 1 or numba.get_num_threads() == 1:
        # one chain, or one Numba thread in this Python thread (a 1-thread run, or a replay worker
        # running one CPU hwconfig beside another: sim.driver): the chains one after the other
        # without the parallel kernel's thread pool (chains are independent: same counts)
        for c in range(C):
            now0[c] = cs.spmm_stream(indptr, indices, starts_c[c], nrows_c[c], meas_c[c], job.n,
                                     chunk, cpu.line, l1[c], l2[c], l3[c], cpu.l2_private, False,
                                     pf_last[c], pf_next[c], pf_stamp[c], cpu.pf_dist,
                                     cpu.pf_degree, counts_c[c], now0[c])
    else:
        cs.spmm_chains(indptr, indices, starts_c, nrows_c, meas_c, job.n, chunk, cpu.line,
                       l1, l2, l3, cpu.l2_private, False,
                       pf_last, pf_next, pf_stamp, cpu.pf_dist, cpu.pf_degree, counts_c, now0)
    return counts_c


def _counts_exact(cpu: Cpu, job: SpmmJob, indptr, indices, starts_c, nrows_c, meas_c) -> np.ndarray:
    """Counters per (chain, group, thread) from the exact set-associative LRU simulation."""
    C, _, T = starts_c.shape
    return _run_exact(cpu, job, indptr, indices, _hierarchy(cpu, job, C, T), starts_c, nrows_c,
                      meas_c)


def _accesses_per_row(cpu: Cpu, nnz_mean: float, n_b: int) -> float:
    lines = math.ceil(n_b * F32 / cpu.line) + 1
    per = lines * (2 if cpu.spmm_style == "axpy" else 1)
    return max(1.0, nnz_mean * per + lines)


@dataclass(frozen=True)
class _Plan:
    """Which row groups are simulated, laid out per (chain, group, thread)."""

    starts: np.ndarray           # (C, Gc, T) first A row of the thread's rows in the group
    nrows: np.ndarray            # (C, Gc, T) rows (0 on padding groups: no-ops)
    measured: np.ndarray         # (C, Gc) False: a warm-up group, simulated but not counted
    population: int              # groups of the whole product: (recorded unit, block)
    unit_rows: int
    sampled: bool
    rounds: tuple = ()           # sampled: the adaptive sampler's rounds, each its picks ascending
    part: tuple = ()             # thread t's rows of a unit: [part[t], part[t + 1])
    per_unit: int = 1            # groups per recorded unit


def _chains_of(picks) -> list[list[tuple[int, bool]]]:
    """Sampled groups (ascending) alternating between CHAINS hierarchies, each right after its own
    warm-up group (unless its chain just simulated that group)."""
    chains: list[list[tuple[int, bool]]] = [[] for _ in range(CHAINS)]
    for i, p in enumerate(picks):
        ch = chains[i % CHAINS]
        if p > 0 and (not ch or ch[-1][0] != p - 1):
            ch.append((int(p) - 1, False))
        ch.append((int(p), True))
    return [ch for ch in chains if ch]


def _layout(job: SpmmJob, T: int, part, per_unit: int, unit_rows: int,
            chains, warmup: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """starts, nrows (C, Gc, T) and measured (C, Gc) of groups listed per chain; a warm-up group
    simulates only its last `warmup` fraction of rows."""
    m = job.m
    C, Gc = len(chains), max(len(ch) for ch in chains)
    starts = np.zeros((C, Gc, T), np.int64)
    nrows = np.zeros((C, Gc, T), np.int64)
    meas = np.zeros((C, Gc), np.bool_)
    for c, ch in enumerate(chains):
        for gi, (g, is_meas) in enumerate(ch):
            u, blk = divmod(g, per_unit)
            meas[c, gi] = is_meas
            for t in range(T):
                lo = part[t] + blk * unit_rows
                hi = min(part[t + 1], lo + unit_rows)
                if not is_meas and warmup < 1.0 and hi > lo:
                    lo = hi - max(1, int(math.ceil((hi - lo) * warmup)))
                starts[c, gi, t] = u * m + lo
                nrows[c, gi, t] = max(0, hi - lo)
    return starts, nrows, meas


def _plan(job: SpmmJob, T: int, acc_row: float, exhaustive: bool, seed: int,
          unit_rows: int | None, n_sample: int) -> _Plan:
    """Split rows among threads (thread t: rows [m t / T, m (t+1) / T)) and pick the groups."""
    m = job.m
    part = [(m * t) // T for t in range(T + 1)]
    part_rows = max(part[t + 1] - part[t] for t in range(T))
    if unit_rows is None:
        unit_rows = max(1, min(part_rows, int(UNIT_ACCESSES / (acc_row * T)))) if not exhaustive \
            else max(1, min(part_rows, 64))
    per_unit = math.ceil(part_rows / unit_rows)
    population = job.units * per_unit
    rounds: tuple = ()
    if exhaustive or population <= 2 * n_sample:
        chains = [[(g, True) for g in range(population)]]
        sampled = False
    else:
        # systematic sampling with a random start; the samples alternate between CHAINS
        # independent cache hierarchies simulated in parallel, each sample keeping its own
        # warm-up group right before it
        rng = np.random.default_rng(seed)
        step = population / n_sample
        picks = np.unique((rng.random() * step + step * np.arange(n_sample)).astype(np.int64))
        picks = picks[picks < population]
        chains = _chains_of(picks)
        sampled = True
        # the adaptive sampler's rounds: pick i goes to round i mod k, the rounds taken in a
        # spread order starting at a random residue, so every round is a systematic sample of the
        # whole product with a random start (drawn after the picks: they stay the fixed plan's)
        k = max(1, math.ceil(picks.size / ROUND_UNITS))
        first = int(rng.integers(k))
        rounds = tuple(picks[(first + r) % k::k] for r in spread_order(k))
    starts, nrows, meas = _layout(job, T, part, per_unit, unit_rows, chains)
    return _Plan(starts, nrows, meas, population, unit_rows, sampled, rounds, tuple(part), per_unit)


def _counts(cpu: Cpu, job: SpmmJob, indptr, indices, plan: _Plan,
            model: str) -> tuple[np.ndarray, dict | None]:
    """Counters per (chain, group, thread) from the chosen cache model, and the profile's facts."""
    if model == "exact":
        return _counts_exact(cpu, job, indptr, indices, plan.starts, plan.nrows, plan.measured), None
    if model != "profile":
        raise ValueError(f"unknown cache model {model!r} (profile or exact)")
    C, Gc, T = plan.starts.shape
    chunk = register_chunk(cpu)
    key = rs.pattern_key(indptr, indices, job.m, job.k, job.n, job.units, T, cpu.line, chunk,
                         plan.starts.tobytes(), plan.nrows.tobytes(), plan.measured.tobytes())
    prof = rs.cached_profile(key, lambda: rs.build_profile(
        indptr, indices, plan.starts, plan.nrows, plan.measured, job.n, job.k, chunk, cpu.line))
    counts = rs.misses_from_profile(
        prof, line=cpu.line, l1=cpu.l1, l2=cpu.l2, l2_private=cpu.l2_private, l3=cpu.l3,
        pf_streams=cpu.pf_streams, pf_dist=cpu.pf_dist, pf_degree=cpu.pf_degree
    ).reshape(C, Gc, T, cs.N_COUNTS)
    return counts, {"accesses_walked": prof.accesses_walked,
                    "accesses_measured": prof.accesses_measured,
                    "histogram_rows": int(prof.slots.size)}


def _group_cycles(cpu: Cpu, job: SpmmJob, nnz_row: np.ndarray, starts: np.ndarray,
                  nrows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """Cycles of every simulated group (its slowest thread, or the shared DRAM bandwidth), and
    per (group, thread) the index of the bound that limited it, with the bounds' names."""
    # per (group, thread) pipeline cycles from the real nonzero counts of its rows
    cs_nnz = np.concatenate([[0], np.cumsum(nnz_row)])
    rows_nnz = cs_nnz[starts + nrows] - cs_nnz[starts]
    per_nnz, per_row = pipeline_costs(cpu, job.n)
    pipe = rows_nnz * per_nnz + nrows * per_row
    mem = _memory_cycles(cpu, counts.astype(np.float64))
    bounds = {"pipeline": pipe, "latency": mem["latency"], "l2-bandwidth": mem["l2-bandwidth"],
              "l3-bandwidth": mem["l3-bandwidth"], "dram-bandwidth": mem["dram-bandwidth"]}
    stack = np.stack(list(bounds.values()))                    # (bounds, G, T)
    thread_t = stack.max(axis=0)
    group_t = thread_t.max(axis=1)
    shared_dram = mem["dram_bytes"].sum(axis=1) / cpu.dram_bw
    group_t = np.maximum(group_t, shared_dram) / cpu.spmm_eff
    winner = stack.argmax(axis=0)                              # (G, T)
    slow_t = thread_t.argmax(axis=1)
    return group_t, winner[np.arange(winner.shape[0]), slow_t], list(bounds)


def _details(cpu: Cpu, job: SpmmJob, plan: _Plan, model: str, ctot: np.ndarray, G: int,
             n_meas: int, est: float, half: float, indptr: np.ndarray) -> dict:
    demand = ctot[:4].sum()
    rate = lambda i: float(ctot[i] / demand) if demand else 0.0   # noqa: E731
    return {"simulation": "sampled" if plan.sampled else "exhaustive", "cache_model": model,
            "groups_simulated": int(G), "groups_measured": int(n_meas),
            "population_groups": int(plan.population), "rows_per_group": int(plan.unit_rows),
            "ci95_cycles": [float((est - half) * job.scale), float((est + half) * job.scale)],
            "ci95_rel": float(half / est) if est else 0.0,
            "hit_rates": {"l1": rate(cs.L1_HIT), "l2": rate(cs.L2_HIT), "l3": rate(cs.L3_HIT),
                          "dram": rate(cs.DRAM)},
            "prefetched_lines": float(ctot[cs.PF_L3] + ctot[cs.PF_DRAM]),
            "style": cpu.spmm_style, "threads": cpu.threads, "scale": job.scale,
            "density": float(indptr[-1] / max(1, indptr.size - 1) / max(1, job.k))}


def _group_accesses(cpu: Cpu, job: SpmmJob, cs_nnz: np.ndarray, starts: np.ndarray,
                    nrows: np.ndarray) -> np.ndarray:
    """The regression estimator's auxiliary variable: each group's line accesses as _accesses_per_row
    models them (nonzeros and rows of its threads), known for every group without simulating."""
    lines = math.ceil(job.n * F32 / cpu.line) + 1
    per = lines * (2 if cpu.spmm_style == "axpy" else 1)
    nnz = cs_nnz[starts + nrows] - cs_nnz[starts]
    return (nnz * per + nrows * lines).sum(axis=-1).astype(np.float64)


def _access_total(cpu: Cpu, job: SpmmJob, cs_nnz: np.ndarray) -> float:
    """The auxiliary variable's population total: every row of every recorded unit."""
    return float(_group_accesses(cpu, job, cs_nnz, np.zeros((1, 1), np.int64),
                                 np.full((1, 1), job.m * job.units, np.int64))[0])


def _adaptive_exact(cpu: Cpu, job: SpmmJob, indptr, indices, plan: _Plan, nnz_row: np.ndarray,
                    target: float):
    """The exact simulation of the plan's rounds, one after the other on the same CHAINS
    hierarchies, until the regression estimate's 95% half-width is within `target` of it (or every
    round ran). Returns the simulated groups (starts, nrows, measured, counts per (group, thread))
    in simulation order and the rounds run."""
    T = plan.starts.shape[2]
    hier = _hierarchy(cpu, job, CHAINS, T)
    cs_nnz = np.concatenate([[0], np.cumsum(nnz_row)])
    x_total = _access_total(cpu, job, cs_nnz)
    parts: list = []
    ys, xs = [], []
    used = 0
    for rp in plan.rounds:
        st, nr, me = _layout(job, T, plan.part, plan.per_unit, plan.unit_rows, _chains_of(rp),
                             WARMUP)
        cnt = _run_exact(cpu, job, indptr, indices, hier, st, nr, me)
        C, Gc, _ = st.shape
        keep = (nr.sum(axis=2) > 0).reshape(-1)
        st, nr = st.reshape(C * Gc, T)[keep], nr.reshape(C * Gc, T)[keep]
        me, cnt = me.reshape(-1)[keep], cnt.reshape(C * Gc, T, cs.N_COUNTS)[keep]
        parts.append((st, nr, me, cnt))
        used += 1
        gt = _group_cycles(cpu, job, nnz_row, st[me], nr[me], cnt[me])[0]
        ys.append(gt)
        xs.append(_group_accesses(cpu, job, cs_nnz, st[me], nr[me]))
        est, half = regression_estimate(np.concatenate(ys), np.concatenate(xs), x_total,
                                        plan.population)
        if used >= MIN_ROUNDS and half <= target * est:
            break
    return tuple(np.concatenate(a) for a in zip(*parts)) + (used,)


def simulate_spmm(cpu: Cpu, job: SpmmJob, *, exhaustive: bool | None = None, seed: int = 0,
                  unit_rows: int | None = None, n_sample: int = SAMPLE_UNITS,
                  cache: str | None = None, sampling: str | None = None,
                  target_rel: float = TARGET_REL) -> tuple[float, dict[str, float], dict[str, int], dict]:
    """Cycles of the whole product (all real units) with the cache hierarchy simulated.

    cache: "profile" (misses derived from the stream's reuse-distance profile, which is built once
    per pattern and reused by every cache geometry) or "exact" (the set-associative LRU
    simulation); None: the current CACHE_MODEL.
    sampling (a sampled product only): "adaptive" (rounds of ROUND_UNITS groups until the regression
    estimate's 95% half-width is within target_rel; the profile model builds its profile once for
    all rounds and uses every one) or "fixed" (all n_sample groups, mean estimate); None: the
    current SAMPLING.
    """
    mode = sampling if sampling is not None else SAMPLING.get()
    if mode not in SAMPLINGS:
        raise ValueError(f"unknown sampling {mode!r} (one of {', '.join(SAMPLINGS)})")
    T = cpu.threads
    indptr = np.ascontiguousarray(job.indptr, np.int64)
    indices = np.ascontiguousarray(job.indices, np.int32)
    nnz_row = np.diff(indptr)
    nnz_mean = float(nnz_row.mean()) if nnz_row.size else 0.0
    acc_row = _accesses_per_row(cpu, nnz_mean, job.n)
    if exhaustive is None:
        exhaustive = acc_row * job.m * job.units <= EXHAUSTIVE_ACCESSES
    plan = _plan(job, T, acc_row, exhaustive, seed, unit_rows, n_sample)
    model = cache if cache is not None else CACHE_MODEL.get()
    adaptive = plan.sampled and mode == "adaptive"
    profile_info = None
    rounds_used = len(plan.rounds)
    if adaptive and model == "exact":
        starts, nrows, measured, counts, rounds_used = _adaptive_exact(
            cpu, job, indptr, indices, plan, nnz_row, target_rel)
    else:
        counts_c, profile_info = _counts(cpu, job, indptr, indices, plan, model)
        C, Gc, _ = plan.starts.shape
        keep = (plan.nrows.sum(axis=2) > 0).reshape(-1)
        starts = plan.starts.reshape(C * Gc, T)[keep]
        nrows = plan.nrows.reshape(C * Gc, T)[keep]
        measured = plan.measured.reshape(-1)[keep]
        counts = counts_c.reshape(C * Gc, T, cs.N_COUNTS)[keep]
    G = int(measured.size)
    group_t, limit, names = _group_cycles(cpu, job, nnz_row, starts, nrows, counts)
    y = group_t[measured]
    # which bound limited each measured group (by cycles, for the breakdown)
    bd = {k: 0.0 for k in names}
    for gi in np.nonzero(measured)[0]:
        bd[names[limit[gi]]] += group_t[gi]
    n_meas = y.size
    if adaptive:
        cs_nnz = np.concatenate([[0], np.cumsum(nnz_row)])
        x = _group_accesses(cpu, job, cs_nnz, starts[measured], nrows[measured])
        est, half = regression_estimate(y, x, _access_total(cpu, job, cs_nnz), plan.population)
        frac = est / max(y.sum(), 1e-30)
    elif plan.sampled:
        population = plan.population
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
    details = _details(cpu, job, plan, model, ctot, G, n_meas, est, half, indptr)
    if plan.sampled:
        details["sampling"] = {"mode": mode, "estimator": "regression" if adaptive else "mean",
                               "rounds": int(rounds_used), "rounds_max": len(plan.rounds),
                               "target_rel": float(target_rel) if adaptive else None}
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


def mask_of_result(method_result, rows: int, cols: int) -> np.ndarray:
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


def csr_of_mask(mask2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.zeros(mask2d.shape[0] + 1, np.int64)
    indptr[1:] = np.cumsum(mask2d.sum(axis=1))
    return indptr, np.nonzero(mask2d)[1].astype(np.int32)


def pattern_keys(method_result, rows: int, cols: int) -> np.ndarray | None:
    """Sorted unique row * cols + col of every nonzero of the method's CSR (the pattern
    csr_of_mask(mask_of_result(...)) has, without the dense mask); None without a CSR."""
    csr = getattr(method_result, "csr", None)
    if csr is None:
        return None
    if csr.shape != (rows, cols):
        raise ValueError(f"the method's CSR is {csr.shape[0]} x {csr.shape[1]}, expected "
                         f"{rows} x {cols}")
    indptr = np.asarray(csr.indptr, np.int64)
    r = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr))
    keys = r * cols + np.asarray(csr.indices, np.int64)
    # the methods' CSRs are row-major with ascending columns already: skip the sort then
    if keys.size > 1 and not bool((keys[1:] > keys[:-1]).all()):
        keys = np.unique(keys)
    return keys


def csr_of_keys(keys: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr int64, indices int32) of sorted unique row * cols + col keys."""
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(keys // cols, minlength=rows), out=indptr[1:])
    return indptr, (keys % cols).astype(np.int32)


def sample_transpose_keys(keys: np.ndarray, n: int, c: int, pq: int) -> np.ndarray:
    """Keys of (n*c) x pq turned into (n*pq) x c, sample by sample (dO_n -> dO_n^T), sorted (the
    reference of csr_t_of_keys: csr_of_keys of these keys is its result)."""
    row, p = np.divmod(keys, pq)
    s, ch = np.divmod(row, c)
    return np.sort((s * pq + p) * c + ch)


@njit(cache=True, nogil=True)
def _csr_t_of_keys(keys, n, c, pq):
    indptr = np.zeros(n * pq + 1, np.int64)
    for k in keys:
        row = k // pq
        indptr[(row // c) * pq + k - row * pq + 1] += 1
    for r in range(n * pq):
        indptr[r + 1] += indptr[r]
    fill = indptr[:-1].copy()
    indices = np.empty(keys.size, np.int32)
    # keys ascend by (sample, channel, position): each output row gets its channels in order
    for k in keys:
        row = k // pq
        r = (row // c) * pq + k - row * pq
        indices[fill[r]] = row - (row // c) * c
        fill[r] += 1
    return indptr, indices


def csr_t_of_keys(keys: np.ndarray, n: int, c: int, pq: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the (n*pq) x c sample-by-sample transpose of sorted unique (n*c) x pq keys by two
    counting passes (O(nnz), no sort): csr_of_keys(sample_transpose_keys(...)), which sorted
    (a sixth of the replay's time outside the cache kernels)."""
    return _csr_t_of_keys(np.ascontiguousarray(keys, np.int64), n, c, pq)
