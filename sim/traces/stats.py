"""Per-tensor gradient statistics in bounded memory (used by `prunesim trace info`).

`layer_stats` reads its input in fixed-size chunks of the flattened array, so a memory-mapped
ResNet-50 ImageNet layer (hundreds of MB) never sits in RAM: the working set is a few float64
copies of one chunk plus a fixed-size sample of nonzero magnitudes.
"""
from __future__ import annotations

import math

import numpy as np

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
        x = np.array(flat[start:start + chunk_elems], dtype=np.float64)  # a copy: modified below
        n = x.size
        m = float(x.mean())
        d = x - m
        d2 = d * d
        m2 = float(d2.sum())
        m3 = float((d2 * d).sum())
        m4 = float((d2 * d2).sum())
        del d, d2
        moments = _merge(moments, (n, m, m2, m3, m4))
        a = np.abs(x, out=x)
        sum_abs += float(a.sum())
        max_abs = max(max_abs, float(a.max()))
        nz = a[a != 0]
        nnz += nz.size
        if nz.size:
            # bottom-k sampling: every nonzero gets a uniform key (one draw per nonzero in element
            # order, so chunking does not change the sample); keep the k smallest keys.
            new = rng.random(nz.size)
            if keep_keys.size == sample_size:  # full: only keys below the current k-th can enter
                sel = new < keep_keys.max()
                new, nz = new[sel], nz[sel]
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
