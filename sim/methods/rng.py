"""Counter-based random numbers shared by the offline kernels and the in-training PyTorch twins.

A uniform draw is a pure function of (key, element index), so Numba, NumPy and PyTorch produce the
same stream bit for bit, in any order and on any device. The mixer is Chris Wellons' `lowbias32`
(a 32-bit integer hash with low avalanche bias); products are masked to 32 bits, which keeps the
arithmetic identical in uint64 (Numba, NumPy) and wrapping int64 (PyTorch).
"""
from __future__ import annotations

import numpy as np
from numba import njit

MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_GOLDEN = 0x9E3779B9
INV_2_24 = np.float32(1.0 / (1 << 24))


def hash32_py(x: int) -> int:
    x &= MASK32
    x ^= x >> 16
    x = (x * _M1) & MASK32
    x ^= x >> 15
    x = (x * _M2) & MASK32
    x ^= x >> 16
    return x


def stream_key(seed: int, *ids: int) -> int:
    """A 32-bit key for one random stream, e.g. stream_key(seed, layer_index, iteration)."""
    k = hash32_py(seed & MASK32) ^ hash32_py((seed >> 32) + _GOLDEN)
    for i in ids:
        k = hash32_py(k ^ hash32_py((i + _GOLDEN) & MASK32))
    return k


@njit(cache=True, inline="always")
def hash32(x):
    x = x & np.uint64(MASK32)
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(_M1)) & np.uint64(MASK32)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(_M2)) & np.uint64(MASK32)
    x ^= x >> np.uint64(16)
    return x


@njit(cache=True, inline="always")
def uniform_at(key, i):
    """U[0, 1) with 24 random bits (exact in float32) for element i of stream `key`."""
    hi = np.uint64(i) >> np.uint64(32)
    lo = np.uint64(i) & np.uint64(MASK32)
    h = hash32(lo ^ hash32(np.uint64(key) ^ ((hi + np.uint64(_GOLDEN)) & np.uint64(MASK32))))
    return np.float32(h >> np.uint64(8)) * INV_2_24


@njit(cache=True, inline="always")
def block_key(key, i):
    """The part of uniform_at that depends only on i >> 32: constant over any run of 2^32 indices,
    so loops compute it once and call uniform_in_block per element (half the hashing)."""
    hi = np.uint64(i) >> np.uint64(32)
    return hash32(np.uint64(key) ^ ((hi + np.uint64(_GOLDEN)) & np.uint64(MASK32)))


@njit(cache=True, inline="always")
def uniform_in_block(bkey, i):
    """uniform_at(key, i) given bkey = block_key(key, i) (same i >> 32)."""
    h = hash32((np.uint64(i) & np.uint64(MASK32)) ^ bkey)
    return np.float32(h >> np.uint64(8)) * INV_2_24


def uniform_np(key: int, index: np.ndarray) -> np.ndarray:
    """Plain-NumPy reference of `uniform_at` over an array of element indices."""
    idx = np.asarray(index, dtype=np.uint64)
    m = np.uint64(MASK32)

    def h(x):
        x = x & m
        x = x ^ (x >> np.uint64(16))
        x = (x * np.uint64(_M1)) & m
        x = x ^ (x >> np.uint64(15))
        x = (x * np.uint64(_M2)) & m
        return x ^ (x >> np.uint64(16))

    hi, lo = idx >> np.uint64(32), idx & m
    out = h(lo ^ h(np.uint64(key) ^ ((hi + np.uint64(_GOLDEN)) & m)))
    return (out >> np.uint64(8)).astype(np.float32) * INV_2_24


def uniform_torch(key: int, index):
    """PyTorch twin of `uniform_at` (int64 arithmetic, wrapping products masked to 32 bits)."""
    import torch
    m = MASK32

    def h(x):
        x = x & m
        x = x ^ (x >> 16)
        x = (x * _M1) & m
        x = x ^ (x >> 15)
        x = (x * _M2) & m
        return x ^ (x >> 16)

    idx = index.to(torch.int64)
    hi, lo = idx >> 32, idx & m
    out = h(lo ^ h(torch.full_like(idx, key) ^ ((hi + _GOLDEN) & m)))
    return (out >> 8).to(torch.float32) * float(INV_2_24)
