"""PruneTrain channel-trajectory model with rho and the training schedule as inputs, fitted to the
bundled real group-lasso runs (sim/data/prunetrain, made by tools/prunetrain_runs.py).

Why a lasso dose (the hypothesis; the fit decides how much of it holds). SGD on CE + lambda*R
moves every weight group against its norm by lr*lambda per step (lr*lambda/(1 - momentum) once
the momentum buffer is full); a group the cross-entropy does not hold up loses its initial norm n0
after about n0*(1 - momentum)/(lr*lambda) steps. So the clock of pruning is the dimensionless dose

    u(e) = sum over steps up to the end of epoch e of  lr_t * lambda / ((1 - momentum) * n0),
    lambda = rho * CE0 / ((1 - rho) * R0),  n0 = R0 / G  (mean initial group norm),

not epochs: the same u is reached with half the lr and twice the steps, and dynamic mini-batch
(lr scaled with the batch, steps per epoch divided by it) leaves u per epoch unchanged. A fitted
run's lambda and R0 are the ones it logged. A prediction's R0, G follow from the workload at the
init (PyTorch's default, kaiming-uniform, a = sqrt(5): an output-channel group of a conv has norm
sqrt(1/3), an input-channel group sqrt(K / (3 C)); or the authors' He fan-out); on the bundled
runs the analytic R0 is within 0.4 % of the logged one. Its CE0 is ln(classes) + Fit.ce0_offset,
the runs' median first CE above ln(outputs) (0.17: the first logits are not uniform; with ln
(classes) alone a prediction's lambda was 7 % below the runs' on the median; docs/system.md,
session 31). An offset, not a ratio of ln(classes): logits spread with variance s^2 over the
classes give CE0 ~ ln(classes) + s^2 / 2 at any class count, and four networks at their init
measured the same offset at 10 and 100 classes within 0.05 (tools/first_ce.py; session 32).

Model of one channel space's kept fraction, as PruneTrain counts it (a group is dead once every
weight is below 1e-4), per kind of space (plain spaces; residual nodes, which keep a channel any of
their convs still uses, the channel union), each kind fitted separately (KindFit):

    keep(u, H) = k_inf + (1 - k_inf) * (e + h * H * (1 - e)),
    e = exp(-(max(0, u - u_on) / u_scale)^m),   k_inf = exp(-a * max(0, P^gamma - p0)),
    P = rho / (1 - rho)   (p0: a lasso too weak to outweigh any used group's loss gradient
    prunes nothing, P0S; and the clock u runs x (1 - p0 / P^gamma)^z, drift_factor: near the
    threshold the groups drift down at lr (lambda - g), not lr lambda, KindFit.drift)
    (k_inf's pressure also divided by init_scale^delta and by T^kappa, T = ln(classes) / ln 10:
    a larger init and a task with more distinctions keep more; task_information; and, on natural
    images only (X = 1, natural_images), multiplied by e^(-nu X) (psl / PAPER_PSL)^(eta X), psl
    the run's per-sample lr: the CIFAR-10 runs at 8x the paper's per-sample lr prune far deeper
    than the same run at the paper's, the digits runs do not; predictions hold the temperature
    factor at 1 (CIFAR's schedule is at the paper's per-sample lr, ImageNet's at half of it,
    below every run); and multiplied by (wd / 1e-4)^omega, wd
    the SGD weight decay, which also speeds the clock, u x (wd / 1e-4)^omega_clock: the runs at
    the authors' CIFAR decay 5e-4 prune far sooner and deeper than their 1e-4 twins, and
    predictions use the authors' decay per data set, default_schedule; and multiplied by
    E^xi, E the network's expansion (residual node over the width of the blocks writing it: 1 for
    basic blocks, 4 for bottlenecks, expansion()), with the clock u x E^xi_clock: the bottleneck
    ResNet-29 runs, narrow and at ResNet-50's inner widths, prune their residual nodes deeper
    and their blocks' inner spaces less than their ResNet-20 twins; ResNet-50 is a bottleneck
    network. The residual kind's xi and xi_clock are fitted to them; the plain kind is fitted to
    basic-block and VGG runs only, PLAIN_FROM_BASIC, docs/system.md sessions 13-14)

with the clock generalised to u = sum lr*steps/(1 - momentum) * (lambda/n0)^beta (beta 1: the dose
above; 0: lr-weighted steps), or, with a cap (KindFit.cap; the plain kind, fit_clock_cap),
(min(lambda/n0, cap) / cap)^beta: lr-weighted steps where the lasso is strong, the dose where it
is weak (the bottleneck runs' onsets, docs/system.md sessions 20 and 22), H = 1 while the
schedule's lr is at its maximum: a share h of the channels the lasso has killed still hover
above 1e-4 until the first lr decay (the runs show the burst; on natural images h x nat_hover,
KindFit.nat_hover: their residual nodes release a third as many there), and from that decay on e
is taken at u + lag u_on (KindFit.lag, LAGS): the groups the lasso had nearly driven down fall
below the count once the lr, and the SGD noise that holds them up, is 10x smaller (ResNet-20
at a quarter of the lr x steps an epoch, whose cut was under way at the decay: docs/system.md,
session 24).
The clock is lr-weighted steps, not epochs, on natural images too: at 1/4, 1 and 2x the paper's
lr x steps an epoch the first dead channel came at epoch 56 / 14 / 7 (`--grid clock`). beta, m,
gamma, h, lag, u_on, u_scale and a are fitted by least squares to every run's per-epoch kept
fractions (plain NumPy grid search, fit_runs; stored in fit.json). Widths are sampled at
reconfiguration epochs (every `interval` epochs), width = max(1, round(keep * C)), or 0 for the
inner spaces of a block the death model kills (sim.system.block_death, with_dead_blocks); the
network input and the classifier outputs are never pruned. No published Table 1 number enters
the fit.

Within a kind the runs prune the low-resolution spaces hardest (every family of bundled runs: a
ResNet's last-stage residual node keeps 0.2-0.6 while its first keeps ~1; VGG's 4x4 layers keep
a tenth of what its 32x32 ones keep). So keep is the kind's channel-weighted mean K, spread over
its spaces as keep_s = K^(m exp(t z_s)): z_s the space's depth in the kind (halvings of the
feature-map side from the kind's largest map, over the kind's most: 0 first, 1 last), m solved
so that the channel-weighted mean stays K, the tilt t fitted per kind to the runs' per-space kept
fractions given their own K (KindFit.tilt; t = 0: uniform, the model before). FLOPs weight the
early, wide-map layers most, so the tilt keeps more FLOPs at the same K. Within a stage, the plain
spaces of the first block writing into a residual node keep ~4x (relative to K) what the later
blocks' keep: the later blocks sit behind identity shortcuts and can fade out whole, the first one
carries the stage's change of representation (Veit et al. 2016: deleting a later block of a stage
costs little accuracy, a downsampling one a lot). So the plain spaces' exponent also carries
exp(b L_s), L_s = 1 in a later block (later_blocks), b fitted with t (KindFit.block). And the
spaces that carry the classifier's input (the last stage's main path) keep at least as many
channels as the task has classes (classifier_floor: neural collapse), in the fit and in a
prediction alike; at ten classes it seldom binds, at CIFAR-100's and ImageNet's it does. A chain
(a network without residual nodes: VGG) spreads its plain keep with a spread of its own (Fit.chain,
fitted to the chain runs alone, spread_runs): no later blocks, and the last stage's spaces (those
with a classifier floor) get the exponent q (KindFit.last): with no shortcut to carry the
signal, a chain's spaces cannot fade out as a ResNet block's inner spaces do, and its last stage
is cut towards the class count.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from sim.methods.prunetrain import space_channels
from sim.system.block_death import (block_death, block_groups, choose_dead, death_probability,
                                    fit_death)
from sim.system.trajectory import Trajectory, layer_widths
from sim.workload import Workload, tensor_chw
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
# both put 0.17 / 0.15 (decay_release; docs/system.md, session 28)
NAT_HOVERS = (0.0, 0.25, 0.5, 0.75, 1.0)
TILTS = np.linspace(0.0, 10.0, 81)    # depth tilts t tried by the fit (keep_s = K^(m e^(t z_s)))
BLOCK_TILTS = np.linspace(0.0, 4.0, 17)   # later-block exponents b tried (plain spaces only)
LAST_TILTS = np.linspace(0.0, 4.0, 17)    # last-stage exponents q tried (a chain's spaces)
STEM_TILTS = np.linspace(-2.0, 4.0, 25)   # stem exponents tried (the space the first conv writes)
RUNS_DIR = Path(__file__).resolve().parents[1] / "data" / "prunetrain"
# The weight decay at which the decay term (wd / REF_WEIGHT_DECAY)^omega of k_inf's pressure is
# 1: most bundled runs' decay, and the authors' ImageNet one. Why a decay acts on the lasso: with
# BN after every conv the conv weights are scale-invariant, and SGD with decay settles their norm
# where the gradient's growth balances the decay's shrinking, ||w||^4 ~ lr / wd (van Laarhoven
# 2017; Wan et al. 2021, "spherical motion dynamics"): a larger decay gives smaller groups, which
# the same lambda (set once at iteration 0) then drives to zero sooner and further. The
# smaller norms both start the pruning sooner (the clock) and end it deeper (k_inf), so the decay
# enters both: u x (wd / REF)^omega_clock and k_inf's pressure x (wd / REF)^omega, the exponents
# fitted to the twin runs at 5e-4 (`--grid wd`, `--grid paper1x`); the norm argument alone would
# give about 1/4 for the group norms.
REF_WEIGHT_DECAY = 1e-4
OMEGAS = (0.0, 0.25, 0.5, 1.0, 1.5)     # weight-decay exponents of the pressure tried
CLOCK_OMEGAS = (0.0, 0.25, 0.5, 0.75, 1.0)   # ... and of the clock (only with such runs)
DATASET_CLASSES = {"cifar10": 10, "cifar100": 100, "imagenet": 1000}
# Photographs of objects in scenes (backgrounds, pose, lighting): the data sets the paper prunes
# on. The bundled runs on them (CIFAR-10) keep far more channels at the paper's per-sample lr than
# the runs on centred digits and Fashion-MNIST products do, and only they depend on the per-sample
# lr: a level (KindFit.nu) and a temperature exponent (KindFit.eta) apply to them alone [U].
# cifar10rot: CIFAR-10's photographs turned by quarter turns (sim.capture.datasets).
NATURAL_IMAGES = frozenset({"cifar10", "cifar100", "imagenet", "cifar10rot"})
# The per-sample lr of the paper's CIFAR schedule (lr 0.1 at batch 128, VALIDATION.md C), which
# every bundled run replays in lr x steps (sim.system.lasso_runs.PAPER_CIFAR*); the linear
# scaling rule keeps it under dynamic mini-batch. Predictions hold the temperature term at 1
# (model_trajectory; the CIFAR schedule is at this per-sample lr, ImageNet's at half of it, below
# every run): it only corrects runs made at another per-sample lr (the CPU runs' 8x) before they
# inform the level.
PAPER_PSL = 0.1 / 128
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
# and shape and raised its RMS from 0.076 to 0.126 (docs/system.md, session 14). The residual
# kind takes them at no cost (RMS 0.109 -> 0.110).
PLAIN_FROM_BASIC = True
# The plain kind's clock below the level runs' lambda / n0 (fit_clock_cap). The basic-block and
# VGG runs fix the plain kind's level and shape and choose a clock of lr-weighted steps alone
# (beta 0; a dose clock raises their RMS from 0.083 to 0.14): at their lambda / n0 (7e-5 to 2e-3)
# a group dies no sooner than the network's learning lets it, whatever the lasso's strength. The
# bottleneck runs, whose lambda / n0 reaches down to 4e-6, start pruning later the weaker the
# dose: first dead inner channel at epoch 21 to 90 as lambda / n0 falls 35x (docs/system.md,
# session 20), where the uncapped clock starts all of them at epoch ~17. So below a cap the clock
# is the lasso dose, (min(lambda / n0, cap) / cap)^beta x lr-weighted steps. (beta, cap) are
# fitted jointly to the level runs' kept fractions and the bottleneck runs' plain-space time
# course with the level removed ((keep - final) / (1 - final); their level is not the basic
# blocks', session 14), then the level refitted with that clock (fit_clock_cap, _fit_plain;
# session 22 had bounded the cap by the level runs' least lambda / n0, session 23 lets the level
# runs below it weigh in).
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
# at rho 0.1 keeps 0.70 / 0.66 (docs/system.md, session 23). Searched with gamma (GAMMAS).
P0S = (0.0, 0.02, 0.05, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25)
# The exponents z of the threshold's drift on the clock tried (drift_factor; 0: none), jointly
# with the threshold and gamma. 1 was tried as well, in a full refit: the search takes it at the
# level stage, and the finished fit is worse on the runs (RMS 0.0948 against 0.0946; the weak
# runs' ends 0.85 / 0.67 against the measured 0.94 / 0.76, z = 0.5: 0.92 / 0.72), so the grid
# stops at 0.5 (docs/system.md, session 33).
DRIFTS = (0.0, 0.5)


# Data sets that mix natural images with others: the natural share of their training images
MIXED_IMAGES = {"cifar10fashion": 0.5}   # CIFAR-10's 50,000 and 50,000 Fashion-MNIST images


def natural_images(dataset: str | None) -> float:
    """X: the share of natural images in a data set's training images (1 for NATURAL_IMAGES, 0
    for digits and products on a blank ground, MIXED_IMAGES' share for a union)."""
    return 1.0 if dataset in NATURAL_IMAGES else MIXED_IMAGES.get(dataset or "", 0.0)


def task_information(classes: int) -> float:
    """T = ln(classes) / ln(10): the information a label carries, relative to a 10-class task.
    The runs on CIFAR-10's two super-classes (same images, same lambda) prune far deeper than on
    its ten classes: channels are kept for the distinctions the task asks for. ln, not the count:
    the method itself normalises lambda by CE0 = ln(classes), and the count would extrapolate
    from 2-10 classes to ImageNet's 1000 by 100x instead of 3x. Beyond ten the runs disagree:
    the 20-class CIFAR-10 + Fashion-MNIST run pruned deeper than its 10-label control, so the
    fitted exponent is a compromise over 2-20 classes (docs/system.md, session 12)."""
    return math.log(max(int(classes), 2)) / math.log(10)


def lasso_pressure(rho: float) -> float:
    """P = rho / (1 - rho): lambda is set so that the penalty is rho of the loss at iteration 0.

    The data's difficulty D (training CE in the high-lr phase / ln classes) is measured in every
    run and reported, not a model input: the runs on noisy digits (CE 3-15x the clean runs') end
    at about the same kept fractions as the clean ones, so the loss level the data keeps up does
    not protect channels (irreducible loss needs no capacity); docs/system.md."""
    return rho / (1 - rho)


@dataclass(frozen=True)
class Schedule:
    """The training schedule that sets the lasso dose (global batch; lr at that batch)."""

    samples: int
    epochs: int
    batch: int
    lr: float
    decay_epochs: tuple[int, ...]     # lr x0.1 from each of these epochs on
    momentum: float = 0.9
    source: str = ""
    weight_decay: float = REF_WEIGHT_DECAY

    def lr_at(self, epoch: int) -> float:
        return self.lr * 0.1 ** sum(epoch >= d for d in self.decay_epochs)

    def steps_per_epoch(self) -> int:
        return math.ceil(self.samples / self.batch)


# The authors' step decays (their configs: cifar_*.yaml `schedule: '91 136'` of 182 epochs,
# imagenet_resnet50.yaml `schedule: '41 61 81'` of 90, lr x0.1 from each of these 1-based epochs
# on; train_batch 128 / 256 at lr 0.1), as fractions of the epochs so other lengths scale them.
CIFAR_DECAYS = (90 / 182, 135 / 182)       # 0-based epochs 90 and 135 of 182
IMAGENET_DECAYS = (40 / 90, 60 / 90, 80 / 90)


# The authors' SGD weight decay: their ImageNet scripts pass 1e-4; their cifar.py defaults
# `--weight-decay` to 5e-4 (its help text says 1e-4) and their CIFAR run-script does not set it.
IMAGENET_WEIGHT_DECAY = 1e-4
CIFAR_WEIGHT_DECAY = 5e-4


def authors_weight_decay(dataset: str) -> float:
    """The authors' SGD weight decay for a data set (any other than ImageNet: CIFAR's)."""
    return IMAGENET_WEIGHT_DECAY if dataset == "imagenet" else CIFAR_WEIGHT_DECAY


def default_schedule(dataset: str, epochs: int, global_batch: int, samples: int,
                     weight_decay: float | None = None) -> Schedule:
    """PruneTrain's schedules (the authors' configs; VALIDATION.md C: 182 CIFAR epochs at batch
    128, 90 ImageNet epochs at 256): lr 0.1 at batch 128 (CIFAR) / 256 (ImageNet), scaled linearly
    with the global batch, x0.1 from (1-based) epochs 91 and 136 of 182 (CIFAR) or 41, 61 and 81
    of 90 (ImageNet), scaled with the number of epochs; weight decay `weight_decay`, by default
    5e-4 (CIFAR) / 1e-4 (ImageNet), the authors' scripts' (any other data set: the CIFAR
    schedule)."""
    if dataset == "imagenet":
        lr = 0.1 * global_batch / 256
        dec = tuple(round(f * epochs) for f in IMAGENET_DECAYS)
        src = ("ImageNet: lr 0.1 per 256, x0.1 from epochs 41 / 61 / 81 of 90 (the authors' "
               "imagenet_resnet50.yaml), weight decay ")
        own = "1e-4"
    else:
        lr = 0.1 * global_batch / 128
        dec = tuple(round(f * epochs) for f in CIFAR_DECAYS)
        src = ("CIFAR: lr 0.1 per 128, x0.1 from epochs 91 / 136 of 182 (the authors' "
               "cifar_*.yaml), weight decay ")
        own = "5e-4 (their cifar.py default)"
    wd = authors_weight_decay(dataset) if weight_decay is None else weight_decay
    src += own if weight_decay is None else f"{weight_decay:g} (given)"
    return Schedule(samples, epochs, global_batch, lr, dec, 0.9, src, wd)


# The conv init the model assumes for the networks it predicts: the PruneTrain authors' CIFAR
# models re-initialise every Conv2d as N(0, 2 / (k_h k_w C_out)) (He et al. 2015, fan out; e.g.
# src/models/cifar/resnet32_flat.py of the authors' code), as torchvision's ResNets do for
# ImageNet. Its group norms are 2.2-2.3x PyTorch's default (kaiming_uniform, a = sqrt(5)), so the
# same rho gives a 2.2-2.3x smaller lambda. The runs record which init they used.
PAPER_INIT = "he_fan_out"
INITS = ("torch", "he_fan_out")


def init_group_norms(workload: Workload, init: str = "torch") -> tuple[float, int]:
    """(R0, G): the expected group-lasso norm sum and the number of groups at initialisation:
    "torch" (PyTorch's default, weight variance 1 / (3 fan_in)) or "he_fan_out" (convs 2 / (k_h
    k_w C_out); FC layers keep PyTorch's default). A group of n weights of variance v has norm
    ~ sqrt(n v)."""
    if init not in INITS:
        raise ValueError(f"unknown init {init!r} ({', '.join(INITS)})")
    first = workload.layers[0].name
    r, g = 0.0, 0
    for l in workload.layers:
        cin = l.c_in // l.groups
        if l.depthwise:
            continue    # the authors leave depthwise convs out of the lasso (MobileNet)
        if l.op == "conv":
            if init == "he_fan_out":
                r += l.c_out * math.sqrt(2 * cin / l.c_out)        # n = cin k^2
            else:
                r += l.c_out * math.sqrt(1 / 3)
            g += l.c_out
            if l.name != first:
                if init == "he_fan_out":
                    r += l.c_in * math.sqrt(2 / l.groups)          # n = C_out k^2 / groups
                else:
                    r += l.c_in * math.sqrt(l.c_out / (3 * cin * l.groups))
                g += l.c_in
        else:
            r += l.c_in * math.sqrt(l.c_out / (3 * l.c_in))
            g += l.c_in
    return r, g


def init_scale(workload: Workload, init: str) -> float:
    """R0 at `init` over R0 at PyTorch's default: how much larger the initial group norms are."""
    return init_group_norms(workload, init)[0] / init_group_norms(workload)[0]


def lambda_per_norm(workload: Workload, rho: float, init: str = PAPER_INIT,
                    ce0_offset: float = 0.0) -> float:
    """lambda / n0: lambda = rho CE0 / ((1 - rho) R0) over the mean initial group norm R0 / G,
    CE0 = ln(classes) + ce0_offset (0: uniform first logits; a prediction passes the fit's
    Fit.ce0_offset, from the runs' measured first CE)."""
    r0, g = init_group_norms(workload, init)
    classes = DATASET_CLASSES.get(workload.dataset or "", workload.layers[-1].c_out)
    return rho * (math.log(classes) + ce0_offset) / ((1 - rho) * r0) / (r0 / g)


def clock_factor(lam_n: float, beta: float, cap: float = 0.0) -> float:
    """What lambda / n0 multiplies the clock's lr-weighted steps by: (lambda / n0)^beta, or with a
    cap (KindFit.cap > 0) (min(lambda / n0, cap) / cap)^beta: at or above the cap the clock is the
    lr-weighted steps alone, below it the lasso dose slows it."""
    return (min(lam_n, cap) / cap) ** beta if cap > 0 else lam_n ** beta


def dose_per_epoch(workload: Workload, rho: float, sched: Schedule, beta: float = 1.0,
                   init: str = PAPER_INIT, cap: float = 0.0,
                   ce0_offset: float = 0.0) -> np.ndarray:
    """The clock at the end of every epoch (cumulative): sum lr*steps/(1-momentum) x
    clock_factor(lambda/n0, beta, cap). beta = 1 (no cap) is the lasso dose u; beta = 0 counts
    lr-weighted steps only. ce0_offset: lambda_per_norm's."""
    per = [sched.lr_at(e) * sched.steps_per_epoch() for e in range(sched.epochs)]
    return (np.cumsum(per) / (1 - sched.momentum)
            * clock_factor(lambda_per_norm(workload, rho, init, ce0_offset), beta, cap))


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
    noise: float = 0.0            # the run's pixel-noise difficulty dial (sim.system.lasso_runs)
    high: np.ndarray | None = None  # per epoch: the schedule's lr still at its maximum
    init_scale: float = 1.0       # the run's R0 over PyTorch's default init's (init_scale())
    has_residual: bool = True     # the network has residual nodes (VGG has none)
    plain_spaces: SpaceData | None = None     # per-space kept fractions (the tilt's data)
    residual_spaces: SpaceData | None = None
    weight_decay: float = REF_WEIGHT_DECAY    # the run's SGD weight decay
    coarse: bool = False          # CIFAR-10's labels merged into 2 super-classes (lasso_runs)
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


def _kinds(workload: Workload) -> tuple[list[str], list[str]]:
    """The prunable channel spaces, split into plain and residual (channel union) ones."""
    chans = space_channels(workload)
    first, last = workload.layers[0], workload.layers[-1]
    fixed = {first.in_space} | ({last.out_space} if last.op == "fc" else set())
    residual = {l.residual_node for l in workload.layers if l.residual_node}
    spaces = [s for s in chans if s not in fixed]
    return [s for s in spaces if s not in residual], [s for s in spaces if s in residual]


def space_areas(workload: Workload) -> dict[str, int]:
    """Feature-map area (height x width) of every channel space, from the first layer that
    writes it (a conv's input space from the conv, for the network input)."""
    chw = tensor_chw(workload)
    area: dict[str, int] = {}
    for l in workload.layers:
        area.setdefault(l.out_space, chw[l.out_tensor][1] * chw[l.out_tensor][2])
        if l.op == "conv":
            area.setdefault(l.in_space, chw[l.in_tensor][1] * chw[l.in_tensor][2])
    return area


def map_depth(workload: Workload, spaces: list[str]) -> np.ndarray:
    """z of each space among `spaces`: halvings of its feature-map side from the largest map of
    these spaces (0: the largest maps; all 0 when the spaces share one size). Not normalised: the
    resolution a channel works at is what the lasso sees (a channel of a 2 x 2 map gets 1/256 of
    the gradient positions of one at 32 x 32), and the runs decide it: one tilt per halving
    fits the bundled ResNet runs (2 halvings) and VGG runs (4 halvings) alike (0.375 each,
    fit_spread on each family), where depth as a share of the network (0..1) would need 0.75 for
    the ResNets and two thirds more for VGG. The authors' own final VGG networks
    (sim/data/authors) cut their 2 x 2 layers far harder than their 32 x 32 ones (docs/system.md,
    session 11)."""
    area = space_areas(workload)
    if not spaces:
        return np.zeros(0)
    a = np.array([float(area[s]) for s in spaces])
    return 0.5 * np.log2(a.max() / a)


def _block_ends(workload: Workload, plain: list[str], residual: list[str]) -> dict:
    """Per plain space: (the residual node its block writes, the index of the block's first
    layer reading the space), following the chain of convs from the space to the first layer
    writing a residual node; None for a space not followed by one (VGG's)."""
    res = set(residual)
    readers: dict[str, list[int]] = {}
    for i, l in enumerate(workload.layers):
        readers.setdefault(l.in_space, []).append(i)

    def block_end(s):
        for _ in range(len(workload.layers)):
            if s not in readers:
                return None
            i = readers[s][0]
            out = workload.layers[i].out_space
            if out in res:
                return out, i
            s = out
        return None

    return {s: block_end(s) for s in plain}


def stem_spaces(workload: Workload, spaces: list[str]) -> np.ndarray:
    """1 for the space among `spaces` that the network's first conv (the one reading the image)
    writes, else 0. Why it is set apart: in every one of the authors' nine final VGG networks
    (sim/data/authors, CIFAR-10 / 100, rho 0.1-0.4) that space keeps far less than the depth
    tilt gives it from the network's own mean (0.20-0.55 against 0.53-0.82), and the layer after
    it more; the bundled 32 x 32 VGG-11 runs do the same (0.25-0.45 against 0.34-0.69). Its
    output groups are the network's smallest: 27 weights of a 3 x 3 x 3 kernel, norm
    sqrt(2 * 3 / C_out) at the authors' He fan-out init against sqrt(2) for a C -> C conv, and
    the lasso shrinks every group by the same step. Fitted on the runs (KindFit.stem); in a
    basic-block ResNet the first conv writes a residual node, which has no such term."""
    first = workload.layers[0] if workload.layers else None
    stem = first.out_space if first is not None and first.op == "conv" else None
    return np.array([1.0 if s == stem else 0.0 for s in spaces])


def later_blocks(workload: Workload, plain: list[str], residual: list[str]) -> np.ndarray:
    """1 for each plain space in a later block of its stage, else 0: its block (the chain of
    convs from it to the first layer writing a residual node) is not the first, in layer order,
    to write that node. VGG's spaces, and any not followed by a residual node, get 0."""
    ends = _block_ends(workload, plain, residual)
    first: dict[str, int] = {}
    for e in filter(None, ends.values()):
        first[e[0]] = min(first.get(e[0], e[1]), e[1])
    return np.array([0.0 if ends[s] is None or ends[s][1] == first[ends[s][0]] else 1.0
                     for s in plain])


def expansion(workload: Workload) -> float:
    """E: how much wider a residual node is than the convs inside the blocks that write it
    (node channels over the mean channels of those blocks' plain spaces), channel-weighted over
    the nodes: 1 for basic blocks (ResNet-20/32), 4 for bottlenecks (ResNet-50), 1 without
    residual nodes (VGG). Why it may matter: a bottleneck's node channel is one of 4c read
    through a c-wide 1x1 conv, so each carries less of what the block needs, and its groups start
    smaller (the writing conv's output groups at the authors' init have norm sqrt(2 c / 4c), the
    reading conv's input groups at PyTorch's sqrt(c / (3 * 4c))). The bottleneck runs (`--grid
    bottleneck`, `--grid bottleneck-wide`) inform the residual kind's exponents (KindFit.xi,
    xi_clock)."""
    plain, res = _kinds(workload)
    chans = space_channels(workload)
    inner: dict[str, list[int]] = {}
    for s, end in _block_ends(workload, plain, res).items():
        if end is not None:
            inner.setdefault(end[0], []).append(chans[s])
    if not inner:
        return 1.0
    c = np.array([chans[n] for n in inner], dtype=float)
    e = np.array([chans[n] / np.mean(v) for n, v in inner.items()])
    return float((c * e).sum() / c.sum())


# Data sets whose schedule ends with the training error far from zero: ImageNet in 90 epochs
# (He et al. 2016, Fig. 4: the training-error curves of the ImageNet ResNets end far above zero;
# the CIFAR ones, Fig. 6, near it). Neural collapse, which sets the classifier floor, is a
# phenomenon of the terminal phase that follows zero training error (Papyan et al. 2020), so
# these get no floor. The authors' own ImageNet networks agree: all five in their code dump end
# with fewer channels at the classifier's input than ImageNet's 1000 classes (ResNet-50 769 /
# 957 / 782 of 2048, MobileNet 906 / 418 of 1024; sim/data/authors, session 25).
NOT_INTERPOLATED = frozenset({"imagenet"})


def classifier_floor(workload: Workload, classes: int) -> dict[str, int]:
    """The fewest channels the lasso leaves in each space that carries the classifier's input:
    min(channels, classes), for the spaces of the last stage (the classifier input's feature-map
    size) on the main path: every such space of a plain network (VGG), the residual node of a
    residual one (its blocks' inner spaces can fade out behind the shortcut).

    Why: at the end of training the classifier's input features collapse onto their class means,
    which form a simplex (Papyan, Han & Donoho 2020, "Prevalence of neural collapse during the
    terminal phase of deep learning training", PNAS 117(40)): C class means of ReLU (non-negative,
    uncentred) features span C dimensions, so fewer than C channels cannot hold them apart and
    their groups keep cross-entropy gradient the lasso cannot beat. The bundled 10-class runs
    that prune hardest stop at 10-14 channels there (VGG-11 on Fashion-MNIST 10 / 12 of 512,
    ResNet-32 on Fashion-MNIST 10-14 of 64), the 20-class runs at 32-56; the authors' own
    networks keep 125 of 512 on CIFAR-100 against 27 on CIFAR-10 (VGG-11 rho 0.3) and 769 / 957
    of 2048 on ImageNet (sim/data/authors; a check, not an input). A floor, not a level: where
    the lasso keeps more, the model's spread decides."""
    if workload.dataset in NOT_INTERPOLATED:
        return {}       # no terminal phase, no collapse (NOT_INTERPOLATED)
    if not any(l.op == "conv" for l in workload.layers):
        return {}       # the last stage is found by its feature-map size: a CNN's notion
    last = workload.layers[-1]
    plain, res = _kinds(workload)
    area = space_areas(workload)
    target = area.get(last.in_space)
    if target is None:
        return {}
    chans = space_channels(workload)
    main = res if res else plain
    return {s: min(chans[s], int(classes)) for s in main if area.get(s) == target}


def spread_keep(k_mean, c: np.ndarray, score, floor=None) -> np.ndarray:
    """Per-space keep (rows: the entries of k_mean; columns: the spaces) K^(m exp(score)),
    score = t z (+ b L for plain spaces), with m solved by bisection (in log m) so that
    sum c keep = K sum c, for every K in (0, 1) (K = 0 or 1: every space alike); then raised to
    each space's floor (classifier_floor over its channels; none: 0). A constant score and no
    floor give K everywhere. The floor is added, not taken from the other spaces: K is the
    lasso's mean where no floor binds (the fitted runs', whose floors seldom bind), and the
    authors' own VGG-11 keeps 34 % more channels in all on CIFAR-100 than on CIFAR-10 at rho
    0.3 (1097 against 816), fewer in its first four layers (473 against 538), more in its last
    four (624 against 278; sim/data/authors)."""
    k = np.clip(np.atleast_1d(np.asarray(k_mean, dtype=float)), 0.0, 1.0)
    score = np.asarray(score, dtype=float)
    expo = np.exp(score - score.max()) if len(score) else score
    c = np.asarray(c, dtype=float)
    fl = np.zeros(len(c)) if floor is None else np.asarray(floor, dtype=float)
    inner = (k > 0.0) & (k < 1.0)
    out = np.repeat(k[:, None], len(c), axis=1)
    if len(c) < 2 or np.ptp(score) == 0.0 or not inner.any():
        return np.maximum(out, fl)
    kk = k[inner][:, None]
    lo = np.full(kk.shape, -30.0)          # log m
    hi = np.full(kk.shape, 30.0)
    target = kk[:, 0] * c.sum()
    for _ in range(48):                    # 60 / 2^48: far below a channel
        mid = 0.5 * (lo + hi)
        val = (c * kk ** (np.exp(mid) * expo)).sum(axis=1)
        more = val > target                # too much kept: a larger m prunes more
        lo = np.where(more[:, None], mid, lo)
        hi = np.where(more[:, None], hi, mid)
    out[inner] = kk ** (np.exp(0.5 * (lo + hi)) * expo)
    return np.maximum(out, fl)


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


def high_lr_epochs(per_epoch: list, base_batch: int) -> np.ndarray:
    """Per epoch: is the schedule's lr (the lr without the dynamic-batch scaling) at its maximum?"""
    lr = np.array([p["lr"] * base_batch / p["batch"] for p in per_epoch])
    return lr >= 0.99 * lr.max()


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


@dataclass(frozen=True)
class KindFit:
    """The fitted trajectory of one kind of channel space (plain, or residual node)."""

    a: float               # k_inf = exp(-a P^gamma)
    u_on: float            # clock value of the first dead group
    u_scale: float
    shape: float = 1.0     # Weibull shape of the approach to k_inf (1: exponential)
    hover: float = 0.0     # share of the dead channels still counted while the lr is at its max
    beta: float = 1.0      # clock: sum lr*steps/(1 - momentum) * (lambda/n0)^beta
    gamma: float = 1.0
    rms: float = 0.0
    delta: float = 0.0     # k_inf's pressure divided by init_scale^delta (larger init: less pruned)
    kappa: float = 0.0     # ... and by T^kappa (task_information; more distinctions: less pruned)
    tilt: float = 0.0      # depth tilt of the per-space keep (spread_keep; 0: uniform)
    block: float = 0.0     # exponent of a later block's plain spaces (later_blocks)
    last: float = 0.0      # exponent of the last stage's floored spaces (a chain's spread;
    #                        classifier_floor; Fit.chain)
    stem: float = 0.0      # exponent of the space the first conv writes (stem_spaces)
    tilt_rms: float = 0.0  # RMS of the per-space kept fractions given each run's own mean
    nu: float = 0.0        # natural images (natural_images): pressure x e^-nu
    eta: float = 0.0       # ... and x (per-sample lr / PAPER_PSL)^eta
    omega: float = 0.0     # ... and x (weight decay / REF_WEIGHT_DECAY)^omega
    omega_clock: float = 0.0   # the clock u x (weight decay / REF_WEIGHT_DECAY)^omega_clock
    xi: float = 0.0        # k_inf's pressure x E^xi (expansion(): bottleneck nodes)
    xi_clock: float = 0.0  # the clock u x E^xi_clock
    cap: float = 0.0       # the clock's lambda/n0 saturates here (clock_factor; 0: no cap)
    p0: float = 0.0        # k_inf's pressure threshold (P0S, thresholded; 0: none)
    lag: float = 0.0       # from the first lr decay on, the count runs lag x u_on ahead (LAGS)
    nat_hover: float = 1.0  # on natural images the hovering share is hover x this (NAT_HOVERS)
    drift: float = 0.0     # the clock x (1 - p0 / P^gamma)^drift (drift_factor; 0: off)

    def keep(self, rho: float, u, high=False, scale: float = 1.0, task: float = 1.0,
             natural: float = 0.0, temp: float = 1.0, decay: float = 1.0,
             expansion: float = 1.0) -> np.ndarray:
        k_inf = math.exp(-self.a * float(thresholded(
            lasso_pressure(rho) ** self.gamma, scale ** -self.delta
            * _input_factor((task, natural, temp, decay, expansion), self.kappa, self.nu,
                            self.eta, self.omega, self.xi), self.p0)))
        u = (np.asarray(u, dtype=float) * decay ** self.omega_clock * expansion ** self.xi_clock
             * drift_factor(lasso_pressure(rho) ** self.gamma, self.p0, self.drift))
        hi = np.asarray(high, dtype=float)
        x = np.maximum(0.0, u + self.lag * self.u_on * (1 - hi) - self.u_on) / self.u_scale
        e = np.exp(-x ** self.shape)
        h = self.hover * (1.0 - natural * (1.0 - self.nat_hover))
        return k_inf + (1 - k_inf) * (e + h * hi * (1 - e))

    def keep_run(self, r: "RunData") -> np.ndarray:
        """This kind's kept fraction at every epoch of a run, with the run's own inputs."""
        return self.keep(r.rho, r.u(self.beta, self.cap), _hi(r), r.init_scale, r.task,
                         r.natural, r.temperature, r.decay, r.expansion)


@dataclass(frozen=True)
class Fit:
    plain: KindFit
    residual: KindFit
    runs: tuple[str, ...]
    rms: float
    # the plain kind's level with the spread of a chain: a network without residual nodes (VGG),
    # every space on its only path (None without such runs: the plain spread then)
    chain: KindFit | None = None
    # (a, b, c) of sim.system.block_death.death_probability over the plain spaces of residual
    # blocks (death_rows); None: no block ever dies
    death: tuple[float, ...] | None = None
    # CE0 less ln(outputs) at the first iteration, the median of the fitted runs' (ce0_offset):
    # the fit's clock takes each run's logged lambda, so a prediction's lambda takes CE0 =
    # ln(outputs) + this, not ln(outputs) (a He-initialised network's first logits are not uniform)
    ce0_offset: float = 0.0

    def kind(self, residual: bool) -> KindFit:
        return self.residual if residual else self.plain

    def spread_kind(self, residual: bool, has_residual: bool) -> KindFit:
        """The fit whose spread (tilt, block, last) a kind's spaces take: a chain's plain spaces
        (no residual nodes in the network) Fit.chain's where fitted, else the kind's own."""
        if not (residual or has_residual) and self.chain is not None:
            return self.chain
        return self.kind(residual)

    def keep(self, rho: float, u_by_beta, residual: bool, high=False,
             scale: float = 1.0, task: float = 1.0, natural: float = 0.0,
             temp: float = 1.0, decay: float = 1.0, expansion: float = 1.0) -> np.ndarray:
        """Kept fraction as PruneTrain counts it (a group is dead once every weight is below
        1e-4). u_by_beta: a function (beta, cap) -> clock values (the kinds' clocks may
        differ), or the clock values themselves. high: the schedule's lr is still at its
        maximum. scale: the init's R0 over PyTorch's default's (init_scale). task:
        task_information(classes). natural: natural_images(dataset). temp: per-sample lr over
        PAPER_PSL. decay: weight decay over REF_WEIGHT_DECAY. expansion: the network's E
        (expansion())."""
        k = self.kind(residual)
        u = u_by_beta(k.beta, k.cap) if callable(u_by_beta) else u_by_beta
        return k.keep(rho, u, high, scale, task, natural, temp, decay, expansion)

    def keep_run(self, r: "RunData", residual: bool) -> np.ndarray:
        """The model's kept fraction at every epoch of a run, with the run's own inputs."""
        return self.kind(residual).keep_run(r)


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


def thresholded(pg, rest, p0: float):
    """k_inf's pressure term past the threshold (P0S): max(0, P^gamma - p0) x rest, pg = P^gamma
    and rest the init and input factors (numbers or per-row arrays)."""
    return np.maximum(0.0, pg - p0) * rest if p0 else pg * rest


def drift_factor(pg, p0: float, z: float):
    """What the lasso's threshold does to the clock: (max(0, 1 - p0 / P^gamma))^z (1 where z or
    p0 is 0; pg = P^gamma, a number or per-row array). Why: a group whose loss gradient pulls with
    g shrinks at lr (lambda - g) per step, not lr lambda, while lambda > g; the level's threshold
    p0 is where lambda meets the least g of the groups the loss uses, so near it the groups the
    lasso kills first drift down slowly, and a lasso at the threshold never finishes one
    (DRIFTS; docs/system.md, session 33)."""
    if not (z and p0):
        return np.ones_like(pg) if isinstance(pg, np.ndarray) else 1.0
    return np.maximum(0.0, 1.0 - p0 / np.asarray(pg, dtype=float)) ** z


def _input_factor(columns, k, nu, eta, omega, xi):
    """The input terms' factor on k_inf's pressure, per row of `columns` (tt, nat, tmp, dec, ex;
    arrays in the fit, numbers in a prediction: one formula for both)."""
    tt, nat, tmp, dec, ex = columns
    return tt ** -k * np.exp(-nu * nat) * tmp ** (eta * nat) * dec ** omega * ex ** xi


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
    8-32 against 134 of 2041; docs/system.md session 18). Why not before the decay:
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


def _hi(r: RunData) -> np.ndarray:
    return r.high if r.high is not None else np.zeros(len(r.lrsteps), bool)


FIT_FILE = "fit.json"     # the stored fit of the bundled runs (tools/prunetrain_runs.py --write-fit)


def runs_digest(directory: str | Path) -> str:
    """sha256 over the run files' names and bytes: the stored fit is valid for exactly these."""
    h = hashlib.sha256()
    for f in sorted(Path(directory).glob("*.yaml")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def write_fit(directory: str | Path, fit: Fit) -> Path:
    out = Path(directory) / FIT_FILE
    doc = {"schema": 1, "runs_digest": runs_digest(directory),
           "note": "fit_runs over the run files of this folder; rewritten by "
                   "`python tools/prunetrain_runs.py --write-fit`",
           "fit": {"plain": dataclasses.asdict(fit.plain),
                   "residual": dataclasses.asdict(fit.residual),
                   "chain": dataclasses.asdict(fit.chain) if fit.chain else None,
                   "death": list(fit.death) if fit.death else None,
                   "ce0_offset": fit.ce0_offset, "runs": list(fit.runs), "rms": fit.rms}}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


@lru_cache(maxsize=4)
def bundled_fit(directory: str = str(RUNS_DIR)) -> Fit:
    """The fit of the runs in `directory`: the stored one (fit.json) when it was made from exactly
    these run files, else fitted now (several seconds)."""
    f = Path(directory) / FIT_FILE
    if f.exists():
        try:
            doc = json.loads(f.read_text())
            if doc.get("runs_digest") == runs_digest(directory):
                d = doc["fit"]
                return Fit(KindFit(**d["plain"]), KindFit(**d["residual"]), tuple(d["runs"]),
                           d["rms"], KindFit(**d["chain"]) if d.get("chain") else None,
                           tuple(float(v) for v in d["death"]) if d.get("death") else None,
                           float(d["ce0_offset"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(str(f), "fit", f"unreadable stored fit ({e}); rewrite it with "
                              "`python tools/prunetrain_runs.py --write-fit`") from None
    return fit_runs(bundled_runs(directory))


def held_out(train: list[RunData], test: list[RunData]) -> dict:
    """Fit without the `test` runs, predict them: RMS error of their kept fractions and their
    final kept fractions (plain spaces; residual nodes) measured vs predicted."""
    f = fit_runs(train, spread=False)     # the kind means only: no spread needed
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
    return leave_out(lambda r: r.natural and r.temperature <= 1.0, runs)


def leave_paper_decay_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The natural-image runs at the paper's per-sample lr and another weight decay than
    REF_WEIGHT_DECAY, predicted by a fit to the others: whether the decay term learnt from the
    twins at 8x the per-sample lr carries to the paper's setting (None without such runs)."""
    return leave_out(lambda r: r.natural and r.temperature <= 1.0 and r.decay != 1.0, runs)


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
    return leave_out(lambda r: r.natural and abs(epoch_clock(r) / PAPER_EPOCH_CLOCK - 1) > 0.02,
                     runs)


def leave_bottleneck_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The runs on bottleneck networks (expansion E != 1), predicted by a fit to the others, which
    has no E to fit and so predicts them as basic-block networks: how far the bottleneck's own
    kinds are from what the basic-block runs teach (None without such runs)."""
    return leave_out(lambda r: r.expansion != 1.0, runs)


def leave_four_stage_out(runs: tuple[RunData, ...] | None = None) -> dict | None:
    """The runs on four-stage networks (residual nodes over 3 halvings of the map: ImageNet
    ResNet-50's stages, `--grid resnet50`), predicted by a fit to the others, all of which have
    at most three stages (None without such runs)."""
    return leave_out(lambda r: stages(r) >= 4, runs)


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


def spread_score(kf: KindFit, z, later=None, floor=None, stem=None) -> np.ndarray:
    """The fitted spread's score of a kind's spaces (spread_keep): tilt x z, + the later-block
    exponent on a space in a later block (`later`: plain spaces only), + the last-stage exponent
    on a space with a classifier floor, + the stem exponent on the space the first conv writes
    (`stem`: plain spaces only)."""
    score = kf.tilt * np.asarray(z, dtype=float)
    if stem is not None:
        score = score + kf.stem * np.asarray(stem, dtype=float)
    if later is not None:
        score = score + kf.block * later
    if floor is not None:
        score = score + kf.last * (np.asarray(floor) > 0)
    return score


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


def model_trajectory(workload: Workload, rho: float, interval: int, sched: Schedule,
                     fit: Fit | None = None, depth: float = 1.0, init: str = PAPER_INIT,
                     blocks: bool = True):
    """Channel widths from each reconfiguration epoch on, from the fitted model, for a network
    initialised as `init` (default: the authors' He fan-out init, PAPER_INIT).

    depth scales the pruned fraction, keep' = 1 - depth * (1 - keep) (1: the model). Not a model
    input: the validation's error budget uses it to feed the engine a trajectory of the model's
    shape whose FLOPs equal a published figure, separating the engine's error from the
    trajectory's. blocks: residual blocks die (Fit.death, with_dead_blocks) and their paths are
    removed, as PruneTrain removes them; False: every space keeps at least one channel (the
    spread alone; the validation's row without block death)."""
    if not (math.isfinite(depth) and depth >= 0.0):
        raise ConfigError(None, "depth", f"must be a finite number >= 0, got {depth}")
    fit = fit or bundled_fit()
    chans = space_channels(workload)
    plain, res = _kinds(workload)
    u = {(k.beta, k.cap): dose_per_epoch(workload, rho, sched, k.beta, init, k.cap,
                                         fit.ce0_offset)
         for k in (fit.plain, fit.residual)}
    scale = init_scale(workload, init)
    classes = DATASET_CLASSES.get(workload.dataset or "", workload.layers[-1].c_out)
    task = task_information(classes)
    # the temperature is held at 1: the CIFAR schedule is at PAPER_PSL, and ImageNet's (0.1 per
    # 256) at half of it, below every measured run (1x-8x, a step between 1x and 4x), where the
    # fitted power law would be an extrapolation (it would keep 1.2x more at rho 0.25 on ImageNet;
    # docs/system.md, session 34)
    natural = natural_images(workload.dataset)
    decay = sched.weight_decay / REF_WEIGHT_DECAY
    ex = expansion(workload)
    floor = classifier_floor(workload, classes)
    pts = [(0, ())]
    kinds = []
    for ss, resid in ((plain, False), (res, True)):
        if ss:
            c = np.array([chans[s] for s in ss], dtype=float)
            fl = np.array([floor.get(s, 0) for s in ss]) / c
            score = spread_score(fit.spread_kind(resid, bool(res)), map_depth(workload, ss),
                                 None if resid else later_blocks(workload, ss, res), fl,
                                 None if resid else stem_spaces(workload, ss))
            groups = block_groups(workload, ss) if fit.death and not resid and blocks else []
            kinds.append((ss, fit.kind(resid), c, score, fl, groups))
    dead: frozenset[int] = frozenset()
    for e in range(interval, sched.epochs, interval):
        width = dict(chans)
        high = sched.lr_at(e - 1) >= sched.lr
        for ss, kf, c, score, fl, groups in kinds:
            k = max(0.0, 1.0 - depth * (1.0 - float(kf.keep(rho, u[kf.beta, kf.cap][e - 1], high,
                                                             scale, task, natural, decay=decay,
                                                             expansion=ex))))
            if groups and (dead or (k < 1.0 and not high)):
                # a last channel hovers above the threshold while the lr is at its maximum
                # (death_rows): blocks die from the first lr decay on, and only where the lasso
                # prunes at all
                ks, dead = with_dead_blocks(k, c, score, fl, groups, fit.death, dead, ex)
                gone = dead_spaces(groups, dead, len(c))
            else:
                ks, gone = spread_keep(k, c, score, fl)[0], np.zeros(len(c), bool)
            for s, kk, cc, g in zip(ss, ks, c, gone):
                width[s] = 0 if g else max(1, round(cc * float(kk)))
        pts.append((e, layer_widths(workload, chans, width)))
    scaled = "" if depth == 1.0 else f", pruned fraction scaled x{depth:.3g}"
    died = f", {len(dead)} blocks removed" if dead else ""
    weak = [f"{name} (rho <= {t:.3g})" for name, t, ss in
            (("plain spaces", threshold_rho(fit.plain), plain),
             ("residual nodes", threshold_rho(fit.residual), res)) if ss and rho <= t]
    below = f"; at or below the lasso threshold of the {', '.join(weak)}: none pruned" \
        if weak else ""
    return Trajectory(tuple(pts), f"lasso-dose model fitted to {len(fit.runs)} real runs (rho={rho}, "
                                  f"interval={interval}, {init} init; {sched.source}{scaled}{died}"
                                  f"{below})")


def threshold_rho(kf: KindFit) -> float:
    """The rho at and below which a kind prunes nothing (P^gamma <= p0; 0 without a threshold)."""
    if not kf.p0:
        return 0.0
    p = kf.p0 ** (1.0 / kf.gamma)
    return p / (1.0 + p)


def with_dead_blocks(k: float, c: np.ndarray, score: np.ndarray, floor: np.ndarray,
                     groups: list[list[int]], coef: tuple[float, ...],
                     before: frozenset[int] = frozenset(),
                     expansion: float = 1.0) -> tuple[np.ndarray, frozenset[int]]:
    """Per-space keep of a kind's plain spaces with dead blocks (sim.system.block_death): the
    spread of the mean k gives each space its channels and death probability (in a network of
    expansion E, `expansion`); choose_dead kills
    the expected number of blocks (at least those dead `before`); their spaces keep 0, and the
    rest take the spread of what is left of the mean, k sum c less one channel per dead space
    (the runs' means, which the level is fitted to, count a dead space's one zero channel), so
    that the level stays the lasso's. Returns (keep per space, the dead blocks)."""
    ks = spread_keep(k, c, score, floor)[0]
    p = block_death(death_probability(coef, ks * c, expansion), groups)
    dead = choose_dead(p, before)
    if not dead:
        return ks, dead
    gone = dead_spaces(groups, dead, len(c))
    out = np.zeros(len(c))
    live = ~gone
    if live.any():
        rest = (k * c.sum() - gone.sum()) / c[live].sum()
        out[live] = spread_keep(min(1.0, max(0.0, rest)), c[live], score[live], floor[live])[0]
    return out, dead


def dead_spaces(groups: list[list[int]], dead: frozenset[int], n: int) -> np.ndarray:
    """Mask over a kind's n spaces: those in a dead block."""
    gone = np.zeros(n, bool)
    for b in dead:
        gone[groups[b]] = True
    return gone
