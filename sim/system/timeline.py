"""One training iteration on many devices, in SimPy: compute stream, DDP buckets, all-reduce stream.

Inputs are per-layer times (`layer_times`): FWD, AGBP and WGC seconds, the layer's non-GEMM kernels
(BN, ReLU, bias, gradient sums: `fwd_ops`, `bwd_ops`, from sim.stepops under a framework profile,
sim.frameworks) and the gradient bytes each layer contributes; pools, adds and the loss are entries
of their own (no GEMMs, no gradient). The engine of the device's hwconfig provides them through sim.driver; the
roofline model (documented below, labeled in every output) stands in only when asked for
(`train --roofline`) or when the device names no hwconfig. An engine error propagates.

The iteration (data-parallel, one replica per device, all devices symmetric):
  compute stream: per entry in op order FWD then its forward ops (BN, ReLU, ...), the loss, then
  the backward in reverse: per entry its backward ops (gradient sum at a fork, ReLU and BN
  backward) then AGBP then WGC (a layer's gradient is ready when its WGC ends; a layer under the
  `zero` approximation this batch skips its WGC and sends no gradient, but its BN backward runs;
  under `random` or `approx` its WGC is the method's kernels, scheduled_wgc_seconds, and its full
  dW is sent);
  buckets: as PyTorch DDP, parameters in reverse order fill buckets up to the cap (25 MB by
  default); a bucket is launched when the last gradient in it is ready;
  comm stream: one collective at a time, FIFO (NCCL runs DDP's all-reduces on one stream), each the
  simulated hierarchical all-reduce of sim.system.collectives, overlapping the rest of the backward;
  optimizer step: after the backward and the last all-reduce: the profile's optimizer kernels
  (sim.stepops: e.g. PyTorch's foreach SGD reads 7 and writes 4 FP32 words per parameter in 4
  multi-tensor kernels; the fused minimum is read 3 (w, g, momentum), write 2 (w, momentum)),
  then the profile's fixed per-step overhead.
Non-GEMM kernels are timed by the device's engine (Engine.stream); on the roofline path each takes
its bytes / mem_bandwidth (no launch cost). The `gemm-only` profile has none of them and no
optimizer step: the compute stream of the GEMMs alone.
Exposed communication is the time the optimizer step waits for the comm stream after the backward.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Sequence

import simpy

from sim.stepops import method_parts
from sim.system.collectives import Level, allreduce_bytes_sent, allreduce_seconds
from sim.workload import Gemm, Workload, lower

DEFAULT_FRAMEWORK = "pytorch-eager"   # the profile `framework=None` means (train, replay --cluster)


@dataclass(frozen=True)
class LayerTimes:
    """One entry of the compute stream: a conv/FC layer (GEMMs and its own non-GEMM kernels) or a
    non-GEMM op (pool, add, the loss: GEMM times and gradient bytes 0)."""

    name: str
    fwd: float
    agbp: float
    wgc: float
    grad_bytes: int
    params: int
    fwd_ops: float = 0.0     # non-GEMM forward kernels after the FWD GEMM
    bwd_ops: float = 0.0     # non-GEMM backward kernels before AGBP


@dataclass(frozen=True)
class Timing:
    """Per-layer times of one workload at one batch and where they came from."""

    layers: tuple[LayerTimes, ...]
    source: str          # "engine:tensorcore (hw, dtype)", ROOFLINE_ASKED or ROOFLINE_NO_HW
    optimizer: float = 0.0       # s: the profile's optimizer kernels (after the all-reduce)
    step_overhead: float = 0.0   # s: the profile's fixed per-step overhead
    framework: str = ""          # the profile's name

    @property
    def gemm_seconds(self) -> float:
        return sum(l.fwd + l.agbp + l.wgc for l in self.layers)

    @property
    def ops_seconds(self) -> float:
        return sum(l.fwd_ops + l.bwd_ops for l in self.layers)

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
    layers run below peak, which is the engine's job (sim.engines.gpu)."""
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


@lru_cache(maxsize=65536)
def _engine_method_wgc_seconds(hw_name: str, layer, batch: int, dtype: str, spec) -> float:
    """Engine seconds of one layer's WGC under the method's result without data
    (Method.system_result: Wang's approx on a scheduled conv is the patch engine's kernels on a
    synthetic pick, random its generation kernel); dense where the method returns None."""
    from sim.driver import engine_for, phase_kernels
    from sim.methods import method_for
    mr = method_for(spec).system_result(spec, layer, batch)
    ks = phase_kernels(engine_for(_load_hw(hw_name)), layer, batch, mr, phases=("wgc",),
                       dtype=dtype)
    return sum(k.seconds for k in ks["wgc"])


def scheduled_wgc_seconds(workload: Workload, batch: int, device, training, engine: str,
                          method, names) -> dict[str, float]:
    """WGC seconds of the layers `names` of the workload on a (layer, batch) pair the method
    approximates (Wang's `wgc-kernels` methods: random, approx, approx-topk), for the timeline to
    charge instead of their dense WGC. The engine of the device's hwconfig times the method's
    result without data (Method.system_result). The roofline model has a generated dW (its fp32
    write at mem_bandwidth) but no model of the approx patch kernel, and a hardware kind without
    the method's kernel has neither: both are refused in one line naming --method."""
    from sim.errors import ConfigError
    from sim.methods import method_for, method_info
    roofline = engine == "roofline" or not getattr(device, "hwconfig", None)
    layers = [l for l in workload.layers if l.name in names]
    m = method_for(method)
    if roofline:
        out = {}
        for l in layers:
            mr = m.system_result(method, l, batch)
            if mr is None:               # not approximated: its dense WGC stays
                continue
            if mr.structure == "skipped":
                out[l.name] = 0.0
            elif mr.structure == "generated":
                out[l.name] = int(mr.work.elems_written) * 4 / device.mem_bandwidth.value
            else:
                raise ConfigError(None, "--method", f"{method.label}: the roofline model has no "
                                  f"model of its {mr.structure} WGC kernel (Wang et al.'s patch "
                                  "kernel): time the layers with the engine of a GPU hwconfig "
                                  "(without --roofline)")
        return out
    hw = _load_hw(device.hwconfig)
    gap = method_info(method).kernel_gap(hw.kind)
    if gap:
        raise ConfigError(None, "--method", f"{method.label}: {gap}; {device.hwconfig} is a "
                          f"{hw.kind}: train cannot time its WGC there")
    from sim.engines.base import Unsupported
    dtype = ENGINE_DTYPE.get(int(training.activation_bytes.value), "fp16")
    try:
        return {l.name: _engine_method_wgc_seconds(device.hwconfig, l, batch, dtype, method)
                for l in layers}
    except Unsupported as e:     # e.g. the patch kernel on a grouped conv: refused, not dense
        raise ConfigError(None, "--method", f"{method.label}: {e.message}; train refuses it "
                          "rather than charging the dense WGC") from None


@lru_cache(maxsize=16)
def _load_hw(name: str):
    from sim.hwconfig import load_hwconfig
    return load_hwconfig(name)


def resolve_framework(framework=None):
    """A FrameworkProfile from None (DEFAULT_FRAMEWORK), a bundled name, a path or a profile."""
    from sim.frameworks import FrameworkProfile, load_framework
    if isinstance(framework, FrameworkProfile):
        return framework
    return load_framework(framework or DEFAULT_FRAMEWORK)


def layer_times(workload: Workload, batch: int, device, training, engine: str = "auto",
                method=None, framework=None) -> Timing:
    """FWD/AGBP/WGC seconds, non-GEMM kernels and gradient bytes per layer at the workload's widths.

    engine: "auto" (the engine of the device's hwconfig, through sim.driver; the roofline model
    only when the device names no hwconfig, said in the source), "roofline" (the roofline model by
    choice: `train --roofline`). An engine error (a hwconfig that does not load, a layer the engine
    does not model) propagates as its one-line error: no silent fallback.
    method: a MethodSpec, or a tuple of them (a combination: PruneTrain's plan with a gradient
    method); SDGP (sdgp-*) prunes AGBP through the nominal n:m result (engine only; the roofline
    model has no sparse model); PruneTrain adds its group-lasso kernels. Every other method: dense
    times (Wang's schedules too: simulate_run charges their scheduled (conv, batch) pairs,
    scheduled_wgc_seconds). framework: a profile (resolve_framework) giving the non-GEMM kernels."""
    profile = resolve_framework(framework)
    dt = int(training.activation_bytes.value)
    dtype = ENGINE_DTYPE.get(dt, "fp16")
    roofline = engine == "roofline" or not getattr(device, "hwconfig", None)
    from sim.methods import method_info
    sdgp = next((m for m in method_parts(method)
                 if method_info(m).system_effect == "nm-agbp"), None)
    gb = int(training.grad_bytes.value)
    hw = None if roofline else _load_hw(device.hwconfig)
    gemm = {}
    for l in workload.layers:
        if roofline:
            t = {ph: 0.0 if ph == "agbp" and not l.needs_agbp else
                 roofline_seconds(g, device.peak_math.value, device.mem_bandwidth.value, dt)
                 for ph, g in lower(l, batch).items()}
        else:
            t = _engine_layer_seconds(device.hwconfig, l, batch, dtype, sdgp)
        gemm[l.name] = LayerTimes(l.name, t["fwd"], t.get("agbp", 0.0), t["wgc"],
                                  l.param_count * gb, l.param_count)
    if roofline:
        ops = _roofline_step_seconds(workload, batch, profile, method, dt,
                                     device.mem_bandwidth.value)
        src = ROOFLINE_ASKED if engine == "roofline" else ROOFLINE_NO_HW
    else:
        ops = _engine_step_seconds(device.hwconfig, workload, batch, profile, method, dt)
        src = f"engine:{'tensorcore' if hw.kind == 'gpu' else hw.kind} ({device.hwconfig}, {dtype})"
    return Timing(_entries(workload, gemm, ops), src, ops["optimizer"], ops["framework"],
                  profile.name)


def _entries(workload: Workload, gemm: dict, ops: dict) -> tuple[LayerTimes, ...]:
    """Compute-stream entries in op order: layers with their ops, pools and adds with theirs, and
    the loss last (its backward comes first). Ops of a name in neither go with the loss."""
    fo, bo = dict(ops["fwd-ops"]), dict(ops["bwd-ops"])
    out = []
    names = [op["name"] for op in workload.ops]
    names += [n for n in gemm if n not in set(names)]      # a layer the op list does not name
    for n in names:
        f, b = fo.pop(n, 0.0), bo.pop(n, 0.0)
        if n in gemm:
            out.append(replace(gemm[n], fwd_ops=f, bwd_ops=b))
        elif f or b:
            out.append(LayerTimes(n, 0.0, 0.0, 0.0, 0, 0, f, b))
    f, b = sum(fo.values()), sum(bo.values())
    if f or b:
        out.append(LayerTimes("loss", 0.0, 0.0, 0.0, 0, 0, f, b))
    return tuple(out)


def _by_layer(pairs) -> dict:
    """{phase: {layer: seconds}} for fwd-ops and bwd-ops, optimizer and framework as totals."""
    out = {"fwd-ops": {}, "bwd-ops": {}, "optimizer": 0.0, "framework": 0.0}
    for phase, layer, sec in pairs:
        if phase in ("optimizer", "framework"):
            out[phase] += sec
        else:
            out[phase][layer] = out[phase].get(layer, 0.0) + sec
    return out


_STEP_CACHE: dict = {}


def _step_key(workload: Workload, batch: int, profile, method) -> tuple:
    return (workload.name, workload.origin, tuple((l.name, l.c_in, l.c_out) for l in workload.layers),
            batch, profile.checksum, profile.path,
            "+".join(m.label for m in method_parts(method)))


def _engine_step_seconds(hw_name: str, workload: Workload, batch: int, profile, method,
                         dtype_bytes: int) -> dict:
    """The step's non-GEMM kernels on the device's engine (sim.driver.step_kernels), memoized;
    their tensors at the training's bytes per activation (the cluster's activation_bytes, as the
    GEMMs' dtype), not the engine's default: fp32 training on a tensor-core GPU moves 4 bytes."""
    key = ("engine", hw_name, dtype_bytes) + _step_key(workload, batch, profile, method)
    if key not in _STEP_CACHE:
        from sim.driver import engine_for, step_kernels
        ks = step_kernels(engine_for(_load_hw(hw_name)), workload, batch, profile, method=method,
                          dtype_bytes=dtype_bytes)
        if len(_STEP_CACHE) > 4096:
            _STEP_CACHE.clear()
        _STEP_CACHE[key] = _by_layer((ph, k.layer, k.seconds) for ph, kl in ks.items() for k in kl)
    return _STEP_CACHE[key]


def _roofline_step_seconds(workload: Workload, batch: int, profile, method, dtype_bytes: int,
                           mem_bw: float) -> dict:
    """The roofline path's non-GEMM kernels: the same StreamOps at bytes / mem_bandwidth (no launch
    or dispatch cost), plus the profile's fixed per-step overhead."""
    from sim.stepops import step_ops
    ops = step_ops(workload, batch, profile=profile, dtype_bytes=dtype_bytes, method=method)
    pairs = [(op.phase, op.layer, op.bytes / mem_bw) for op in ops]
    if profile.step_overhead > 0:
        pairs.append(("framework", "", profile.step_overhead))
    return _by_layer(pairs)


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
    ops_seconds: float = 0.0       # non-GEMM kernels on the compute stream (in compute_seconds)
    overhead_seconds: float = 0.0  # the framework's fixed per-step overhead (after the optimizer)

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "compute_seconds": self.compute_seconds,
                "comm_seconds": self.comm_seconds, "exposed_comm_seconds": self.exposed_comm_seconds,
                "optimizer_seconds": self.optimizer_seconds, "ops_seconds": self.ops_seconds,
                "overhead_seconds": self.overhead_seconds, "comm_bytes": self.comm_bytes,
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
                       opt_seconds: float, skip_wgc: frozenset[str] = frozenset(),
                       overhead_seconds: float = 0.0) -> IterationResult:
    """The iteration's SimPy timeline (see the module docstring); opt_seconds: the optimizer
    kernels, overhead_seconds: the framework's fixed per-step time, both after the all-reduce."""
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
            if l.fwd_ops:
                yield env.timeout(l.fwd_ops)
        for l in reversed(layers):
            if l.bwd_ops:
                yield env.timeout(l.bwd_ops)
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
        if overhead_seconds:
            yield env.timeout(overhead_seconds)

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
        buckets=tuple(records), ops_seconds=sum(l.fwd_ops + l.bwd_ops for l in layers),
        overhead_seconds=overhead_seconds)
