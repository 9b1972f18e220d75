"""A communication saving split into the terms of the all-reduce model, per level of the hierarchy.

The hierarchical ring all-reduce of `collectives.allreduce_time` is linear in every level's alpha,
beta and gamma: level i (innermost first) sees the shard n_i = n / (p_0 ... p_{i-1}) and costs

    latency    2 (p_i - 1) alpha_i                 (per all-reduce call: one per DDP bucket)
    bandwidth  2 ((p_i - 1) / p_i) n_i beta_i
    reduction  ((p_i - 1) / p_i) n_i gamma_i

so `allreduce_terms` evaluates the closed form itself with every coefficient but one set to 0,
and the terms sum to `allreduce_time` (to rounding). A run's all-reduce time is the sum over its
epochs of iterations x the epoch's buckets; `run_comm_terms` sums the terms the same way, and
`saving_split` gives each term's share of a saving of `pruned` against `dense`:

    1 - P / D = sum_k (D_k - P_k) / D          (P, D: all-reduce seconds; k: a term)

The bandwidth terms of one bucket are proportional to its bytes with a coefficient that depends
on the levels only, so with every alpha at 0 the time saving equals the payload (bytes) saving at
any GPU count. The latency terms count all-reduce calls, not bytes: a pruned network has fewer
25 MB buckets but not proportionally fewer (the last bucket is partly filled), and the
outermost level's latency term grows with its ring size (2 (N - 1) alpha per call), so the time
saving falls below the byte saving as N grows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from sim.system.collectives import Level, allreduce_bytes_sent, allreduce_time

TERMS = ("latency", "bandwidth", "reduction")


def _active(levels: Sequence[Level]) -> tuple[Level, ...]:
    return tuple(l for l in levels if l.p > 1)


def allreduce_terms(n: float, levels: Sequence[Level]) -> dict[tuple[int, str], float]:
    """{(level index among the levels with p > 1, term): seconds} of one all-reduce of n bytes,
    each term the closed form `allreduce_time` with every other coefficient at 0."""
    levels = _active(levels)
    zero = [replace(l, alpha=0.0, beta=0.0, gamma=0.0) for l in levels]
    out = {}
    for i, l in enumerate(levels):
        for term, coef in zip(TERMS, (dict(alpha=l.alpha), dict(beta=l.beta), dict(gamma=l.gamma))):
            lv = list(zero)
            lv[i] = replace(zero[i], **coef)
            out[(i, term)] = allreduce_time(n, lv)
    return out


def allreduce_wire_by_level(n: float, levels: Sequence[Level]) -> list[float]:
    """Bytes one rank sends on each level in one all-reduce of n bytes: 2 ((p_i - 1) / p_i) n_i
    (they sum to `allreduce_bytes_sent`)."""
    out = []
    for l in _active(levels):
        out.append(allreduce_bytes_sent(n, (l,)))
        n /= l.p
    return out


@dataclass(frozen=True)
class RunComm:
    """A run's all-reduce as the model's terms: seconds per (level, term), the payload bytes,
    the wire bytes per level (one rank), all-reduce calls and iterations, summed over epochs."""

    terms: dict
    payload: float
    wire: tuple[float, ...]
    calls: int
    iterations: int

    @property
    def seconds(self) -> float:
        return sum(self.terms.values())


def run_comm_terms(run, levels: Sequence[Level]) -> RunComm:
    """Sum over `run`'s epochs of iterations x (terms of every bucket of the epoch's iteration).
    An epoch's iterations all have its widths, hence its buckets (the partial last iteration only
    has a smaller batch), so this is the closed form of the run's `comm_seconds` (for methods with
    one schedule phase: dense, prunetrain)."""
    levels = _active(levels)
    terms: dict = {(i, t): 0.0 for i in range(len(levels)) for t in TERMS}
    wire = [0.0] * len(levels)
    payload, calls, iters = 0.0, 0, 0
    for e in run.epochs:
        n_it = e.iterations
        iters += n_it
        for b in e.iteration.buckets:
            for k, v in allreduce_terms(float(b.bytes), levels).items():
                terms[k] += n_it * v
            for i, v in enumerate(allreduce_wire_by_level(float(b.bytes), levels)):
                wire[i] += n_it * v
            payload += n_it * b.bytes
            calls += n_it
    return RunComm(terms, payload, tuple(wire), calls, iters)


@dataclass(frozen=True)
class SavingSplit:
    """1 - pruned / dense of the all-reduce time, split into the terms' contributions
    ((D_k - P_k) / D, summing to `time`), with each term's dense share D_k / D and own saving
    1 - P_k / D_k; `bytes` the payload saving, `calls` and `iterations` the saving in all-reduce
    calls and in iterations."""

    time: float
    bytes: float
    contribution: dict
    share: dict
    term_saving: dict
    calls: float
    iterations: float
    dense: RunComm
    pruned: RunComm


def saving_split(dense, pruned, levels: Sequence[Level]) -> SavingSplit:
    d, p = run_comm_terms(dense, levels), run_comm_terms(pruned, levels)
    D = d.seconds
    contribution = {k: (d.terms[k] - p.terms[k]) / D for k in d.terms}
    share = {k: d.terms[k] / D for k in d.terms}
    term_saving = {k: 1 - p.terms[k] / d.terms[k] for k in d.terms if d.terms[k]}
    return SavingSplit(1 - p.seconds / D, 1 - p.payload / d.payload, contribution, share,
                       term_saving, 1 - p.calls / d.calls, 1 - p.iterations / d.iterations, d, p)
