"""Reuse-distance (LRU stack-distance) profiles of a CSR x dense address stream, and the cache
misses of any cache geometry derived from one profile.

The address stream of a CSR sparse x dense product depends on the sparsity pattern, the layout
(line size, the kernel's register chunk) and the thread split, never on cache capacity,
associativity or the prefetcher. So the expensive part, walking the stream, is done once per
pattern: every access gets its stack distance (the number of distinct lines touched since the
same line was last touched; -1 on first touch) in its own thread's stream (for private levels)
and in the interleaved stream of all threads (for shared levels), and a link to the access before
it when that one touched the line just below (a sequential run, what the stream prefetcher
follows). `misses_from_profile` then turns the profile into the six counters of sim.engines.cpu.cache
for any hierarchy in vectorised NumPy:

- A fully associative LRU cache of C lines misses exactly when distance >= C (Mattson et al.
  1970). A set-associative one with S sets and A ways misses when at least A of the d distinct
  lines map to the access's set; with lines spread uniformly over sets that is
  P(Binomial(d, 1/S) >= A) (Smith 1978, "A comparative study of set associative memory mapping
  algorithms"; the model StatStack and SHARDS-derived MRCs use for associativity).
- Levels are treated as inclusive LRU stacks on the demand stream (an access that misses L2 also
  misses L1): miss(L2) = min(miss(L1), P_L2), miss(L3) = min(miss(L2), P_L3). The exact
  simulator's L2 is not refreshed by L1 hits; the difference is measured in the tests.
- The L2 stream prefetcher confirms a stream on the second consecutive L1 miss of a sequential
  run (runs resume across register chunks while the stream table holds them); from the third line
  on, a line that would miss L2 has been prefetched: an L2 hit. Every L1 miss that continues a
  stream issues `degree` prefetches while the lookahead ramps up, one afterwards; each costs a
  fetch from L3 or DRAM. L2 room taken by prefetched lines never used is not modeled
  (docs/engines/cpu.md gives the measured error).

Sampling: the product's row groups are sampled SMARTS-style by the caller (sim.engines.cpu.spmm) with
a warm-up group before each sample, as for the exact simulator, so the profile has the same
per-(group, thread) structure and the same 95% confidence interval applies.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.stats import binom

from sim.engines.cpu import cache as cs

# per-access arrays of all cached profiles together (bytes); least recently used ones go first
PROFILE_CACHE_BYTES = 128 << 20


@njit(cache=True)
def _region_ids(line, shift, nnz, k, n_b, m_total):
    """Dense id of a line: the four regions back to back, one unused id between them so a
    sequential run never crosses from one region into the next."""
    a_lines = ((nnz * 4) >> shift) + 2
    b_lines = ((k * n_b * 4) >> shift) + 2
    if line >= (cs.C_BASE >> shift):
        return 2 * a_lines + b_lines + (line - (cs.C_BASE >> shift))
    if line >= (cs.B_BASE >> shift):
        return 2 * a_lines + (line - (cs.B_BASE >> shift))
    if line >= (cs.A_VAL_BASE >> shift):
        return a_lines + (line - (cs.A_VAL_BASE >> shift))
    return line - (cs.A_IDX_BASE >> shift)


@njit(cache=True)
def spmm_line_ids(indptr, indices, starts, nrows, n_b, k, register_chunk, line_bytes, out_id,
                  out_thread, out_group):
    """The line stream spmm_stream walks (cache.spmm_row_lines, the same walk), as dense line ids.

    First the warm-up of B (every line once per thread, group -1, as warm_region), then the row
    groups (group index g). Fills the out arrays (sized by the caller to an upper bound) and
    returns how many accesses there are.
    """
    shift = cs.line_shift(line_bytes)
    nnz = indptr[indptr.shape[0] - 1]
    m_total = indptr.shape[0] - 1
    n_groups, n_threads = starts.shape
    n = 0
    b_lo = cs.B_BASE >> shift
    b_hi = (cs.B_BASE + k * n_b * 4 - 1) >> shift
    for t in range(n_threads):
        for ln in range(b_lo, b_hi + 1):
            out_id[n] = _region_ids(ln, shift, nnz, k, n_b, m_total)
            out_thread[n] = t
            out_group[n] = -1
            n += 1
    last_idx = np.full(n_threads, -1, np.int64)
    last_val = np.full(n_threads, -1, np.int64)
    buf = np.empty(cs.row_lines_bound(indptr, n_b, register_chunk, line_bytes), np.int64)
    for g in range(n_groups):
        most = 0
        for t in range(n_threads):
            if nrows[g, t] > most:
                most = nrows[g, t]
        for i in range(most):
            for t in range(n_threads):
                if i >= nrows[g, t]:
                    continue
                cnt = cs.spmm_row_lines(indptr, indices, starts[g, t] + i, n_b, register_chunk,
                                        shift, t, last_idx, last_val, buf)
                for j in range(cnt):
                    out_id[n] = _region_ids(buf[j], shift, nnz, k, n_b, m_total)
                    out_thread[n] = t
                    out_group[n] = g
                    n += 1
    return n


@njit(cache=True)
def stack_distances(ids, n_ids):
    """LRU stack distance of every access (-1 on first touch), O(n log n) with a Fenwick tree
    over access times: a time holds a 1 while it is the latest access of its line, so the
    distinct lines since line x was last touched are the ones between its last time and now."""
    n = ids.shape[0]
    tree = np.zeros(n + 1, np.int64)
    last = np.full(n_ids, -1, np.int64)
    out = np.empty(n, np.int64)
    live = 0
    for i in range(n):
        x = ids[i]
        p = last[x]
        if p < 0:
            out[i] = -1
        else:
            # live markers at times <= p
            s = 0
            j = p + 1
            while j > 0:
                s += tree[j]
                j -= j & (-j)
            out[i] = live - s
            j = p + 1
            while j <= n:
                tree[j] -= 1
                j += j & (-j)
            live -= 1
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & (-j)
        live += 1
        last[x] = i
    return out


def stack_distances_ref(ids: np.ndarray) -> np.ndarray:
    """Reference of stack_distances: an explicit LRU stack (a list, most recent first)."""
    stack: list[int] = []
    out = np.empty(len(ids), np.int64)
    for i, x in enumerate(ids.tolist()):
        if x in stack:
            d = stack.index(x)
            stack.pop(d)
            out[i] = d
        else:
            out[i] = -1
        stack.insert(0, x)
    return out


@njit(cache=True)
def sequential_links(ids, thread, n_ids, d_private, far):
    """Per access, the index of the latest access to the line just below when the same thread
    made it after this line's own latest access (a stream walking upwards, possibly resumed after
    other streams ran: the prefetcher's stream table keeps it), else -1; and how many runs were
    started in between by accesses at stack distance >= far or first touches (only L1 misses
    allocate streams; `far` stands for the L1's capacity in lines), since a stream table of fewer
    entries has forgotten the stream by then; and the access's position in its run."""
    n = ids.shape[0]
    last = np.full(n_ids, -1, np.int64)
    link = np.full(n, -1, np.int64)
    between = np.zeros(n, np.int64)
    pos = np.zeros(n, np.int64)
    started = np.zeros(n + 1, np.int64)         # runs started before access i
    for i in range(n):
        x = ids[i]
        p = last[x - 1] if x > 0 else -1
        if p >= 0 and thread[p] == thread[i] and p > last[x]:
            link[i] = p
            between[i] = started[i] - started[p + 1]
            pos[i] = pos[p] + 1 if between[i] < RAMP_KEPT else 1
            started[i + 1] = started[i]
        elif d_private[i] < 0 or d_private[i] >= far:
            started[i + 1] = started[i] + 1
        else:
            started[i + 1] = started[i]
        last[x] = i
    return link, between, pos


def sequential_links_ref(ids: np.ndarray, thread: np.ndarray, d_private: np.ndarray,
                         far: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference of sequential_links with dictionaries and a list of run starts."""
    last: dict[int, int] = {}
    link = np.full(len(ids), -1, np.int64)
    between = np.zeros(len(ids), np.int64)
    pos = np.zeros(len(ids), np.int64)
    starts: list[int] = []
    for i, x in enumerate(ids.tolist()):
        p = last.get(x - 1, -1)
        if p >= 0 and thread[p] == thread[i] and p > last.get(x, -1):
            link[i] = p
            between[i] = sum(1 for s in starts if p < s < i)
            pos[i] = pos[p] + 1 if between[i] < RAMP_KEPT else 1
        elif d_private[i] < 0 or d_private[i] >= far:
            starts.append(i)
        last[x] = i
    return link, between, pos


# distances are kept in bins: exact below EXACT_BELOW, then BINS_PER_OCTAVE per factor of two
# (a 4.4% wide bin: a capacity falls inside one bin, so at most that bin's accesses are split
# the wrong way); two codes for "first touch" and "no run"
EXACT_BELOW = 64
BINS_PER_OCTAVE = 16
COLD, NONE = 510, 511
# run starts farther than this count as L1 misses when deciding whether the prefetcher's stream
# table still holds a stream (512 lines: a 32 KiB L1 of 64 B lines, both bundled CPUs')
FAR_LINES = 512
# a run resumed after this many other runs started counts its prefetch ramp from the start again
# (an approximation: the exact prefetcher keeps a stream's lookahead while its table entry lives,
# but a stream that waited that long has usually lost its prefetched lines and its entry)
RAMP_KEPT = 16


def distance_bin(d: np.ndarray) -> np.ndarray:
    d = np.asarray(d, np.int64)
    out = np.where(d < EXACT_BELOW, d, 0)
    big = d >= EXACT_BELOW
    out[big] = EXACT_BELOW + np.floor(BINS_PER_OCTAVE * np.log2(d[big] / EXACT_BELOW)).astype(np.int64)
    out = np.minimum(out, COLD - 1)
    out[d < 0] = COLD
    return out


def bin_distance(b: np.ndarray) -> np.ndarray:
    """A bin's representative distance (geometric middle; -1 for first touch)."""
    b = np.asarray(b, np.int64)
    out = np.where(b < EXACT_BELOW, b, EXACT_BELOW * 2.0 ** ((b - EXACT_BELOW + 0.5) / BINS_PER_OCTAVE))
    return np.where(b == COLD, -1.0, out)


# ---- the profile -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """A product's measured accesses as a weighted histogram: per row, the counter slot
    ((chain, group) * T + thread), the distance bins in the thread's own and in the shared stream,
    the smaller distance bin of the two accesses before it in its sequential run (NONE: it is
    not the third or later line of a run), the most runs started in between those links, and
    how many accesses have that combination."""

    slots: np.ndarray
    b_private: np.ndarray
    b_shared: np.ndarray
    b_run: np.ndarray
    b_prev: np.ndarray
    runs_between: np.ndarray
    run_pos: np.ndarray
    weight: np.ndarray
    n_slots: int
    accesses_walked: int
    accesses_measured: int
    mean_run: float              # lines per sequential run of the walked stream

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.slots, self.b_private, self.b_shared, self.b_run, self.b_prev,
                                      self.runs_between, self.run_pos, self.weight))


def _upper_bound(indptr, starts, nrows, n_b, k, chunk, line) -> int:
    """Accesses spmm_line_ids can emit for these groups, at most."""
    cs_nnz = np.concatenate([[0], np.cumsum(np.diff(indptr))])
    nnz = int((cs_nnz[starts + nrows] - cs_nnz[starts]).sum())
    rows = int(nrows.sum())
    c = chunk if chunk > 0 else n_b
    n_chunks = -(-n_b // c)
    per_chunk = c * 4 // line + 2
    b_lines = k * n_b * 4 // line + 2
    per_nnz = n_chunks * (2 + per_chunk * (2 if chunk == 0 else 1))
    return nnz * per_nnz + rows * n_chunks * per_chunk + starts.shape[1] * b_lines


def build_profile(indptr, indices, starts_c, nrows_c, meas_c, n_b: int, k: int, chunk: int,
                  line: int) -> Profile:
    """Walk each chain's stream once (warm-up of B first, as the exact simulator starts) and keep
    the histogram of the measured accesses."""
    C, Gc, T = starts_c.shape
    if C * Gc * T >= 1 << 15:
        raise ValueError(f"{C * Gc * T} counter slots: too many for a profile key (at most 32767)")
    keys = []
    walked = 0
    runs = 0
    n_ids = (2 * ((int(indptr[-1]) * 4) // line + 2) + (k * n_b * 4) // line + 2
             + ((indptr.size - 1) * n_b * 4) // line + 2)
    for c in range(C):
        cap = _upper_bound(indptr, starts_c[c], nrows_c[c], n_b, k, chunk, line)
        ids = np.empty(cap, np.int64)
        thr = np.empty(cap, np.int32)
        grp = np.empty(cap, np.int32)
        n = spmm_line_ids(indptr, indices, starts_c[c], nrows_c[c], n_b, k, chunk, line, ids, thr,
                          grp)
        ids, thr, grp = ids[:n], thr[:n], grp[:n]
        walked += n
        d_sh = stack_distances(ids, n_ids)
        if T == 1:
            d_pr = d_sh
        else:
            d_pr = np.empty(n, np.int64)
            for t in range(T):
                sel = np.nonzero(thr == t)[0]
                d_pr[sel] = stack_distances(ids[sel], n_ids)
        link, between, pos = sequential_links(ids, thr, n_ids, d_pr, FAR_LINES)
        runs += int((link < 0).sum())
        keep = grp >= 0
        keep[keep] = meas_c[c][grp[keep]]
        idx = np.nonzero(keep)[0]
        p1 = link[idx]
        p2 = np.where(p1 >= 0, link[np.maximum(p1, 0)], -1)
        run = p2 >= 0
        # an L1 hit on either earlier line leaves the stream unconfirmed: the nearer reuse decides
        dp1 = np.where(d_pr[np.maximum(p1, 0)] < 0, np.iinfo(np.int64).max, d_pr[np.maximum(p1, 0)])
        dp2 = np.where(d_pr[np.maximum(p2, 0)] < 0, np.iinfo(np.int64).max, d_pr[np.maximum(p2, 0)])
        dmin = np.minimum(dp1, dp2)
        b_run = np.where(run, distance_bin(np.where(dmin == np.iinfo(np.int64).max, -1, dmin)), NONE)
        b_prev = np.where(p1 >= 0, distance_bin(d_pr[np.maximum(p1, 0)]), NONE)
        gap = np.where(run, np.maximum(between[idx], between[np.maximum(p1, 0)]),
                       np.where(p1 >= 0, between[idx], 0))
        b_gap = np.minimum(gap, 63)
        b_pos = np.minimum(pos[idx], 63)
        slot = (c * Gc + grp[idx].astype(np.int64)) * T + thr[idx]
        keys.append((((((slot * 512 + distance_bin(d_pr[idx])) * 512 + distance_bin(d_sh[idx]))
                       * 512 + b_run) * 512 + b_prev) * 64 + b_gap) * 64 + b_pos)
    allk = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    mean_run = walked / max(1, runs)
    uk, w = np.unique(allk, return_counts=True)
    b_pos, rest = uk % 64, uk // 64
    b_gap, rest = rest % 64, rest // 64
    b_prev, rest = rest % 512, rest // 512
    b_run, rest = rest % 512, rest // 512
    b_sh, rest = rest % 512, rest // 512
    b_pr, slot = rest % 512, rest // 512
    # compact dtypes: bins < 512, gap and position < 64 (a profile is ~22 bytes per row)
    i16 = lambda a: a.astype(np.int16)   # noqa: E731
    return Profile(slot.astype(np.int32), i16(b_pr), i16(b_sh), i16(b_run), i16(b_prev),
                   b_gap.astype(np.int8), b_pos.astype(np.int8), w.astype(np.float64), C * Gc * T, walked,
                   int(allk.size), float(mean_run))


def _miss_of_bins(bins: np.ndarray, size_bytes: int, ways: int, line: int, run: float) -> np.ndarray:
    # one probability per bin code (512 of them), then a gather: the profile has far more rows
    table = miss_probability(bin_distance(np.arange(NONE + 1)), size_bytes, ways, line, run)
    table[NONE] = 0.0
    return table[bins]


def miss_probability(d: np.ndarray, size_bytes: int, ways: int, line: int,
                     run: float = 1.0) -> np.ndarray:
    """P(miss) of accesses with stack distances d (-1: first touch) in an LRU cache of this
    geometry: Smith's binomial model of set conflicts (exact for a fully associative cache).

    run: the mean length of the sequential runs the d lines come in. Consecutive lines go to
    consecutive sets, so it is the d / run runs, not the d lines, that land at random; a run
    covers a given set with probability run / sets (run = 1 is Smith's model).
    """
    d = np.asarray(d, np.float64)
    if size_bytes <= 0 or ways <= 0:
        return np.ones(d.shape, np.float64)
    sets = max(1, size_bytes // (ways * line))
    if sets == 1:
        p = (d >= ways).astype(np.float64)
    else:
        r = min(max(run, 1.0), float(sets))
        p = binom.sf(ways - 1, np.round(np.maximum(d, 0) / r), r / sets)
    return np.where(d < 0, 1.0, p)


def _bin_table(size_bytes: int, ways: int, line: int, run: float) -> np.ndarray:
    """Miss probability of every distance-bin code (NONE: 0)."""
    table = miss_probability(bin_distance(np.arange(NONE + 1)), size_bytes, ways, line, run)
    table[NONE] = 0.0
    return table


@njit(cache=True)
def accumulate_counts(slots, b_l1, b_l2, b_l3, b_run, b_prev, runs_between, run_pos, weight,
                      t1, t2, t3, n_slots, pf_streams, ramp, pf_degree, prefetch):
    """misses_from_profile's per-row arithmetic in one pass (t1..t3: per-bin miss tables)."""
    cnt = np.zeros((n_slots, 6), np.float64)
    for i in range(slots.shape[0]):
        m1 = t1[b_l1[i]]
        m2 = min(m1, t2[b_l2[i]])
        m3 = min(m2, t3[b_l3[i]])
        cover = 0.0
        issued = 0.0
        if prefetch and runs_between[i] < pf_streams:
            cover = t1[b_run[i]]
            per = pf_degree if run_pos[i] - 1 < ramp else 1
            issued = t1[b_prev[i]] * m1 * per
        w = weight[i]
        c = cnt[slots[i]]
        c[0] += w * (1.0 - m1)
        c[1] += w * (m1 - m2 + cover * m2)
        c[2] += w * (m2 - m3) * (1.0 - cover)
        c[3] += w * m3 * (1.0 - cover)
        c[4] += w * issued * (m2 - m3)
        c[5] += w * issued * m3
    return cnt


def misses_from_profile(prof: Profile, *, line: int, l1: tuple, l2: tuple, l2_private: bool,
                        l3: tuple, pf_streams: int, pf_dist: int, pf_degree: int) -> np.ndarray:
    """The six counters of sim.engines.cpu.cache per slot (float: expected counts), for one hierarchy
    (levels are (size bytes, ways, ...) tuples); the model is spelled out in
    misses_from_profile_ref, this is its one-pass kernel."""
    r = prof.mean_run
    prefetch = pf_streams > 0 and pf_dist > 0 and pf_degree > 0
    ramp = (pf_dist - 1) / (pf_degree - 1) if pf_degree > 1 else 0.0
    return accumulate_counts(prof.slots, prof.b_private, prof.b_private if l2_private else prof.b_shared,
                             prof.b_shared, prof.b_run, prof.b_prev, prof.runs_between, prof.run_pos,
                             prof.weight, _bin_table(l1[0], l1[1], line, r),
                             _bin_table(l2[0], l2[1], line, r), _bin_table(l3[0], l3[1], line, r),
                             prof.n_slots, pf_streams, ramp, pf_degree, prefetch)


def misses_from_profile_ref(prof: Profile, *, line: int, l1: tuple, l2: tuple, l2_private: bool,
                        l3: tuple, pf_streams: int, pf_dist: int, pf_degree: int) -> np.ndarray:
    """Plain-NumPy reference of misses_from_profile (the same model, row arrays at a time)."""
    r = prof.mean_run
    w = prof.weight
    m1 = _miss_of_bins(prof.b_private, l1[0], l1[1], line, r)
    l2_bins = prof.b_private if l2_private else prof.b_shared
    if pf_streams > 0 and pf_dist > 0 and pf_degree > 0:
        held = prof.runs_between < pf_streams
        # the third line of a run on is prefetched if the two before it missed L1 (the stream
        # was confirmed) and the stream table still held the stream
        cover = _miss_of_bins(prof.b_run, l1[0], l1[1], line, r) * held
        # every L1 miss that continues a held stream issues `degree` new prefetches while the
        # distance ramps up (degree - 1 lines per access, to pf_dist), one once it runs pf_dist
        # ahead: the lines the run uses next, and past its end lines that may never be used
        ramp = (pf_dist - 1) / (pf_degree - 1) if pf_degree > 1 else 0.0
        per = np.where(prof.run_pos - 1 < ramp, pf_degree, 1)
        issued = _miss_of_bins(prof.b_prev, l1[0], l1[1], line, r) * m1 * held * per
    else:
        cover = issued = np.zeros_like(m1)
    # not modeled: L2 room taken by prefetched lines never used (stretching L2 distances by the
    # unused prefetches per L1 miss was tried: it made random patterns 10-14% slow on the Xeon)
    m2 = np.minimum(m1, _miss_of_bins(l2_bins, l2[0], l2[1], line, r))
    m3 = np.minimum(m2, _miss_of_bins(prof.b_shared, l3[0], l3[1], line, r))
    # a prefetched line costs a fetch where it would have missed L2: taken as the issuing access's
    pf_l3 = issued * (m2 - m3)
    pf_dram = issued * m3
    bc = lambda v: np.bincount(prof.slots, weights=v * w, minlength=prof.n_slots)   # noqa: E731
    cnt = np.zeros((6, prof.n_slots), np.float64)
    cnt[cs.L1_HIT] = bc(1.0 - m1)
    cnt[cs.L2_HIT] = bc(m1 - m2 + cover * m2)
    cnt[cs.L3_HIT] = bc((m2 - m3) * (1 - cover))
    cnt[cs.DRAM] = bc(m3 * (1 - cover))
    cnt[cs.PF_L3] = bc(pf_l3)
    cnt[cs.PF_DRAM] = bc(pf_dram)
    return cnt.T


# ---- the cache of profiles ---------------------------------------------------------------------


_PROFILES: OrderedDict = OrderedDict()
_PROFILES_LOCK = threading.Lock()
_STATS = {"built": 0, "reused": 0}


def pattern_key(indptr: np.ndarray, indices: np.ndarray, *params) -> str:
    """A key of a profile: the pattern's content and the stream parameters, never the cache sizes."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(indptr, np.int64).tobytes())
    h.update(np.ascontiguousarray(indices, np.int32).tobytes())
    h.update(repr(params).encode())
    return h.hexdigest()


def cached_profile(key: str, build) -> Profile:
    """The profile under `key`, built (by calling build()) on first use and kept, least recently
    used ones dropped past PROFILE_CACHE_BYTES. Thread-safe (sim.driver runs CPU hwconfigs on two
    threads); two threads missing the same key both build it, and the second one's is kept."""
    with _PROFILES_LOCK:
        prof = _PROFILES.get(key)
        if prof is not None:
            _PROFILES.move_to_end(key)
            _STATS["reused"] += 1
            return prof
    prof = build()
    with _PROFILES_LOCK:
        _STATS["built"] += 1
        _PROFILES[key] = prof
        total = sum(p.nbytes for p in _PROFILES.values())
        while total > PROFILE_CACHE_BYTES and len(_PROFILES) > 1:
            _, old = _PROFILES.popitem(last=False)
            total -= old.nbytes
    return prof


def cache_stats() -> dict[str, int]:
    """Profiles built and reused so far in this process."""
    return dict(_STATS, held=len(_PROFILES))


def clear_profiles() -> None:
    _PROFILES.clear()
