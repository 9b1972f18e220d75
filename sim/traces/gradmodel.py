"""Statistical model of a layer's activation gradient dO, its fitting, and its cross-network mapping.

Model (``hq-v1``, docs/explanation/synthetic-traces.md has the derivation and the evidence): for a layer with
output dO of shape (N, C, P, Q) (FC: (N, C), i.e. P = Q = 1),

    g[n, c, i] = S * A[n] * B[c] * U[n, c] * sign[n, c, i] * e[n, c, i] * m[n, c, i]

- ``S``: the layer's mean |g| over non-zero elements (``scale_per_sample / batch``: the loss is a
  batch mean, so gradients scale as 1/batch; the YAML stores ``S * batch``).
- ``A[n]``, ``B[c]``, ``U[n, c]``: mean-one factors of a sample, a channel and a (sample, channel)
  plane: log A = sigma_n * Q_n(z) + const, z ~ N(0, 1), with Q_n the standardized quantile shape
  ``shape_n`` (the z-scores themselves, i.e. log-normal A, when too few effects were observed to
  tell); likewise B (``sigma_c``, ``shape_c``) and U (``sigma_nc``, ``shape_nc``). Captured channel
  scales are strongly left-skewed in log space (a few near-silent channels, no loud ones); a
  log-normal with the same variance puts far too much weight on loud channels, which inflates
  mean|g| and halves the DBTD densities.
- ``e > 0``: i.i.d. within a plane, E e = 1; its log is given by a quantile function: ``logq``
  holds the quantiles of log e (minus its median) at the probability levels LEVELS, and
  log e = Q(z), z ~ N(0, 1), interpolates them piecewise linearly in normal-score space (linear,
  i.e. log-normal-like, beyond the outer knots). Captured gradients are far more spread in log
  magnitude than a normal or Laplace (inter-quartile range of log|g| within a plane of 2-4 nepers
  against 1.6 for a normal) and their skew in log space changes sign from layer to layer, which no
  one- or two-parameter symmetric family (Student-t, generalized normal) followed; quantiles do,
  and they are robust to fp16 flush-to-zero and to outliers.
- ``sign``: positive with probability ``pos_fraction`` (0.5 = symmetric around zero).
- ``m``: zeros from ReLU masks. A plane is dead (all zero) with probability ``dead_fraction``;
  a live plane keeps each element with probability theta[n, c] ~ Beta, mean ``1 - zero_fraction``,
  concentration ``zero_kappa`` (None: theta is the same for every plane).

Fitting works in the log domain, where the model is additive: for non-zero elements
``log|g| = log S' + a_n + b_c + u_nc + log e``. Per plane, the log of the mean |g| (the L1 scale
that SDGP's rescaling and DBTD's threshold see) estimates log S + a_n + b_c + u_nc (plus noise of
variance ~CV(e)^2/k); a two-way random-effects analysis of variance of these separates the
sample, channel and plane variances with the sampling noise of each level subtracted, and the
pooled histogram of log(|g| / plane mean) gives the quantiles of log e. (Plane medians of log|g|
were tried first: captured planes differ in shape, so medians vary far more than means, and the
synthetic traces came out twice as heavy-tailed as the captured ones.) One streaming pass in
bounded memory per tensor; no scipy.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from statistics import NormalDist
from typing import Any, Iterable

import numpy as np

from sim.errors import TraceError

MODEL = "hq-v1"
STATS_FORMAT = "prunesim-gradstats"
STATS_SCHEMA = 2          # 2 added per-layer `progress` and `channels`; schema 1 files still read
STATS_SCHEMAS = (1, 2)
# Training-progress bins a fit averages within (upper edges; progress 0, the untrained network,
# is its own bin): early, middle and late thirds of the schedule
PROGRESS_BINS = (0.0, 1 / 3, 2 / 3, 1.0)
# "Averaged over the run": parameters at these progress points, averaged (uniform in progress)
RUN_GRID = tuple((i + 0.5) / 10 for i in range(10))
KAPPA_MAX = 1e6


# ----------------------------------------------------------------------------------------------
# The within-plane magnitude distribution: a quantile function in normal-score space


# Probability levels of the stored quantiles of log|e| (relative to the plane median).
LEVELS = (0.001, 0.003, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
          0.85, 0.9, 0.93, 0.96, 0.98, 0.99, 0.997, 0.999)
_MEDIAN = LEVELS.index(0.5)
ZKNOTS = tuple(NormalDist().inv_cdf(p) for p in LEVELS)
_HIST_LO, _HIST_HI, _HIST_STEP = -60.0, 60.0, 0.005
_HIST_BINS = int(round((_HIST_HI - _HIST_LO) / _HIST_STEP))
_FIT_BLOCK_ELEMS = 1 << 20


# Probability levels of the standardized quantile shapes of the log-scale factors A, B, U.
EFFECT_LEVELS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98)
EZKNOTS = tuple(NormalDist().inv_cdf(p) for p in EFFECT_LEVELS)
NORMAL_SHAPE = tuple(float(z) for z in EZKNOTS)
_MIN_EFFECTS = 24   # fewer estimated effects than this: assume a normal shape (log-normal factor)


def logq_of_z(z: np.ndarray, logq, zknots=ZKNOTS) -> np.ndarray:
    """Quantile function in normal-score space: piecewise linear through (zknots, logq), linear
    beyond the ends. With the default knots it maps z ~ N(0, 1) to log e."""
    zk = np.asarray(zknots)
    q = np.asarray(logq, dtype=np.float64)
    y = np.interp(z, zk, q)
    lo_slope = (q[1] - q[0]) / (zk[1] - zk[0])
    hi_slope = (q[-1] - q[-2]) / (zk[-1] - zk[-2])
    y = np.where(z < zk[0], q[0] + lo_slope * (z - zk[0]), y)
    y = np.where(z > zk[-1], q[-1] + hi_slope * (z - zk[-1]), y)
    return y


def log_mean_abs(logq, zknots=ZKNOTS, scale: float = 1.0) -> float:
    """log E exp(scale * Q(z)), z ~ N(0, 1), by quadrature over the normal score."""
    z = np.linspace(-9.0, 9.0, 36001)
    w = np.exp(-0.5 * z * z)
    y = scale * logq_of_z(z, logq, zknots)
    m = float(y.max())
    return m + math.log(float((np.exp(y - m) * w).sum()) / float(w.sum()))


# ----------------------------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True)
class LayerParams:
    """Fitted parameters of one layer (see the module docstring for their meaning)."""

    name: str
    op: str                 # conv | fc
    block: str              # Layer.block: conv-bn-relu, conv-bn, conv-relu, conv, fc-relu, fc
    masked: bool            # ReLU without BN: the ReLU derivative zeroes dO
    depth: float            # relative depth among the source network's layers of the same op, 0..1
    plane: int              # P*Q elements per (sample, channel) plane in the source layer
    scale_per_sample: float  # mean |g| over non-zero elements times the training batch
    logq: tuple             # quantiles of log|e| - median at LEVELS (natural log)
    sigma_n: float
    sigma_c: float
    sigma_nc: float
    shape_n: tuple          # standardized quantiles of log A at EFFECT_LEVELS (normal: the z-scores)
    shape_c: tuple          # ... of log B
    shape_nc: tuple         # ... of log U
    dead_fraction: float
    zero_fraction: float
    zero_kappa: float | None
    pos_fraction: float
    density: float          # observed non-zero fraction (diagnostic; implied by the three above)
    iterations: int = 1     # iterations averaged
    progress: float | None = None  # fraction of the training schedule (None: not known/averaged)
    channels: int | None = None    # output channels of the source layer

    def to_yaml(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = float(f"{v:.6g}")
        for k in ("logq", "shape_n", "shape_c", "shape_nc"):
            d[k] = [float(f"{v:.4f}") for v in getattr(self, k)]
        return d


_FLOAT_FIELDS = {
    "depth": (0.0, 1.0), "scale_per_sample": (0.0, math.inf),
    "sigma_n": (0.0, 10.0), "sigma_c": (0.0, 10.0), "sigma_nc": (0.0, 10.0),
    "dead_fraction": (0.0, 1.0), "zero_fraction": (0.0, 1.0), "pos_fraction": (0.0, 1.0),
    "density": (0.0, 1.0),
}


def layer_params_from_dict(d: Any, file, field: str) -> LayerParams:
    """Validate one `layers[i]` entry of a statistics YAML; errors name the file and field."""
    if not isinstance(d, dict):
        raise TraceError(file, field, f"expected a mapping, got {d!r}")
    names = {f.name for f in fields(LayerParams)}
    for k in d:
        if k not in names:
            raise TraceError(file, f"{field}.{k}", "unknown key (allowed: " + ", ".join(sorted(names)) + ")")
    out: dict[str, Any] = {}
    for f in fields(LayerParams):
        fld = f"{field}.{f.name}"
        if f.name not in d:
            if f.name in ("iterations", "progress", "channels"):
                out[f.name] = f.default
                continue
            raise TraceError(file, fld, "missing")
        v = d[f.name]
        if f.name == "progress":
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0.0 <= v <= 1.0):
                raise TraceError(file, fld, f"expected null or a fraction in [0, 1], got {v!r}")
            out[f.name] = None if v is None else float(v)
            continue
        if f.name == "channels":
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise TraceError(file, fld, f"expected null or a positive integer, got {v!r}")
            out[f.name] = v
            continue
        if f.name in ("name", "op", "block"):
            if not isinstance(v, str) or not v:
                raise TraceError(file, fld, f"expected a non-empty string, got {v!r}")
            if f.name == "op" and v not in ("conv", "fc"):
                raise TraceError(file, fld, f"expected conv or fc, got {v!r}")
        elif f.name == "masked":
            if not isinstance(v, bool):
                raise TraceError(file, fld, f"expected true or false, got {v!r}")
        elif f.name in ("plane", "iterations"):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TraceError(file, fld, f"expected a positive integer, got {v!r}")
        elif f.name in ("logq", "shape_n", "shape_c", "shape_nc"):
            lv = LEVELS if f.name == "logq" else EFFECT_LEVELS
            if not isinstance(v, list) or len(v) != len(lv):
                raise TraceError(file, fld, f"expected a list of {len(lv)} numbers (quantiles "
                                 f"at levels {list(lv)})")
            for j, q in enumerate(v):
                if isinstance(q, bool) or not isinstance(q, (int, float)) or not math.isfinite(q) \
                        or abs(q) > 50:
                    raise TraceError(file, f"{fld}[{j}]", f"expected a finite number in [-50, 50], got {q!r}")
            if any(b < a for a, b in zip(v, v[1:])):
                raise TraceError(file, fld, "quantiles must be non-decreasing")
            v = tuple(float(q) for q in v)
        elif f.name == "zero_kappa":
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= KAPPA_MAX):
                    raise TraceError(file, fld, f"expected null or a number in (0, {KAPPA_MAX:g}], got {v!r}")
                v = float(v)
        else:
            lo, hi = _FLOAT_FIELDS[f.name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise TraceError(file, fld, f"expected a finite number, got {v!r}")
            v = float(v)
            if not lo <= v <= hi or (f.name == "scale_per_sample" and v <= 0):
                raise TraceError(file, fld, f"{v} is out of range [{lo:g}, {hi:g}]"
                                 + (" (must be > 0)" if f.name == "scale_per_sample" else ""))
        out[f.name] = v
    if out["dead_fraction"] >= 1.0 or out["zero_fraction"] >= 1.0:
        raise TraceError(file, field, "dead_fraction and zero_fraction must be < 1 "
                         "(a layer with no non-zero gradient cannot be modelled)")
    return LayerParams(**out)


# ----------------------------------------------------------------------------------------------
# Fitting one tensor


def _two_way(means: np.ndarray, live: np.ndarray, sweeps: int = 6):
    """Additive fit means ~ mu + a[n] + b[c] over live cells: returns mu, a, b, residuals."""
    w = live.astype(np.float64)
    means = np.where(live, means, 0.0)
    mu = float((means * w).sum() / w.sum())
    a = np.zeros(means.shape[0])
    b = np.zeros(means.shape[1])
    for _ in range(sweeps):
        r = (means - mu - b[None, :]) * w
        a = r.sum(axis=1) / np.maximum(w.sum(axis=1), 1)
        r = (means - mu - a[:, None]) * w
        b = r.sum(axis=0) / np.maximum(w.sum(axis=0), 1)
        mu += float(((means - mu - a[:, None] - b[None, :]) * w).sum() / w.sum())
    resid = (means - mu - a[:, None] - b[None, :]) * w
    return mu, a, b, resid


def _hist_add(hist: np.ndarray, r: np.ndarray) -> None:
    idx = np.floor((np.clip(r, _HIST_LO, _HIST_HI - 1e-9) - _HIST_LO) / _HIST_STEP).astype(np.int64)
    hist += np.bincount(idx, minlength=_HIST_BINS)


def _hist_quantiles(hist: np.ndarray, levels) -> list[float]:
    cum = np.cumsum(hist, dtype=np.float64)
    tot = cum[-1]
    edges = _HIST_LO + _HIST_STEP * np.arange(1, _HIST_BINS + 1)   # upper edge of each bin
    out = []
    for p in levels:
        t = p * tot
        i = int(np.searchsorted(cum, t))
        prev = cum[i - 1] if i > 0 else 0.0
        frac = (t - prev) / hist[i] if hist[i] > 0 else 0.5
        out.append(float(edges[i] - _HIST_STEP + frac * _HIST_STEP))
    return out


def _shape(v: np.ndarray) -> tuple:
    """Standardized quantiles of estimated effects (normal when too few to tell)."""
    v = np.asarray(v, dtype=np.float64)
    sd = float(v.std())
    if v.size < _MIN_EFFECTS or sd <= 0:
        return NORMAL_SHAPE
    return tuple(float(x) for x in np.quantile((v - v.mean()) / sd, EFFECT_LEVELS))


def _extrapolate_censored(q: list[float], censored: float) -> list[float]:
    """Replace quantiles at levels inside the censored lower tail by a linear extrapolation in
    normal-score space from the two lowest uncensored knots."""
    ok = [i for i, p in enumerate(LEVELS) if p > censored + 0.005 and q[i] > _HIST_LO + 1.0]
    if len(ok) < 2 or ok[0] == 0:
        return q
    i0, i1 = ok[0], ok[1]
    slope = (q[i1] - q[i0]) / (ZKNOTS[i1] - ZKNOTS[i0])
    return [q[i0] + slope * (ZKNOTS[i] - ZKNOTS[i0]) if i < i0 else q[i] for i in range(len(q))]


def fit_tensor(arr: np.ndarray, batch: int, block_elems: int = _FIT_BLOCK_ELEMS,
               censor_zeros: bool = False) -> dict:
    """Fit one dO tensor (N, C[, P, Q]) for one iteration; reads it in whole-sample blocks.

    censor_zeros: the zeros are not structural but values too small for the storage format
    (float16 flush-to-zero in a layer without ReLU mask): count them as censored low values, so
    the model has no zeros and the lowest quantiles are extrapolated from the observed ones.

    Pass over the data (a memory map is fine): per (n, c) plane the non-zero count and the median
    of log|g|; a histogram of log|g| minus its plane median; sum |g| and the positive count.
    """
    n, c = arr.shape[0], arr.shape[1]
    plane = int(np.prod(arr.shape[2:], dtype=np.int64)) if arr.ndim > 2 else 1
    flat = arr.reshape(n, c, plane)
    k = np.zeros((n, c), np.int64)
    med = np.zeros((n, c))
    hist = np.zeros(_HIST_BINS, np.int64)
    sabs, npos, n_nz = 0.0, 0, 0
    per = max(1, block_elems // max(1, c * plane))
    for n0 in range(0, n, per):
        x = np.asarray(flat[n0:n0 + per], dtype=np.float64)
        nz = x != 0
        ax = np.abs(x)
        sabs += float(ax.sum())
        npos += int((x > 0).sum())
        n_nz += int(nz.sum())
        k[n0:n0 + x.shape[0]] = plane if censor_zeros else nz.sum(axis=2)
        if plane > 1:
            # plane scale: log of the plane's mean |g| (over its non-zero elements, or over all
            # of them when zeros are censored values); e: log(|g| / plane mean)
            kb = np.full(nz.shape[:2], plane) if censor_zeros else nz.sum(axis=2)
            sb = ax.sum(axis=2)
            ok = (kb > 0) & (sb > 0)
            lm = np.log(np.where(ok, sb / np.maximum(kb, 1), 1.0))
            med[n0:n0 + x.shape[0]] = lm
            k[n0:n0 + x.shape[0]] = np.where(ok, kb, 0)
            with np.errstate(divide="ignore"):
                L = np.log(ax)
            sel = ok[:, :, None] & (nz | censor_zeros)
            r = (L - lm[:, :, None])[sel]
            _hist_add(hist, np.where(np.isfinite(r), r, _HIST_LO))
        else:
            med[n0:n0 + x.shape[0]] = np.log(np.where(nz[:, :, 0], ax[:, :, 0], 1.0))
    nnz = int(k.sum())
    if nnz == 0:
        raise ValueError("tensor is all zeros")
    live = k > 0
    n_live = int(live.sum())
    if n_nz == 0:
        raise ValueError("tensor is all zeros")
    # with censoring, nnz counts the censored zeros too: S is then the mean |g| over all elements
    out: dict[str, Any] = {"density": n_nz / (n * c * plane), "dead_fraction": 1.0 - n_live / (n * c),
                           "scale_per_sample": sabs / nnz * batch, "pos_fraction": npos / n_nz}
    kk = k[live].astype(np.float64)
    if plane > 1:
        # zeros inside live planes: mean and Beta concentration (moments, binomial noise removed)
        f = 1.0 - kk / plane
        zf = float(f.mean())
        var_f = float(f.var(ddof=1)) if f.size > 1 else 0.0
        var_t = (var_f - zf * (1.0 - zf) / plane) / (1.0 - 1.0 / plane)
        kappa = None
        if zf > 0 and var_t > 0:
            kappa = min(KAPPA_MAX, max(1e-3, zf * (1.0 - zf) / var_t - 1.0))
        out["zero_fraction"], out["zero_kappa"] = zf, kappa
        if censor_zeros:
            out["zero_fraction"], out["zero_kappa"] = 0.0, None
    else:
        out["zero_fraction"], out["zero_kappa"] = 0.0, None
    _, a, b, resid = _two_way(med, live)
    dof_r = max(1, n_live - n - c + 1)
    var_r = float((resid ** 2).sum()) / dof_r
    if plane > 1:
        q = _hist_quantiles(hist, LEVELS)
        if censor_zeros:
            q = _extrapolate_censored(q, hist[0] / max(1, hist.sum()))
        q = [v - q[_MEDIAN] for v in q]
        # the log of a plane mean of k values has variance ~ CV(e)^2 / k (delta method)
        cv2 = max(0.0, math.exp(log_mean_abs(q, scale=2.0) - 2.0 * log_mean_abs(q)) - 1.0)
        noise = float((1.0 / kk).mean()) * cv2
        out["sigma_nc"] = math.sqrt(max(0.0, var_r - noise))
    else:
        # single-element planes (FC): U and e are not separable, U := 1; e from the residuals
        _hist_add(hist, resid[live])
        q = _hist_quantiles(hist, LEVELS)
        q = [v - q[_MEDIAN] for v in q]
        out["sigma_nc"] = 0.0
    out["logq"] = tuple(q)
    # row/column effects carry the residual variance divided by the number of cells averaged
    rows, cols = live.any(axis=1), live.any(axis=0)
    cells_n = np.maximum(live.sum(axis=1), 1)
    cells_c = np.maximum(live.sum(axis=0), 1)
    var_a = float(a[rows].var(ddof=1)) if rows.sum() > 1 else 0.0
    var_b = float(b[cols].var(ddof=1)) if cols.sum() > 1 else 0.0
    out["shape_n"] = _shape(a[rows])
    out["shape_c"] = _shape(b[cols])
    out["shape_nc"] = _shape(resid[live]) if plane > 1 else NORMAL_SHAPE
    out["sigma_n"] = math.sqrt(max(0.0, var_a - var_r * float((1.0 / cells_n[rows]).mean())))
    out["sigma_c"] = math.sqrt(max(0.0, var_b - var_r * float((1.0 / cells_c[cols]).mean())))
    return out


def average_fits(fits: list[dict]) -> dict:
    """Average per-iteration fits: geometric mean of the scale, RMS of the log-sigmas, mean of the
    quantiles (the Wasserstein barycentre of the magnitude distributions) and of the fractions."""
    out: dict[str, Any] = {}
    out["scale_per_sample"] = math.exp(sum(math.log(f["scale_per_sample"]) for f in fits) / len(fits))
    for k in ("sigma_n", "sigma_c", "sigma_nc"):
        out[k] = math.sqrt(sum(f[k] ** 2 for f in fits) / len(fits))
    for k in ("dead_fraction", "zero_fraction", "pos_fraction", "density"):
        out[k] = sum(f[k] for f in fits) / len(fits)
    for k, lv in (("logq", LEVELS), ("shape_n", EFFECT_LEVELS), ("shape_c", EFFECT_LEVELS),
                  ("shape_nc", EFFECT_LEVELS)):
        out[k] = tuple(float(np.mean([f[k][j] for f in fits])) for j in range(len(lv)))
    # average 1/(kappa+1) (the over-dispersion), where None (no over-dispersion) counts as 0
    od = [0.0 if f["zero_kappa"] is None else 1.0 / (f["zero_kappa"] + 1.0) for f in fits]
    mean_od = sum(od) / len(od)
    out["zero_kappa"] = None if mean_od == 0.0 else min(KAPPA_MAX, 1.0 / mean_od - 1.0)
    out["iterations"] = len(fits)
    return out


# ----------------------------------------------------------------------------------------------
# Cross-network mapping


def relative_depths(layers: Iterable) -> dict[str, float]:
    """Relative depth of each layer among the network's layers of the same op (0 first, 1 last)."""
    layers = list(layers)
    out = {}
    for op in ("conv", "fc", "linear", "matmul"):
        same = [l for l in layers if l.op == op]
        for i, l in enumerate(same):
            out[l.name] = i / (len(same) - 1) if len(same) > 1 else 0.0
    return out


def is_masked(layer) -> bool:
    """ReLU without BN: the ReLU derivative leaves exact zeros in the layer's dO."""
    return bool(layer.relu and not layer.bn)


_INTERP_LOG = ("scale_per_sample", "zero_kappa")
_INTERP_LIN = ("sigma_n", "sigma_c", "sigma_nc", "dead_fraction", "zero_fraction",
               "pos_fraction", "density")
_QUANTILE_FIELDS = ("logq", "shape_n", "shape_c", "shape_nc")
# similarity bandwidths (octaves) of the cross-network weights: spatial plane size and channels
PLANE_OCTAVES = 1.0
CHANNEL_OCTAVES = 1.0


def check_progress(progress, field: str = "--progress") -> float | None:
    """None (averaged over the run) or a fraction of the schedule in [0, 1]."""
    if progress is None:
        return None
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) \
            or not math.isfinite(progress) or not 0.0 <= progress <= 1.0:
        raise TraceError(None, field, f"training progress must be a fraction in [0, 1], got {progress!r}")
    return float(progress)


def _interp(cands: list[LayerParams], x: float, key: str = "depth") -> dict:
    cands = sorted(cands, key=lambda p: getattr(p, key))
    pos = lambda p: getattr(p, key)  # noqa: E731
    if x <= pos(cands[0]):
        lo = hi = cands[0]
    elif x >= pos(cands[-1]):
        lo = hi = cands[-1]
    else:
        lo = max((p for p in cands if pos(p) <= x), key=pos)
        hi = min((p for p in cands if pos(p) >= x), key=pos)
    t = 0.0 if pos(hi) == pos(lo) else (x - pos(lo)) / (pos(hi) - pos(lo))
    out: dict[str, Any] = {}
    for k in _INTERP_LIN:
        out[k] = (1 - t) * getattr(lo, k) + t * getattr(hi, k)
    out["scale_per_sample"] = math.exp((1 - t) * math.log(lo.scale_per_sample)
                                       + t * math.log(hi.scale_per_sample))
    kl, kh = lo.zero_kappa, hi.zero_kappa
    if kl is None and kh is None:
        out["zero_kappa"] = None
    else:
        kl, kh = kl or KAPPA_MAX, kh or KAPPA_MAX
        out["zero_kappa"] = math.exp((1 - t) * math.log(kl) + t * math.log(kh))
    for k in _QUANTILE_FIELDS:
        out[k] = tuple((1 - t) * x + t * y for x, y in zip(getattr(lo, k), getattr(hi, k)))
    out["plane_log2"] = (1 - t) * math.log2(lo.plane) + t * math.log2(hi.plane)
    out["channels_log2"] = None if lo.channels is None or hi.channels is None else \
        (1 - t) * math.log2(lo.channels) + t * math.log2(hi.channels)
    out["from"] = sorted({lo.name, hi.name}, key=[lo.name, hi.name].index)
    out["t"] = t
    return out


def _combine(parts: list[tuple[float, dict]]) -> dict:
    """Weighted average of parameter dicts: arithmetic for fractions, sigmas and quantiles,
    geometric for the scale, over-dispersion 1/(kappa+1) for the Beta concentration."""
    tot = sum(w for w, _ in parts)
    out: dict[str, Any] = {}
    for k in _INTERP_LIN:
        out[k] = sum(w * d[k] for w, d in parts) / tot
    out["scale_per_sample"] = math.exp(sum(w * math.log(d["scale_per_sample"]) for w, d in parts) / tot)
    od = sum(w * (0.0 if d["zero_kappa"] is None else 1.0 / (d["zero_kappa"] + 1.0))
             for w, d in parts) / tot
    out["zero_kappa"] = None if od <= 0.0 else min(KAPPA_MAX, 1.0 / od - 1.0)
    for k in _QUANTILE_FIELDS:
        out[k] = tuple(sum(w * d[k][j] for w, d in parts) / tot for j in range(len(parts[0][1][k])))
    return out


def network_of(p: LayerParams) -> str:
    """The source network of a fitted layer (`fit_many` prefixes names with it)."""
    return p.name.split("/", 1)[0] if "/" in p.name else ""


def at_progress(source: list[LayerParams], progress: float | None) -> list[LayerParams]:
    """One parameter set per source layer at training progress `progress` (a fraction of the
    schedule), interpolated between the fitted progress points; None averages the parameters over
    the whole run (RUN_GRID, uniform in progress). Layers fitted without progress stay as they are."""
    from dataclasses import replace
    progress = check_progress(progress, "progress")
    groups: dict[str, list[LayerParams]] = {}
    for p in source:
        groups.setdefault(p.name, []).append(p)
    out = []
    for name, ps in groups.items():
        known = [p for p in ps if p.progress is not None]
        if not known:
            out.append(ps[0])
            continue
        pts = RUN_GRID if progress is None else (progress,)
        d = _combine([(1.0, _interp(known, x, key="progress")) for x in pts])
        out.append(replace(known[0], **d, progress=progress,
                           iterations=sum(p.iterations for p in known)))
    return out


def map_params(source: list[LayerParams], workload, progress: float | None = None
               ) -> tuple[dict[str, dict], list[str]]:
    """Parameters for every conv/FC layer of `workload` from layers fitted on other networks.

    First the source layers are taken to training progress `progress` (`at_progress`; None:
    averaged over the run). Candidates for a target layer, first non-empty set wins:
      1. source layers of the same block kind (e.g. conv-bn-relu),
      2. of the same op and the same masking (ReLU without BN or not),
      3. of the same op (zero structure adapted: see below),
      4. any source layer.
    Within each source network the candidates are interpolated linearly in relative depth
    (log-linearly for the scale and the Beta concentration) between the two nearest, clamped at
    the ends; the networks' results are then averaged with weights
    exp(-d_plane^2 / 2 - d_channels^2 / 2), d the difference in octaves (PLANE_OCTAVES,
    CHANNEL_OCTAVES) between the target layer's spatial plane size / output channels and the
    interpolated source position's. When the masking differs (rules 3 and 4), a target without
    ReLU mask gets no zeros (dead_fraction and zero_fraction 0: BN's backward pass is dense), and a
    masked target fed from unmasked layers keeps the source's (near-zero) zeros: the mapping has no
    data on ReLU sparsity then, and says so. Returns (params by layer name, warnings).
    """
    warnings: list[str] = []
    src = at_progress(source, progress)
    nets: dict[str, list[LayerParams]] = {}
    for p in src:
        nets.setdefault(network_of(p), []).append(p)
    depths = relative_depths(workload.layers)
    out: dict[str, dict] = {}
    for l in workload.layers:
        masked = is_masked(l)
        rules = [
            ("block", lambda p: p.block == l.block),
            ("op+masking", lambda p: p.op == l.op and p.masked == masked),
            ("op", lambda p: p.op == l.op),
            ("any", lambda p: True),
        ]
        for rule, pred in rules:
            per_net = {k: [p for p in v if pred(p)] for k, v in nets.items()}
            per_net = {k: v for k, v in per_net.items() if v}
            if per_net:
                break
        parts = []
        lp_t, lc_t = math.log2(l.p * l.q), math.log2(l.c_out)
        for net, cands in per_net.items():
            d = _interp(cands, depths[l.name])
            e = ((lp_t - d["plane_log2"]) / PLANE_OCTAVES) ** 2
            if d["channels_log2"] is not None:
                e += ((lc_t - d["channels_log2"]) / CHANNEL_OCTAVES) ** 2
            parts.append((-0.5 * e, d, cands))
        top = max(w for w, _, _ in parts)
        weighted = sorted(((math.exp(w - top), d) for w, d, _ in parts), key=lambda x: -x[0])
        d = _combine(weighted)
        d["from"] = [n for _, dd in weighted for n in dd["from"]][:4]
        d["t"] = weighted[0][1]["t"]
        d["weights"] = [round(w / sum(x for x, _ in weighted), 4) for w, _ in weighted][:4]
        d["rule"] = rule
        src_masked = any(p.masked for _, _, c in parts for p in c)
        if rule in ("op", "any"):
            if not masked:
                d["dead_fraction"] = d["zero_fraction"] = 0.0
                d["zero_kappa"] = None
            if masked and not src_masked:
                warnings.append(f"{l.name} ({l.block}): no fitted layer with a ReLU mask; its exact "
                                "zeros (ReLU sparsity) are not modelled")
            warnings.append(f"{l.name} ({l.block}): no fitted {l.op} layer of this kind; "
                            f"used rule '{rule}' from {', '.join(d['from'])}")
        out[l.name] = d
    return out, warnings
