"""Dead residual blocks: which blocks a PruneTrain trajectory model removes, and how likely each is.

PruneTrain removes a residual block's path once a conv on it keeps no channel (the authors'
rm_layers.py; sim.system.trajectory.without_paths does it to a workload). Real runs kill many:
ResNet-20 on 16 x 16 CIFAR-10 at rho 0.25 ends with 4-5 of its 9 blocks' inner spaces at one
channel, ResNet-32 at the paper's setting with 2 of 15. A smooth spread of the kind's mean over
the spaces (sim.system.lasso_model.spread_keep) never gets there: the real spaces scatter around
it, and the low tail dies. The model here: a space the spread gives x channels is dead with
probability

    p(x) = 1 / (1 + exp(-(a + b ln(1 + x))))          (b < 0: fewer channels, likelier dead)

fitted by logistic regression to the bundled runs (sim.system.lasso_model.death_rows: every 5th
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


def death_probability(coef: tuple[float, float], channels) -> np.ndarray:
    """p(x) for spaces the spread gives `channels` channels (fractional) each."""
    a, b = coef
    z = a + b * np.log1p(np.maximum(np.asarray(channels, dtype=float), 0.0))
    return 1.0 / (1.0 + np.exp(-z))


def fit_death(channels, dead, iters: int = 50) -> tuple[float, float]:
    """(a, b) of death_probability by maximum likelihood (Newton / IRLS; plain NumPy), with a
    tiny ridge so that perfectly separated data still gives finite coefficients."""
    x = np.log1p(np.maximum(np.asarray(channels, dtype=float), 0.0))
    y = np.asarray(dead, dtype=float)
    if len(x) == 0 or y.min() == y.max():
        raise ValueError("fit_death needs both dead and live spaces")
    X = np.column_stack([np.ones_like(x), x])
    w = np.zeros(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (y - p) - 1e-6 * w
        h = (X * (p * (1 - p))[:, None]).T @ X + 1e-6 * np.eye(2)
        step = np.linalg.solve(h, g)
        w = w + step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


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
