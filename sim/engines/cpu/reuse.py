"""Reuse-distance (LRU stack-distance) profiles of a CSR x dense address stream, and the cache
misses of any cache geometry derived from one profile.

The address stream of a CSR sparse x dense product depends on the sparsity pattern, the layout
(line size, the kernel's register chunk) and the thread split, never on cache capacity or
associativity. So the expensive part, walking the stream, is done once per pattern (and
prefetcher: `Profile.histogram`): every access gets its stack distance (the number of distinct
lines touched since the same line was last touched; -1 on first touch) in its own thread's demand
stream (L1), and the L2 stream prefetcher is replayed among the accesses (`prefetch_replay`: the
exact model's stream table, lookahead ramp and degree) so that L2 and L3 get the stream they
really see, the accesses that miss L1 and the prefetch lookups, with a stack distance for each
(and the blocks of consecutive lines the distinct lines since form), in the thread's own stream
(private levels) and in the interleaved one (shared levels).
`misses_from_profile` then turns the profile into the six counters of sim.engines.cpu.cache for any
hierarchy in vectorised NumPy:

- A fully associative LRU cache of C lines misses exactly when distance >= C (Mattson et al.
  1970). A set-associative one with S sets and A ways misses when at least A of the d distinct
  lines map to the access's set; with lines spread uniformly over sets that is
  P(Binomial(d, 1/S) >= A) (Smith 1978, "A comparative study of set associative memory mapping
  algorithms"; the model StatStack and SHARDS-derived MRCs use for associativity), here with the
  lines grouped in sequential runs that land at random, the accessed line's own run excluded:
  for L1 the demand stream's mean run, for L2 and L3 the mean length of the blocks measured in
  the windows of that distance (Histogram.run_private, run_shared: a product's B rows are read
  in any order, but the more of B a window holds the more its rows merge into long blocks that
  fill the sets evenly).
- For an L2 whose set count is in SET_COUNTS (powers of two, 128-4096) with at most CAP ways the
  binomial is not used: the replayed L2 stream also runs through one LRU stack per set
  (depth_counts), and a bin's miss rate is the share of its events (of the row's kind: demand,
  prefetch lookup, L1 hit) whose depth in their own set is the ways or more, exact for the
  replayed stream. It sees what random placement cannot: B's rows a fixed stride apart put their
  set offsets on a lattice and a register-chunk pass reads the same columns of every row, so
  which of a line's set-mates are in the window is deterministic (docs/explanation/performance.md, "Ninth
  pass").
- Levels are treated as inclusive LRU stacks (an access that misses L2 also misses L1):
  miss(L2) = min(miss(L1), P_L2), miss(L3) = min(miss(L2), P_L3). As in the exact simulator, an
  L1 hit does not touch L2 or L3 (no refresh there, no line pushed down).
- A prefetch lookup that misses L2 is a prefetch fetch from L3 or DRAM; a prefetched line still
  in L2 at its demand access is an L2 hit. The replay decides "misses L1" (the stream table sees
  only L1 misses) by a fixed distance, FAR_LINES, so one replay serves every geometry.

Sampling: the product's row groups are sampled SMARTS-style by the caller (sim.engines.cpu.spmm) with
a warm-up group before each sample, as for the exact simulator, so the profile has the same
per-(group, thread) structure and the same 95% confidence interval applies.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

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


@njit(cache=True, inline="always")
def _fw_add(tree, i, v):
    """Add v at time i (0-based) of a Fenwick tree over access times."""
    j = i + 1
    while j < tree.shape[0]:
        tree[j] += v
        j += j & (-j)


@njit(cache=True, inline="always")
def _fw_upto(tree, i):
    """The sum over times 0..i of a Fenwick tree (0 for i < 0)."""
    s = 0
    j = i + 1
    while j > 0:
        s += tree[j]
        j -= j & (-j)
    return s


@njit(cache=True, inline="always")
def _touch(tree, last, x, now, live):
    """Line x touched at event time `now` (times hold a 1 while they are their line's latest
    touch): its stack distance (-1 on first touch) and the new number of lines touched."""
    p = last[x]
    d = -1
    if p >= 0:
        d = live - _fw_upto(tree, p)
        _fw_add(tree, p, -1)
        live -= 1
    _fw_add(tree, now, 1)
    last[x] = now
    return d, live + 1


@njit(cache=True)
def stack_distances(ids, n_ids):
    """LRU stack distance of every access (-1 on first touch), O(n log n) with a Fenwick tree
    over access times: a time holds a 1 while it is the latest access of its line, so the
    distinct lines since line x was last touched are the ones between its last time and now."""
    n = ids.shape[0]
    tree = np.zeros(n + 1, np.int32)        # counts below 2^31 (a walk is far shorter)
    last = np.full(n_ids, -1, np.int64)
    out = np.empty(n, np.int64)
    live = 0
    for i in range(n):
        out[i], live = _touch(tree, last, ids[i], i, live)
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


@njit(cache=True, inline="always")
def _pair_newer(tree2, last, y, z, old):
    """Line y (last touched at `old`, -1: never) is touched now: the pair of y and its neighbour z
    is counted at the older of their latest touches, which becomes z's unless z is older still
    (then nothing moves). Returns the change in the number of pairs."""
    tz = last[z]
    if tz < 0 or tz <= old:
        return 0
    if old >= 0:
        _fw_add(tree2, old, -1)
    _fw_add(tree2, tz, 1)
    return 1 if old < 0 else 0


@njit(cache=True, inline="always")
def _blocks(tree, tree2, last, x, live, pairs):
    """Distance of line x (-1: first touch) and the number of blocks of consecutive lines the
    distinct lines since its last touch form (lines minus neighbouring pairs both among them)."""
    p = last[x]
    if p < 0:
        return -1, 0
    d = live - _fw_upto(tree, p)
    return d, d - (pairs - _fw_upto(tree2, p))


@njit(cache=True, inline="always")
def _touch_pairs(tree, tree2, last, y, now, live, pairs):
    """_touch of line y with its blocks (as _blocks), keeping the pairs of neighbouring lines in
    tree2. Returns the distance, blocks, lines and pairs."""
    old = last[y]
    inside = pairs - _fw_upto(tree2, old) if old >= 0 else 0
    d, live = _touch(tree, last, y, now, live)
    if y > 0:
        pairs += _pair_newer(tree2, last, y, y - 1, old)
    if y + 1 < last.shape[0]:
        pairs += _pair_newer(tree2, last, y, y + 1, old)
    return d, (d - inside if d >= 0 else 0), live, pairs


@njit(cache=True)
def prefetch_replay(ids, thread, n_threads, n_ids, d_private, far, n_streams, pf_dist, pf_degree):
    """The stream L2 and L3 see: the accesses that miss L1 (taken as those at private stack
    distance `far` or more, or first touches: the one cache-size fact the replay needs) with the
    L2 stream prefetcher of cache.spmm_stream replayed among them, its stream table driven by
    those accesses. Each prefetch lookup touches its line in L2 and L3 as a demand access does,
    so an LRU level sees both, and a stack distance taken over both is what decides a hit. An L1
    hit never reaches L2 in the exact model (it refreshes nothing there): it only reads the
    distance of its line's last touch there, which prices it should L1 miss after all (a set
    conflict there).

    With each distance, the blocks of consecutive lines the distinct lines since the last touch
    form, which sets how evenly they fill the sets of a set-associative level (miss_probability):
    a product's B rows are read in any order, but once most of B is in the window its rows merge
    into long blocks that tile the sets evenly.

    Returns: per access, its stack distance in that stream (-1 on first touch) and blocks; per
    prefetch lookup, the access that issued it, the lookup's stack distance (-1 for a line never
    touched, or past the last region) and blocks; the number of sequential runs of the demand
    stream (an access whose line minus one was its thread's latest access of the two starts none);
    the order of events that stream sees (every access, L1 hits included, as its index i; lookup j
    as -1 - j) and each lookup's line, so set_depths can replay the same stream per set.
    """
    n = ids.shape[0]
    deg = max(pf_degree, 0) if n_streams > 0 and pf_dist > 0 else 0
    tree = np.zeros(n * (1 + deg) + 1, np.int32)       # over event times: accesses and lookups
    tree2 = np.zeros(n * (1 + deg) + 1, np.int32)      # neighbouring pairs, at the older touch
    last = np.full(n_ids, -1, np.int64)                 # event time of the line's latest touch
    last_dem = np.full(n_ids, -1, np.int64)             # access index of its latest demand
    dist = np.empty(n, np.int64)
    blk = np.empty(n, np.int64)
    lk_at = np.empty(n * deg, np.int64)
    lk_d = np.empty(n * deg, np.int64)
    lk_b = np.empty(n * deg, np.int64)
    lk_y = np.empty(n * deg, np.int64)
    ev_ref = np.empty(n * (1 + deg), np.int64)
    n_ev = 0
    # per thread: entries' last line, furthest prefetched line, stamp; holder[t, id]: the entry
    # most recently left at last line id (+1; 0: none)
    e_last = np.full((n_threads, max(n_streams, 1)), -10, np.int64)
    e_next = np.full((n_threads, max(n_streams, 1)), -10, np.int64)
    e_stamp = np.zeros((n_threads, max(n_streams, 1)), np.int64)
    holder = np.zeros((n_threads, n_ids if deg > 0 else 1), np.int64)
    now = 0
    live = 0
    pairs = 0
    n_lk = 0
    runs = 0
    for i in range(n):
        x = ids[i]
        t = thread[i]
        q = last_dem[x - 1] if x > 0 else -1
        if not (q >= 0 and thread[q] == t and q > last_dem[x]):
            runs += 1
        last_dem[x] = i
        ev_ref[n_ev] = i
        n_ev += 1
        if 0 <= d_private[i] < far:
            dist[i], blk[i] = _blocks(tree, tree2, last, x, live, pairs)
            continue
        dist[i], blk[i], live, pairs = _touch_pairs(tree, tree2, last, x, now, live, pairs)
        now += 1
        if deg == 0:
            continue
        e = holder[t, x - 1] - 1 if x > 0 else -1
        if e >= 0 and e_last[t, e] != x - 1:
            e = -1
        if e < 0:
            e = 0
            for f in range(1, n_streams):
                if e_stamp[t, f] < e_stamp[t, e]:
                    e = f
            e_next[t, e] = x
        else:
            start = max(e_next[t, e] + 1, x + 1)
            stop = min(x + pf_dist, start + pf_degree - 1)
            for y in range(start, stop + 1):
                lk_at[n_lk] = i
                lk_d[n_lk] = -1
                lk_b[n_lk] = 0
                lk_y[n_lk] = y
                ev_ref[n_ev] = -1 - n_lk
                n_ev += 1
                if y < n_ids:
                    lk_d[n_lk], lk_b[n_lk], live, pairs = _touch_pairs(
                        tree, tree2, last, y, now, live, pairs)
                    now += 1
                n_lk += 1
            if stop > e_next[t, e]:
                e_next[t, e] = stop
        e_last[t, e] = x
        e_stamp[t, e] = i + 1
        holder[t, x] = e + 1
    return dist, blk, lk_at[:n_lk], lk_d[:n_lk], lk_b[:n_lk], runs, ev_ref[:n_ev], lk_y[:n_lk]


def prefetch_replay_ref(ids, thread, n_threads, n_ids, d_private, far, n_streams, pf_dist,
                        pf_degree):
    """Reference of prefetch_replay: a scanned stream table and an explicit LRU stack of the
    touched lines (a list, most recent first), blocks counted in the stack's top d lines."""
    ids = [int(v) for v in ids]
    stack: list[int] = []
    last_dem: dict[int, int] = {}
    dist = np.empty(len(ids), np.int64)
    blk = np.empty(len(ids), np.int64)
    lk_at: list[int] = []
    lk_d: list[int] = []
    lk_b: list[int] = []
    lk_y: list[int] = []
    ev_ref: list[int] = []
    tables = [[[-10, -10, 0] for _ in range(n_streams)] for _ in range(n_threads)]
    holder: dict[tuple[int, int], int] = {}
    on = n_streams > 0 and pf_dist > 0 and pf_degree > 0
    runs = 0

    def look(y):
        d = stack.index(y) if y in stack else -1
        window = set(stack[:max(d, 0)])
        return d, sum(1 for v in window if v - 1 not in window)

    def touch(y):
        d, b = look(y)
        if d >= 0:
            stack.pop(d)
        stack.insert(0, y)
        return d, b

    for i, x in enumerate(ids):
        t = int(thread[i])
        q = last_dem.get(x - 1, -1)
        if not (q >= 0 and int(thread[q]) == t and q > last_dem.get(x, -1)):
            runs += 1
        last_dem[x] = i
        ev_ref.append(i)
        if 0 <= d_private[i] < far:
            dist[i], blk[i] = look(x)
            continue
        dist[i], blk[i] = touch(x)
        if not on:
            continue
        st = tables[t]
        # the entry most recently left at x - 1, if it is still there
        e = holder.get((t, x - 1))
        hit = st[e] if e is not None and st[e][0] == x - 1 else None
        if hit is None:
            e = min(range(n_streams), key=lambda f: st[f][2])   # lowest index of equal stamps
            hit = st[e]
            hit[1] = x
        else:
            start = max(hit[1] + 1, x + 1)
            stop = min(x + pf_dist, start + pf_degree - 1)
            for y in range(start, stop + 1):
                ev_ref.append(-1 - len(lk_at))
                lk_at.append(i)
                lk_y.append(y)
                d, b = touch(y) if y < n_ids else (-1, 0)
                lk_d.append(d)
                lk_b.append(b)
            hit[1] = max(hit[1], stop)
        hit[0], hit[2] = x, i + 1
        holder[(t, x)] = e
    return (dist, blk, np.array(lk_at, np.int64), np.array(lk_d, np.int64),
            np.array(lk_b, np.int64), runs, np.array(ev_ref, np.int64), np.array(lk_y, np.int64))


# distances are kept in bins: exact below EXACT_BELOW, then BINS_PER_OCTAVE per factor of two
# (a 4.4% wide bin: a capacity falls inside one bin, so at most that bin's accesses are split
# the wrong way); two codes for "first touch" and "not prefetched"
EXACT_BELOW = 64
BINS_PER_OCTAVE = 16
COLD, NONE = 510, 511
# the stream table sees only L1 misses; the replay takes an access at this private stack distance
# or more as one (512 lines: a 32 KiB L1 of 64 B lines, both bundled CPUs'), so one replay serves
# every cache geometry (the sweep's L1 of 16-64 KiB included: most SpMM accesses miss any of them)
FAR_LINES = 512


def distance_bin(d: np.ndarray) -> np.ndarray:
    d = np.asarray(d, np.int64)
    out = np.where(d < EXACT_BELOW, d, 0)
    big = d >= EXACT_BELOW
    out[big] = EXACT_BELOW + np.floor(BINS_PER_OCTAVE * np.log2(d[big] / EXACT_BELOW)).astype(np.int64)
    out = np.minimum(out, COLD - 1)
    out[d < 0] = COLD
    return out


# the L1 distance bins of the accesses the replay takes as L1 hits (FAR_LINES is a bin edge)
READ_BELOW = int(distance_bin(np.array([FAR_LINES]))[0])
assert READ_BELOW == int(distance_bin(np.array([FAR_LINES - 1]))[0]) + 1


def bin_distance(b: np.ndarray) -> np.ndarray:
    """A bin's representative distance (geometric middle; -1 for first touch)."""
    b = np.asarray(b, np.int64)
    out = np.where(b < EXACT_BELOW, b, EXACT_BELOW * 2.0 ** ((b - EXACT_BELOW + 0.5) / BINS_PER_OCTAVE))
    return np.where(b == COLD, -1.0, out)


# ---- set depths: set conflicts of power-of-two set counts, measured -----------------------------

# The binomial model places the window's blocks at random sets. A CSR x dense product's B rows are
# a fixed stride apart, so their set offsets lie on a lattice, and a register-chunk pass reads the
# same columns of every row it touches: which of a line's set-mates (the lines a multiple of the
# set count away) are in the window depends on their columns relative to the line's, a
# deterministic pattern (docs/explanation/performance.md, "Ninth pass"). For these set counts the replayed L2
# stream is therefore also run through one LRU stack per set, CAP deep, giving every access and
# lookup its depth in its own set (Mattson's stack distance per set: an LRU set of A ways misses
# exactly when the depth is A or more), kept per distance bin; other geometries (a set count not
# in the list, more than CAP ways, the L1 and L3 models) use the binomial.
SET_COUNTS = np.array([128, 256, 512, 1024, 2048, 4096], np.int64)
CAP = 32          # depths kept: 0..CAP - 1, CAP for "not among the set's CAP latest" (ways <= 32)
# the events' kinds, kept apart because a distance bin's miss rate differs between them: an access
# that misses L1 (it touches L2), a prefetch lookup, an L1 hit (it only reads its depth: a line
# hit in L1 is not refreshed in L2, so its L2 distance grows while it stays in L1)
DEMAND, LOOKUP, READ = 0, 1, 2


@njit(cache=True, inline="always")
def _set_touch(row, x, touch, cap):
    """Line x in its set's LRU stack `row` (most recent first, cap deep): its depth (cap: not
    among them), and, on a touch, x moved (or put) on top."""
    p = cap
    for w in range(cap):
        if row[w] == x:
            p = w
            break
    if touch:
        for w in range(min(p, cap - 1), 0, -1):
            row[w] = row[w - 1]
        row[0] = x
    return p


@njit(cache=True)
def set_depths(tags, offs, touch, set_counts, cap):
    """Per event and per set count S (a power of two), the number of distinct lines of its set
    (offset mod S) touched since its line's last touch, capped at `cap` (also for a first touch).
    tags: the line's unique id; offs: its offset in its region (the region bases are multiples
    of every S, as in the exact model's line & (S - 1)); touch False: the event only reads its
    depth (an L1 hit: it moves nothing in L2)."""
    n = tags.shape[0]
    out = np.empty((n, set_counts.shape[0]), np.int8)
    for j in range(set_counts.shape[0]):
        sets = set_counts[j]
        stack = np.full((sets, cap), -1, np.int64)   # per set, most recent first
        for i in range(n):
            out[i, j] = _set_touch(stack[offs[i] & (sets - 1)], tags[i], touch[i], cap)
    return out


def set_depths_ref(tags, offs, touch, set_counts, cap) -> np.ndarray:
    """Reference of set_depths: a dict of per-set lists (most recent first), uncapped."""
    out = np.empty((len(tags), len(set_counts)), np.int8)
    for j, sets in enumerate(int(v) for v in set_counts):
        stacks: dict[int, list[int]] = {}
        for i, (x, o) in enumerate(zip(tags.tolist(), offs.tolist())):
            st = stacks.setdefault(o % sets, [])
            p = st.index(x) if x in st else len(st) + cap
            out[i, j] = min(p, cap)
            if touch[i]:
                if p < len(st):
                    st.pop(p)
                st.insert(0, x)
    return out


@njit(cache=True)
def depth_counts(ids, d_private, keep, bin_acc, lk_at, lk_y, bin_lk, ev_ref, starts, set_counts,
                 cap, far):
    """Counts of the measured events of one replayed stream per (kind: DEMAND, LOOKUP, READ; set
    count; distance bin; set depth as set_depths gives it). The stream is prefetch_replay's
    event order ev_ref over the accesses ids (an access at private distance below `far` is an L1
    hit: it only reads) and its lookups (lk_at: issuing access, lk_y: line; a line at or past
    starts[-1], the end of the last region, is none: never touched); keep: measured accesses,
    whose lookups are measured too; bin_acc, bin_lk: the events' distance bins in this stream;
    starts: the dense ids' region starts, then their end."""
    out = np.zeros((3, set_counts.shape[0], NONE + 1, cap + 1), np.int64)
    for j in range(set_counts.shape[0]):
        sets = set_counts[j]
        stack = np.full((sets, cap), -1, np.int64)
        for e in range(ev_ref.shape[0]):
            r = ev_ref[e]
            if r >= 0:
                i, x, b = r, ids[r], bin_acc[r]
                touch = not (0 <= d_private[r] < far)
                kind = DEMAND if touch else READ
            else:
                i, x, b = lk_at[-1 - r], lk_y[-1 - r], bin_lk[-1 - r]
                touch = x < starts[starts.shape[0] - 1]
                kind = LOOKUP
            g = 0
            while g + 2 < starts.shape[0] and x >= starts[g + 1]:
                g += 1
            p = _set_touch(stack[(x - starts[g]) & (sets - 1)], x, touch, cap)
            if keep[i]:
                out[kind, j, b, p] += 1
    return out


def depth_counts_ref(ids, d_private, keep, bin_acc, lk_at, lk_y, bin_lk, ev_ref, starts,
                     set_counts, cap, far) -> np.ndarray:
    """Reference of depth_counts: the events laid out as arrays, their depths from
    set_depths_ref, counted with np.add.at."""
    acc = ev_ref >= 0
    j = np.where(acc, 0, -1 - ev_ref)
    i = np.where(acc, ev_ref, lk_at[j] if lk_at.size else 0)
    line = np.where(acc, ids[i], lk_y[j] if lk_y.size else 0)
    touch = np.where(acc, ~((d_private[i] >= 0) & (d_private[i] < far)), line < starts[-1])
    region = np.clip(np.searchsorted(starts, line, side="right") - 1, 0, starts.size - 2)
    depth = set_depths_ref(line, line - starts[region], touch, set_counts, cap)
    kind = np.where(acc, np.where(touch, DEMAND, READ), LOOKUP)
    b = np.where(acc, bin_acc[i], bin_lk[j] if bin_lk.size else 0)
    out = np.zeros((3, len(set_counts), NONE + 1, cap + 1), np.int64)
    sel = keep[i]
    for s in range(len(set_counts)):
        np.add.at(out, (kind[sel], s, b[sel], depth[sel, s]), 1)
    return out


def _depth_counts(rep, ids, d_private, keep, starts) -> np.ndarray:
    """depth_counts of one replayed stream (rep: prefetch_replay's outputs on ids): the same
    events the histogram keeps, so a bin's share of depths >= A is its events' miss rate."""
    dist, _, lk_at, lk_d, _, _, ev_ref, lk_y = rep
    return depth_counts(ids, d_private, keep, distance_bin(dist), lk_at, lk_y, distance_bin(lk_d),
                        ev_ref, starts, SET_COUNTS, CAP, FAR_LINES).astype(np.float64)


# ---- the profile -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """A product's measured accesses and prefetch lookups under one prefetcher, as a weighted
    histogram: per row, the counter slot ((chain, group) * T + thread), the distance bin in the
    thread's own demand stream (L1; NONE: a prefetch lookup, which L1 does not see), the distance
    bins in the stream L2 and L3 see (L1 misses and prefetch lookups) of the thread's own and of
    all threads, and how many accesses or lookups have that combination; per distance bin of
    those two streams, the mean length of the blocks of consecutive lines in the windows (summed
    distances over summed blocks); per stream, the set-depth counts of the same events (demand or
    lookup, set count of SET_COUNTS, distance bin, depth 0..CAP: _depth_counts; float32, the
    shared stream's array is the private one's too with one thread)."""

    slots: np.ndarray
    b_l1: np.ndarray
    b_private: np.ndarray
    b_shared: np.ndarray
    weight: np.ndarray
    run_private: np.ndarray
    run_shared: np.ndarray
    depth_private: np.ndarray
    depth_shared: np.ndarray

    @property
    def nbytes(self) -> int:
        arrays = (self.slots, self.b_l1, self.b_private, self.b_shared, self.weight,
                  self.run_private, self.run_shared, self.depth_private, self.depth_shared)
        return sum(a.nbytes for a in {id(a): a for a in arrays}.values())


@dataclass(frozen=True)
class Profile:
    """A product's sampled groups and, per stream-prefetcher configuration (entries, distance,
    degree), the histogram of its measured accesses (`histogram`: built on first use, one walk of
    the stream each; a cache geometry never needs a new one)."""

    indptr: np.ndarray
    indices: np.ndarray
    starts_c: np.ndarray
    nrows_c: np.ndarray
    meas_c: np.ndarray
    n_b: int
    k: int
    chunk: int
    line: int
    n_slots: int
    hists: dict = field(default_factory=dict, compare=False)
    facts: dict = field(default_factory=dict, compare=False)   # walked, measured, mean run
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    def histogram(self, pf: tuple[int, int, int]) -> Histogram:
        with self.lock:
            h = self.hists.get(pf)
            if h is None:
                h, facts = _walk(self, *pf)
                self.hists[pf] = h
                self.facts.update(facts)
                self.facts["last"] = pf
            return h

    # what sim.engines.cpu.spmm reports of the histogram it used last
    @property
    def accesses_walked(self) -> int:
        return self.facts.get("walked", 0)

    @property
    def accesses_measured(self) -> int:
        return self.facts.get("measured", 0)

    @property
    def mean_run(self) -> float:
        return self.facts.get("mean_run", 1.0)

    @property
    def slots(self) -> np.ndarray:
        last = self.facts.get("last")
        return self.hists[last].slots if last is not None else np.zeros(0, np.int32)

    @property
    def nbytes(self) -> int:
        return sum(h.nbytes for h in list(self.hists.values()))


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
    """A product's profile: its sampled groups; the stream is walked (warm-up of B first, as the
    exact simulator starts) once per prefetcher configuration that asks for its histogram."""
    C, Gc, T = starts_c.shape
    if C * Gc * T >= 1 << 15:
        raise ValueError(f"{C * Gc * T} counter slots: too many for a profile key (at most 32767)")
    return Profile(indptr, indices, starts_c, nrows_c, meas_c, int(n_b), int(k), int(chunk),
                   int(line), C * Gc * T)


def _replay_chain(ids, thr, T: int, n_ids: int, pf: tuple, keep, starts) -> tuple:
    """One chain's walked stream replayed: its L1 distances; per access and per lookup the
    distance and blocks in the private stream (one thread's own accesses and prefetches) and in
    the shared one (all threads'), the lookups' issuing accesses, the demand stream's runs; and
    the set-depth counts of the measured events of both streams (_depth_counts)."""
    n = ids.size
    if T == 1:
        d_l1 = stack_distances(ids, n_ids)
        rep = prefetch_replay(ids, thr, 1, n_ids, d_l1, *pf)
        dep = _depth_counts(rep, ids, d_l1, keep, starts)
        d_sh, b_sh, at_sh, lk_sh, lb_sh, r = rep[:6]
        return d_l1, (d_sh, b_sh, lk_sh, lb_sh, dep), (d_sh, b_sh, lk_sh, lb_sh, dep), at_sh, r
    # private levels see one thread's accesses and prefetches: the replay on its own accesses
    # (its stream table is its own) gives the same lookups in the same order
    d_l1 = np.empty(n, np.int64)
    d_pr = np.empty(n, np.int64)
    b_pr = np.empty(n, np.int64)
    lk_parts, lb_parts = [], []
    dep_pr = 0.0
    for t in range(T):
        sel = np.nonzero(thr == t)[0]
        d_l1[sel] = stack_distances(ids[sel], n_ids)
        rep = prefetch_replay(ids[sel], np.zeros(sel.size, np.int32), 1, n_ids, d_l1[sel], *pf)
        d_pr[sel], b_pr[sel] = rep[0], rep[1]
        lk_parts.append(rep[3])
        lb_parts.append(rep[4])
        dep_pr = dep_pr + _depth_counts(rep, ids[sel], d_l1[sel], keep[sel], starts)
    rep = prefetch_replay(ids, thr, T, n_ids, d_l1, *pf)
    d_sh, b_sh, at_sh, lk_sh, lb_sh, r = rep[:6]
    order = np.argsort(thr[at_sh], kind="stable")
    lk_pr = np.empty_like(lk_sh)
    lk_pr[order] = np.concatenate(lk_parts)
    lb_pr = np.empty_like(lb_sh)
    lb_pr[order] = np.concatenate(lb_parts)
    dep_sh = _depth_counts(rep, ids, d_l1, keep, starts)
    return d_l1, (d_pr, b_pr, lk_pr, lb_pr, dep_pr), (d_sh, b_sh, lk_sh, lb_sh, dep_sh), at_sh, r


def _walk(prof: Profile, pf_streams: int, pf_dist: int, pf_degree: int) -> tuple[Histogram, dict]:
    """Walk each chain's stream, replay the prefetcher among its accesses, keep the histogram of
    the measured accesses and of the prefetch lookups they issued."""
    indptr, line, n_b, k, chunk = prof.indptr, prof.line, prof.n_b, prof.k, prof.chunk
    C, Gc, T = prof.starts_c.shape
    keys = []
    walked = 0
    runs = 0
    # per distance bin of the private and shared streams: summed distances and blocks
    sums = np.zeros((2, 2, NONE + 1), np.float64)
    depths = [0.0, 0.0]
    a_lines = (int(indptr[-1]) * 4) // line + 2
    # the dense ids' region starts (A indices, A values, B, C) and their end
    starts = np.cumsum([0, a_lines, a_lines, (k * n_b * 4) // line + 2,
                        ((indptr.size - 1) * n_b * 4) // line + 2])
    n_ids = int(starts[-1])
    pf = (FAR_LINES, pf_streams, pf_dist, pf_degree)
    for c in range(C):
        cap = _upper_bound(indptr, prof.starts_c[c], prof.nrows_c[c], n_b, k, chunk, line)
        ids = np.empty(cap, np.int64)
        thr = np.empty(cap, np.int32)
        grp = np.empty(cap, np.int32)
        n = spmm_line_ids(indptr, prof.indices, prof.starts_c[c], prof.nrows_c[c], n_b, k, chunk,
                          line, ids, thr, grp)
        ids, thr, grp = ids[:n], thr[:n], grp[:n]
        walked += n
        keep = grp >= 0
        keep[keep] = prof.meas_c[c][grp[keep]]
        d_l1, pr, sh, at_sh, r = _replay_chain(ids, thr, T, n_ids, pf, keep, starts)
        runs += r
        idx = np.nonzero(keep)[0]
        slot = (c * Gc + grp[idx].astype(np.int64)) * T + thr[idx]
        keys.append(((slot * 512 + distance_bin(d_l1[idx])) * 512 + distance_bin(pr[0][idx]))
                    * 512 + distance_bin(sh[0][idx]))
        # the lookups issued by measured accesses (counted where exact counts its prefetches)
        mine = keep[at_sh]
        at = at_sh[mine]
        slot = (c * Gc + grp[at].astype(np.int64)) * T + thr[at]
        keys.append(((slot * 512 + NONE) * 512 + distance_bin(pr[2][mine])) * 512
                    + distance_bin(sh[2][mine]))
        for j, (d, b, ld, lb, dep) in enumerate((pr, sh)):
            dd = np.concatenate([d[idx], ld[mine]])
            bins = distance_bin(dd)
            sums[j, 0] += np.bincount(bins, weights=np.maximum(dd, 0), minlength=NONE + 1)
            sums[j, 1] += np.bincount(bins, weights=np.concatenate([b[idx], lb[mine]]),
                                      minlength=NONE + 1)
            depths[j] = depths[j] + dep
    allk = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    uk, w = np.unique(allk, return_counts=True)
    b_sh, rest = uk % 512, uk // 512
    b_pr, rest = rest % 512, rest // 512
    b_l1, slot = rest % 512, rest // 512
    # compact dtypes: bins < 512 (a histogram is ~18 bytes per row)
    i16 = lambda a: a.astype(np.int16)   # noqa: E731
    run = np.where(sums[:, 1] > 0, sums[:, 0] / np.maximum(sums[:, 1], 1), 1.0)
    dep = [np.asarray(v, np.float32) for v in depths]
    h = Histogram(slot.astype(np.int32), i16(b_l1), i16(b_pr), i16(b_sh), w.astype(np.float64),
                  run[0], run[1], dep[0] if T > 1 else dep[1], dep[1])
    return h, {"walked": walked, "measured": int(w[b_l1 != NONE].sum()),
               "mean_run": walked / max(1, runs)}


def miss_probability(d: np.ndarray, size_bytes: int, ways: int, line: int,
                     run: float = 1.0) -> np.ndarray:
    """P(miss) of accesses with stack distances d (-1: first touch) in an LRU cache of this
    geometry: Smith's binomial model of set conflicts (exact for a fully associative cache).

    run: the mean length of the sequential runs the d lines come in (a number, or one per d).
    Consecutive lines go to
    consecutive sets, so it is the runs, not the lines, that land at random; a run covers a given
    set with probability run / sets (run = 1 is Smith's model). The accessed line's own run is
    among them (its run - 1 other lines were touched since: the pass before left the lines after
    it, this pass the lines before it), and it never puts a line in the accessed line's set: the
    other (d - run + 1) / run runs do.
    """
    d = np.asarray(d, np.float64)
    if size_bytes <= 0 or ways <= 0:
        return np.ones(d.shape, np.float64)
    sets = max(1, size_bytes // (ways * line))
    if sets == 1:
        p = (d >= ways).astype(np.float64)
    else:
        r = np.clip(run, 1.0, float(sets))
        p = binom.sf(ways - 1, np.round(np.maximum(d - r + 1, 0) / r), r / sets)
    return np.where(d < 0, 1.0, p)


def _bin_table(size_bytes: int, ways: int, line: int, run) -> np.ndarray:
    """Miss probability of every distance-bin code (NONE: 0); run: a number, or one per code."""
    table = miss_probability(bin_distance(np.arange(NONE + 1)), size_bytes, ways, line, run)
    table[NONE] = 0.0
    return table


def _set_index(size_bytes: int, ways: int, line: int) -> int:
    """The index in SET_COUNTS of this level's set count, -1 where the set depths cannot price it
    (a set count not measured, more than CAP ways, no level)."""
    if size_bytes <= 0 or ways <= 0 or ways > CAP:
        return -1
    hit = np.nonzero(SET_COUNTS == size_bytes // (ways * line))[0]
    return int(hit[0]) if hit.size else -1


def _depth_tables(depth: np.ndarray, size_bytes: int, ways: int, line: int,
                  fallback: np.ndarray) -> np.ndarray:
    """Per-bin miss tables of an L2, one per event kind (DEMAND, LOOKUP, READ): the share of the
    bin's events of that kind whose set depth is `ways` or more; the binomial's (fallback) where
    the set count is not measured or a bin has no event of that kind."""
    s = _set_index(size_bytes, ways, line)
    if s < 0:
        return np.stack([fallback] * 3)
    cnt = depth[:, s].astype(np.float64)                 # (kind, bin, depth)
    tot = cnt.sum(-1)
    t = np.where(tot > 0, cnt[..., ways:].sum(-1) / np.maximum(tot, 1.0), fallback)
    t[:, NONE] = 0.0
    return t


@njit(cache=True)
def accumulate_counts(slots, b_l1, b_l2, b_l3, weight, t1, t2, t3, n_slots):
    """misses_from_profile's per-row arithmetic in one pass (t1..t3: per-bin miss tables; L2's
    one per event kind, DEMAND, LOOKUP, READ: an L1 distance below READ_BELOW is an L1 hit in
    the replay)."""
    cnt = np.zeros((n_slots, 6), np.float64)
    for i in range(slots.shape[0]):
        w = weight[i]
        c = cnt[slots[i]]
        if b_l1[i] == NONE:
            f2 = t2[LOOKUP, b_l2[i]]
            f3 = min(f2, t3[b_l3[i]])
            c[4] += w * (f2 - f3)
            c[5] += w * f3
            continue
        m1 = t1[b_l1[i]]
        m2 = min(m1, t2[READ if b_l1[i] < READ_BELOW else DEMAND, b_l2[i]])
        m3 = min(m2, t3[b_l3[i]])
        c[0] += w * (1.0 - m1)
        c[1] += w * (m1 - m2)
        c[2] += w * (m2 - m3)
        c[3] += w * m3
    return cnt


def misses_from_profile(prof: Profile, *, line: int, l1: tuple, l2: tuple, l2_private: bool,
                        l3: tuple, pf_streams: int, pf_dist: int, pf_degree: int) -> np.ndarray:
    """The six counters of sim.engines.cpu.cache per slot (float: expected counts), for one hierarchy
    (levels are (size bytes, ways, ...) tuples); the model is spelled out in
    misses_from_profile_ref, this is its one-pass kernel."""
    h = prof.histogram(_prefetcher(pf_streams, pf_dist, pf_degree))
    r2, dep2 = (h.run_private, h.depth_private) if l2_private else (h.run_shared, h.depth_shared)
    t2 = _depth_tables(dep2, l2[0], l2[1], line, _bin_table(l2[0], l2[1], line, r2))
    return accumulate_counts(h.slots, h.b_l1, h.b_private if l2_private else h.b_shared,
                             h.b_shared, h.weight, _bin_table(l1[0], l1[1], line, prof.mean_run),
                             t2, _bin_table(l3[0], l3[1], line, h.run_shared), prof.n_slots)


def _prefetcher(pf_streams: int, pf_dist: int, pf_degree: int) -> tuple[int, int, int]:
    """The histogram key of a prefetcher (every disabled one is the same: no prefetches)."""
    on = pf_streams > 0 and pf_dist > 0 and pf_degree > 0
    return (int(pf_streams), int(pf_dist), int(pf_degree)) if on else (0, 0, 0)


def misses_from_profile_ref(prof: Profile, *, line: int, l1: tuple, l2: tuple, l2_private: bool,
                            l3: tuple, pf_streams: int, pf_dist: int, pf_degree: int) -> np.ndarray:
    """Plain-NumPy reference of misses_from_profile (the same model, row arrays at a time)."""
    h = prof.histogram(_prefetcher(pf_streams, pf_dist, pf_degree))
    w = h.weight
    # L1 sees the demand accesses; L2 and L3 the L1 misses and the prefetch lookups, and either
    # kind misses where its distance in that stream says (a prefetched line still there is a
    # demand hit; a lookup that misses is a prefetch fetch, used or not), the sets filled by the
    # blocks measured at that distance
    lookup = h.b_l1 == NONE
    b2, r2, dep2 = ((h.b_private, h.run_private, h.depth_private) if l2_private
                    else (h.b_shared, h.run_shared, h.depth_shared))
    row = lambda b, lv, run: np.where(   # noqa: E731
        b == NONE, 0.0, miss_probability(bin_distance(b), lv[0], lv[1], line, run))
    m1 = np.where(lookup, 1.0, row(h.b_l1, l1, prof.mean_run))
    p2 = row(b2, l2, r2[b2])
    s = _set_index(l2[0], l2[1], line)
    if s >= 0:
        # the row's events of its kind in its bin: the share at set depth >= ways
        kind = np.where(lookup, LOOKUP, np.where(h.b_l1 < READ_BELOW, READ, DEMAND))
        ev = dep2[kind, s, b2.astype(np.int64)].astype(np.float64)
        n_ev = ev.sum(-1)
        p2 = np.where(n_ev > 0, ev[:, l2[1]:].sum(-1) / np.maximum(n_ev, 1.0), p2)
    m2 = np.minimum(m1, p2)
    m3 = np.minimum(m2, row(h.b_shared, l3, h.run_shared[h.b_shared]))
    dem = 1.0 - lookup
    bc = lambda v: np.bincount(h.slots, weights=v * w, minlength=prof.n_slots)   # noqa: E731
    cnt = np.zeros((6, prof.n_slots), np.float64)
    cnt[cs.L1_HIT] = bc(dem * (1.0 - m1))
    cnt[cs.L2_HIT] = bc(dem * (m1 - m2))
    cnt[cs.L3_HIT] = bc(dem * (m2 - m3))
    cnt[cs.DRAM] = bc(dem * m3)
    cnt[cs.PF_L3] = bc(lookup * (m2 - m3))
    cnt[cs.PF_DRAM] = bc(lookup * m3)
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
