"""All-reduce: alpha-beta closed forms (HARDWARE.md section 6) and SimPy chunked-transfer simulation.

A ring all-reduce over p ranks is a reduce-scatter (p-1 steps) then an all-gather (p-1 steps); in
every step each rank sends one n/p chunk to its successor on its own outgoing link, and may send
step s only after the chunk of step s-1 from its predecessor arrived (and, in the reduce-scatter,
was reduced: gamma s/byte). A step costs alpha + (n/p)*beta on the link.

Hierarchical (multi-dimension) all-reduce, innermost dimension first: reduce-scatter along dim 1,
all-reduce the n/p1 shard along the remaining dimensions (recursively), all-gather along dim 1.
With two dimensions (g devices per node, N nodes) this is HARDWARE.md's
    T = 2(g-1)a_i + 2((g-1)/g) n b_i + 2(N-1)a_o + 2((N-1)/N)(n/g) b_o.

Why a simulation at all when the closed form exists: the simulation is the thing that can later
carry contention, uneven links and pipelined chunks; the closed form is its test oracle. Every
ring of a phase runs the same schedule on disjoint links (other nodes' intra rings; the g inter-node
rings of the shards), so by default one representative ring per phase is simulated; `full=True`
simulates every ring instance (the tests check both agree).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import simpy


@dataclass(frozen=True)
class Level:
    """One dimension as the collective sees it: ranks, alpha (s/step), beta (s/byte)."""

    p: int
    alpha: float
    beta: float
    gamma: float = 0.0   # s/byte of reduction compute (0: reduction hidden, as NCCL's model)


def levels_of(cluster) -> tuple[Level, ...]:
    """A cluster's dimensions as collective levels (dimensions of one device dropped)."""
    return tuple(Level(d.devices, d.alpha, d.beta) for d in cluster.dimensions if d.devices > 1)


# ---------------------------------------------------------------------------------- closed forms

def ring_reduce_scatter_time(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    return (p - 1) * alpha + (p - 1) / p * n * (beta + gamma)


def ring_all_gather_time(n: float, p: int, alpha: float, beta: float) -> float:
    return (p - 1) * alpha + (p - 1) / p * n * beta


def ring_allreduce_time(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Patarasuk & Yuan: 2(p-1)a + 2((p-1)/p) n b + ((p-1)/p) n g."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def hierarchical_2d_time(n: float, g: int, nodes: int, alpha_i: float, beta_i: float,
                         alpha_o: float, beta_o: float) -> float:
    """HARDWARE.md section 6, literally (no gamma)."""
    return (2 * (g - 1) * alpha_i + 2 * (g - 1) / g * n * beta_i
            + 2 * (nodes - 1) * alpha_o + 2 * (nodes - 1) / nodes * (n / g) * beta_o)


def allreduce_time(n: float, levels: Sequence[Level]) -> float:
    """Closed form of the hierarchical all-reduce over `levels` (innermost first)."""
    levels = [l for l in levels if l.p > 1]
    if not levels or n <= 0:
        return 0.0
    first, rest = levels[0], levels[1:]
    if not rest:
        return ring_allreduce_time(n, first.p, first.alpha, first.beta, first.gamma)
    return (ring_reduce_scatter_time(n, first.p, first.alpha, first.beta, first.gamma)
            + allreduce_time(n / first.p, rest)
            + ring_all_gather_time(n, first.p, first.alpha, first.beta))


def allreduce_bytes_sent(n: float, levels: Sequence[Level]) -> float:
    """Bytes one rank puts on the wire in the hierarchical all-reduce (all levels)."""
    levels = [l for l in levels if l.p > 1]
    if not levels or n <= 0:
        return 0.0
    first, rest = levels[0], levels[1:]
    return 2 * (first.p - 1) / first.p * n + allreduce_bytes_sent(n / first.p, rest)


# ------------------------------------------------------------------------------------ simulation

def _ring_phase(env: simpy.Environment, level: Level, chunk: float, reduce: bool, instances: int):
    """One reduce-scatter or all-gather on `instances` disjoint rings; returns their done-events."""
    p = level.p
    step = level.alpha + chunk * level.beta
    reduce_t = chunk * level.gamma if reduce else 0.0
    done = []
    for _ in range(instances):
        links = [simpy.Resource(env, capacity=1) for _ in range(p)]   # rank r -> r+1
        arrived = [[env.event() for _ in range(p - 1)] for _ in range(p)]

        def rank(r: int, links=links, arrived=arrived):
            for s in range(p - 1):
                if s > 0:
                    yield arrived[r][s - 1]
                    if reduce_t:
                        yield env.timeout(reduce_t)
                with links[r].request() as req:
                    yield req
                    yield env.timeout(step)
                arrived[(r + 1) % p][s].succeed()
            yield arrived[r][p - 2]          # the last chunk into this rank
            if reduce_t:
                yield env.timeout(reduce_t)

        done.extend(env.process(rank(r)) for r in range(p))
    return done


def simulate_allreduce(n: float, levels: Sequence[Level], full: bool = False) -> float:
    """Simulated seconds of one hierarchical all-reduce of n bytes on idle links."""
    levels = [l for l in levels if l.p > 1]
    if not levels or n <= 0:
        return 0.0
    total = 1
    for l in levels:
        total *= l.p
    env = simpy.Environment()

    def plan():
        # phases: RS on levels[0..k-2] (shrinking shards), AR (RS+AG) on the last, AG back out
        size = float(n)
        sizes = []
        for l in levels:
            sizes.append(size)
            size /= l.p
        order = [(i, True) for i in range(len(levels))] + \
                [(i, False) for i in reversed(range(len(levels)))]
        for i, is_rs in order:
            l = levels[i]
            inst = total // l.p if full else 1
            yield env.all_of(_ring_phase(env, l, sizes[i] / l.p, is_rs, inst))

    env.process(plan())
    env.run()
    return float(env.now)


@lru_cache(maxsize=4096)
def allreduce_seconds(n: float, levels: tuple[Level, ...]) -> float:
    """Memoized simulate_allreduce: a collective on the exclusive (FIFO) comm stream depends only
    on its size, so the iteration timeline simulates each distinct size once."""
    return simulate_allreduce(n, levels)
