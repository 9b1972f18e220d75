"""One training iteration on many devices, in SimPy: compute stream, DDP buckets, all-reduce stream.

Inputs are per-layer times (`layer_times`): FWD, AGBP and WGC seconds and the gradient bytes each
layer contributes. The engine of the device's hwconfig provides them through sim.driver; the
roofline model (documented below, labeled in every output) stands in only when asked for
(`train --roofline`) or when the device names no hwconfig. An engine error propagates.

The iteration (data-parallel, one replica per device, all devices symmetric):
  compute stream: FWD over layers in order, then the backward in reverse: per layer AGBP then WGC
  (a layer's gradient is ready when its WGC ends; a layer under the `zero` approximation this
  batch skips its WGC and sends no gradient);
  buckets: as PyTorch DDP, parameters in reverse order fill buckets up to the cap (25 MB by
  default); a bucket is launched when the last gradient in it is ready;
  comm stream: one collective at a time, FIFO (NCCL runs DDP's all-reduces on one stream), each the
  simulated hierarchical all-reduce of sim.system.collectives, overlapping the rest of the backward;
  optimizer step: after the backward and the last all-reduce; SGD with momentum streams weights,
  gradients and momentum (read 3, write 2 fp32 words per parameter) at the device's memory
  bandwidth.
Exposed communication is the time the optimizer step waits for the comm stream after the backward.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import simpy

from sim.system.collectives import Level, allreduce_bytes_sent, allreduce_seconds
from sim.workload import Gemm, Workload, lower

OPTIMIZER_WORDS_PER_PARAM = 5      # SGD momentum: read w, g, m; write w, m
OPTIMIZER_WORD_BYTES = 4           # fp32 master weights and momentum


@dataclass(frozen=True)
class LayerTimes:
    name: str
    fwd: float
    agbp: float
    wgc: float
    grad_bytes: int
    params: int


@dataclass(frozen=True)
class Timing:
    """Per-layer times of one workload at one batch and where they came from."""

    layers: tuple[LayerTimes, ...]
    source: str          # "engine:tensorcore (hw, dtype)", ROOFLINE_ASKED or ROOFLINE_NO_HW

    @property
    def fallback(self) -> bool:
        """Timed by the roofline model, asked for or not (callers label both; see `asked`)."""
        return self.source.startswith("roofline")

    @property
    def asked(self) -> bool:
        return self.source == ROOFLINE_ASKED


# the source of times from engine="roofline": the user chose the model (train --roofline), so it is
# named as a choice, not as a fallback; callers test `source.startswith("roofline")` for either
ROOFLINE_ASKED = ("roofline model (asked for with --roofline: peak_math and mem_bandwidth of the "
                  "cluster's device)")


# ------------------------------------------------------------------------------- layer times

def roofline_seconds(g: Gemm, peak_flops: float, mem_bw: float, dtype_bytes: int) -> float:
    """The roofline model: max(flops / peak math, compulsory operand bytes / memory bandwidth).

    Knows nothing of tiles, waves, odd channel counts or SIMD lanes: it cannot show why pruned
    layers run below peak, which is the engine's job (sim.engines.tensorcore)."""
    return max(g.flops / peak_flops, g.bytes(dtype_bytes) / mem_bw)


ENGINE_DTYPE = {2: "fp16", 4: "fp32"}   # activation bytes -> the engine's data type

# the source of times when the cluster's device names no hwconfig: nothing for an engine to read
ROOFLINE_NO_HW = ("roofline model (the device names no hwconfig: peak_math and mem_bandwidth of "
                  "the cluster's device)")


@lru_cache(maxsize=65536)
def _engine_layer_seconds(hw_name: str, layer, batch: int, dtype: str, spec=None) -> dict:
    """Engine seconds per phase of one layer (sim.driver); spec given: SDGP's nominal n:m result
    (on AGBP, where SDGP prunes). Engine errors propagate: there is no silent fallback."""
    from sim.driver import engine_for, phase_kernels
    from sim.methods.synthetic import nominal_nm_result
    mr = nominal_nm_result(spec, layer, batch) if spec is not None else None
    ks = phase_kernels(engine_for(_load_hw(hw_name)), layer, batch, mr, dtype=dtype)
    return {ph: sum(k.seconds for k in kl) for ph, kl in ks.items()}


@lru_cache(maxsize=16)
def _load_hw(name: str):
    from sim.hwconfig import load_hwconfig
    return load_hwconfig(name)


def layer_times(workload: Workload, batch: int, device, training, engine: str = "auto",
                method=None) -> Timing:
    """FWD/AGBP/WGC seconds and gradient bytes per layer at the workload's widths.

    engine: "auto" (the engine of the device's hwconfig, through sim.driver; the roofline model
    only when the device names no hwconfig, said in the source), "roofline" (the roofline model by
    choice: `train --roofline`). An engine error (a hwconfig that does not load, a layer the engine
    does not model) propagates as its one-line error: no silent fallback.
    method: a MethodSpec; SDGP (sdgp-*) prunes AGBP through the nominal n:m result (engine only;
    the roofline model has no sparse model). Every other method: dense times."""
    dt = int(training.activation_bytes.value)
    dtype = ENGINE_DTYPE.get(dt, "fp16")
    roofline = engine == "roofline" or not getattr(device, "hwconfig", None)
    sdgp = method if (method is not None and method.id.startswith("sdgp-")) else None
    gb = int(training.grad_bytes.value)
    hw = None if roofline else _load_hw(device.hwconfig)
    out = []
    for l in workload.layers:
        if roofline:
            t = {ph: 0.0 if ph == "agbp" and not l.needs_agbp else
                 roofline_seconds(g, device.peak_math.value, device.mem_bandwidth.value, dt)
                 for ph, g in lower(l, batch).items()}
        else:
            t = _engine_layer_seconds(device.hwconfig, l, batch, dtype, sdgp)
        out.append(LayerTimes(l.name, t["fwd"], t.get("agbp", 0.0), t["wgc"],
                              l.param_count * gb, l.param_count))
    if roofline:
        src = ROOFLINE_ASKED if engine == "roofline" else ROOFLINE_NO_HW
    else:
        src = f"engine:{'tensorcore' if hw.kind == 'gpu' else hw.kind} ({device.hwconfig}, {dtype})"
    return Timing(tuple(out), src)


def optimizer_seconds(params: int, mem_bw: float) -> float:
    return params * OPTIMIZER_WORDS_PER_PARAM * OPTIMIZER_WORD_BYTES / mem_bw


# ---------------------------------------------------------------------------------- iteration

@dataclass(frozen=True)
class Bucket:
    layers: tuple[str, ...]
    bytes: int
    ready: float       # when its last gradient was ready
    start: float       # when the comm stream began it
    end: float


@dataclass(frozen=True)
class IterationResult:
    seconds: float               # critical path: start of FWD to end of the optimizer step
    compute_seconds: float       # FWD + backward on the compute stream
    backward_end: float
    comm_seconds: float          # sum of all-reduce durations
    exposed_comm_seconds: float  # comm not hidden behind the backward
    optimizer_seconds: float
    comm_bytes: int              # gradient payload all-reduced
    wire_bytes: float            # bytes one rank sends
    skipped_wgc: tuple[str, ...] = ()
    skipped_bytes: int = 0
    buckets: tuple[Bucket, ...] = field(default=(), repr=False)

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "compute_seconds": self.compute_seconds,
                "comm_seconds": self.comm_seconds, "exposed_comm_seconds": self.exposed_comm_seconds,
                "optimizer_seconds": self.optimizer_seconds, "comm_bytes": self.comm_bytes,
                "wire_bytes_per_rank": self.wire_bytes, "buckets": len(self.buckets),
                "skipped_wgc": list(self.skipped_wgc), "skipped_bytes": self.skipped_bytes}


def make_buckets(layers: Sequence[LayerTimes], cap: float, skip: frozenset[str] = frozenset()
                 ) -> list[tuple[str, ...]]:
    """DDP bucket assignment: reverse layer order, a bucket closes once it holds >= cap bytes."""
    buckets, cur, size = [], [], 0
    for l in reversed(layers):
        if l.name in skip or l.grad_bytes == 0:
            continue
        cur.append(l.name)
        size += l.grad_bytes
        if size >= cap:
            buckets.append(tuple(cur))
            cur, size = [], 0
    if cur:
        buckets.append(tuple(cur))
    return buckets


def simulate_iteration(layers: Sequence[LayerTimes], levels: tuple[Level, ...], bucket_cap: float,
                       opt_seconds: float, skip_wgc: frozenset[str] = frozenset()) -> IterationResult:
    """The iteration's SimPy timeline (see the module docstring)."""
    env = simpy.Environment()
    by_name = {l.name: l for l in layers}
    groups = make_buckets(layers, bucket_cap, skip_wgc)
    owner = {n: i for i, g in enumerate(groups) for n in g}
    missing = [len(g) for g in groups]
    ready_at = [0.0] * len(groups)
    queue = simpy.Store(env)
    records: list[Bucket] = []
    backward_done = env.event()

    def compute():
        for l in layers:
            yield env.timeout(l.fwd)
        for l in reversed(layers):
            yield env.timeout(l.agbp)
            if l.name in skip_wgc:
                continue
            yield env.timeout(l.wgc)
            b = owner.get(l.name)
            if b is not None:
                missing[b] -= 1
                if missing[b] == 0:
                    ready_at[b] = env.now
                    queue.put(b)
        backward_done.succeed(env.now)

    def comm():
        for _ in range(len(groups)):
            b = yield queue.get()
            nbytes = sum(by_name[n].grad_bytes for n in groups[b])
            start = env.now
            yield env.timeout(allreduce_seconds(float(nbytes), levels))
            records.append(Bucket(groups[b], nbytes, ready_at[b], start, env.now))

    def step(comm_proc):
        yield backward_done
        yield comm_proc
        yield env.timeout(opt_seconds)

    c = env.process(comm())
    env.process(compute())
    env.process(step(c))
    env.run()
    bwd_end = float(backward_done.value)
    last_comm = max((r.end for r in records), default=bwd_end)
    comm_bytes = sum(r.bytes for r in records)
    skipped = tuple(n for n in skip_wgc if n in by_name)
    return IterationResult(
        seconds=float(env.now), compute_seconds=bwd_end, backward_end=bwd_end,
        comm_seconds=sum(r.end - r.start for r in records),
        exposed_comm_seconds=max(0.0, last_comm - bwd_end), optimizer_seconds=opt_seconds,
        comm_bytes=comm_bytes, wire_bytes=sum(allreduce_bytes_sent(r.bytes, levels) for r in records),
        skipped_wgc=skipped, skipped_bytes=sum(by_name[n].grad_bytes for n in skipped),
        buckets=tuple(records))
