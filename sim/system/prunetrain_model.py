"""PruneTrain channel-trajectory model with rho and the training schedule as inputs: the prediction.

The model is fitted to real group-lasso runs (research/prunetrain/data/fitted, made by
`python -m research.prunetrain.grids`; the fit is research.prunetrain.fitting). Its parameters are
stored in sim/data/prunetrain-fit.json, which this module loads without reading any run file;
research/ is not on the simulator's runtime path and sim never imports it.

The interface the simulator uses (sim.system.prunetrain): default_schedule and
authors_weight_decay (the schedule that sets the lasso dose), model_trajectory (channel widths per
reconfiguration epoch), high_lr_epochs, and bundled_fit (the stored Fit). Everything else here is
the model those build on.

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
(classes) alone a prediction's lambda was 7 % below the runs' on the median; docs/explanation/system.md).
An offset, not a ratio of ln(classes): logits spread with variance s^2 over the
classes give CE0 ~ ln(classes) + s^2 / 2 at any class count, and four networks at their init
measured the same offset at 10 and 100 classes within 0.05 (research.prunetrain.first_ce).

Model of one channel space's kept fraction, as PruneTrain counts it (a group is dead once every
weight is below 1e-4), per kind of space (plain spaces; residual nodes, which keep a channel any of
their convs still uses, the channel union), each kind fitted separately (KindFit):

    keep(u, H) = k_inf + (1 - k_inf) * (e + h * H * (1 - e)),
    e = exp(-(max(0, u - u_on) / u_scale)^m),   k_inf = exp(-a * max(0, P^gamma - p0)),
    P = rho / (1 - rho)   (p0: a lasso too weak to outweigh any used group's loss gradient
    prunes nothing, fitting.P0S; and the clock u runs x (1 - p0 / P^gamma)^z, drift_factor: near the
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
    basic-block and VGG runs only, PLAIN_FROM_BASIC in research.prunetrain.fitting; docs/explanation/system.md)

with the clock generalised to u = sum lr*steps/(1 - momentum) * (lambda/n0)^beta (beta 1: the dose
above; 0: lr-weighted steps), or, with a cap (KindFit.cap; the plain kind, fit_clock_cap),
(min(lambda/n0, cap) / cap)^beta: lr-weighted steps where the lasso is strong, the dose where it
is weak (the bottleneck runs' onsets, docs/explanation/system.md), H = 1 while the
schedule's lr is at its maximum: a share h of the channels the lasso has killed still hover
above 1e-4 until the first lr decay (the runs show the burst; on natural images h x nat_hover,
KindFit.nat_hover: their residual nodes release a third as many there), and from that decay on e
is taken at u + lag u_on (KindFit.lag, LAGS): the groups the lasso had nearly driven down fall
below the count once the lr, and the SGD noise that holds them up, is 10x smaller (ResNet-20
at a quarter of the lr x steps an epoch, whose cut was under way at the decay: docs/explanation/system.md).
The clock is lr-weighted steps, not epochs, on natural images too: at 1/4, 1 and 2x the paper's
lr x steps an epoch the first dead channel came at epoch 56 / 14 / 7 (`--grid clock`). beta, m,
gamma, h, lag, u_on, u_scale and a are fitted by least squares to every run's per-epoch kept
fractions (plain NumPy grid search, research.prunetrain.fitting.fit_runs; stored in
sim/data/prunetrain-fit.json). Widths are sampled at
reconfiguration epochs (every `interval` epochs), width = max(1, round(keep * C)), or 0 for the
inner spaces of a block the death model kills (death_probability, with_dead_blocks); the
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

Dead residual blocks. PruneTrain removes a residual block's path once a conv on it keeps no channel
(the authors' rm_layers.py; sim.system.trajectory.without_paths does it to a workload). Real runs
kill many: ResNet-20 on 16 x 16 CIFAR-10 at rho 0.25 ends with 4-5 of its 9 blocks' inner spaces
at one channel, ResNet-32 at the paper's setting with 2 of 15. A smooth spread of the kind's mean
over the spaces (spread_keep) never gets there: the real spaces scatter around it, and the low
tail dies. A space the spread gives x channels is dead with probability

    p(x) = 1 / (1 + exp(-(a + b ln(1 + x) + c ln E)))   (b < 0: fewer channels, likelier dead)

with E the network's expansion (expansion(): 1 for basic blocks, 4 for bottlenecks), fitted by
logistic regression to the runs (research.prunetrain.fitting.death_rows and fit_death: every 5th
epoch of every run with residual blocks, x from the fitted spread of the run's own mean, dead from
the run's `dead` records, or for runs recorded before those, one channel or none left). A block
dies when any of its plain spaces does: p_block = 1 - prod(1 - p_space). A trajectory is one
network, not a distribution, so `choose_dead` kills the expected number of blocks, round(sum
p_block), the likeliest first, and never revives one (PruneTrain cannot).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from sim.methods.prunetrain import space_channels
from sim.system.trajectory import Trajectory, layer_widths, residual_paths
from sim.workload import Workload, tensor_chw

# The stored fit (research.prunetrain.fitting.fit_runs over research/prunetrain/data/fitted;
# rewritten by `python -m research.prunetrain.grids --write-fit`)
FIT_PATH = Path(__file__).resolve().parents[1] / "data" / "prunetrain-fit.json"
WRITE_FIT = "python -m research.prunetrain.grids --write-fit"

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

DATASET_CLASSES = {"cifar10": 10, "cifar100": 100, "imagenet": 1000}
# Photographs of objects in scenes (backgrounds, pose, lighting): the data sets the paper prunes
# on. The bundled runs on them (CIFAR-10) keep far more channels at the paper's per-sample lr than
# the runs on centred digits and Fashion-MNIST products do, and only they depend on the per-sample
# lr: a level (KindFit.nu) and a temperature exponent (KindFit.eta) apply to them alone [U].
# cifar10rot: CIFAR-10's photographs turned by quarter turns (sim.capture.datasets).
NATURAL_IMAGES = frozenset({"cifar10", "cifar100", "imagenet", "cifar10rot"})
# The per-sample lr of the paper's CIFAR schedule (lr 0.1 at batch 128, VALIDATION.md C), which
# every bundled run replays in lr x steps (research.prunetrain.runs.PAPER_CIFAR*); the linear
# scaling rule keeps it under dynamic mini-batch. Predictions hold the temperature term at 1
# (model_trajectory; the CIFAR schedule is at this per-sample lr, ImageNet's at half of it, below
# every run): it only corrects runs made at another per-sample lr (the CPU runs' 8x) before they
# inform the level.
PAPER_PSL = 0.1 / 128


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
    fitted exponent is a compromise over 2-20 classes (docs/explanation/system.md)."""
    return math.log(max(int(classes), 2)) / math.log(10)


def lasso_pressure(rho: float) -> float:
    """P = rho / (1 - rho): lambda is set so that the penalty is rho of the loss at iteration 0.

    The data's difficulty D (training CE in the high-lr phase / ln classes) is measured in every
    run and reported, not a model input: the runs on noisy digits (CE 3-15x the clean runs') end
    at about the same kept fractions as the clean ones, so the loss level the data keeps up does
    not protect channels (irreducible loss needs no capacity); docs/explanation/system.md."""
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
    (research/prunetrain/data/authors) cut their 2 x 2 layers far harder than their 32 x 32
    ones (docs/explanation/system.md)."""
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
    (research/prunetrain/data/authors, CIFAR-10 / 100, rho 0.1-0.4) that space keeps far less
    than the depth
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
# 957 / 782 of 2048, MobileNet 906 / 418 of 1024; research/prunetrain/data/authors).
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
    of 2048 on ImageNet (research/prunetrain/data/authors; a check, not an input). A floor, not a
    level: where
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
    four (624 against 278; research/prunetrain/data/authors)."""
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


def high_lr_epochs(per_epoch: list, base_batch: int) -> np.ndarray:
    """Per epoch: is the schedule's lr (the lr without the dynamic-batch scaling) at its maximum?"""
    lr = np.array([p["lr"] * base_batch / p["batch"] for p in per_epoch])
    return lr >= 0.99 * lr.max()


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
    p0: float = 0.0        # k_inf's pressure threshold (thresholded; 0: none)
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

    def keep_run(self, r) -> np.ndarray:
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
    # (a, b, c) of death_probability over the plain spaces of residual
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

    def keep_run(self, r, residual: bool) -> np.ndarray:
        """The model's kept fraction at every epoch of a run, with the run's own inputs."""
        return self.kind(residual).keep_run(r)


def thresholded(pg, rest, p0: float):
    """k_inf's pressure term past the threshold p0: max(0, P^gamma - p0) x rest, pg = P^gamma
    and rest the init and input factors (numbers or per-row arrays)."""
    return np.maximum(0.0, pg - p0) * rest if p0 else pg * rest


def drift_factor(pg, p0: float, z: float):
    """What the lasso's threshold does to the clock: (max(0, 1 - p0 / P^gamma))^z (1 where z or
    p0 is 0; pg = P^gamma, a number or per-row array). Why: a group whose loss gradient pulls with
    g shrinks at lr (lambda - g) per step, not lr lambda, while lambda > g; the level's threshold
    p0 is where lambda meets the least g of the groups the loss uses, so near it the groups the
    lasso kills first drift down slowly, and a lasso at the threshold never finishes one
    (docs/explanation/system.md)."""
    if not (z and p0):
        return np.ones_like(pg) if isinstance(pg, np.ndarray) else 1.0
    return np.maximum(0.0, 1.0 - p0 / np.asarray(pg, dtype=float)) ** z


def _input_factor(columns, k, nu, eta, omega, xi):
    """The input terms' factor on k_inf's pressure, per row of `columns` (tt, nat, tmp, dec, ex;
    arrays in the fit, numbers in a prediction: one formula for both)."""
    tt, nat, tmp, dec, ex = columns
    return tt ** -k * np.exp(-nu * nat) * tmp ** (eta * nat) * dec ** omega * ex ** xi


def _hi(r) -> np.ndarray:
    """A run's per-row flags: the schedule's lr still at its maximum (none where not recorded)."""
    return r.high if r.high is not None else np.zeros(len(r.lrsteps), bool)


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
    # docs/explanation/system.md)
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
    """Per-space keep of a kind's plain spaces with dead blocks (death_probability): the
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


# ------------------------------------------------------------------------------- the stored fit


def fit_to_doc(fit: Fit) -> dict:
    """A Fit as JSON-ready data (the "fit" entry of FIT_PATH; fit_from_doc reads it back)."""
    return {"plain": dataclasses.asdict(fit.plain),
            "residual": dataclasses.asdict(fit.residual),
            "chain": dataclasses.asdict(fit.chain) if fit.chain else None,
            "death": list(fit.death) if fit.death else None,
            "ce0_offset": fit.ce0_offset, "runs": list(fit.runs), "rms": fit.rms}


def fit_from_doc(d: dict) -> Fit:
    """The Fit of fit_to_doc's data (floats round-trip through JSON exactly)."""
    return Fit(KindFit(**d["plain"]), KindFit(**d["residual"]), tuple(d["runs"]),
               d["rms"], KindFit(**d["chain"]) if d.get("chain") else None,
               tuple(float(v) for v in d["death"]) if d.get("death") else None,
               float(d["ce0_offset"]))


@lru_cache(maxsize=4)
def bundled_fit(path: str = str(FIT_PATH)) -> Fit:
    """The stored fit (FIT_PATH): the model's parameters as fitted to the runs in
    research/prunetrain/data/fitted. Read as it is: which run files it was made from is checked by
    the research tests (its runs_digest), not here."""
    try:
        return fit_from_doc(json.loads(Path(path).read_text())["fit"])
    except OSError as e:
        raise ConfigError(path, "fit", f"no stored PruneTrain fit ({e.strerror}); write it with "
                          f"`{WRITE_FIT}`") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(path, "fit", f"unreadable stored fit ({e}); rewrite it with "
                          f"`{WRITE_FIT}`") from None


# ------------------------------------------------------------------------------- dead blocks


def _design(channels, expansion) -> np.ndarray:
    x = np.log1p(np.maximum(np.asarray(channels, dtype=float), 0.0))
    e = np.log(np.broadcast_to(np.asarray(expansion, dtype=float), x.shape))
    return np.column_stack([np.ones_like(x), x, e])


def death_probability(coef: tuple[float, ...], channels, expansion=1.0) -> np.ndarray:
    """p(x) for spaces the spread gives `channels` channels (fractional) each, in a network of
    expansion E (a scalar, or one per space)."""
    c = np.zeros(3)
    c[:len(coef)] = coef
    shape = np.shape(channels)
    z = _design(np.ravel(channels), np.ravel(np.broadcast_to(expansion, shape))) @ c
    return (1.0 / (1.0 + np.exp(-z))).reshape(shape)


def block_groups(workload: Workload, spaces: list[str]) -> list[list[int]]:
    """Per residual block whose path writes any of `spaces` (a kind's plain spaces, in order):
    the indices of those spaces. A space on no block's path (VGG's) is in no group."""
    layers = {l.name: l for l in workload.layers}
    where = {s: i for i, s in enumerate(spaces)}
    groups: dict[str, list[int]] = {}
    for name, rp in residual_paths(workload).items():
        s = layers[name].out_space
        if s in where and where[s] not in groups.setdefault(rp.add, []):
            groups[rp.add].append(where[s])
    return [sorted(g) for g in groups.values() if g]


def block_death(p_space: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """p_block = 1 - prod over the block's spaces of (1 - p_space)."""
    return np.array([1.0 - float(np.prod(1.0 - p_space[g])) for g in groups])


def choose_dead(p_block: np.ndarray, before: frozenset[int] = frozenset()) -> frozenset[int]:
    """The blocks (indices into p_block) dead in one realisation: round(sum p_block) of them, at
    least those dead `before`, the rest the likeliest (ties: the later block)."""
    n = max(len(before), int(math.floor(float(p_block.sum()) + 0.5)))
    order = sorted((i for i in range(len(p_block)) if i not in before),
                   key=lambda i: (-p_block[i], -i))
    return frozenset(before) | frozenset(order[:max(0, n - len(before))])
