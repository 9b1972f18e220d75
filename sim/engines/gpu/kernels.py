"""The cycle-level pipeline of one GEMM thread block, in Numba, with its plain-Python reference.

One thread block of an implicit GEMM walks its K range in k-tiles. Each k-tile is
  1. requested into a free shared-memory stage (a multistage, cp.async-style pipeline of `stages`
     buffers: a buffer frees when the consumer finishes the k-tile that lived there),
  2. streamed from L2/DRAM at the block's share of bandwidth (bytes per cycle, FIFO over the
     outstanding k-tiles), arriving `mem_lat` cycles after its last byte left the memory,
  3. consumed by the warps: shared->register fragment loads overlapped with MMA issue (warp-level
     double buffering), so a k-tile occupies the consumer for `work` cycles, of which `mma_frac`
     is tensor-core issue and the rest is waiting on shared-memory bandwidth.
After the last k-tile the block drains (the last MMA's latency) and runs its epilogue (`epi`
cycles of stores). The simulation steps one cycle at a time; fractional rates carry over between
cycles and k-tiles so that no per-k-tile rounding inflates long loops.

Long K loops are periodic once the pipeline has filled (all rates are constant), so the kernel
simulates at most `max_sim` k-tiles and extrapolates the rest from the average period (and the
per-category cycle counts) over the second half of the simulated tiles. `max_sim >= n_iter`
simulates everything; the tests check both against the reference.

out: [total, fill, math, smem, mem_stall, drain] in cycles; fill = waiting for the first k-tile,
mem_stall = the consumer idle waiting on a later k-tile (global memory could not keep up).
"""
from __future__ import annotations

import numpy as np
from numba import njit

N_OUT = 6
_EPS = 1e-9


@njit(cache=True)
def block_pipeline(n_iter, stages, load_bytes, load_bw, mem_lat, work, mma_frac, mma_lat, epi,
                   max_sim, out):
    n_sim = min(n_iter, max_sim)
    ready = np.empty(n_sim, np.float64)       # cycle at which k-tile j sits in shared memory
    snap = np.zeros((n_sim, 5), np.float64)   # [t, fill, math, smem, stall] when tile j finished
    t = 0.0
    issued = 0        # k-tiles whose buffer has been granted (requested from memory)
    arrived = 0       # k-tiles whose last byte has left the memory system
    xfer_left = 0.0   # bytes still to move of k-tile `arrived`
    consumed = 0      # k-tiles finished by the consumer
    cons_left = 0.0   # work cycles still to do on k-tile `consumed` (0: not started)
    fill = 0.0
    math = 0.0
    smem = 0.0
    stall = 0.0
    while consumed < n_sim:
        # a stage frees when its k-tile is consumed: at most `stages` k-tiles in flight or in use
        while issued < n_sim and issued - consumed < stages:
            issued += 1
        # memory: this cycle's bandwidth goes to outstanding k-tiles in order
        budget = load_bw
        while budget > _EPS and arrived < issued:
            if xfer_left <= _EPS:
                xfer_left = load_bytes
            take = min(budget, xfer_left)
            xfer_left -= take
            budget -= take
            if xfer_left <= _EPS:
                ready[arrived] = t + 1.0 + mem_lat
                arrived += 1
                xfer_left = 0.0
        # consumer: one cycle of capacity, spent on as many ready k-tiles as it covers
        cap = 1.0
        while cap > _EPS and consumed < arrived and ready[consumed] <= t:
            if cons_left <= _EPS:
                cons_left = work
            use = min(cap, cons_left)
            cons_left -= use
            cap -= use
            math += use * mma_frac
            smem += use * (1.0 - mma_frac)
            if cons_left <= _EPS:
                cons_left = 0.0
                snap[consumed, 0] = t + 1.0 - cap
                snap[consumed, 1] = fill
                snap[consumed, 2] = math
                snap[consumed, 3] = smem
                snap[consumed, 4] = stall
                consumed += 1
        if cap > _EPS and consumed < n_sim:
            if consumed == 0 and cons_left <= _EPS:
                fill += cap
            else:
                stall += cap
        t += 1.0
    end = snap[n_sim - 1, 0]
    total = np.empty(5, np.float64)
    for c in range(5):
        total[c] = snap[n_sim - 1, c]
    total[0] = end
    rest = n_iter - n_sim
    if rest > 0:
        w = max(1, n_sim // 2)
        a = n_sim - 1 - w
        for c in range(5):
            base = snap[a, c] if a >= 0 else 0.0
            total[c] += rest * (snap[n_sim - 1, c] - base) / w
    # the categories cover t = 0 .. end exactly, up to the final partial cycle
    out[0] = total[0] + mma_lat + epi
    out[1] = total[1]
    out[2] = total[2]
    out[3] = total[3]
    out[4] = max(0.0, total[0] - total[1] - total[2] - total[3])
    out[5] = mma_lat + epi


def block_pipeline_reference(n_iter, stages, load_bytes, load_bw, mem_lat, work, mma_frac,
                             mma_lat, epi):
    """The same pipeline written as an event list in plain Python (no extrapolation).

    Memory is a FIFO server: k-tile j may start transferring once its buffer is granted (when
    k-tile j - stages has been consumed) and once k-tile j-1 has finished transferring. The
    consumer takes k-tiles in order. Equal to the cycle stepper up to its fractional-cycle carry.
    """
    xfer = load_bytes / load_bw
    mem_free = 0.0          # when the memory server finishes its previous k-tile
    cons_free = 0.0         # when the consumer finishes its previous k-tile
    done = [0.0] * n_iter
    fill = math = smem = 0.0
    for j in range(n_iter):
        grant = 0.0 if j < stages else done[j - stages]
        start = max(grant, mem_free)
        mem_free = start + xfer
        ready = mem_free + mem_lat
        begin = max(ready, cons_free)
        if j == 0:
            fill = begin
        done[j] = begin + work
        cons_free = done[j]
        math += work * mma_frac
        smem += work * (1.0 - mma_frac)
    end = done[-1]
    return np.array([end + mma_lat + epi, fill, math, smem, end - fill - math - smem,
                     mma_lat + epi])
