"""The L2 model of the patch-extraction engine: an LRU cache replayed over the kernel's accesses.

The approximate-WGC kernel reads, per (sample, output channel), one R x S x C_in input patch at a
data-dependent position (the argmax of |dO|). Whether a patch row is still in L2 when another
output channel's block asks for it depends on those positions, so the hit rate is computed by
replaying the kernel's access stream (built in sim/engines/gpu/patch.py from the real argmax positions)
through a fully associative, byte-capacity LRU.

Objects are "rows" (the C_in values of one input pixel in NHWC, one (sample, channel) map of dO,
one (r, s) slice of a dW channel), each with its size in bytes rounded up to 32-byte sectors. LRU
with variable sizes has a closed form: a re-accessed row hits iff the bytes of the distinct rows
touched since its previous access, plus its own size, fit in the capacity. `lru_hits` computes that
with a Fenwick tree over access times (each row is counted once, at its latest access), O(T log T)
for T accesses; `lru_hits_reference` is the plain OrderedDict LRU it is tested against.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numba import njit


@njit(cache=True)
def lru_hits(rows, sizes, capacity, hit):
    """rows: int64[T] row id of each access (0..U-1); sizes: int64[U] bytes per row;
    capacity: bytes; hit: uint8[T] output, 1 where the access hits."""
    T = rows.shape[0]
    tree = np.zeros(T + 1, np.int64)     # Fenwick tree: bytes of each row at its latest access
    last = np.full(sizes.shape[0], -1, np.int64)
    for t in range(T):
        u = rows[t]
        b = sizes[u]
        lt = last[u]
        if lt >= 0:
            # bytes at positions lt+1 .. t-1 = prefix(t) - prefix(lt + 1)
            d = 0
            i = t
            while i > 0:
                d += tree[i]
                i -= i & (-i)
            i = lt + 1
            while i > 0:
                d -= tree[i]
                i -= i & (-i)
            hit[t] = 1 if d + b <= capacity else 0
            i = lt + 1
            while i <= T:
                tree[i] -= b
                i += i & (-i)
        else:
            hit[t] = 0
        i = t + 1
        while i <= T:
            tree[i] += b
            i += i & (-i)
        last[u] = t


def lru_hits_reference(rows: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """The same LRU as an OrderedDict: insert on miss, evict the oldest rows while over capacity."""
    cache: OrderedDict[int, int] = OrderedDict()
    used = 0
    out = np.zeros(len(rows), np.uint8)
    for t, u in enumerate(int(x) for x in rows):
        b = int(sizes[u])
        if u in cache:
            out[t] = 1
            cache.move_to_end(u)
            continue
        cache[u] = b
        used += b
        while used > capacity and cache:
            _, ob = cache.popitem(last=False)
            used -= ob
    return out
