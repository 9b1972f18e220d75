"""Cache hierarchy simulation for the CPU engine: set-associative LRU levels, a sequential-stream
prefetcher at L2, driven by the exact line-address stream of a CSR sparse x dense product.

The Numba kernel `spmm_stream` walks the rows it is given in the order a real SpMM kernel touches
memory (`spmm_row_lines`: the one address walk, which sim.engines.cpu.reuse profiles too) and
counts, per (row group, thread), where every demand access hit and what the prefetcher fetched. It
knows nothing about time: sim.engines.cpu.spmm turns the counts into cycles. Keeping the kernel
free of timing keeps it small and lets `spmm_stream_ref` (plain Python, an independent OrderedDict
implementation) check it count for count.

Memory layout of the simulated process (byte addresses; regions far apart so they never alias):
A's column indices and values (int32 / float32, one entry per nonzero), the dense B (K x N, row
major, float32) and the dense C (M x N, row major, float32).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numba import njit, prange

# counters per (group, thread)
L1_HIT, L2_HIT, L3_HIT, DRAM, PF_L3, PF_DRAM = range(6)
N_COUNTS = 6

A_IDX_BASE = 1 << 36
A_VAL_BASE = 2 << 36
B_BASE = 3 << 36
C_BASE = 4 << 36


def make_level(copies: int, size_bytes: int, ways: int, line: int,
               chains: int | None = None) -> np.ndarray:
    """An empty level (copies: private per thread, or 1 if shared): int64 [copy, set, 2 * ways],
    a set's tags then its LRU stamps side by side, so one lookup reads one contiguous run of
    memory instead of two arrays far apart (the Xeon's L3 is 9 MiB of state per chain, so every
    lookup there misses the host's caches; this halves those misses).

    Empty is all zeros: tag 0 (no simulated line is 0: the layout's regions start at 1 << 36, so
    it never matches) and stamp 0 (older than any access, so empty ways fill first). np.zeros
    maps fresh zero pages lazily: a product pays only for the sets it touches, not a 9 MiB fill.

    A level of size 0 (no L3 on the Pi) is one set of zero ways: every lookup misses and
    nothing is kept. chains: that many independent levels stacked on a leading axis.
    """
    sets = size_bytes // (ways * line) if size_bytes > 0 else 1
    ways = ways if size_bytes > 0 else 0
    lead = (chains,) if chains is not None else ()
    return np.zeros(lead + (copies, max(sets, 1), 2 * ways), np.int64)


def reset_level(lv: np.ndarray) -> None:
    """Empty a level (or a stack of them, leading axes free) in place."""
    lv[...] = 0


@njit(cache=True, inline="always")
def _lookup(lv, copy, line, now):
    """True on a hit (LRU stamp refreshed); on a miss the LRU way is replaced by `line`."""
    ways = lv.shape[2] >> 1
    if ways == 0:
        return False
    sets = lv.shape[1]
    # L1 and L2 have power-of-two sets (a mask); the Xeon's L3 has 28672, so keep the modulo there
    s = line & (sets - 1) if sets & (sets - 1) == 0 else line % sets
    row = lv[copy, s]
    victim = 0
    oldest = row[ways]
    for w in range(ways):
        if row[w] == line:
            row[ways + w] = now
            return True
        if row[ways + w] < oldest:
            oldest = row[ways + w]
            victim = w
    row[victim] = line
    row[ways + victim] = now
    return False


PF_BUCKETS = 256           # hash buckets of the stream table's last lines (a power of two)


@njit(cache=True)
def _pf_index(pf_last, pf_stamp):
    """The stream tables' recency lists (per thread: prev links, next links, head = least
    recent, tail = most recent; ordered by stamp, then entry, as the LRU choice is) and the
    counts of their entries' last lines per hash bucket, from the tables' state."""
    n_threads, n_streams = pf_last.shape
    lru = np.empty((n_threads, 2 * n_streams + 2), np.int64)
    bucket = np.zeros((n_threads, PF_BUCKETS), np.int64)
    for t in range(n_threads):
        if n_streams == 0:
            continue
        order = np.argsort(pf_stamp[t] * n_streams + np.arange(n_streams), kind="mergesort")
        for i in range(n_streams):
            e = order[i]
            lru[t, e] = order[i - 1] if i > 0 else -1
            lru[t, n_streams + e] = order[i + 1] if i + 1 < n_streams else -1
            bucket[t, pf_last[t, e] & (PF_BUCKETS - 1)] += 1
        lru[t, 2 * n_streams] = order[0]
        lru[t, 2 * n_streams + 1] = order[n_streams - 1]
    return lru, bucket


@njit(cache=True)
def _access_run(lines, n, t, now, l1, l2, l3, l2_private, l3_private,
                pf_last, pf_next, pf_stamp, pf_dist, pf_degree, cnt, pf_lru, pf_bucket):
    """The demand accesses lines[0:n] by thread t, in order; returns the updated clock.

    One call per row's line run, the per-access logic written in the loop body: as an inlined
    per-access function taking the 7 state arrays, every access paid Numba's reference counting
    of those arrays (2.5x the whole lookup work; counts and clocks are the same either way).
    pf_lru, pf_bucket: the stream table's recency list and last-line hash counts (_pf_index),
    kept in step with pf_last and pf_stamp.
    """
    c2 = t if l2_private else 0
    c3 = t if l3_private else 0
    n_streams = pf_last.shape[1]
    for j in range(n):
        line = lines[j]
        now += 1
        if _lookup(l1, t, line, now):
            cnt[L1_HIT] += 1
            continue
        if _lookup(l2, c2, line, now):
            cnt[L2_HIT] += 1
        elif _lookup(l3, c3, line, now):
            cnt[L3_HIT] += 1
        else:
            cnt[DRAM] += 1
        # L2 stream prefetcher: an L1 miss one line past a tracked stream advances it and issues
        # up to pf_degree new prefetches, never more than pf_dist lines ahead (so the distance
        # ramps up over a stream's first accesses); any other miss (re)starts the least recently
        # used stream.
        if n_streams == 0 or pf_dist == 0:
            continue
        # the stream table's entry to use, as a scan would find it (the first entry whose stream
        # ends at line - 1, else the least recently used entry: lowest stamp, then lowest index),
        # without scanning 32 entries per access (the scan was a third of the Xeon's time): the
        # hash counts say when no entry can match, the most recent entry usually is the match
        # (unique when its hash bucket holds one entry), and the recency list gives the LRU one
        prev = line - 1
        hb = prev & (PF_BUCKETS - 1)
        hit_e = n_streams
        if pf_bucket[t, hb] > 0:
            mru = pf_lru[t, 2 * n_streams + 1]
            if pf_bucket[t, hb] == 1 and pf_last[t, mru] == prev:
                hit_e = mru
            else:
                for e in range(n_streams):
                    if pf_last[t, e] == prev:
                        hit_e = e
                        break
        e = hit_e if hit_e < n_streams else pf_lru[t, 2 * n_streams]
        # e becomes the most recent entry of the recency list (prev links, then next links, head,
        # tail)
        tail = pf_lru[t, 2 * n_streams + 1]
        if e != tail:
            ep, en = pf_lru[t, e], pf_lru[t, n_streams + e]
            if ep >= 0:
                pf_lru[t, n_streams + ep] = en
            else:
                pf_lru[t, 2 * n_streams] = en
            pf_lru[t, en] = ep
            pf_lru[t, e] = tail
            pf_lru[t, n_streams + e] = -1
            pf_lru[t, n_streams + tail] = e
            pf_lru[t, 2 * n_streams + 1] = e
        pf_bucket[t, pf_last[t, e] & (PF_BUCKETS - 1)] -= 1
        pf_bucket[t, line & (PF_BUCKETS - 1)] += 1
        if hit_e == n_streams:
            pf_last[t, e] = line
            pf_next[t, e] = line
            pf_stamp[t, e] = now
            continue
        pf_last[t, hit_e] = line
        pf_stamp[t, hit_e] = now
        start = pf_next[t, hit_e] + 1
        if start < line + 1:
            start = line + 1
        stop = min(line + pf_dist, start + pf_degree - 1)
        for p in range(start, stop + 1):
            now += 1
            if not _lookup(l2, c2, p, now):
                if _lookup(l3, c3, p, now):
                    cnt[PF_L3] += 1
                else:
                    cnt[PF_DRAM] += 1
        if stop > pf_next[t, hit_e]:
            pf_next[t, hit_e] = stop
    return now


@njit(cache=True)
def line_shift(line_bytes):
    """log2 of the line size (a power of two): byte address >> shift = line address."""
    shift = 0
    while (1 << shift) < line_bytes:
        shift += 1
    return shift


@njit(cache=True)
def row_lines_bound(indptr, n_b, register_chunk, line_bytes):
    """Most line accesses spmm_row_lines can emit for one row of this product (its buffer size):
    a span of w bytes covers at most w // line + 2 lines."""
    nnz_max = 0
    for r in range(indptr.shape[0] - 1):
        if indptr[r + 1] - indptr[r] > nnz_max:
            nnz_max = indptr[r + 1] - indptr[r]
    chunk = register_chunk if register_chunk > 0 else n_b
    n_chunks = (n_b + chunk - 1) // chunk
    per_chunk = chunk * 4 // line_bytes + 2
    per_nnz = 2 + per_chunk * (2 if register_chunk == 0 else 1)
    return max(1, n_chunks * (nnz_max * per_nnz + per_chunk))


@njit(cache=True)
def spmm_row_lines(indptr, indices, r, n_b, register_chunk, shift, t, last_idx, last_val, out):
    """The line addresses one row r of C = A @ B touches, in the order a real SpMM kernel does
    (the one address walk both cache models replay): per chunk of the C row, per nonzero its A
    index and value lines (each once while the thread stays on the same line: last_idx/last_val
    hold the thread's last ones) and the B row's lines; the C row's lines per nonzero (axpy:
    register_chunk 0) or once per chunk (register). Fills `out`, returns how many."""
    n = 0
    chunk = register_chunk if register_chunk > 0 else n_b
    c_row = C_BASE + np.int64(r) * n_b * 4
    for c0 in range(0, n_b, chunk):
        c1 = min(n_b, c0 + chunk)
        for jj in range(indptr[r], indptr[r + 1]):
            li = (A_IDX_BASE + jj * 4) >> shift
            if li != last_idx[t]:
                last_idx[t] = li
                out[n] = li
                n += 1
            lv = (A_VAL_BASE + jj * 4) >> shift
            if lv != last_val[t]:
                last_val[t] = lv
                out[n] = lv
                n += 1
            b_row = B_BASE + np.int64(indices[jj]) * n_b * 4
            for ln in range((b_row + c0 * 4) >> shift, ((b_row + c1 * 4 - 1) >> shift) + 1):
                out[n] = ln
                n += 1
            if register_chunk == 0:
                for ln in range((c_row + c0 * 4) >> shift, ((c_row + c1 * 4 - 1) >> shift) + 1):
                    out[n] = ln
                    n += 1
        if register_chunk > 0:
            for ln in range((c_row + c0 * 4) >> shift, ((c_row + c1 * 4 - 1) >> shift) + 1):
                out[n] = ln
                n += 1
    return n


@njit(cache=True, nogil=True)
def spmm_stream(indptr, indices, starts, nrows, measure, n_b, register_chunk, line_bytes,
                l1, l2, l3, l2_private, l3_private, pf_last, pf_next, pf_stamp, pf_dist, pf_degree, counts, now0=0):
    """Replay C = A @ B (A in CSR, B dense K x n_b) for row groups; fill counts[g, t, :].

    now0: the LRU clock the caches were left at (e.g. by warm_region); stamps must keep growing,
    or lines touched now would look older than the warmed ones and be evicted first.

    starts[g, t], nrows[g, t]: the contiguous A rows thread t runs in group g (threads advance one
    row at a time in lock step, sharing the shared levels). measure[g] False: a warm-up group,
    simulated but not counted. register_chunk > 0: MKL-style, C row kept in registers in chunks of
    that many floats (B read per nonzero per chunk, C touched once per chunk); 0: axpy style (Eigen,
    SciPy): every nonzero streams the whole C row through L1 (load and store).
    Returns the final LRU clock.
    """
    shift = line_shift(line_bytes)
    n_groups, n_threads = starts.shape
    now = now0
    last_idx = np.full(n_threads, -1, np.int64)
    last_val = np.full(n_threads, -1, np.int64)
    scratch = np.zeros(N_COUNTS, np.int64)
    buf = np.empty(row_lines_bound(indptr, n_b, register_chunk, line_bytes), np.int64)
    pf_lru, pf_bucket = _pf_index(pf_last, pf_stamp)
    for g in range(n_groups):
        most = 0
        for t in range(n_threads):
            if nrows[g, t] > most:
                most = nrows[g, t]
        for i in range(most):
            for t in range(n_threads):
                if i >= nrows[g, t]:
                    continue
                cnt = counts[g, t] if measure[g] else scratch
                n = spmm_row_lines(indptr, indices, starts[g, t] + i, n_b, register_chunk, shift, t,
                                   last_idx, last_val, buf)
                now = _access_run(buf, n, t, now, l1, l2, l3, l2_private, l3_private, pf_last,
                                  pf_next, pf_stamp, pf_dist, pf_degree, cnt, pf_lru, pf_bucket)
    return now


@njit(cache=True, nogil=True)
def warm_region(base, n_bytes, line_bytes, n_threads, l1, l2, l3, l2_private, l3_private, now):
    """Touch a region once per thread (the state right after a pass wrote it), no counting."""
    shift = line_shift(line_bytes)
    for t in range(n_threads):
        c2 = t if l2_private else 0
        c3 = t if l3_private else 0
        for ln in range(base >> shift, ((base + n_bytes - 1) >> shift) + 1):
            now += 1
            _lookup(l3, c3, ln, now)
            _lookup(l2, c2, ln, now)
            _lookup(l1, t, ln, now)
    return now


@njit(cache=True, nogil=True)
def _fill_in_order(lv, first, n, now):
    """Copy 0 of an EMPTY level (make_level) as n misses of lines first, ..., first + n - 1
    at stamps now + 1, ..., now + n leave it: consecutive lines go round the sets, so line i is
    its set's (i // sets)-th arrival and, the first empty way being taken and then the oldest,
    sits in way (i // sets) % ways; only the last sets * ways lines stay."""
    ways = lv.shape[2] >> 1
    if ways == 0:
        return
    sets = lv.shape[1]
    for i in range(max(0, n - sets * ways), n):
        line = first + i
        s = line & (sets - 1) if sets & (sets - 1) == 0 else line % sets
        w = (i // sets) % ways
        lv[0, s, w] = line
        lv[0, s, ways + w] = now + 1 + i


def warm_region_empty(base, n_bytes, line_bytes, n_threads, l1, l2, l3, l2_private, l3_private,
                      now):
    """warm_region on empty levels: with one thread every line misses every level once, so each
    level's state is written directly (_fill_in_order) instead of simulated lookup by lookup; the
    same state and clock (tests/test_cpu_engine.py). More threads: warm_region itself."""
    if n_threads != 1:
        return warm_region(base, n_bytes, line_bytes, n_threads, l1, l2, l3, l2_private,
                           l3_private, now)
    shift = line_shift(line_bytes)
    first = base >> shift
    n = ((base + n_bytes - 1) >> shift) + 1 - first
    for lv in (l3, l2, l1):
        _fill_in_order(lv, first, n, now)
    return now + n


@njit(cache=True, parallel=True, nogil=True)
def spmm_chains(indptr, indices, starts, nrows, measure, n_b, register_chunk, line_bytes,
                l1, l2, l3, l2_private, l3_private, pf_last, pf_next, pf_stamp, pf_dist, pf_degree, counts, now0):
    """spmm_stream over independent chains of sampled groups, one cache hierarchy each, in
    parallel: every array has a leading chain axis. A chain's result does not depend on how many
    threads run the chains, so sampled estimates are the same on any machine. now0[c] is left at
    chain c's final LRU clock, so a later call can go on with the same hierarchies (the adaptive
    sampler's rounds)."""
    for c in prange(starts.shape[0]):
        now0[c] = spmm_stream(indptr, indices, starts[c], nrows[c], measure[c], n_b, register_chunk,
                    line_bytes, l1[c], l2[c], l3[c], l2_private, l3_private, pf_last[c], pf_next[c], pf_stamp[c], pf_dist, pf_degree, counts[c],
                    now0[c])


# ---- plain-Python reference --------------------------------------------------------------------


class _RefLevel:
    def __init__(self, copies, lv):
        _, self.sets, self.ways = lv.shape
        self.ways //= 2
        self.c = [[OrderedDict() for _ in range(self.sets)] for _ in range(copies)]

    def lookup(self, copy, line):
        if self.ways == 0:
            return False
        s = self.c[copy][line % self.sets]
        if line in s:
            s.move_to_end(line)
            return True
        if len(s) >= self.ways:
            s.popitem(last=False)
        s[line] = True
        return False


def spmm_stream_ref(indptr, indices, starts, nrows, measure, n_b, register_chunk, line_bytes,
                    levels, l2_private, l3_private, n_streams, pf_dist, pf_degree):
    """Reference of spmm_stream: levels = fresh L1, L2, L3 arrays (make_level)."""
    n_groups, n_threads = starts.shape
    l1, l2, l3 = (_RefLevel(lv.shape[0], lv) for lv in levels)
    counts = np.zeros((n_groups, n_threads, N_COUNTS), np.int64)
    # stream table per thread: [last line, furthest prefetched, stamp]; never-used entries have
    # stamp 0 and are taken lowest index first, as in the kernel
    streams = [[[-10, -10, 0] for _ in range(n_streams)] for _ in range(n_threads)]
    clock = [0]

    def access(line, t, cnt):
        clock[0] += 1
        if l1.lookup(t, line):
            cnt[L1_HIT] += 1
            return
        c2, c3 = (t if l2_private else 0), (t if l3_private else 0)
        if l2.lookup(c2, line):
            cnt[L2_HIT] += 1
        elif l3.lookup(c3, line):
            cnt[L3_HIT] += 1
        else:
            cnt[DRAM] += 1
        if n_streams == 0 or pf_dist == 0:
            return
        st = streams[t]
        hit = next((s for s in st if s[0] == line - 1), None)
        if hit is None:
            victim = min(st, key=lambda s: s[2])   # min() keeps the first of equal stamps
            victim[:] = [line, line, clock[0]]
            return
        hit[0], hit[2] = line, clock[0]
        stop = min(line + pf_dist, max(hit[1] + 1, line + 1) + pf_degree - 1)
        for p in range(max(hit[1] + 1, line + 1), stop + 1):
            clock[0] += 1
            if not l2.lookup(c2, p):
                if l3.lookup(c3, p):
                    cnt[PF_L3] += 1
                else:
                    cnt[PF_DRAM] += 1
        hit[1] = max(hit[1], stop)

    shift = int(line_bytes).bit_length() - 1
    last_idx = [-1] * n_threads
    last_val = [-1] * n_threads
    chunk = register_chunk if register_chunk > 0 else n_b
    scratch = np.zeros(N_COUNTS, np.int64)
    for g in range(n_groups):
        for i in range(int(nrows[g].max())):
            for t in range(n_threads):
                if i >= nrows[g, t]:
                    continue
                cnt = counts[g, t] if measure[g] else scratch
                r = int(starts[g, t]) + i
                c_row = C_BASE + r * n_b * 4
                for c0 in range(0, n_b, chunk):
                    c1 = min(n_b, c0 + chunk)
                    for jj in range(int(indptr[r]), int(indptr[r + 1])):
                        li = (A_IDX_BASE + jj * 4) >> shift
                        if li != last_idx[t]:
                            last_idx[t] = li
                            access(li, t, cnt)
                        lv = (A_VAL_BASE + jj * 4) >> shift
                        if lv != last_val[t]:
                            last_val[t] = lv
                            access(lv, t, cnt)
                        b_row = B_BASE + int(indices[jj]) * n_b * 4
                        for ln in range((b_row + c0 * 4) >> shift, ((b_row + c1 * 4 - 1) >> shift) + 1):
                            access(ln, t, cnt)
                        if register_chunk == 0:
                            for ln in range((c_row + c0 * 4) >> shift, ((c_row + c1 * 4 - 1) >> shift) + 1):
                                access(ln, t, cnt)
                    if register_chunk > 0:
                        for ln in range((c_row + c0 * 4) >> shift, ((c_row + c1 * 4 - 1) >> shift) + 1):
                            access(ln, t, cnt)
    return counts
