"""Per-tensor gradient statistics in bounded memory (used by `prunesim trace info`).

`layer_stats` reads its input in fixed-size chunks of the flattened array, so a memory-mapped
ResNet-50 ImageNet layer (hundreds of MB) never sits in RAM: the working set is one chunk's
nonzero magnitudes plus a fixed-size sample of them. A chunk's sums are one Numba pass
(`_chunk_pass`) that adds in numpy's own pairwise order, so every statistic is bit for bit what
the plain-NumPy reference (`_chunk_ref`: a float64 copy, `.sum()` of its powers) gives.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

CHUNK_ELEMS = 1 << 20            # elements per chunk (8 MB as float64)
QUANTILE_SAMPLE = 1 << 16        # nonzero |g| values kept for the quantile estimates
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def quantile_key(q: float) -> str:
    """Dict key of a quantile: 0.5 -> 'p50', 0.99 -> 'p99', 0.999 -> 'p99.9'."""
    return "p" + f"{q * 100:.6f}".rstrip("0").rstrip(".")


def _merge(a: tuple, b: tuple) -> tuple:
    """Combine (n, mean, M2, M3, M4) of two disjoint parts (Chan et al.; Pebay 2008)."""
    na, ma, m2a, m3a, m4a = a
    nb, mb, m2b, m3b, m4b = b
    if na == 0:
        return b
    n = na + nb
    d = mb - ma
    dn = d / n
    mean = ma + nb * dn
    m2 = m2a + m2b + d * dn * na * nb
    m3 = (m3a + m3b + d * dn * dn * na * nb * (na - nb)
          + 3.0 * dn * (na * m2b - nb * m2a))
    m4 = (m4a + m4b + d * dn * dn * dn * na * nb * (na * na - na * nb + nb * nb)
          + 6.0 * dn * dn * (na * na * m2b + nb * nb * m2a) + 4.0 * dn * (na * m3b - nb * m3a))
    return n, mean, m2, m3, m4


# ---- one chunk's sums: a Numba pass, numpy's own summation order -------------------------------

PW_BLOCK = 128                   # numpy's pairwise-summation block (PW_BLOCKSIZE, loops_utils.h)


@njit(cache=True)
def _pw_leaf(x, lo, n, m, moments, r, res):
    """One block of numpy's pairwise summation (n <= PW_BLOCK): below 8 elements one running sum,
    else 8 interleaved accumulators combined as ((0+1)+(2+3))+((4+5)+(6+7)), then the rest.
    moments False: res[0] = sum of x; True: res[0:4] = sums of d^2, d^3, d^4 (d = x - m), |x|."""
    q = 4 if moments else 1
    top = n - n % 8 if n >= 8 else 0
    for j in range(8 if n >= 8 else 0):
        r[:, j] = 0.0
    for i in range(top):
        v = np.float64(x[lo + i])
        j = i % 8
        if moments:
            d = v - m
            d2 = d * d
            r[0, j] += d2
            r[1, j] += d2 * d
            r[2, j] += d2 * d2
            r[3, j] += abs(v)
        else:
            r[0, j] += v
    for k in range(q):
        res[k] = ((r[k, 0] + r[k, 1]) + (r[k, 2] + r[k, 3])) + \
            ((r[k, 4] + r[k, 5]) + (r[k, 6] + r[k, 7])) if n >= 8 else 0.0
    for i in range(top, n):
        v = np.float64(x[lo + i])
        if moments:
            d = v - m
            d2 = d * d
            res[0] += d2
            res[1] += d2 * d
            res[2] += d2 * d2
            res[3] += abs(v)
        else:
            res[0] += v


@njit(cache=True)
def _pw_sums(x, m, moments):
    """Sums over x in numpy's add.reduce order for a contiguous array (pairwise halves cut at
    multiples of 8, blocks of at most PW_BLOCK: _pw_leaf), so each is bit for bit `.sum()` of the
    float64 array it stands for (see _pw_leaf for which). Iterative: Numba cannot cache a
    recursive function."""
    n = x.size
    r = np.zeros((4, 8))
    res = np.zeros(4)
    if n <= PW_BLOCK:
        _pw_leaf(x, 0, n, m, moments, r, res)
        return res
    depth = 64
    f_lo = np.zeros(depth, np.int64)
    f_n = np.zeros(depth, np.int64)
    f_ph = np.zeros(depth, np.int64)
    vals = np.zeros((depth, 4))
    nf, nv = 1, 0
    f_lo[0], f_n[0], f_ph[0] = 0, n, 0
    while nf > 0:
        t = nf - 1
        lo, k = f_lo[t], f_n[t]
        if k <= PW_BLOCK:
            _pw_leaf(x, lo, k, m, moments, r, res)
            vals[nv, :] = res
            nv += 1
            nf -= 1
            continue
        n2 = k // 2
        n2 -= n2 % 8
        if f_ph[t] == 0:
            f_ph[t] = 1
            f_lo[nf], f_n[nf], f_ph[nf] = lo, n2, 0
            nf += 1
        elif f_ph[t] == 1:
            f_ph[t] = 2
            f_lo[nf], f_n[nf], f_ph[nf] = lo + n2, k - n2, 0
            nf += 1
        else:
            vals[nv - 2, :] = vals[nv - 2, :] + vals[nv - 1, :]   # left + right
            nv -= 1
            nf -= 1
    return vals[0].copy()


@njit(cache=True, nogil=True)   # the replay runs CPU engines beside it (sim.driver)
def _chunk_pass(x):
    """One chunk's (mean, m2, m3, m4, sum |x|, max |x|, nonzero |x| in element order), each as
    numpy computes it on the chunk's float64 copy (layer_stats's reference, _chunk_ref)."""
    n = x.size
    mean = _pw_sums(x, 0.0, False)[0] / n
    out = _pw_sums(x, mean, True)
    mx = 0.0
    nnz = 0
    nan = False
    for i in range(n):
        a = abs(np.float64(x[i]))
        if a != a:
            nan = True
        elif a > mx:
            mx = a
        if a != 0:
            nnz += 1
    nz = np.empty(nnz)
    k = 0
    for i in range(n):
        a = abs(np.float64(x[i]))
        if a != 0:
            nz[k] = a
            k += 1
    if nan:
        mx = np.nan
    return mean, out[0], out[1], out[2], out[3], mx, nz


@njit(cache=True, nogil=True)
def _below(keys, vals, top):
    """(keys[keys < top], vals[keys < top]) in one pass without a boolean mask."""
    n = 0
    for i in range(keys.size):
        if keys[i] < top:
            n += 1
    ko, vo = np.empty(n, keys.dtype), np.empty(n, vals.dtype)
    j = 0
    for i in range(keys.size):
        if keys[i] < top:
            ko[j], vo[j] = keys[i], vals[i]
            j += 1
    return ko, vo


def _chunk_ref(x: np.ndarray) -> tuple:
    """_chunk_pass in plain NumPy (what layer_stats computed before the kernel)."""
    x = np.array(x, dtype=np.float64)
    m = float(x.mean())
    d = x - m
    d2 = d * d
    m2, m3, m4 = float(d2.sum()), float((d2 * d).sum()), float((d2 * d2).sum())
    a = np.abs(x, out=x)
    return m, m2, m3, m4, float(a.sum()), float(a.max()), a[a != 0]


def layer_stats(array: np.ndarray, *, chunk_elems: int = CHUNK_ELEMS,
                sample_size: int = QUANTILE_SAMPLE, quantiles: tuple[float, ...] = QUANTILES,
                seed: int = 0) -> dict:
    """Summary statistics of one gradient tensor, computed chunk by chunk in float64.

    Returns a dict with
      elements, nonzeros        element counts
      density                   fraction of elements that are nonzero
      zero_fraction             fraction exactly zero (+0.0 or -0.0); 1 - density for finite data
      mean, std                 over all elements (population std, ddof=0)
      mean_abs, max_abs         mean and max of |g| over all elements
      mean_abs_nonzero          mean |g| over the nonzero elements
      kurtosis                  excess kurtosis (Fisher, population: m4 / m2**2 - 3)
      quantiles                 {'p50': .., 'p90': .., 'p99': .., 'p99.9': ..}: |g| quantiles of the
                                NONZERO elements (linear interpolation)
      quantile_sample           how many nonzero values the quantiles were computed from

    Moments are exact (chunked one-pass merge of central moments, float64 accumulators). The
    quantiles are ESTIMATES when the tensor has more than `sample_size` nonzeros: they come from a
    uniform random sample (without replacement) of exactly `sample_size` nonzero magnitudes, drawn
    with a fixed seed by bottom-k sampling, so memory stays bounded and the result is reproducible
    (and does not depend on `chunk_elems`). With at most `sample_size` nonzeros they are exact.

    Undefined values are NaN: mean/std/kurtosis of an empty array, kurtosis of a constant one,
    quantiles and mean_abs_nonzero when there is no nonzero. Values are assumed finite
    (`prunesim trace check` verifies that); a NaN or Inf propagates into the moments.
    The input should be contiguous (as memory-mapped trace tensors are); a non-contiguous array
    is flattened with a copy.
    """
    if chunk_elems < 1 or sample_size < 1:
        raise ValueError("chunk_elems and sample_size must be >= 1")
    arr = np.asarray(array) if not isinstance(array, np.ndarray) else array
    flat = arr.reshape(-1, order="A") if (arr.flags.c_contiguous or arr.flags.f_contiguous) \
        else arr.reshape(-1)
    n_total = int(flat.size)
    moments = (0, 0.0, 0.0, 0.0, 0.0)
    nnz = 0
    sum_abs = 0.0
    max_abs = 0.0
    rng = np.random.default_rng(seed)
    keep_keys = np.empty(0, dtype=np.float64)
    keep_vals = np.empty(0, dtype=np.float64)
    for start in range(0, n_total, chunk_elems):
        x = np.ascontiguousarray(flat[start:start + chunk_elems])
        if x.dtype not in (np.float32, np.float64):   # the kernel's types; both casts are exact
            x = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
        # one pass over the chunk, no float64 temporaries, the same bits as _chunk_ref
        m, m2, m3, m4, s_abs, mx, nz = _chunk_pass(x)
        moments = _merge(moments, (x.size, float(m), float(m2), float(m3), float(m4)))
        sum_abs += float(s_abs)
        max_abs = max(max_abs, float(mx))
        nnz += nz.size
        if nz.size:
            # bottom-k sampling: every nonzero gets a uniform key (one draw per nonzero in element
            # order, so chunking does not change the sample); keep the k smallest keys.
            new = rng.random(nz.size)
            if keep_keys.size == sample_size:  # full: only keys below the current k-th can enter
                new, nz = _below(new, nz, keep_keys.max())
            keys = np.concatenate([keep_keys, new])
            vals = np.concatenate([keep_vals, nz])
            if keys.size > sample_size:
                idx = np.argpartition(keys, sample_size - 1)[:sample_size]
                keys, vals = keys[idx], vals[idx]
            keep_keys, keep_vals = keys, vals
    n, mean, m2, _m3, m4 = moments
    nan = float("nan")
    if n_total == 0:
        mean = std = kurt = mean_abs = nan
    else:
        std = math.sqrt(max(m2, 0.0) / n)
        kurt = n * m4 / (m2 * m2) - 3.0 if m2 > 0 else nan
        mean_abs = sum_abs / n_total
    if keep_vals.size:
        qs = np.quantile(keep_vals, quantiles)
        qd = {quantile_key(q): float(v) for q, v in zip(quantiles, qs)}
    else:
        qd = {quantile_key(q): nan for q in quantiles}
    return {
        "elements": n_total,
        "nonzeros": int(nnz),
        "density": nnz / n_total if n_total else nan,
        "zero_fraction": (n_total - nnz) / n_total if n_total else nan,
        "mean": float(mean),
        "std": float(std),
        "mean_abs": float(mean_abs),
        "max_abs": float(max_abs) if n_total else nan,
        "mean_abs_nonzero": sum_abs / nnz if nnz else nan,
        "kurtosis": float(kurt),
        "quantiles": qd,
        "quantile_sample": int(keep_vals.size),
    }
