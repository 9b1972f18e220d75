"""PruneTrain (Lym et al., SC19): channel masks from weights, with channel union, and the group lasso.

A channel of a channel space (tensors tied by residual adds and pools share one space, see
sim/workload.py) survives reconfiguration if ANY layer touching the space still uses it: a
producer's output channel whose weights are not all below the threshold, or a consumer's input
channel likewise. Between two plain layers that is "remove only the intersection of the sparsified
channels"; for a residual node it is the paper's channel union. FC input columns are grouped by
the channel they flatten from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.workload import Layer, Workload

ZERO_THRESHOLD = 1e-4


def dense_out_channels(w: np.ndarray, threshold: float = ZERO_THRESHOLD) -> np.ndarray:
    """Output channels with any |weight| >= threshold: W is (K, C, R, S) or (K, C)."""
    a = np.abs(np.asarray(w, dtype=np.float32)).reshape(w.shape[0], -1)
    return a.max(axis=1) >= threshold


def dense_in_channels(w: np.ndarray, layer: Layer, space_channels: int,
                      threshold: float = ZERO_THRESHOLD) -> np.ndarray:
    """Input channels (of the input channel space) with any |weight| >= threshold."""
    a = np.abs(np.asarray(w, dtype=np.float32))
    if layer.op == "fc":
        # flattened C*H*W columns: column j belongs to channel j // (H*W)
        a = a.reshape(a.shape[0], space_channels, -1).transpose(1, 0, 2).reshape(space_channels, -1)
        return a.max(axis=1) >= threshold
    if layer.groups > 1:
        # grouped conv: input channel c of group g sits at column c % (C/groups) of rows of group g
        k, cg = a.shape[0], a.shape[1]
        per = k // layer.groups
        out = np.zeros(layer.c_in, bool)
        for g in range(layer.groups):
            blk = a[g * per:(g + 1) * per].reshape(per, cg, -1).max(axis=(0, 2))
            out[g * cg:(g + 1) * cg] = blk >= threshold
        return out
    return a.transpose(1, 0, 2, 3).reshape(a.shape[1], -1).max(axis=1) >= threshold


@dataclass(frozen=True)
class ChannelPlan:
    """Kept channels per channel space and the resulting per-layer widths."""

    space_keep: dict[str, np.ndarray]        # space -> bool mask over its channels
    layer_c_in: dict[str, int]
    layer_c_out: dict[str, int]
    # spaces with no channel left: each keeps one all-zero channel (the layers stay well formed);
    # PruneTrain removes such a residual block's path (its rm_layers.py), a trajectory writes 0
    dead: frozenset = frozenset()

    def density(self, workload: Workload) -> float:
        """Remaining fraction of conv+FC weights."""
        before = sum(l.weight_count for l in workload.layers)
        after = 0
        for l in workload.layers:
            cin = self.layer_c_in[l.name]
            per_out = 1 if l.depthwise else (cin // l.groups if l.groups > 1 else cin)
            after += self.layer_c_out[l.name] * per_out * l.r * l.s
        return after / before


def space_channels(workload: Workload) -> dict[str, int]:
    """Channel count of every channel space touched by a conv or FC layer."""
    out: dict[str, int] = {}
    for l in workload.layers:
        out[l.out_space] = l.c_out
        if l.op == "conv":
            out.setdefault(l.in_space, l.c_in)
    for l in workload.layers:
        if l.op == "fc" and l.in_space not in out:
            out[l.in_space] = l.c_in
    return out


def channel_plan(workload: Workload, weights: dict[str, np.ndarray],
                 threshold: float = ZERO_THRESHOLD) -> ChannelPlan:
    """Reconfiguration: which channels every space keeps, given each layer's weights."""
    chans = space_channels(workload)
    first = workload.layers[0].name
    last = workload.layers[-1].name
    keep = {s: np.zeros(c, bool) for s, c in chans.items()}
    for l in workload.layers:
        if l.depthwise and l.name != first:
            # out of the lasso, it neither keeps nor drops a channel: the pointwise convs around
            # it decide its space (the authors' _makeSparse keeps their union through it)
            continue
        w = weights[l.name]
        if l.name == last and l.op == "fc":
            keep[l.out_space][:] = True          # the classifier's outputs are never pruned
        else:
            keep[l.out_space] |= dense_out_channels(w, threshold)
        if l.name == first:
            keep[l.in_space][:] = True           # nor the network input's channels
        else:
            keep[l.in_space] |= dense_in_channels(w, l, chans[l.in_space], threshold)
    dead = frozenset(s for s, m in keep.items() if not m.any())
    for s in dead:
        # a space whose every channel is zero keeps one (channel 0, all zeros): the layers around
        # it stay well formed, the network computes the same
        keep[s][0] = True
    c_in, c_out = {}, {}
    for l in workload.layers:
        kin = int(keep[l.in_space].sum())
        if l.op == "fc":
            c_in[l.name] = kin * (l.c_in // chans[l.in_space])
        else:
            c_in[l.name] = kin
        c_out[l.name] = int(keep[l.out_space].sum())
    return ChannelPlan(keep, c_in, c_out, dead)


def group_lasso_norm(workload: Workload, weights: dict[str, np.ndarray]) -> float:
    """R = sum over layers of input-channel and output-channel group L2 norms (authors' groups:
    input channels of every conv but the first, output channels of every conv, FC input columns;
    depthwise convs have none)."""
    total = 0.0
    first = workload.layers[0].name
    for l in workload.layers:
        if l.depthwise:
            continue        # the authors leave depthwise convs out of the lasso
        w = np.asarray(weights[l.name], dtype=np.float64)
        if l.op == "conv":
            total += np.sqrt((w ** 2).reshape(w.shape[0], -1).sum(axis=1)).sum()
            if l.name != first:
                total += np.sqrt((w ** 2).transpose(1, 0, 2, 3).reshape(w.shape[1], -1).sum(axis=1)).sum()
        else:
            total += np.sqrt((w ** 2).sum(axis=0)).sum()
    return float(total)


def lasso_lambda(rho: float, first_loss: float, group_norm: float) -> float:
    """lambda from the penalty ratio rho = lambda*R / (CE + lambda*R) at iteration 0."""
    if not 0.0 < rho < 1.0:
        raise ValueError(f"penalty ratio must be in (0, 1), got {rho}")
    return rho * first_loss / ((1.0 - rho) * group_norm)


# ------------------------------------------- the authors' cost accounting (METHODS.md 3)

def authors_macs(workload: Workload, batch: int) -> int:
    """PruneTrain authors' accounting (METHODS.md 3): conv N*(2*C*R*S*K*P^2 + (H+pad)^2*K*R*S*C),
    FC 3*K*C*N. '(H + pad)' is the padded input side H + 2*pad: the authors' cost script
    (src/scripts/calc_cost.py) adds pad = 2 to a 3 x 3 conv's input side. The one copy of the
    formula: a capture's per-epoch count and Table 1's training count both call it."""
    tot = 0
    for l in workload.layers:
        if l.op == "fc":
            tot += 3 * l.c_out * l.c_in * batch
        else:
            crs_k = l.c_in // l.groups * l.r * l.s * l.c_out
            # a deconv's FWD and WGC run per input pixel, its AGBP over its padded output
            pix = l.h * l.w if l.transposed else l.p * l.q
            ih, iw = (l.p, l.q) if l.transposed else (l.h, l.w)
            tot += batch * (2 * crs_k * pix + (ih + 2 * l.pad_h) * (iw + 2 * l.pad_w) * crs_k)
    return tot


def authors_bn_words(workload: Workload, batch: int) -> int:
    """PruneTrain authors' batch-norm traffic of one iteration (calc_cost.py's bn_cost, "(3 x
    NKPQ) + (5 x NKPQ)"): 8 N K P^2 words after every conv (their networks have a BN after each)."""
    return sum(8 * batch * l.c_out * l.p * l.q for l in workload.layers if l.op != "fc")


# ---- the registered method --------------------------------------------------------------------

import math  # noqa: E402

from sim.methods.info import MethodInfo  # noqa: E402
from sim.methods.registry import Method, Param, choice, pos_int, rate  # noqa: E402

# the options that only the lasso-dose trajectory model reads: a trajectory file, which fixes the
# widths and their epochs, refuses them (train, replay, sweep)
TRAJECTORY_MODEL_INPUTS = frozenset({"rho", "interval", "wd"})


def _weight_decay(v: str) -> float:
    x = float(v)
    # SGD weight decay per step, a coefficient (no unit); CNN training uses 1e-5..1e-3
    if not (math.isfinite(x) and 0 < x <= 0.01):
        raise ValueError("must be an SGD weight decay in (0, 0.01], e.g. 5e-4")
    return x


class PruneTrain(Method):
    """Acts on weights over epochs (channel_plan, and a channel trajectory at system level), not on
    one gradient tensor; capture trains it with its own loop (sim.capture.methods.PruneTrain)."""

    def apply(self, spec, layer, g, **ctx):
        raise ValueError("prunetrain acts on weights over epochs, not on one gradient tensor: "
                         "use sim.methods.prunetrain.channel_plan")


FAMILY = (
    PruneTrain(
        MethodInfo("prunetrain", "channels", "weights", ("fwd", "agbp", "wgc"), "channels",
                   transforms_tensor=False),
        # wd: the training's SGD weight decay (None: the authors' for the data set, 5e-4 on
        # CIFAR, 1e-4 on ImageNet; sim.system.prunetrain_model.authors_weight_decay), an input of the
        # lasso model. timing: "wall" (the step's whole time) or "authors" (as PruneTrain's
        # scripts time a step: less the group-lasso penalty's forward, sim.stepops._method_ops)
        {"rho": Param(rate, 0.2), "interval": Param(pos_int, 10),
         "wd": Param(_weight_decay, None, omitted=True),
         "timing": Param(choice("wall", "authors"), "wall", omitted=True)},
        {"capture": {"timing": "how a step is timed changes no value a capture records"}}),
)
