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

A uniform ring (every rank's link has the level's alpha and beta, as every Level here has) needs no
event queue at all: every rank starts step s when its own step s-1 and its predecessor's both end,
at the same instant, so the SimPy clock of a phase is the phase's start plus its per-step delays,
added one at a time in float64 (gamma, then alpha + chunk*beta, per reduce-scatter step).
`ring_phase_end` computes exactly that sum, bit for bit, in a number of operations that grows with
log2(p), not p: within one binade of the clock every addition of the same delay rounds to the same
increment, so a run of additions inside a binade is one integer multiply (module `_repeat_add`).
`simulate_allreduce` uses it by default (`engine="uniform"`); `engine="simpy"` runs the event
simulation, whose cost grows as p^2 per ring (p rank processes of p-1 steps each); the tests check
both give the same float for every level shape they draw.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
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


def _repeat_add(t: float, deltas: tuple[float, ...], rounds: int) -> float:
    """`t` after `rounds` rounds of `for d in deltas: t = t + d` in float64 (non-negative deltas,
    t >= 0), bit for bit, in O(binades crossed) steps.

    Inside the binade [2^(e-1), 2^e) of t, floats are the multiples of u = ulp(t); t + d rounds to
    t + round_u(d) for every t of the binade, unless d's remainder modulo u is exactly u/2 (a tie,
    where round-half-even looks at t's last bit) or the sum leaves the binade. So while a whole
    round stays below 2^e and no delta ties, a round adds the same integer number of u's, and n
    rounds are one integer multiply; the round that would cross the binade's top (or a tie) is
    added one float addition at a time, as the event simulation adds it."""
    deltas = tuple(d for d in deltas if d != 0.0)   # SimPy skips a zero reduce step; t + 0 = t
    while rounds > 0 and deltas:
        if t > 0.0 and math.isfinite(t):
            u = math.ulp(t)
            top = math.ldexp(1.0, math.frexp(t)[1])      # t < top, the binade's end
            units = []
            for d in deltas:
                if d >= top:
                    break                                 # one addition leaves the binade
                r = math.fmod(d, u)                       # exact
                if 2.0 * r == u:
                    break                                 # a tie: one round by float additions
                units.append(int((d - r) / u) + (1 if 2.0 * r > u else 0))
            else:
                per_round = sum(units)
                if per_round == 0:
                    return t                              # every delta rounds away at this t
                big_t, big_top = int(t / u), int(top / u)
                # rounds after which every partial sum is still at most top - u
                n = min(rounds, (big_top - 1 - big_t) // per_round)
                if n > 0:
                    t = float(big_t + n * per_round) * u  # exact: an integer < 2^53 times 2^k
                    rounds -= n
                    continue
        for d in deltas:
            t = t + d
        rounds -= 1
    return t


def ring_phase_end(start: float, level: Level, chunk: float, reduce: bool) -> float:
    """The SimPy clock at the end of one ring reduce-scatter (reduce=True) or all-gather of
    `chunk`-byte steps on `level`, started at `start`: _ring_phase's schedule, evaluated without
    events (module docstring), the same float."""
    p = level.p
    if p < 2:
        return start
    step = level.alpha + chunk * level.beta
    reduce_t = chunk * level.gamma if reduce else 0.0
    t = start + step                                   # step 0: nothing to wait for
    t = _repeat_add(t, (reduce_t, step), p - 2)        # steps 1..p-2: reduce, then send
    return t + reduce_t if reduce_t else t             # the last chunk in, reduced


def allreduce_evaluation_steps(levels: Sequence[Level]) -> int:
    """Steps the uniform evaluation of one all-reduce over `levels` takes, as the work estimate of
    `train` counts them: per phase (a reduce-scatter and an all-gather per level), a jump and an
    addition per binade the clock crosses (about log2 p), at most p - 1 rounds. The event
    simulation's count would be p(p-1) per ring."""
    return sum(2 * min(l.p - 1, 2 * (l.p.bit_length() + 2)) for l in levels if l.p > 1)


def _phases(n: float, levels: Sequence[Level]):
    """(level, chunk bytes, reduce-scatter?) of each phase, in order: reduce-scatter on levels
    0..k-1 (shrinking shards), then all-gather back out from level k-1."""
    size = float(n)
    sizes = []
    for l in levels:
        sizes.append(size)
        size /= l.p
    order = [(i, True) for i in range(len(levels))] + \
            [(i, False) for i in reversed(range(len(levels)))]
    return [(levels[i], sizes[i] / levels[i].p, is_rs) for i, is_rs in order]


def simulate_allreduce(n: float, levels: Sequence[Level], full: bool = False,
                       engine: str = "uniform") -> float:
    """Simulated seconds of one hierarchical all-reduce of n bytes on idle links.

    engine "uniform" (default): each phase's ring evaluated by ring_phase_end, in O(log p);
    "simpy": the event simulation, one representative ring per phase (full=True: every ring
    instance). Both give the same float (tests/test_system.py)."""
    levels = [l for l in levels if l.p > 1]
    if not levels or n <= 0:
        return 0.0
    if engine == "uniform" and not full:
        t = 0.0
        for level, chunk, is_rs in _phases(n, levels):
            t = ring_phase_end(t, level, chunk, is_rs)
        return float(t)
    if engine not in ("uniform", "simpy"):
        raise ValueError(f"engine: expected uniform or simpy, got {engine!r}")
    total = 1
    for l in levels:
        total *= l.p
    env = simpy.Environment()

    def plan():
        for level, chunk, is_rs in _phases(n, levels):
            inst = total // level.p if full else 1
            yield env.all_of(_ring_phase(env, level, chunk, is_rs, inst))

    env.process(plan())
    env.run()
    return float(env.now)


@lru_cache(maxsize=4096)
def allreduce_seconds(n: float, levels: tuple[Level, ...]) -> float:
    """Memoized simulate_allreduce: a collective on the exclusive (FIFO) comm stream depends only
    on its size, so the iteration timeline simulates each distinct size once."""
    return simulate_allreduce(n, levels)
