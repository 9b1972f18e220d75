"""Fitting the PruneTrain trajectory model (sim.system.prunetrain_model) to real group-lasso runs.

The model predicts; this module fits it. Here: the run records (RunData, SpaceData, read_run,
bundled_runs: research/prunetrain/data/fitted, written by research.prunetrain.runs), the least-
squares fit of every kind's level, clock and spread (fit_runs: plain NumPy grid searches, the grids
below), the block-death fit (death_rows, fit_death), the held-out checks (held_out, leave_one_out,
leave_*_out, death_held_out, stage_spread) and the stored fits:

  sim/data/prunetrain-fit.json        fit_runs over every fitted run: what `prunesim train` loads
                                      (write_fit; its runs_digest names the run files it was
                                      made of)
  data/held-out-fits.json             the fits without each held-out group of runs that the
                                      validation's held-out rows predict from (write_held_out_fits,
                                      held_out_fit), keyed by the run files' digest and the fitting
                                      code's (held_out_key)

Both are rewritten by `python -m research.prunetrain.grids --write-fit`. Nothing in sim imports
this module.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import itertools
import json
import math
import sys
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

import sim.system.prunetrain_model as prunetrain_model
from sim.errors import ConfigError
from sim.methods.prunetrain import space_channels
from sim.system.prunetrain_model import (FIT_PATH, PAPER_PSL, REF_WEIGHT_DECAY, WRITE_FIT, Fit,
                                         KindFit, _design, _hi, _input_factor, _kinds,
                                         bundled_fit, classifier_floor,
                                         clock_factor, death_probability, drift_factor,
                                         expansion, fit_from_doc, fit_to_doc, high_lr_epochs,
                                         init_group_norms, init_scale, lasso_pressure,
                                         later_blocks, map_depth, natural_images, spread_keep,
                                         spread_score, stem_spaces, task_information,
                                         thresholded)
from sim.yamlio import load_yaml_file

# exponents of lambda in the clock tried by the fit (1: the lasso dose; 0: lr-weighted steps)
BETAS = (0.0, 0.5, 1.0)
SHAPES = (1.0, 2.0)            # Weibull shapes of the approach to k_inf tried by the fit
GAMMAS = (0.5, 1.0)            # exponents of rho / (1 - rho) in k_inf tried by the fit
DELTAS = (0.0, 0.25, 0.5, 1.0)  # exponents of the init scale in k_inf (only with such runs)
# exponents of the task's information T = ln(classes) / ln(10) in k_inf (only with runs on other
# label counts: `--grid coarse`)
KAPPAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
HOVERS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)   # hovering shares h tried by the fit
# lags L tried by the fit: from the first lr decay on, the count runs L u_on of clock ahead
LAGS = (0.0, 0.25, 0.5, 0.75, 1.0)
# the hovering share on natural images as a fraction of the kind's (KindFit.nat_hover), searched
# last: at the first lr decay the residual nodes of the digits and Fashion-MNIST runs release
# 0.17 of their channels on average, those of the natural-image runs 0.05, where one share for
# both put 0.17 / 0.15 (decay_release; docs/explanation/system.md)
NAT_HOVERS = (0.0, 0.25, 0.5, 0.75, 1.0)
TILTS = np.linspace(0.0, 10.0, 81)    # depth tilts t tried by the fit (keep_s = K^(m e^(t z_s)))
BLOCK_TILTS = np.linspace(0.0, 4.0, 17)   # later-block exponents b tried (plain spaces only)
LAST_TILTS = np.linspace(0.0, 4.0, 17)    # last-stage exponents q tried (a chain's spaces)
STEM_TILTS = np.linspace(-2.0, 4.0, 25)   # stem exponents tried (the space the first conv writes)
# the run files the model is fitted to, and the held-out runs (fitted to nothing)
DATA_DIR = Path(__file__).resolve().parent / "data"
RUNS_DIR = DATA_DIR / "fitted"
HELD_OUT_DIR = DATA_DIR / "held-out"

OMEGAS = (0.0, 0.25, 0.5, 1.0, 1.5)     # weight-decay exponents of the pressure tried
CLOCK_OMEGAS = (0.0, 0.25, 0.5, 0.75, 1.0)   # ... and of the clock (only with such runs)

NUS = tuple(float(x) for x in np.linspace(0.0, 3.0, 13))   # natural-image levels nu tried
ETAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)   # temperature exponents eta tried
# exponents of the expansion E (expansion(): residual node over block width) tried, only with
# runs on bottleneck networks; negative: a wider node keeps more
XIS = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
# ... and of E in the clock, u x E^xi_clock: a group's time to die is its norm over lr x lambda,
# and a bottleneck's groups start at other norms than a basic block's (expansion())
CLOCK_XIS = (-1.0, -0.5, 0.0, 0.5, 1.0)
# The plain kind is fitted to basic-block and VGG runs only, so its E terms stay 0: the plain
# spaces inside bottleneck blocks keep more than basic blocks' at both widths tried, but by
# amounts one E exponent cannot hold (the 4x-wide runs keep 0.45 / 0.94 at rho 0.25 / 0.1, the
# narrow 0.29 / 0.77, at the same E = 4), and fitting the kind to them too changed its clock
# and shape and raised its RMS from 0.076 to 0.126 (docs/explanation/system.md). The residual
# kind takes them at no cost (RMS 0.109 -> 0.110).
PLAIN_FROM_BASIC = True
# The plain kind's clock below the level runs' lambda / n0 (fit_clock_cap). The basic-block and
# VGG runs fix the plain kind's level and shape and choose a clock of lr-weighted steps alone
# (beta 0; a dose clock raises their RMS from 0.083 to 0.14): at their lambda / n0 (7e-5 to 2e-3)
# a group dies no sooner than the network's learning lets it, whatever the lasso's strength. The
# bottleneck runs, whose lambda / n0 reaches down to 4e-6, start pruning later the weaker the
# dose: first dead inner channel at epoch 21 to 90 as lambda / n0 falls 35x (docs/explanation/system.md),
# where the uncapped clock starts all of them at epoch ~17. So below a cap the clock
# is the lasso dose, (min(lambda / n0, cap) / cap)^beta x lr-weighted steps. (beta, cap) are
# fitted jointly to the level runs' kept fractions and the bottleneck runs' plain-space time
# course with the level removed ((keep - final) / (1 - final); their level is not the basic
# blocks'), then the level refitted with that clock (fit_clock_cap, _fit_plain; the level
# runs below the cap weigh in as well as those above it).
CAP_BETAS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
# The caps tried, in lambda / n0
CAPS = tuple(float(x) for x in np.geomspace(1e-5, 1e-3, 21))
# A threshold of the lasso pressure below which it prunes nothing: k_inf = exp(-a max(0, P^gamma -
# p0) x the input factors). The group lasso's optimality condition (Yuan and Lin 2006): a group
# stays at zero only where lambda outweighs the loss gradient over it, so the kept fraction is
# the share of groups whose loss gradient exceeds lambda, a survival function of lambda; if every
# group the loss uses has a least gradient, the survival is truncated there (S(P) / S(P0): the
# Weibull exp(-a P^gamma) shifted in -ln k by a p0), and a lasso below P0 = p0^(1/gamma) kills
# nothing. The ResNet-20 runs at rho 0.03 / 0.05 / 0.1 / 0.2 / 0.25 on 16 x 16 CIFAR-10 lie on
# -ln k = a P^0.5 - t0 within 0.15, where one gamma cannot hold them (local gamma 2.8 between
# rho 0.03 and 0.05, 0.5-0.8 above 0.1). On P itself, not on the pressure with the input factors:
# the fit of every run prefers it (RMS 0.0945 against 0.0954), and on the factored pressure the
# threshold put ImageNet at rho 0.1 below it, unpruned, where the authors' own ImageNet network
# at rho 0.1 keeps 0.70 / 0.66 (docs/explanation/system.md). Searched with gamma (GAMMAS).
P0S = (0.0, 0.02, 0.05, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25)
# The exponents z of the threshold's drift on the clock tried (drift_factor; 0: none), jointly
# with the threshold and gamma. 1 was tried as well, in a full refit: the search takes it at the
# level stage, and the finished fit is worse on the runs (RMS 0.0948 against 0.0946; the weak
# runs' ends 0.85 / 0.67 against the measured 0.94 / 0.76, z = 0.5: 0.92 / 0.72), so the grid
# stops at 0.5 (docs/explanation/system.md).
DRIFTS = (0.0, 0.5)



# ------------------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class SpaceData:
    """One kind's channel spaces in a run: channels, depth z (map_depth) and kept fraction per
    epoch (epochs x spaces)."""

    c: np.ndarray
    z: np.ndarray
    keep: np.ndarray
    later: np.ndarray | None = None    # 1: the space is in a later block of its stage
    floor: np.ndarray | None = None    # the fewest channels kept, as a fraction (classifier_floor)
    dead: np.ndarray | None = None     # epochs x spaces: no channel left (the run's `dead` records)
    stem: np.ndarray | None = None     # 1: the space the network's first conv writes (stem_spaces)
    # the (0-based) epoch of each row of `keep`; None: a row for every epoch (RunData.epochs)
    epochs: np.ndarray | None = None

    def rows_every_5th(self) -> np.ndarray:
        """Indices of the rows at every 5th epoch (4, 9, 14, ...): where the spread and the
        block-death fits look."""
        return every_5th(self.epochs, len(self.keep))

    def dead_or_one(self) -> np.ndarray:
        """Dead per epoch and space: the run's records, else (runs recorded before them) one
        channel kept or none: a space left with none keeps one zero channel in the run, and a
        last live channel cannot be told from it."""
        return self.dead if self.dead is not None else self.keep * self.c <= 1.0 + 1e-9


@dataclass(frozen=True)
class RunData:
    name: str
    workload: str
    rho: float
    interval: int
    lrsteps: np.ndarray           # sum lr*steps/(1-momentum) at each epoch end
    lam_n: float                  # lambda / n0 of the run
    keep_plain: np.ndarray        # kept fraction of plain-space channels at each epoch end
    keep_residual: np.ndarray     # same, residual nodes
    lr: float
    batch: int
    difficulty: float = 1.0       # D: training CE in the high-lr phase / ln(classes)
    noise: float = 0.0            # the run's pixel-noise difficulty dial (research.prunetrain.runs)
    high: np.ndarray | None = None  # per epoch: the schedule's lr still at its maximum
    init_scale: float = 1.0       # the run's R0 over PyTorch's default init's (init_scale())
    has_residual: bool = True     # the network has residual nodes (VGG has none)
    plain_spaces: SpaceData | None = None     # per-space kept fractions (the tilt's data)
    residual_spaces: SpaceData | None = None
    weight_decay: float = REF_WEIGHT_DECAY    # the run's SGD weight decay
    coarse: bool = False          # CIFAR-10's labels merged into 2 super-classes (runs.py)
    classes: int = 10             # distinct labels the run was trained on
    dataset: str = "digits"
    expansion: float = 1.0        # E of the run's network (expansion())
    # the (0-based) epoch of each row of lrsteps / keep_*: None, a row for every epoch; a run read
    # from a console log that prints the widths at reconfigurations only has rows there
    epochs: np.ndarray | None = None
    first_clock: float | None = None  # lr x steps / (1 - momentum) of epoch 0 (None: lrsteps[0])
    head: int = 10                # the classifier's outputs (CE0 = ln(head); D is over ln(head))
    # the first iteration's CE less ln(head), where the run logged it (NaN: not logged): the CE0
    # in the run's lambda, which a prediction estimates (Fit.ce0_offset)
    ce0_offset: float = math.nan

    def kept(self, residual: bool) -> np.ndarray:
        """The measured kept fraction per epoch of one kind (residual nodes or plain spaces)."""
        return self.keep_residual if residual else self.keep_plain

    @property
    def natural(self) -> float:
        return natural_images(self.dataset)

    @property
    def temperature(self) -> float:
        """The run's per-sample lr (lr / batch at its initial batch) over the paper's."""
        return self.lr / self.batch / PAPER_PSL

    @property
    def decay(self) -> float:
        """The run's weight decay over REF_WEIGHT_DECAY."""
        return self.weight_decay / REF_WEIGHT_DECAY

    @property
    def task(self) -> float:
        return task_information(self.classes)

    @property
    def learned(self) -> float:
        """Nats of the labels the network has learnt in the high-lr phase: ln(labels) minus the
        median training CE there (difficulty x ln(head)). Reported, not a model input: it is
        measured during the run it would predict (NaN where the CE was not logged)."""
        return math.log(max(self.classes, 2)) - self.difficulty * math.log(self.head)

    @property
    def pressure(self) -> float:
        return lasso_pressure(self.rho)

    def u(self, beta: float, cap: float = 0.0) -> np.ndarray:
        return self.lrsteps * clock_factor(self.lam_n, beta, cap)


def _spread_rows(data: list[SpaceData], second: str | None) -> list:
    """(data, kept fractions at every 5th epoch, their channel-weighted means, the second score
    feature: L_s (second "block"), F_s = 1 on the spaces with a classifier floor ("last"), or
    0) for every run's spaces of one kind; runs with fewer than two spaces left out."""
    rows = []
    for d in data:
        if d is None or len(d.c) < 2:
            continue
        k = d.keep[d.rows_every_5th()]
        if second == "block" and d.later is not None:
            f = d.later
        elif second == "last" and d.floor is not None:
            f = (d.floor > 0).astype(float)
        else:
            f = np.zeros(len(d.c))
        rows.append((d, k, (k * d.c).sum(axis=1) / d.c.sum(), f))
    return rows


def _stem(d: SpaceData) -> np.ndarray:
    return d.stem if d.stem is not None else np.zeros(len(d.c))


def spread_sse(rows: list, t: float, s: float, u: float = 0.0) -> tuple[float, int]:
    """fit_spread's objective: the squared error of spread_keep(each run's own mean, score t z +
    s f + u stem) against the per-space kept fractions of _spread_rows, and their count."""
    sse = sum(float(((spread_keep(m, d.c, t * d.z + s * f + u * _stem(d), d.floor) - k) ** 2)
                    .sum()) for d, k, m, f in rows)
    return sse, sum(k.size for _, k, _, _ in rows)


def fit_spread(data: list[SpaceData], blocks: bool,
               last: bool = False) -> tuple[float, float, float]:
    """(t, s, RMS): the tilt (TILTS) and a second exponent s: with `blocks` the later-block
    exponent b (BLOCK_TILTS, on L_s), with `last` the last-stage exponent q (LAST_TILTS, on F_s),
    else none, whose spread of every run's own channel-weighted mean keep best matches its
    per-space kept fractions (least squares over every 5th epoch and every space): every 4th
    grid point first, then the full grid within one coarse step of the best."""
    second = "block" if blocks else "last" if last else None
    rows = _spread_rows(data, second)
    if not rows:
        return 0.0, 0.0, 0.0
    memo: dict[tuple[float, float], float] = {}

    def sse(t, b):
        if (t, b) not in memo:
            memo[t, b] = spread_sse(rows, t, b)[0]
        return memo[t, b]

    bs = BLOCK_TILTS if blocks else LAST_TILTS if last else np.zeros(1)
    coarse = [(float(t), float(b)) for t in TILTS[::4] for b in bs[::4]]
    t0, b0 = min(coarse, key=lambda tb: sse(*tb))
    dt, db = 4 * (TILTS[1] - TILTS[0]), 4 * (bs[1] - bs[0]) if len(bs) > 1 else 0.0
    fine = [(float(t), float(b)) for t in TILTS if abs(t - t0) <= dt + 1e-9
            for b in bs if abs(b - b0) <= db + 1e-9]
    t, b = min(fine, key=lambda tb: (sse(*tb), tb))
    return t, b, math.sqrt(sse(t, b) / sum(k.size for _, k, _, _ in rows))


def fit_stem(data: list[SpaceData], t: float, s: float, blocks: bool,
             last: bool = False) -> tuple[float, float]:
    """(u, RMS): the stem exponent (STEM_TILTS, on stem_spaces) that best matches the per-space
    kept fractions with the tilt t and second exponent s already fitted (fit_spread's rows); 0
    where no run has a stem space of this kind."""
    rows = _spread_rows(data, "block" if blocks else "last" if last else None)
    if not any(_stem(d).any() for d, _, _, _ in rows):
        return 0.0, math.sqrt(spread_sse(rows, t, s)[0] / max(1, sum(k.size for _, k, _, _ in rows)))
    sse = {float(u): spread_sse(rows, t, s, float(u))[0] for u in STEM_TILTS}
    u = min(sse, key=lambda x: (sse[x], abs(x)))
    return u, math.sqrt(sse[u] / sum(k.size for _, k, _, _ in rows))


def run_difficulty(per_epoch: list, classes: int) -> float:
    """D of a run: the median training CE over its high-lr epochs (lr at its maximum), the first
    five left out (the network is still learning the easy part), over ln(classes)."""
    top = max(p["lr"] for p in per_epoch)
    ce = [p["ce"] for p in per_epoch if p["lr"] >= 0.99 * top]
    ce = ce[5:] if len(ce) > 10 else ce
    return float(np.median(ce)) / math.log(classes)



def every_5th(epochs: np.ndarray | None, n: int) -> np.ndarray:
    """Indices of the rows at epochs 4, 9, 14, ... (epochs: each row's epoch; None: row i is
    epoch i); every row where none is (fewer than five epochs)."""
    e = np.arange(n) if epochs is None else np.asarray(epochs)
    idx = np.flatnonzero(e % 5 == 4)
    return idx if len(idx) else np.arange(n)


def run_epochs(r: RunData) -> np.ndarray:
    """The (0-based) epoch of each of a run's rows."""
    return np.arange(len(r.lrsteps)) if r.epochs is None else r.epochs


def read_run(path: Path) -> RunData:
    return run_from_doc(load_yaml_file(path, ConfigError), path)


def run_from_doc(doc: dict, path: Path) -> RunData:
    """A run file already read (its document, and the path that names it).

    Every per_epoch record gives the epoch's lr, batch and steps (the clock); an epoch whose
    widths are not known (a run read from a console log that prints them at reconfigurations
    only) leaves out `kept` and is no row of the fit. `run.classifier` (optional) gives the
    classifier's outputs where they differ from the workload file's (CIFAR-100's VGG-11 from
    vgg11-cifar)."""
    from sim.workload import load_workload, with_classes
    f = str(path)
    try:
        run, per_all = doc["run"], doc["per_epoch"]
        w = load_workload(doc["workload"])
        if "classifier" in run:
            w = with_classes(w, int(run["classifier"]))
        plain, res = _kinds(w)
        chans = space_channels(w)
        _, g = init_group_norms(w)
        n0 = float(run["first_group_norm"]) / g
        lam_n = float(run["lambda"]) / n0
        lrsteps = np.cumsum([p["lr"] * p["steps"] for p in per_all]) / (1 - run["momentum"])
        rows = np.array([i for i, p in enumerate(per_all) if "kept" in p], dtype=int)
        if len(rows) < 2:
            raise ValueError("fewer than two per_epoch records with kept channels")
        sampled = len(rows) < len(per_all)
        per = [per_all[i] for i in rows]
        lrsteps = lrsteps[rows]
        high = high_lr_epochs(per_all, int(run["batch"]))[rows]
        # D from the training CE where every epoch logged it (a console log may not)
        diff = (run_difficulty(per_all, w.layers[-1].c_out)
                if all("ce" in p for p in per_all) else float("nan"))
        frac = lambda ss: np.array([sum(p["kept"][s] for s in ss) / sum(chans[s] for s in ss)
                                    if ss else 1.0 for p in per])

        classes = int(run.get("classes", 2 if run.get("coarse", False) else w.layers[-1].c_out))
        floor = classifier_floor(w, classes)

        def spaces(ss, later=None, stem=None):
            if not ss:
                return None
            c = np.array([chans[s] for s in ss], dtype=float)
            dead = (np.array([[s in p["dead"] for s in ss] for p in per])
                    if all("dead" in p for p in per) else None)
            return SpaceData(c, map_depth(w, ss),
                             np.array([[p["kept"][s] for s in ss] for p in per], dtype=float) / c,
                             later, np.array([floor.get(s, 0) for s in ss]) / c, dead, stem,
                             rows if sampled else None)

        return RunData(path.stem, w.name, float(run["rho"]), int(run["interval"]), lrsteps, lam_n,
                       frac(plain), frac(res), float(run["lr"]), int(run["batch"]),
                       diff, float(run.get("noise", 0.0)), high,
                       init_scale(w, str(run.get("init", "torch"))), bool(res),
                       spaces(plain, later_blocks(w, plain, res), stem_spaces(w, plain)),
                       spaces(res),
                       float(run.get("weight_decay", 1e-4)),
                       bool(run.get("coarse", False)), classes,
                       str(run.get("dataset", "digits")), expansion(w),
                       rows if sampled else None,
                       float(per_all[0]["lr"] * per_all[0]["steps"] / (1 - run["momentum"])),
                       w.layers[-1].c_out, _first_ce(run) - math.log(w.layers[-1].c_out))
    except (KeyError, TypeError, ZeroDivisionError, ValueError) as e:
        raise ConfigError(f, "run", f"not a PruneTrain run record ({e})") from None


def _first_ce(run: dict) -> float:
    """A run record's logged first CE (NaN where it has none); one that is not a finite positive
    number is a ValueError."""
    if run.get("first_ce") is None:
        return math.nan
    ce = float(run["first_ce"])
    if not (math.isfinite(ce) and ce > 0):
        raise ValueError(f"first_ce must be a finite number > 0, got {run['first_ce']!r}")
    return ce


@lru_cache(maxsize=4)
def bundled_runs(directory: str = str(RUNS_DIR)) -> tuple[RunData, ...]:
    return tuple(read_run(p) for p in sorted(Path(directory).glob("*.yaml")))


# ------------------------------------------------------------------------------- the fit


def _grid_sse(rr: np.ndarray, e: np.ndarray, y: np.ndarray, a_grid: np.ndarray) -> np.ndarray:
    """sum_i (k_i + (1 - k_i) e_ji - y_i)^2 for every a of a_grid (k = exp(-a rr)) and every row
    j of e, as an (a, j) matrix: expanded into three matrix products."""
    k = np.exp(-np.outer(a_grid, rr))
    d, m = k - y, 1 - k
    return ((d * d).sum(axis=1)[:, None] + 2 * (d * m) @ e.T + (m * m) @ (e * e).T)


def _search(u, rr, hi, y, shape, on_grid, sc_grid, a_grid, hovers=None, lag=0.0, hs=None):
    """Best (sse, a, u_on, u_scale, h) over the (u_on, u_scale, h) grid and a by 1-D search.
    counted = k + (1 - k) e' with e' = e + h hs H (1 - e) (H: lr at its maximum; hs: the
    per-row hover scale, KindFit.nat_hover; 1 by default), e at the clock u + lag u_on (1 - H)
    (KindFit.lag)."""
    on, sc = np.meshgrid(on_grid, sc_grid, indexing="ij")
    on, sc = on.ravel(), sc.ravel()
    ahead = u[None, :] + lag * on[:, None] * (1 - hi[None, :])
    e = np.exp(-(np.maximum(0.0, ahead - on[:, None]) / sc[:, None]) ** shape)
    held = (hi if hs is None else hi * hs)[None, :]    # the hover's rows, scaled
    best = None
    for h in (HOVERS if hovers is None else hovers):
        sse = _grid_sse(rr, e + h * held * (1 - e) if h else e, y, a_grid)
        i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
        if best is None or sse[i, j] < best[0]:
            best = (float(sse[i, j]), float(a_grid[i]), float(on[j]), float(sc[j]), h)
    return best



def _refine_inputs(u, y, hi, best, shape, level, grids, start):
    """Better (kappa, nu, eta, omega, xi) from `start` on `grids`, with the clock's (u_on, u_scale, h)
    of `best` held and a by 1-D search; level(terms) is k_inf's pressure term per row with those
    input terms. These terms scale k_inf's pressure alone and only a few runs inform them, so
    they are searched on the level (cheap: one clock row) and the clock refitted after. (kappa,
    nu, eta) jointly with omega and xi held, then omega, then xi, each with the others held: the
    joint grid over all five would cost len(OMEGAS) x len(XIS) times as much."""
    _, a, on, sc, h = best
    e = np.exp(-(np.maximum(0.0, u - on) / sc) ** shape)
    e = (e + h * hi * (1 - e))[None, :]
    a_grid = a * np.geomspace(0.2, 5.0, 61)
    terms = tuple(start)
    for free in ((0, 1, 2), (3,), (4,)):
        out = None
        for vals in itertools.product(*(grids[i] for i in free)):
            t = list(terms)
            for i, v in zip(free, vals):
                t[i] = v
            sse = float(_grid_sse(level(t), e, y, a_grid).min())
            if out is None or sse < out[0] - 1e-12:
                out = (sse, tuple(t))
        terms = out[1]
    return terms


def _kind_search(hi: np.ndarray, y: np.ndarray):
    """search(u, umax, rr, shape, near): the kind's clock and level by grid (_search), coarse then
    a finer grid around the coarse best; a coarse best worse than 4x `near`'s SSE skips the fine
    grid (it would not win)."""
    a0 = np.geomspace(1e-3, 30, 46)

    def search(u, umax, rr, shape, near=None, lag=0.0, hs=None):
        coarse = _search(u, rr, hi, y, shape, np.linspace(0, umax, 31),
                         umax * np.geomspace(0.01, 20, 31), a0, lag=lag, hs=hs)
        if near is not None and coarse[0] > 4 * near:
            return coarse
        _, a, on, sc, h = coarse
        # the fine grid: +-1 coarse step around the best of every parameter
        return _search(u, rr, hi, y, shape,
                       np.linspace(max(0.0, on - umax / 30), on + umax / 30, 15),
                       sc * np.geomspace(0.75, 1.33, 15), a * np.geomspace(0.75, 1.33, 31),
                       [x for x in (h - 0.05, h, h + 0.05) if 0.0 <= x < 1.0], lag, hs)
    return search


def _fit_kind(runs: tuple[RunData, ...], y: np.ndarray, hi: np.ndarray,
              pp: np.ndarray, ss: np.ndarray, tt: np.ndarray, nat: np.ndarray,
              tmp: np.ndarray, dec: np.ndarray, ex: np.ndarray,
              clock: tuple[float, float] | None = None) -> KindFit:
    """The grids of beta, shape and gamma with the input terms off, then delta (only when some
    run has another init) searched with the best (beta, shape, gamma): a full grid over it too
    would cost 4x the fit, for a parameter that only a few paired runs inform; then the pressure
    threshold p0 (P0S) the same way, with gamma searched again. Then, jointly, kappa (only when
    some run has another label count), nu (natural images), eta (natural images at another
    per-sample lr), omega (another weight decay) and xi (bottleneck networks) on the level with
    the clock held (_refine_inputs), and the clock refitted at the best, then the expansion's
    clock exponent xi_clock (CLOCK_XIS) with those held; twice (_fit_inputs). Last the count's
    lag after the first lr decay (LAGS, KindFit.lag). clock: (beta, cap) held (fit_clock_cap's)
    instead of the BETAS grid."""
    search = _kind_search(hi, y)
    cap = clock[1] if clock else 0.0
    clk = lambda beta: np.concatenate([r.u(beta, cap) for r in runs])  # noqa: E731
    out = None
    near = lambda: out[0][0] if out else None  # noqa: E731
    for beta in ((clock[0],) if clock else BETAS):
        u = clk(beta)
        for shape in SHAPES:
            for gamma in GAMMAS:
                best = search(u, float(u.max()), pp ** gamma, shape, near())
                if out is None or best[0] < out[0][0] - 1e-12:
                    out = (best, beta, shape, gamma, 0.0)
    _, beta, shape, gamma, _ = out
    u = clk(beta)
    for delta in (DELTAS[1:] if (ss != 1.0).any() else ()):
        best = search(u, float(u.max()), pp ** gamma * ss ** -delta, shape, near())
        if best[0] < out[0][0] - 1e-12:
            out = (best, beta, shape, gamma, delta)
    delta = out[4]
    # the threshold with gamma free: a threshold can stand for a steeper gamma at weak lassos
    p0 = 0.0
    for g, t in itertools.product(GAMMAS, P0S[1:]):
        best = search(u, float(u.max()), thresholded(pp ** g, ss ** -delta, t), shape, near())
        if best[0] < out[0][0] - 1e-12:
            out, p0 = (best, beta, shape, g, delta), t
    gamma = out[3]
    # the threshold's drift on the clock (drift_factor), jointly with the level's threshold and
    # gamma: a drift moves where the weak runs start, and with it the level's best threshold
    drift = 0.0
    for z, g, t in itertools.product(DRIFTS[1:], GAMMAS, P0S[1:]):
        best = search(u * drift_factor(pp ** g, t, z), float(u.max()),
                      thresholded(pp ** g, ss ** -delta, t), shape, near())
        if best[0] < out[0][0] - 1e-12:
            out, p0, drift = (best, beta, shape, g, delta), t, z
    gamma = out[3]
    u = u * drift_factor(pp ** gamma, p0, drift)
    # the decay's clock exponent, like delta with the best (beta, shape, gamma, delta) held; the
    # decay's pressure exponent is searched on the level below
    clock_w = 0.0
    for oc in (CLOCK_OMEGAS[1:] if (dec != 1.0).any() else ()):
        # the grids keep the unscaled clock's range: the scaled runs are few
        best = search(u * dec ** oc, float(u.max()), thresholded(pp ** gamma, ss ** -delta, p0),
                      shape, near())
        if best[0] < out[0][0] - 1e-12:
            out, clock_w = (best, beta, shape, gamma, delta), oc
    level = lambda t: thresholded(pp ** gamma, ss ** -delta * _input_factor(  # noqa: E731
        (tt, nat, tmp, dec, ex), *t), p0)
    out, terms, xc = _fit_inputs(search, out, u * dec ** clock_w, float(u.max()), y, hi, shape,
                                 level, (tt, nat, tmp, dec, ex))
    # the count's lag after the first lr decay, last: the clock and a searched again with it,
    # beta, shape, gamma, delta, p0 and the input terms held
    lag = 0.0
    for lg in LAGS[1:]:
        best = search(u * dec ** clock_w * ex ** xc, float(u.max()), level(terms), shape,
                      out[0][0], lg)
        if best[0] < out[0][0] - 1e-12:
            out, lag = (best, beta, shape, gamma, delta), lg
    # the natural-image hover scale, last, with everything but the clock and a held; only where
    # the kind hovers and some runs are natural images and some not. 1 is searched too, so that
    # a gain of the re-search itself is not credited to the scale
    nat_hover, found = 1.0, None
    for nh in (NAT_HOVERS if out[0][4] > 0 and (nat > 0).any() and (nat == 0).any() else ()):
        best = search(u * dec ** clock_w * ex ** xc, float(u.max()), level(terms), shape,
                      out[0][0], lag, 1.0 - nat * (1.0 - nh))
        if found is None or best[0] < found[0][0] - 1e-12:
            found = (best, nh)
    if found is not None and found[0][0] < out[0][0] - 1e-12:
        out, nat_hover = (found[0], beta, shape, gamma, delta), found[1]
    (sse, a, on, sc, h), beta, shape, gamma, delta = out
    return KindFit(a, on, sc, shape, h, beta, gamma, math.sqrt(sse / len(y)), delta, terms[0],
                   nu=terms[1], eta=terms[2], omega=terms[3], omega_clock=clock_w, xi=terms[4],
                   xi_clock=xc, cap=cap, p0=p0, lag=lag, nat_hover=nat_hover, drift=drift)


def _fit_inputs(search, out, u, umax, y, hi, shape, level, columns):
    """_fit_kind's input terms (kappa, nu, eta, omega, xi; each only where some run varies its
    input) and the expansion's clock exponent, twice: the terms on the level with the clock held
    (_refine_inputs), then the clock refitted with them. level(terms): k_inf's pressure term per
    row. Returns (out, terms, xi_clock)."""
    tt, nat, tmp, dec, ex = columns
    grids = (KAPPAS if (tt != 1.0).any() else (0.0,), NUS if nat.any() else (0.0,),
             ETAS if ((tmp != 1.0) & (nat > 0)).any() else (0.0,),
             OMEGAS if (dec != 1.0).any() else (0.0,), XIS if (ex != 1.0).any() else (0.0,))
    terms, xc = (0.0, 0.0, 0.0, 0.0, 0.0), 0.0
    if not any(len(g) > 1 for g in grids):
        return out, terms, xc
    _, beta, _, gamma, delta = out
    found = terms
    for _ in range(2):
        found = _refine_inputs(u * ex ** xc, y, hi, out[0], shape, level, grids, found)
        best = search(u * ex ** xc, umax, level(found), shape, out[0][0])
        if best[0] < out[0][0] - 1e-12:
            out, terms = (best, beta, shape, gamma, delta), found
        # the expansion's clock exponent, with the level terms held (like the decay's)
        for x in (CLOCK_XIS if (ex != 1.0).any() else ()):
            best = search(u * ex ** x, umax, level(terms), shape, out[0][0])
            if best[0] < out[0][0] - 1e-12:
                out, xc = (best, beta, shape, gamma, delta), x
    return out, terms, xc


def _columns(runs: tuple[RunData, ...]) -> tuple[np.ndarray, ...]:
    """Per epoch of every run: the high-lr flag, the pressure P, the init scale, the task's
    information T, natural images X, the per-sample lr over the paper's, the weight decay
    over REF_WEIGHT_DECAY and the network's expansion E."""
    col = lambda f: np.concatenate([np.full(len(r.lrsteps), f(r)) for r in runs])  # noqa: E731
    return (np.concatenate([_hi(r).astype(float) for r in runs]),
            col(lambda r: r.pressure), col(lambda r: r.init_scale), col(lambda r: r.task),
            col(lambda r: r.natural), col(lambda r: r.temperature), col(lambda r: r.decay),
            col(lambda r: r.expansion))


def kind_runs(runs, residual: bool) -> tuple[RunData, ...]:
    """The runs each kind is fitted to: the plain kind from basic-block and VGG runs only
    (PLAIN_FROM_BASIC); the residual kind from networks that have residual nodes (a VGG's
    "residual keep" would be a constant 1 the fit had to explain). All runs where none qualify."""
    runs = tuple(runs)
    if residual:
        return tuple(r for r in runs if r.has_residual) or runs
    return tuple(r for r in runs if r.expansion == 1.0 or not PLAIN_FROM_BASIC) or runs


def decay_release(keep, high, after: int = 8) -> float | None:
    """How far a kept-fraction series falls from the last epoch at the schedule's maximum lr
    (`high`) to `after` epochs past the first decay: the channels counted while the lr was high
    that the decay lets fall (None: no decay, one in the first two epochs, or too few epochs
    after it)."""
    high = np.asarray(high, dtype=bool)
    if high.all() or len(keep) != len(high):
        return None
    d = int(np.argmin(high))
    if d < 2 or d + after >= len(keep):
        return None
    return float(keep[d - 1] - keep[d + after])


def time_course(keep: np.ndarray) -> np.ndarray:
    """A kept-fraction series with its level removed: (keep - final) / (1 - final), 1 before the
    first dead channel and 0 at the end (0 throughout where nothing is pruned)."""
    keep = np.asarray(keep, dtype=float)
    cut = 1.0 - keep[-1]
    return (keep - keep[-1]) / cut if cut > 1e-9 else np.zeros_like(keep)


def _course_err(kf: KindFit, runs) -> np.ndarray:
    """The plain spaces' time course (time_course) per epoch of every run, modeled - measured."""
    return np.concatenate([time_course(kf.keep_run(r)) - time_course(r.keep_plain)
                           for r in runs] or [np.zeros(0)])


def course_rms(kf: KindFit, runs, cap: float, beta: float) -> float:
    """RMS over the runs' epochs of the plain spaces' time course, modeled with the clock (beta,
    cap) against measured."""
    err = _course_err(dataclasses.replace(kf, beta=beta, cap=cap), runs)
    return float(np.sqrt(np.mean(err ** 2))) if len(err) else 0.0


def fit_clock_cap(kf: KindFit, level_runs, clock_runs) -> tuple[float, float]:
    """The plain kind's clock (beta, cap) (CAP_BETAS x CAPS, or (0, 0): lr-weighted steps alone),
    searched jointly with its level: the squared error of the level runs' kept fractions with
    the kind's other parameters held, plus that of `clock_runs`' time course (time_course;
    their level is not the kind's). A cap below some level runs' lambda / n0 slows their clock
    too, and they weigh in: a weak-lasso level run can pull the cap up as well as down."""
    def sse(beta: float, cap: float) -> float:
        k = dataclasses.replace(kf, beta=beta, cap=cap)
        return (sum(float(((k.keep_run(r) - r.keep_plain) ** 2).sum()) for r in level_runs)
                + float((_course_err(k, clock_runs) ** 2).sum()))
    best = (sse(0.0, 0.0), 0.0, 0.0)
    for beta in CAP_BETAS:
        for cap in CAPS:
            e = sse(beta, cap)
            if e < best[0] - 1e-12:
                best = (e, beta, cap)
    return best[1], best[2]


def _fit_plain(plain_runs, clock_runs) -> KindFit:
    """The plain kind: its level and clock on `plain_runs` (_fit_kind); where that clock is
    lr-weighted steps alone, a cap below which it is the lasso dose (fit_clock_cap, also timed
    on `clock_runs`), and the level refitted with that clock held; twice at most."""
    y, cols = np.concatenate([r.keep_plain for r in plain_runs]), _columns(plain_runs)
    plain = _fit_kind(plain_runs, y, *cols)
    if plain.beta != 0.0 or not clock_runs:
        return plain
    clock = (0.0, 0.0)
    for _ in range(2):
        found = fit_clock_cap(plain, plain_runs, clock_runs)
        if found == clock:
            break
        clock = found
        plain = _fit_kind(plain_runs, y, *cols, clock=clock)
    return plain


def fit_runs(runs: tuple[RunData, ...] | list[RunData], spread: bool = True) -> Fit:
    """Least squares, per kind of space (plain, residual node; their errors are independent):
    the clock exponent beta (BETAS), the approach shape (SHAPES), the pressure exponent gamma
    (GAMMAS), the hovering share (HOVERS) and (u_on, u_scale) on grids, a by 1-D search; then a
    finer grid around the best; then (spread) how each kind's mean spreads over its spaces
    (fit_spread). Plain NumPy: `prunesim train` needs no SciPy."""
    runs = tuple(runs)
    if not runs:
        raise ConfigError(str(RUNS_DIR), None, "no PruneTrain runs to fit the trajectory model to")
    plain_runs, with_res = kind_runs(runs, False), kind_runs(runs, True)
    # the runs left out of the plain kind's level (bottleneck networks) still time its clock
    level = {r.name for r in plain_runs}
    plain = _fit_plain(plain_runs, tuple(r for r in runs
                                         if r.name not in level and r.has_residual))
    resid = _fit_kind(with_res, np.concatenate([r.keep_residual for r in with_res]),
                      *_columns(with_res))
    # the spread over the spaces is fitted given each run's measured mean, apart from the clock
    chain = None
    if spread:
        names = ("tilt", "block", "tilt_rms")
        inner, chains = spread_runs(plain_runs)
        data = [r.plain_spaces for r in inner or chains]
        t, b, _ = fit_spread(data, blocks=True)
        u, rms = fit_stem(data, t, b, blocks=True)
        plain = dataclasses.replace(plain, tilt=t, block=b, stem=u, tilt_rms=rms)
        resid = dataclasses.replace(resid, **dict(zip(names, fit_spread(
            [r.residual_spaces for r in with_res], blocks=False))))
        if inner and chains:
            data = [r.plain_spaces for r in chains]
            t, q, _ = fit_spread(data, blocks=False, last=True)
            u, rms = fit_stem(data, t, q, blocks=False, last=True)
            chain = dataclasses.replace(plain, tilt=t, block=0.0, last=q, stem=u, tilt_rms=rms)
    fit = Fit(plain, resid, tuple(r.name for r in runs),
              math.sqrt((plain.rms ** 2 + resid.rms ** 2) / 2), chain,
              ce0_offset=first_ce_offset(runs))
    if spread:
        x, y, e = death_rows(runs, fit)
        if len(y) and 0 < y.sum() < len(y):
            fit = dataclasses.replace(fit, death=fit_death(x, y, e))
    return fit


def first_ce_offset(runs) -> float:
    """The median over the runs that logged it of the first iteration's CE less ln(outputs)
    (0.0 where none did): a prediction's lambda takes CE0 = ln(classes) + this."""
    r = [x.ce0_offset for x in runs if math.isfinite(x.ce0_offset)]
    return float(np.median(r)) if r else 0.0


def death_rows(runs, fit: Fit, last_only: bool = False) -> tuple[np.ndarray, ...]:
    """The block-death fit's data: for every run with residual blocks, every 5th epoch after
    the first lr decay (or the last epoch, `last_only`) and every plain space, the channels the
    fitted spread gives the space from the run's own mean keep of the kind (the level's error
    apart), whether the space was dead (SpaceData.dead_or_one), and the network's expansion E
    (the narrow bottlenecks' inner spaces die far less often than basic blocks' at the same
    predicted width: 18 of 216 space-epochs at 4-8 channels against 390 of 810, none of 302 at
    8-32 against 134 of 2041; docs/explanation/system.md). Why not before the decay:
    while the lr is at its maximum a space's last channel hovers above the zeroing threshold
    (the run with `dead` records, resnet20-digits8 rho 0.25: a space held one live channel from
    epoch 39 to 90, and 117 of its 394 one-channel space-epochs were live, all before the decay;
    after it 5 of 6 one-channel spaces were dead), so one channel is not yet a dead block."""
    xs, ys, es = [], [], []
    for r in runs:
        d = r.plain_spaces
        if not r.has_residual or d is None or len(d.c) < 2:
            continue
        score = spread_score(fit.spread_kind(False, True), d.z, d.later, d.floor, d.stem)
        dead = d.dead_or_one()
        hi = _hi(r)
        rows = ([len(d.keep) - 1] if last_only else
                [e for e in d.rows_every_5th() if not hi[e]])
        for e in rows:
            m = float((d.keep[e] * d.c).sum() / d.c.sum())
            xs.append(spread_keep(m, d.c, score, d.floor)[0] * d.c)
            ys.append(dead[e])
            es.append(np.full(len(d.c), r.expansion))
    if not xs:
        return np.zeros(0), np.zeros(0, bool), np.zeros(0)
    return np.concatenate(xs), np.concatenate(ys).astype(bool), np.concatenate(es)


def spread_runs(plain_runs) -> tuple[tuple[RunData, ...], tuple[RunData, ...]]:
    """The plain kind's runs split by whose spread they inform: networks with residual nodes
    (their plain spaces sit inside blocks, which can fade out behind the shortcut: Fit.plain's
    tilt and later-block exponent) and chains, networks without (VGG: every space on the only
    path, the last stage cut towards its classifier floor: Fit.chain's tilt and last-stage
    exponent)."""
    return (tuple(r for r in plain_runs if r.has_residual),
            tuple(r for r in plain_runs if not r.has_residual))

# ------------------------------------------------------------------------------- stored fits


def runs_digest(directory: str | Path = RUNS_DIR) -> str:
    """sha256 over the run files' names and bytes: a stored fit is valid for exactly these."""
    h = hashlib.sha256()
    for f in sorted(Path(directory).glob("*.yaml")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def write_fit(fit: Fit, directory: str | Path = RUNS_DIR, path: str | Path = FIT_PATH) -> Path:
    """Store `fit` (fit_runs over the run files of `directory`) where `prunesim train` loads it
    (sim.system.prunetrain_model.FIT_PATH), with the digest of those run files."""
    out = Path(path)
    doc = {"schema": 1, "runs_digest": runs_digest(directory),
           "note": "research.prunetrain.fitting.fit_runs over the run files of "
                   f"research/prunetrain/data/fitted; rewritten by `{WRITE_FIT}`",
           "fit": fit_to_doc(fit)}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


def stored_runs_digest(path: str | Path = FIT_PATH) -> str | None:
    """The runs_digest the stored fit was made with (None: no stored fit)."""
    try:
        return json.loads(Path(path).read_text()).get("runs_digest")
    except (OSError, ValueError):
        return None


def directory_fit(directory: str | Path = RUNS_DIR) -> Fit:
    """The fit of the runs in `directory`: the stored one when it was made from exactly these run
    files, else fitted now (a few minutes)."""
    if stored_runs_digest() == runs_digest(directory):
        return bundled_fit()
    return fit_runs(bundled_runs(str(directory)))


# The fits the held-out checks predict from, stored: each is a full fit_runs (a minute or more on
# one core), and `prunesim validate` makes about fifteen.
HELD_OUT_FITS = DATA_DIR / "held-out-fits.json"
# the modules whose code the fits depend on (the fit here, the model's keep and spread there)
CODE_FILES = (Path(__file__).resolve(), Path(prunetrain_model.__file__).resolve())


def code_text(path: str | Path) -> str:
    """A module's source without its docstrings, comments and blank lines: what its digest is
    taken over, so that rewording prose does not invalidate a stored fit."""
    src = Path(path).read_text()
    lines = src.splitlines()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for i in range(first.lineno - 1, first.end_lineno):
                    lines[i] = ""
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def code_digest() -> str:
    """sha256 over CODE_FILES' code (code_text)."""
    h = hashlib.sha256()
    for f in CODE_FILES:
        h.update(f.name.encode() + b"\0" + code_text(f).encode() + b"\0")
    return h.hexdigest()


def held_out_key(directory: str | Path = RUNS_DIR) -> dict:
    """What the stored held-out fits are valid for: the run files and the fitting code."""
    return {"runs_digest": runs_digest(directory), "code_digest": code_digest()}


def _train_key(train, spread: bool) -> str:
    return json.dumps([[r.name for r in train], bool(spread)])


@lru_cache(maxsize=1)
def _stored_held_out_fits() -> dict:
    """The stored held-out fits by training set, where HELD_OUT_FITS' key is the current one
    (held_out_key); else none."""
    try:
        doc = json.loads(HELD_OUT_FITS.read_text())
    except (OSError, ValueError):
        return {}
    if {k: doc.get(k) for k in ("runs_digest", "code_digest")} != held_out_key():
        return {}
    return {e["key"]: fit_from_doc(e["fit"]) for e in doc.get("fits", [])}


_fresh: dict = {}    # held-out fits made in this process (none stored for them)


def held_out_fit(train, spread: bool = False) -> Fit:
    """fit_runs(train, spread), read from HELD_OUT_FITS where it is stored for this training set
    and the file's key matches the run files and the code (bit-identical to fitting now); else
    fitted now, with one note on stderr, and kept for the rest of the process. Only runs as
    bundled_runs() reads them (the same objects) are looked up: any other RunData (another
    folder, a copy, a test's own) is fitted every time."""
    train = tuple(train)
    fitted = {id(r) for r in bundled_runs()}
    if not all(id(r) in fitted for r in train):
        return fit_runs(train, spread=spread)
    key = _train_key(train, spread)
    stored = _stored_held_out_fits()
    if key in stored:
        return stored[key]
    if key not in _fresh:
        if not _fresh:
            print(f"prunesim: {HELD_OUT_FITS.relative_to(DATA_DIR.parents[2])} does not hold "
                  "this held-out fit for the current run files and fitting code: fitting now "
                  f"(minutes a fit); store them with `{WRITE_FIT}`", file=sys.stderr)
        _fresh[key] = fit_runs(train, spread=spread)
    return _fresh[key]


def held_out_trains(runs=None) -> list[tuple[str, tuple[RunData, ...]]]:
    """(what, training runs) of every held-out check the validation makes: leave_one_out by rho
    and by noise, the leave_*_out groups and the 32 x 32 CIFAR-10 runs (cifar10_32)."""
    runs = tuple(runs or bundled_runs())
    out = [(f"{by}={v:g}", tuple(r for r in runs if getattr(r, by) != v))
           for by in ("rho", "noise") for v in sorted({getattr(r, by) for r in runs})]
    out += [(name, tuple(r for r in runs if not held(r))) for name, held in HELD_OUT_GROUPS]
    return [(what, train) for what, train in out if train and len(train) < len(runs)]


def _level_fit(train) -> Fit:
    """fit_runs without the spread (a module-level function: a worker process can run it)."""
    return fit_runs(train, spread=False)


def write_held_out_fits(path: str | Path = HELD_OUT_FITS, progress=None, jobs: int = 1) -> Path:
    """Fit every held_out_trains set (a few CPU-minutes each; `jobs` at once, each in its own
    process) and store the fits in `path`, keyed by held_out_key. progress(what): called as each
    fit starts (jobs 1) or ends."""
    todo, seen = [], set()
    for what, train in held_out_trains():
        key = _train_key(train, False)
        if key not in seen:
            seen.add(key)
            todo.append((what, key, train))
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            futures = [ex.submit(_level_fit, train) for _, _, train in todo]
            fits = []
            for (what, _, _), fu in zip(todo, futures):
                fits.append(fu.result())
                if progress:
                    progress(what)
    else:
        fits = []
        for what, _, train in todo:
            if progress:
                progress(what)
            fits.append(_level_fit(train))
    doc = {"schema": 1, **held_out_key(),
           "note": "fit_runs(spread=False) without each group of held-out runs "
                   f"(research.prunetrain.fitting.held_out_trains); rewritten by `{WRITE_FIT}`",
           "fits": [{"held_out": what, "key": key, "fit": fit_to_doc(f)}
                    for (what, key, _), f in zip(todo, fits)]}
    out = Path(path)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _stored_held_out_fits.cache_clear()
    return out


def held_out(train: list[RunData], test: list[RunData]) -> dict:
    """Fit without the `test` runs, predict them: RMS error of their kept fractions and their
    final kept fractions (plain spaces; residual nodes) measured vs predicted."""
    f = held_out_fit(train)     # the kind means only: no spread needed
    err = np.concatenate([np.concatenate([f.keep_run(r, False) - r.keep_plain]
                                         + ([f.keep_run(r, True) - r.keep_residual]
                                            if r.has_residual else []))
                          for r in test])
    fin = lambda xs: [round(float(x[-1]), 3) for x in xs]     # noqa: E731
    return {"runs": len(test), "rms": float(np.sqrt(np.mean(err ** 2))),
            "names": [r.name for r in test],
            "onset_measured": [row_epoch(r, first_cut(r.keep_plain)) for r in test],
            "onset_predicted": [row_epoch(r, first_cut(f.keep_run(r, False))) for r in test],
            "final_measured": fin(r.keep_plain for r in test),
            "final_predicted": fin(f.keep_run(r, False) for r in test),
            "final_measured_residual": fin(r.keep_residual for r in test),
            "final_predicted_residual": fin(f.keep_run(r, True) for r in test)}


def row_epoch(r: RunData, i: int | None) -> int | None:
    """The epoch of row i of a run (None: None, as first_cut gives where nothing is cut)."""
    return None if i is None else int(run_epochs(r)[i])


def first_cut(keep) -> int | None:
    """The first epoch at which a kept-fraction series is below 0.995 (None: never)."""
    return next((i for i, k in enumerate(keep) if k < 0.995), None)


def half_cut(keep) -> int | None:
    """The first epoch by which half of a kept-fraction series' final cut is done (None: no
    cut)."""
    if 1.0 - float(keep[-1]) < 1e-9:
        return None
    return int(np.argmax(time_course(keep) <= 0.5))


def leave_one_out(runs: tuple[RunData, ...] | None = None, by: str = "rho") -> list[dict]:
    """For every value of `by` (rho, or noise: the data's difficulty): fit without its runs,
    predict them (held_out)."""
    runs = tuple(runs or bundled_runs())
    out = []
    for v in sorted({getattr(r, by) for r in runs}):
        test = [r for r in runs if getattr(r, by) == v]
        train = [r for r in runs if getattr(r, by) != v]
        if train:
            out.append({by: v, **held_out(train, test)})
    return out


def leave_out(held, runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The runs for which `held(run)` is true, predicted by a fit to the others (held_out, with
    the held-out runs' names); None without such runs."""
    runs = tuple(runs or bundled_runs())
    out = [bool(held(r)) for r in runs]
    test = [r for r, o in zip(runs, out) if o]
    train = [r for r, o in zip(runs, out) if not o]
    return held_out(train, test) if test else None


def leave_paper_psl_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The natural-image runs at (or below) the paper's per-sample lr, predicted by a fit to the
    others: whether the temperature term learnt from the runs at 2-8x it carries to the
    paper's setting (None without such runs)."""
    return leave_out(paper_psl, runs)


def leave_paper_decay_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The natural-image runs at the paper's per-sample lr and another weight decay than
    REF_WEIGHT_DECAY, predicted by a fit to the others: whether the decay term learnt from the
    twins at 8x the per-sample lr carries to the paper's setting (None without such runs)."""
    return leave_out(paper_decay, runs)


# The clock a natural-image epoch adds at the paper's CIFAR schedule, lr x steps / (1 - momentum)
# = 0.1 x 391 / 0.1: every natural-image run but the clock grid's replays it (0.2 x 196, 0.4 x 98)
PAPER_EPOCH_CLOCK = 391.0


def epoch_clock(r: RunData) -> float:
    """A run's lr x steps / (1 - momentum) in its first epoch (RunData.first_clock)."""
    return float(r.lrsteps[0] if r.first_clock is None else r.first_clock)


def leave_clock_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The natural-image runs at another lr x steps an epoch than the paper's CIFAR schedule
    (`--grid clock`: a quarter and twice it), predicted by a fit to the others, all of which
    replay it: whether the clock's lr-weighted steps, rather than epochs, carry to another
    schedule (ImageNet's is 12.8x CIFAR's; None without such runs)."""
    return leave_out(other_clock, runs)


def leave_bottleneck_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The runs on bottleneck networks (expansion E != 1), predicted by a fit to the others, which
    has no E to fit and so predicts them as basic-block networks: how far the bottleneck's own
    kinds are from what the basic-block runs teach (None without such runs)."""
    return leave_out(bottleneck, runs)


def leave_four_stage_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The runs on four-stage networks (residual nodes over 3 halvings of the map: ImageNet
    ResNet-50's stages, `--grid resnet50`), predicted by a fit to the others, all of which have
    at most three stages (None without such runs)."""
    return leave_out(four_stage, runs)


def death_held_out(runs: tuple[RunData, ...] | None = None) -> list[dict]:
    """The block-death model held out by network: for each workload with residual blocks among
    the runs, its runs' plain spaces dead at their last epoch (SpaceData.dead_or_one), measured,
    against the expected count (sum of death_probability) from the death model fitted without
    that workload's runs (on the stored fit's spread), and in-sample (Fit.death)."""
    runs = runs or bundled_runs()
    fit = bundled_fit()
    out: list[dict] = []
    if fit.death is None:
        return out
    for net in sorted({r.workload for r in runs if r.has_residual}):
        test = [r for r in runs if r.workload == net]
        x, y, e = death_rows([r for r in runs if r.workload != net], fit)
        xt, yt, et = death_rows(test, fit, last_only=True)
        if not len(yt) or not 0 < y.sum() < len(y):
            continue
        out.append({"workload": net, "runs": len(test), "spaces": len(yt),
                    "measured": int(yt.sum()),
                    "predicted": float(death_probability(fit_death(x, y, e), xt, et).sum()),
                    "in_sample": float(death_probability(fit.death, xt, et).sum())})
    return out


def stages(r: RunData) -> int:
    """Feature-map sizes a run's residual nodes span: a ResNet's stages (0 without any)."""
    d = r.residual_spaces
    return 0 if d is None or not len(d.z) else int(round(float(d.z.max()))) + 1



def stage_spread(r: RunData, fit: Fit) -> dict[str, list[tuple[int, float, float]]]:
    """Per kind ("plain", "residual") and feature-map size (z, halvings from the largest): the
    run's last kept fraction of those spaces (channel-weighted) against what the fitted spread
    gives them from the run's own last mean of the kind: the spread's error apart from the
    level's (a chain's plain spaces take Fit.chain's spread)."""
    out = {}
    for kind, d in (("plain", r.plain_spaces), ("residual", r.residual_spaces)):
        if d is None or not len(d.c):
            continue
        resid = kind == "residual"
        k = d.keep[-1]
        score = spread_score(fit.spread_kind(resid, r.has_residual), d.z,
                             None if resid else d.later, d.floor, None if resid else d.stem)
        pred = spread_keep(float((k * d.c).sum() / d.c.sum()), d.c, score, d.floor)[0]
        at = lambda x, z: float((x * d.c)[d.z == z].sum() / d.c[d.z == z].sum())  # noqa: E731
        out[kind] = [(int(round(float(z))), at(k, z), at(pred, z)) for z in np.unique(d.z)]
    return out


# The groups of runs the held-out checks leave out (leave_*_out; held_out_trains)
def paper_psl(r: RunData) -> bool:
    """A natural-image run at (or below) the paper's per-sample lr."""
    return bool(r.natural and r.temperature <= 1.0)


def paper_decay(r: RunData) -> bool:
    """A natural-image run at the paper's per-sample lr and another weight decay than
    REF_WEIGHT_DECAY."""
    return bool(r.natural and r.temperature <= 1.0 and r.decay != 1.0)


def other_clock(r: RunData) -> bool:
    """A natural-image run at another lr x steps an epoch than the paper's CIFAR schedule."""
    return bool(r.natural and abs(epoch_clock(r) / PAPER_EPOCH_CLOCK - 1) > 0.02)


def bottleneck(r: RunData) -> bool:
    """A run on a bottleneck network (expansion E != 1)."""
    return r.expansion != 1.0


def four_stage(r: RunData) -> bool:
    """A run on a four-stage network (stages())."""
    return stages(r) >= 4


def cifar10_32(r: RunData) -> bool:
    """A run on 32 x 32 CIFAR-10 (Table 1's image size, the paper's per-sample lr: GPU runs)."""
    return "-cifar10-32-" in r.name


HELD_OUT_GROUPS = (("paper-psl", paper_psl), ("paper-decay", paper_decay),
                   ("other-clock", other_clock), ("bottleneck", bottleneck),
                   ("four-stage", four_stage), ("cifar10-32", cifar10_32))


def fit_death(channels, dead, expansion=1.0, iters: int = 100) -> tuple[float, float, float]:
    """(a, b, c) of sim.system.prunetrain_model.death_probability by maximum likelihood (Newton /
    IRLS; plain NumPy), with a small ridge (1e-3) so that separated data (a kind of network without
    a dead space) and a constant E (c then 0) still give finite coefficients."""
    X = _design(np.ravel(channels), np.ravel(np.broadcast_to(expansion, np.shape(channels))))
    y = np.ravel(np.asarray(dead, dtype=float))
    if len(y) == 0 or y.min() == y.max():
        raise ValueError("fit_death needs both dead and live spaces")
    w = np.zeros(3)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (y - p) - 1e-3 * w
        h = (X * (p * (1 - p))[:, None]).T @ X + 1e-3 * np.eye(3)
        step = np.linalg.solve(h, g)
        w = w + step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1]), float(w[2])
