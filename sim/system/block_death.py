"""Dead residual blocks: which blocks a PruneTrain trajectory model removes, and how likely each is.

PruneTrain removes a residual block's path once a conv on it keeps no channel (the authors'
rm_layers.py; sim.system.trajectory.without_paths does it to a workload). Real runs kill many:
ResNet-20 on 16 x 16 CIFAR-10 at rho 0.25 ends with 4-5 of its 9 blocks' inner spaces at one
channel, ResNet-32 at the paper's setting with 2 of 15. A smooth spread of the kind's mean over
the spaces (sim.system.lasso_model.spread_keep) never gets there: the real spaces scatter around
it, and the low tail dies. The model here: a space the spread gives x channels is dead with
probability

    p(x) = 1 / (1 + exp(-(a + b ln(1 + x) + c ln E)))   (b < 0: fewer channels, likelier dead)

with E the network's expansion (sim.system.lasso_model.expansion: 1 for basic blocks, 4 for
bottlenecks), fitted by logistic regression to the bundled runs (sim.system.lasso_model.death_rows: every 5th
epoch of every run with residual blocks, x from the fitted spread of the run's own mean, dead
from the run's `dead` records, or for runs recorded before those, one channel or none left). A
block dies when any of its plain spaces does: p_block = 1 - prod(1 - p_space). A trajectory is
one network, not a distribution, so `choose_dead` kills the expected number of blocks,
round(sum p_block), the likeliest first, and never revives one (PruneTrain cannot).
"""
from __future__ import annotations

import math

import numpy as np

from sim.system.trajectory import residual_paths
from sim.workload import Workload


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


def fit_death(channels, dead, expansion=1.0, iters: int = 100) -> tuple[float, float, float]:
    """(a, b, c) of death_probability by maximum likelihood (Newton / IRLS; plain NumPy), with a
    small ridge (1e-3) so that separated data (a kind of network without a dead space) and a
    constant E (c then 0) still give finite coefficients."""
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
