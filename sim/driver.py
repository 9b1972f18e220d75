"""The driver: the only loop that runs layers through engines.

Per layer it lowers once, applies the method once (on a trace's recorded tensor: `run_trace`; on
synthetic gradients: `run_workload`), asks every engine whether it `supports` each phase, decides
once where the method's own work is charged (`charge_phase`), and yields flat typed rows:

    LayerRow  per (iteration, layer, method): what is method- but not hardware-specific (density,
              structure, work, dO statistics, shapes);
    PhaseRow  per (iteration, layer, method, hardware, phase): seconds, the method-overhead share
              (kernels of category "method-overhead"), energy, status "ok" / "not run" (one row
              with phase "" and the reason), the sparse fallback.

`aggregate(rows, keys)` (and its running form `Sums`) sums PhaseRows per key; replay's network
records, sweeps, the API, the report, plots, validation and the system timeline are built on it.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from sim.engines.base import (Engine, KernelResult, PhaseJob, Unsupported, engine_for,
                              fallback_of)
from sim.workload import lower

PHASES = ("fwd", "agbp", "wgc")
FALLBACK_WARNING = r".*(running|runs) dense"   # the engines' sparse-fallback warnings


def engines_for(hws) -> list[Engine]:
    """One engine per hwconfig; strings are loaded (bundled names or paths)."""
    from sim.hwconfig import HwConfig, load_hwconfig
    return [engine_for(h if isinstance(h, HwConfig) else load_hwconfig(h)) for h in hws]


# how far the calling thread runs ahead of the CPU workers (run_trace): layers, and bytes of the
# recorded tensors those layers' method results were made from
AHEAD_LAYERS = 4
AHEAD_BYTES = 256 << 20

STEP_PHASES = ("fwd-ops", "bwd-ops", "optimizer", "framework")


def step_kernels(engine: Engine, workload, batch: int, profile, *, method=None,
                 threads: int = 1, dtype_bytes: int | None = None) -> dict[str, list[KernelResult]]:
    """The non-GEMM kernels of one training step on one engine, per STEP_PHASES.

    The workload's non-GEMM ops (sim.stepops: BN, ReLU, pooling, adds, the loss, the optimizer)
    as the framework profile runs them, each timed by the engine's streaming model, plus the
    profile's fixed per-step overhead. A profile with `step_ops: none` gives empty phases (the
    GEMMs-only step of earlier versions). `method` (a MethodSpec) adds the work a method puts
    into the step itself (PruneTrain's group lasso). dtype_bytes: bytes per activation element
    (a cluster's training precision); None: the engine's own (its default GEMM dtype's).
    """
    from sim.stepops import step_ops
    out: dict[str, list[KernelResult]] = {ph: [] for ph in STEP_PHASES}
    if profile is None:
        return out
    ops = step_ops(workload, batch, profile=profile,
                   dtype_bytes=dtype_bytes or engine.step_dtype_bytes(), method=method)
    for op in ops:
        out[op.phase].append(engine.stream(op, profile.launch_overhead, threads))
    if profile.step_overhead > 0:
        out["framework"].append(KernelResult(
            engine.kind, engine.hw.name, "", "framework", "step-overhead",
            profile.step_overhead, 1.0, 0, {"framework": profile.step_overhead},
            details={"source": profile.sources.get("step_overhead", profile.path)},
            category="framework"))
    return out


def charge_phase(method_result, run: Iterable[str]) -> str | None:
    """The one phase whose kernels include the method's own passes: the first phase the method
    names among those run (None: dense, or it names none of them)."""
    if method_result is None:
        return None
    return next((ph for ph in PHASES if ph in run and ph in method_result.phases), None)


def phase_kernels(engine: Engine, layer, batch: int, method_result, *, phases=PHASES,
                  dtype: str | None = None, threads: int = 1,
                  seed: int = 0) -> dict[str, list[KernelResult]]:
    """Every kernel of one layer's phases on one engine; AGBP is skipped where nothing needs it.

    method_result: the method's result with its work already scaled to `batch`, or None (dense).
    Raises Unsupported (field: the phase) when the engine does not model a phase, before any
    engine work."""
    gemms = lower(layer, batch)
    run = [ph for ph in PHASES if ph in phases and (ph != "agbp" or layer.needs_agbp)]
    at = charge_phase(method_result, run)
    jobs = [PhaseJob(layer, ph, gemms[ph], batch, method_result, ph == at, dtype, threads, seed)
            for ph in run]
    for job in jobs:
        why = engine.supports(job)
        if why:
            raise Unsupported(None, job.phase, why)
    return {job.phase: engine.simulate(job) for job in jobs}


# ----------------------------------------------------------------------------------------------
# rows


@dataclass(frozen=True)
class LayerRow:
    """One method on one recorded (or synthesized) layer dO: nothing hardware-specific."""

    iteration: int | None
    epoch: int | None
    layer: str
    op: str
    block: str | None
    method: str                  # the method's label
    density: float
    structure: str
    work: dict
    extra: dict                  # the method's extra fields (schedule, nominal, ...)
    shape: tuple = ()            # dO as recorded
    agbp_mnk: tuple = ()
    wgc_mnk: tuple = ()
    stats: dict | None = None    # the recorded dO's statistics (trace only)


@dataclass(frozen=True)
class PhaseRow:
    """One layer phase of one method on one hardware; status "not run": phase "" and the reason."""

    iteration: int | None
    epoch: int | None
    layer: str
    op: str
    block: str | None
    method: str
    hw: str
    hw_kind: str
    phase: str
    seconds: float = 0.0
    overhead_s: float = 0.0      # kernels of category "method-overhead", included in `seconds`
    energy: dict | None = None   # joules by cause with "total"; None where the hwconfig has no table
    status: str = "ok"
    reason: str | None = None
    fallback: str | None = None  # why this phase ran dense although the method asked for sparsity
    kernels: tuple = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class LayerRun:
    """Everything the driver computed for one (iteration, layer): its LayerRows and PhaseRows."""

    methods: tuple[LayerRow, ...]
    phases: tuple[PhaseRow, ...]

    @property
    def iteration(self):
        return self.methods[0].iteration

    @property
    def layer(self) -> str:
        return self.methods[0].layer


def phase_rows(engine: Engine, layer, batch: int, method_result, *, method: str,
               iteration=None, epoch=None, phases=PHASES, dtype=None, threads: int = 1,
               seed: int = 0, quiet: bool = True) -> list[PhaseRow]:
    """The PhaseRows of one (layer, method) on one engine; Unsupported becomes a "not run" row.

    quiet: the engine's sparse-fallback warnings are silenced (a fallback is the row's `fallback`
    field, summarized once by the caller). False: left alone, for a worker thread, where
    `warnings.catch_warnings` is not thread-safe (see EnginePool)."""
    from sim.engines.energy import kernels_energy
    hw = engine.hw
    base = dict(iteration=iteration, epoch=epoch, layer=layer.name, op=layer.op,
                block=layer.block, method=method, hw=hw.name, hw_kind=hw.kind)
    try:
        with warnings.catch_warnings() if quiet else contextlib.nullcontext():
            if quiet:
                warnings.filterwarnings("ignore", FALLBACK_WARNING, RuntimeWarning)
            ks = phase_kernels(engine, layer, batch, method_result, phases=phases, dtype=dtype,
                               threads=threads, seed=seed)
    except Unsupported as e:
        return [PhaseRow(**base, phase="", status="not run", reason=e.message)]
    return [PhaseRow(**base, phase=ph, seconds=sum(k.seconds for k in kl),
                     overhead_s=sum(k.seconds for k in kl if k.category == "method-overhead"),
                     energy=kernels_energy(hw, kl), fallback=fallback_of(kl), kernels=tuple(kl))
            for ph, kl in ks.items()]


def _layer_row(layer, res, label: str, *, iteration=None, epoch=None, gemms=None, shape=(),
               stats=None) -> LayerRow:
    mnk = {ph: (g.m, g.n, g.k) for ph, g in (gemms or {}).items()}
    return LayerRow(iteration, epoch, layer.name, layer.op, layer.block, label,
                    1.0 if res is None else res.density,
                    "dense" if res is None else res.structure,
                    {} if res is None else res.work.as_dict(),
                    {} if res is None else {k: v for k, v in res.extra.items()
                                            if k != "work_scaled_by"},
                    tuple(shape), mnk.get("agbp", ()), mnk.get("wgc", ()), stats)


def replay_threads(threads: int | None = None) -> int:
    """Threads a replay may use: `threads`, else Numba's count in this thread (NUMBA_NUM_THREADS,
    or numba.set_num_threads; the machine's cores by default)."""
    if threads is not None:
        return max(1, int(threads))
    import numba
    return numba.get_num_threads()


class EnginePool:
    """Runs the CPU hwconfigs' phase_rows on worker threads (as many as the thread budget and the
    CPU hwconfigs allow), while the calling thread goes on with the methods and the other engines.

    The CPU engines' cache kernels release the GIL (`nogil`), and each CPU hwconfig's products are
    independent of the others', so two CPU hwconfigs of a replay run on two cores; every row is
    the same as run in the calling thread and comes back in the same place. A worker sees the
    caller's context variables (the cache model and sampler: sim.engines.cpu.spmm) and runs the
    cache kernels with one Numba thread (its CPU hwconfig already has a core). CPU engines emit no
    sparse-fallback warnings, so the worker does not filter warnings (catch_warnings is not
    thread-safe). None of this where fewer than two threads or two CPU hwconfigs are given."""

    def __init__(self, engines: list[Engine], threads: int | None = None):
        cpus = [e for e in engines if e.hw.kind == "cpu"]
        n = min(replay_threads(threads), len(cpus))
        self.pool = None
        self.ids = {id(e) for e in cpus} if n >= 2 else set()
        if self.ids:
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(n, thread_name_prefix="prunesim-cpu",
                                           initializer=_one_numba_thread)

    def rows(self, engine: Engine, *args, **kw):
        """phase_rows(engine, ...) now (a list), or a future of it (a CPU hwconfig in the pool)."""
        if id(engine) not in self.ids:
            return phase_rows(engine, *args, **kw)
        ctx = contextvars.copy_context()
        return self.pool.submit(ctx.run, phase_rows, engine, *args, quiet=False, **kw)

    @staticmethod
    def done(parts: list) -> bool:
        """Whether every part of `parts` is ready (collect would not wait)."""
        return all(isinstance(p, list) or p.done() for p in parts)

    @staticmethod
    def collect(parts: list) -> tuple:
        """The rows of `parts` (lists and futures of lists) in order, waiting for the futures."""
        out: list[PhaseRow] = []
        for p in parts:
            out += p if isinstance(p, list) else p.result()
        return tuple(out)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _one_numba_thread() -> None:
    import numba
    numba.set_num_threads(1)        # thread-local: this worker only


def run_trace(trace, methods, engines: list[Engine], *, seed: int = 0,
              iteration: int | None = None, threads: int | None = None) -> Iterator[LayerRun]:
    """Per recorded (iteration, layer): each method applied once to the recorded tensor (its work
    scaled to the trace's batch), every engine given that result. threads: how many threads it may
    use (replay_threads; with 2 or more, CPU hwconfigs run side by side: EnginePool); the rows are
    the same for any count."""
    from sim.methods import apply_method, stream_key
    from sim.methods.base import scale_work
    from sim.traces.format import stream_checked
    w = trace.workload
    conv_index = {l.name: i for i, l in enumerate(w.convs)}
    need_csr = any(e.hw.kind == "cpu" for e in engines)
    scale = trace.batch / trace.recorded_batch
    pool = EnginePool(engines, threads)
    ahead: collections.deque = collections.deque()
    try:
        for rec, arr, stats in stream_checked(trace, "dO", iteration):
            full = w.layer(rec.layer)
            g_full = lower(full, trace.batch)
            lrows, parts = [], []
            for m in methods:
                layer, mg, spec = full, arr, m
                if hasattr(m, "narrow"):
                    # a PruneTrain column (sim.replay.Combined): the layer at this epoch's widths,
                    # its dO cut to the kept channels, and the gradient method acting on that;
                    # a layer of a block removed by then has no row in this column
                    narrowed = m.narrow(trace, full, arr, rec.epoch)
                    if narrowed is None:
                        continue
                    layer, mg, spec = narrowed
                g = g_full if layer is full else lower(layer, trace.batch)
                res = apply_method(spec, layer, mg, key=stream_key(seed, layer.index, rec.iteration),
                                   batch=trace.batch, conv_index=conv_index.get(layer.name, 0),
                                   batch_index=rec.iteration, n_conv=len(w.convs),
                                   build_csr=need_csr, dense_output=False)
                mr = None if res.structure == "dense" and not res.phases else scale_work(res, scale)
                lrows.append(_layer_row(layer, res, m.label, iteration=rec.iteration,
                                        epoch=rec.epoch, gemms=g, stats=stats,
                                        shape=rec.shape if mg is arr else mg.shape))
                for e in engines:
                    parts.append(pool.rows(e, layer, trace.batch, mr, method=m.label,
                                           iteration=rec.iteration, epoch=rec.epoch, seed=seed))
            ahead.append((tuple(lrows), parts, arr.nbytes))
            # while the CPU workers finish a layer, this thread goes on with the next layers'
            # methods and GPU engines (a barrier per layer left a core idle); layers still come
            # out in order, and at most AHEAD_LAYERS / AHEAD_BYTES of them wait
            while ahead and (len(ahead) > AHEAD_LAYERS or sum(a[2] for a in ahead) > AHEAD_BYTES
                             or pool.done(ahead[0][1])):
                lr, ps, _ = ahead.popleft()
                yield LayerRun(lr, pool.collect(ps))
        while ahead:
            lr, ps, _ = ahead.popleft()
            yield LayerRun(lr, pool.collect(ps))
    finally:
        pool.close()


def run_workload(workload, batch: int, methods, engines: list[Engine], *, layers=None,
                 phases=PHASES, dtype: str | None = None, threads: int = 1, seed: int = 0,
                 samples: int | None = None, grads: dict | None = None,
                 results=None) -> Iterator[LayerRun]:
    """Per layer (all, or `layers`) and method: the method on synthetic gradients
    (sim.methods.synthetic.method_result_for, the same for every engine), or on `grads`
    ({layer name: dO of b <= batch samples}, e.g. a trace's), or `results(spec, layer)` (a caller's
    own MethodResult, e.g. SDGP's nominal one); then every engine."""
    from sim.methods.synthetic import method_result_for, result_on
    for l in (layers if layers is not None else workload.layers):
        lrows, prows = [], []
        for m in methods:
            if results is not None:
                mr = results(m, l)
            elif grads is not None:
                mr = result_on(m, l, grads[l.name], batch, seed,
                               build_csr=any(e.hw.kind == "cpu" for e in engines))
            else:
                mr = method_result_for(m, l, batch, seed, samples=samples)
            label = "dense" if m is None else m.label
            lrows.append(_layer_row(l, mr, label, gemms=lower(l, batch)))
            for e in engines:
                prows += phase_rows(e, l, batch, mr, method=label, phases=phases, dtype=dtype,
                                    threads=threads, seed=seed)
        yield LayerRun(tuple(lrows), tuple(prows))


# ----------------------------------------------------------------------------------------------
# sums


class Sums:
    """Running sums of PhaseRows per key (a tuple of PhaseRow fields); nothing per row is kept.

    Per key: seconds per phase ("fwd", "agbp", "wgc"), "seconds" (all phases), "overhead_s",
    "energy" ({cause: J} with "total"; None once a row had none), "reason" (the first "not run"
    reason, else None), "fallback" (the first fallback reason), "fallback_layers" and "layers"
    (sets of layer names), "iterations" (set).
    """

    def __init__(self, keys: tuple[str, ...]):
        self.keys = tuple(keys)
        self.acc: dict[tuple, dict[str, Any]] = {}

    def add(self, row: PhaseRow) -> None:
        k = tuple(getattr(row, f) for f in self.keys)
        a = self.acc.get(k)
        if a is None:
            a = self.acc[k] = {"fwd": 0.0, "agbp": 0.0, "wgc": 0.0, "seconds": 0.0,
                               "overhead_s": 0.0, "energy": {}, "reason": None, "fallback": None,
                               "fallback_layers": set(), "layers": set(), "iterations": set()}
        a["iterations"].add(row.iteration)
        if row.status != "ok":
            if a["reason"] is None:
                a["reason"] = row.reason
            return
        a["layers"].add(row.layer)
        a[row.phase] += row.seconds
        a["seconds"] += row.seconds
        a["overhead_s"] += row.overhead_s
        if row.fallback:
            a["fallback_layers"].add(row.layer)
            if a["fallback"] is None:
                a["fallback"] = row.fallback
        if row.energy is None:
            a["energy"] = None       # one phase without a table: no total
        elif a["energy"] is not None:
            en = a["energy"]
            for c, v in row.energy.items():
                en[c] = en.get(c, 0.0) + v

    def update(self, rows: Iterable[PhaseRow]) -> "Sums":
        for r in rows:
            self.add(r)
        return self

    def result(self) -> dict[tuple, dict]:
        return self.acc


def aggregate(rows: Iterable[PhaseRow], keys) -> dict[tuple, dict]:
    """Sums of PhaseRows per key (see Sums), e.g. keys ("hw", "method") for network totals."""
    return Sums(tuple(keys)).update(rows).result()


# ----------------------------------------------------------------------------------------------
# drop-in replacements for the engines' old network loops (same signatures and results)


def simulate_layer(hw, layer, batch: int, *, method=None, phases=PHASES, dtype: str | None = None,
                   seed: int = 0, threads: int = 1) -> dict[str, list[KernelResult]]:
    """Kernels per phase of one layer with a method on synthetic gradients; AGBP is absent for a
    layer reading the network input."""
    from sim.methods.synthetic import method_result_for
    mr = method_result_for(method, layer, batch, seed)
    return phase_kernels(engine_for(hw), layer, batch, mr, phases=phases, dtype=dtype,
                         threads=threads, seed=seed)


def simulate_workload(hw, workload, batch: int, *, method=None, dtype: str | None = None,
                      phases=PHASES, layers=None, seed: int = 0) -> list[dict]:
    """Per layer: {"layer", "op", "phases": {phase: [KernelResult, ...]}}."""
    return [{"layer": l.name, "op": l.op,
             "phases": simulate_layer(hw, l, batch, method=method, phases=phases, dtype=dtype,
                                      seed=seed)}
            for l in (layers if layers is not None else workload.layers)]
