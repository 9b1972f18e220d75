"""Sweeps: the cartesian product of hardware (files, globs, parameter grids), traces or synthetic
workloads, and methods, stored point by point in a resumable result store.

    prunesim sweep --hw 'hwconfigs/a100*.yaml' --hw xeon-e5-2680v4 --grid grid.yaml \
        --trace traces/sample-resnet20-mnist5k --method dbtd:p=0.99 --db results.sqlite

How the work is cut: points are grouped by trace (the method set is the sweep's), and a group runs
`sim.driver.run_trace` once with every hardware variant of the group as an engine, so each method is
applied to each recorded tensor once per group, however many hardware points there are. When
there are fewer groups than workers, a group's hardware list is split into chunks (each chunk
recomputes the methods: the price of using the idle workers). A point's numbers never depend on
the grouping: methods are pure functions of (spec, layer, tensor, seed) and engines do not
interact, so local, pooled and Dask runs give identical records (tests/test_sweep.py checks it).

Workers (a local spawn pool, or Dask with --scheduler) only compute; the parent is the single
writer and stores each point of a group, in its own transaction, as soon as the group returns.
Points already in the store are skipped, so rerunning an interrupted sweep finishes it.
"""
from __future__ import annotations

import glob as _glob
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from sim import __version__
from sim.errors import ConfigError, PrunesimError, TraceError
from sim.hwconfig import HwConfig, load_hwconfig, with_overrides
from sim.limits import check_budget
from sim.progress import Progress
from sim.results.store import ResultStore, cache_model_field, point_key, point_record
from sim.yamlio import load_yaml_file

DEFAULT_BATCH = 64
_GLOB_CHARS = set("*?[")


# ----------------------------------------------------------------------------------------------
# Hardware: files, bundled names, globs, grids


def expand_hw(patterns: list[str]) -> list[HwConfig]:
    """Load every hwconfig named by a file, a bundled name or a glob (sorted matches)."""
    out = []
    for pat in patterns:
        if _GLOB_CHARS & set(pat):
            files = sorted(f for f in _glob.glob(pat) if f.endswith((".yaml", ".yml")))
            if not files:
                raise ConfigError(pat, "--hw", "no hwconfig file matches this pattern")
            out += [load_hwconfig(f) for f in files]
        else:
            out.append(load_hwconfig(pat))
    return out


def load_grid(path: str | os.PathLike, yes_large: bool = False) -> list[dict[str, Any]]:
    """A grid YAML `{params: {name: [value, ...]}}` -> the list of override combinations, in the
    order written (the last parameter varies fastest)."""
    doc = load_yaml_file(path, ConfigError)
    if not isinstance(doc, dict) or set(doc) != {"params"}:
        raise ConfigError(path, None, "expected a mapping with one key, params: {name: [values]}")
    params = doc["params"]
    if not isinstance(params, dict) or not params:
        raise ConfigError(path, "params", "expected a non-empty mapping of parameter to value list")
    for name, vals in params.items():
        if not isinstance(vals, list) or not vals:
            raise ConfigError(path, f"params.{name}", "expected a non-empty list of values "
                              "(a list-valued parameter is a list of lists)")
    names = list(params)
    n = math.prod(len(v) for v in params.values())
    check_budget("grid_points", n, path, "params", yes_large=yes_large, error=ConfigError,
                 what=" x ".join(f"{len(params[k])} {k}" for k in names))
    return [dict(zip(names, combo)) for combo in itertools.product(*(params[n] for n in names))]


def hw_points(hws: list[HwConfig], grid: list[dict] | None = None,
              grid_path: str | None = None) -> list[tuple[HwConfig, dict]]:
    """Every (variant, overrides) of every hwconfig; identical duplicates are dropped and two
    different configs sharing a name are refused (records identify hardware by name)."""
    out: list[tuple[HwConfig, dict]] = []
    seen: dict[str, HwConfig] = {}
    for hw in hws:
        combos = grid or [{}]
        if grid:
            # validate value by value first, so the error names the list entry at fault
            for name in combos[0]:
                vals = []
                for c in combos:
                    if c[name] not in vals:
                        vals.append(c[name])
                for i, v in enumerate(vals):
                    try:
                        with_overrides(hw, {name: v}, origin=grid_path)
                    except ConfigError as e:
                        raise ConfigError(grid_path, f"params.{name}[{i}]",
                                          f"{e.message} (applied to {hw.name})") from None
        for combo in combos:
            v = with_overrides(hw, combo, origin=grid_path) if combo else hw
            prev = seen.get(v.name)
            if prev is not None:
                if prev.checksum != v.checksum:
                    raise ConfigError(v.path, "name", f"{v.name!r} is also the name of {prev.path}, "
                                      "with other parameters; give one of them another name")
                continue
            seen[v.name] = v
            out.append((v, combo))
    return out


# ----------------------------------------------------------------------------------------------
# Traces: given, or synthesized once and cached by content


def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    if cache:
        return Path(cache)
    env = os.environ.get("PRUNESIM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "prunesim"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def synthetic_trace(workload: str, batch: int, seed: int = 0, stats: str | None = None,
                    cache: str | os.PathLike | None = None, progress: bool | None = None,
                    yes_large: bool = False) -> Path:
    """The synthetic trace of (workload, batch, seed, stats), generated on first use.

    Its cache entry is named by the SHA-256 of everything the generator reads (the workload's
    content, not its name; the statistics file's checksum; batch, seed, model and prunesim
    version), and appears atomically (written aside, then renamed), so a killed run never leaves
    a half-written entry that a later run would trust.
    """
    from sim.traces import gradmodel as gm
    from sim.traces.format import open_trace
    from sim.traces.synth import load_stats, synth
    from sim.workload import load_workload
    wl = load_workload(workload)
    st = load_stats(stats)
    ident = {"workload": wl.to_dict(), "batch": batch, "seed": seed, "stats": st.sha256,
             "iterations": 1, "dtype": "float32", "model": gm.MODEL, "prunesim": __version__}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
    root = cache_dir(cache) / "traces"
    final = root / f"{wl.name}-b{batch}-s{seed}-{digest[:16]}"
    if not final.exists():
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(root, "--cache", f"cannot create the trace cache: {e}") from None
        for old in root.glob(f".{final.name}.tmp*"):  # left by killed runs
            pid = old.name.rsplit(".tmp", 1)[-1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".{final.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        with Progress(len(wl.layers), f"synth {wl.name} b{batch}", "layers", force=progress) as bar:
            # the size check is synth's (budget and free disk); --yes-large lifts only the budget
            synth(wl, batch, tmp, st, seed=seed, progress=bar.callback, yes_large=yes_large)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another sweep made it first: same content
    tr = open_trace(final)
    if not tr.complete:
        raise TraceError(final, None, "incomplete cached trace; delete it to regenerate")
    return final


# ----------------------------------------------------------------------------------------------
# Planning


@dataclass(frozen=True)
class TraceRef:
    path: str          # absolute: workers may run in another directory
    checksum: str
    workload: str
    batch: int
    iterations: int
    source: str        # 'trace' or 'synthetic'


def trace_ref(path: str | os.PathLike, source: str = "trace") -> TraceRef:
    from sim.replay import trace_checksum
    from sim.traces.format import open_trace
    tr = open_trace(path)
    n = len(tr.iterations)
    if n == 0:
        raise TraceError(tr.path, "records", "no dO tensors to replay")
    return TraceRef(str(Path(path).resolve()), trace_checksum(tr), tr.workload.name, tr.batch, n, source)


def planned_record(tr: TraceRef, hw: HwConfig, method, seed: int,
                   cache_model: str | None = None, framework=None) -> dict:
    """The key inputs of a point, as its record will hold them (so the key is known up front).
    `framework`: the profile name or path (None: sim.replay.DEFAULT_FRAMEWORK for the kind)."""
    from sim.replay import framework_for
    prof = framework_for(framework, hw.kind)
    return {"prunesim": __version__, "hw": hw.name, "hw_checksum": hw.checksum,
            "workload": tr.workload, "trace_checksum": tr.checksum, "batch": tr.batch,
            "iterations": tr.iterations, "seed": seed, "method_id": method.id,
            "method_params": json.dumps(dict(method.params), sort_keys=True),
            "cache_model": cache_model_field(hw.kind, cache_model),
            "framework": prof.name, "framework_checksum": prof.checksum}


def _profiles(hws, framework) -> dict:
    """The framework profile per hardware kind of a sweep, loaded once."""
    from sim.replay import framework_for
    return {k: framework_for(framework, k) for k in {h.kind for h, _ in hws}}


def plan(traces: list[TraceRef], hws: list[tuple[HwConfig, dict]], methods: list, seed: int,
         done: set[str], workers: int = 1, cache_model: str | None = None,
         framework: str | None = None) -> tuple[list[dict], int, int]:
    """Tasks for the points not in `done`: (tasks, points to run, points skipped).

    A task is a plain dict (hwconfigs travel as their frozen dataclasses; everything else is
    JSON-like). Dense always runs in a task: every speedup is relative to it.
    """
    from sim.replay import is_dense_column
    todo: list[tuple[TraceRef, list[tuple[HwConfig, dict]], set[str]]] = []
    n_run = n_skip = 0
    prof = _profiles(hws, framework)
    for tr in traces:
        need_hw, need_m = [], set()
        for hw, combo in hws:
            missing = {m.label for m in methods
                       if point_key(planned_record(tr, hw, m, seed, cache_model, prof[hw.kind]))
                       not in done}
            n_run += len(missing)
            n_skip += len(methods) - len(missing)
            if missing:
                need_hw.append((hw, combo))
                need_m |= missing
        if need_hw:
            todo.append((tr, need_hw, need_m))
    chunks = max(1, math.ceil(workers / len(todo))) if todo else 1
    tasks = []
    for tr, need_hw, need_m in todo:
        k = min(chunks, len(need_hw))
        size = math.ceil(len(need_hw) / k)
        labels = [m.label for m in methods if m.label in need_m or is_dense_column(m)]
        for i in range(0, len(need_hw), size):
            part = need_hw[i:i + size]
            tasks.append({"trace": tr.path, "trace_checksum": tr.checksum, "source": tr.source,
                          "methods": labels, "hw": [h for h, _ in part],
                          "overrides": {h.name: c for h, c in part}, "seed": seed,
                          "cache_model": cache_model, "framework": framework,
                          # with several worker processes, one thread each: a group's CPU
                          # hwconfigs on threads too would oversubscribe the cores
                          "threads": 1 if workers > 1 else None})
    return tasks, n_run, n_skip


# ----------------------------------------------------------------------------------------------
# One group: a pure function of its task (runs in a worker)


def run_group(task: dict) -> dict:
    """Replay one trace on the task's hardware for its methods; returns {'points': [...]} with
    each point's network record and per-layer rows, or {'error': ...} for bad input (exceptions
    of prunesim do not survive pickling across processes, so they travel as plain data)."""
    try:
        return {"points": _run_group(task)}
    except PrunesimError as e:
        return {"error": {"type": type(e).__name__, "file": e.file, "field": e.field,
                          "message": e.message}}
    except Exception as e:  # noqa: BLE001 - a bug in one group must not cost the other groups
        return {"error": {"type": "InternalError", "file": task.get("trace"), "field": None,
                          "message": f"internal error ({type(e).__name__}: {e}) in the group of "
                                     + ", ".join(h.name for h in task.get("hw", []))}}


def _run_group(task: dict) -> list[dict]:
    from sim.driver import Sums, engine_for, run_trace
    from sim.replay import Totals, parse_column, trace_checksum
    from sim.traces.format import open_trace
    trace = open_trace(task["trace"])
    if trace_checksum(trace) != task["trace_checksum"]:
        raise TraceError(trace.path, "manifest.json", "differs from the trace the sweep planned "
                         "(changed since, or a different file at this path on this worker)")
    # labels, parsed back (PruneTrain combinations too); their options were checked when planned
    methods = [parse_column(s) for s in task["methods"]]
    engines = [engine_for(hw) for hw in task["hw"]]
    seed = task["seed"]
    totals = Totals(trace, methods, engines, seed, task.get("framework"))
    cm = task.get("cache_model")
    # per (hw, method, layer): sums over captured iterations of phase seconds and overhead; per
    # (method, layer): of the density
    lay = Sums(("hw", "method", "layer"))
    dens: dict = defaultdict(float)
    meta: dict[str, dict] = {}
    with _cache_model(cm):  # rows are computed lazily: the whole loop is inside
        for step in run_trace(trace, methods, engines, seed=seed, threads=task.get("threads")):
            totals.add(step)
            lay.update(step.phases)
            for lr in step.methods:
                meta.setdefault(lr.layer, {"op": lr.op, "block": lr.block})
                dens[(lr.method, lr.layer)] += lr.density
    lay = lay.result()
    order = {l.name: i for i, l in enumerate(trace.workload.layers)}
    out = []
    for rec in totals.records():
        hw = next(h for h in task["hw"] if h.name == rec["hw"])
        rec = point_record(rec, hw, cache_model=cm, trace_source=task["source"],
                           overrides=task["overrides"].get(rec["hw"], {}))
        del rec["key"]   # the store adds it
        layers = []
        # a "not run" point has no per-layer numbers (the engine did not model all of them)
        for name in sorted(meta, key=order.__getitem__) if rec["status"] == "ok" else ():
            acc = lay.get((rec["hw"], rec["method"], name))
            if not acc or acc["reason"] is not None:
                continue
            n = len(acc["iterations"])
            layers.append({**{k: rec[k] for k in ("hw", "hw_kind", "hw_checksum", "workload",
                                                  "trace_checksum", "batch", "seed", "method",
                                                  "method_id", "method_params", "prunesim",
                                                  "cache_model", "framework")},
                           "layer": name, "layer_index": order[name], **meta[name],
                           "iterations": int(n), "density": dens[(rec["method"], name)] / n,
                           "fwd_s": acc["fwd"] / n, "agbp_s": acc["agbp"] / n,
                           "wgc_s": acc["wgc"] / n, "overhead_s": acc["overhead_s"] / n,
                           "fallback": acc["fallback"]})
        out.append({"record": rec, "layers": layers})
    return out


def _cache_model(name: str | None):
    """The CPU engine's cache model for this group (a worker process starts with the default)."""
    if name is None:
        from contextlib import nullcontext
        return nullcontext()
    from sim.engines.cpu.spmm import cache_model
    return cache_model(name)


# ----------------------------------------------------------------------------------------------
# Execution: inline, a local spawn pool, or Dask; results come back as groups finish


def _worker_init(parent: int) -> None:
    # Ctrl-C reaches the whole process group; the parent alone decides (it terminates the pool)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # If the parent is killed (kill -9), its workers must not finish their groups for nobody and
    # then die on a broken pipe: on Linux, ask the kernel to kill them with it
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _run_local(tasks: list[dict], jobs: int) -> Iterator[dict]:
    if jobs <= 1 or len(tasks) <= 1:
        for t in tasks:
            yield run_group(t)
        return
    # spawn, not fork: the parent may hold Numba/BLAS threads, which fork does not copy safely
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(min(jobs, len(tasks)), initializer=_worker_init, initargs=(os.getpid(),))
    try:
        yield from pool.imap_unordered(run_group, tasks, chunksize=1)
        pool.close()
    finally:
        pool.terminate()  # on Ctrl-C or an error: stop the workers now, not after their groups
        pool.join()


def _dask_client(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(None, "--scheduler", "Dask is not installed: pip install 'prunesim[dist]' "
                          "(or 'dask[distributed]')") from None
    try:
        return Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise ConfigError(None, "--scheduler", f"cannot connect to {address}: {e}") from None


def dask_workers(address: str) -> int:
    c = _dask_client(address)
    try:
        return max(1, sum(c.nthreads().values()))
    finally:
        c.close()


def _run_dask(tasks: list[dict], address: str) -> Iterator[dict]:
    from distributed import as_completed
    import uuid
    client = _dask_client(address)
    run = uuid.uuid4().hex
    futs = []
    try:
        # pure=False: never reuse a result cached on the cluster; keys name the sweep's groups
        futs = client.map(run_group, tasks, pure=False,
                          key=[f"prunesim-group-{run}-{i}" for i in range(len(tasks))])
        # loop=: this client is not the process default (an API caller may have its own)
        for fut in as_completed(futs, loop=client.loop):
            yield fut.result()
    finally:
        if futs:
            client.cancel(futs)
        client.close()


# ----------------------------------------------------------------------------------------------
# The sweep


@dataclass
class SweepResult:
    db: str
    points: int = 0          # points of the sweep
    skipped: int = 0         # already in the store before this run
    stored: int = 0          # written by this run
    groups: int = 0
    interrupted: bool = False
    keys: list[str] | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "keys"}


def check_sweep_work(workloads, traces, batch: int, hardware: int, methods: int,
                     yes_large: bool = False) -> int:
    """Refuse a sweep whose work, from counts alone, is above its budgets (before any trace is
    synthesized or replayed): each workload's synthetic trace (layers x batch, synth_layer_samples)
    and the replay (sources x iterations x layers x hardware x methods, sweep_layer_evaluations).
    Reads each workload YAML and trace manifest once; returns the replay estimate."""
    from sim.errors import ConfigError
    from sim.limits import check_budget
    from sim.traces.format import open_trace
    from sim.workload import load_workload
    total, parts = 0, []
    for w in workloads or []:
        wl = load_workload(w)
        check_budget("synth_layer_samples", len(wl.layers) * batch, w, "--workload",
                     yes_large=yes_large, error=ConfigError,
                     what=f"synthetic trace of {len(wl.layers):,} layers x batch {batch}")
        total += len(wl.layers)
        parts.append(f"{len(wl.layers):,} layers")
    for t in traces or []:
        tr = open_trace(t)
        total += len(tr.iterations) * len(tr.workload.layers)
        parts.append(f"{len(tr.iterations)} iterations x {len(tr.workload.layers):,} layers")
    est = total * hardware * methods
    check_budget("sweep_layer_evaluations", est, None, "--workload/--trace", yes_large=yes_large,
                 error=ConfigError, what=f"({' + '.join(parts)}) x {hardware} hardware x "
                 f"{methods} method(s)")
    return est


def sweep(hw: list[str], *, workloads: list[str] | None = None, traces: list[str] | None = None,
          methods: list[str] | None = None, db: str | os.PathLike | None = None,
          batch: int | None = None, grid: str | None = None, jobs: int | None = None,
          scheduler: str | None = None, seed: int = 0, cache: str | None = None,
          stats: str | None = None, progress: bool | None = None,
          store: ResultStore | None = None, log: Callable[[str], None] | None = None,
          yes_large: bool = False, cache_model: str | None = None,
          framework: str | None = None) -> SweepResult:
    """Run (or finish) a sweep into the store; see the module docstring and docs/how-to/sweep.md."""
    from sim.replay import check_columns, parse_methods
    from sim.traces.format import open_trace
    if bool(workloads) == bool(traces):
        raise ConfigError(None, "--workload/--trace", "give workloads or traces (one of the two)")
    if traces and batch is not None:
        raise ConfigError(None, "--batch", "traces keep their own batch; --batch is for workloads")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(None, "--seed", f"must be a non-negative integer, got {seed!r}")
    say = log or (lambda s: None)
    specs = parse_methods(list(methods or []), "sweep")
    combos = load_grid(grid, yes_large) if grid else None
    points_hw = hw_points(expand_hw(list(hw)), combos, str(grid) if grid else None)
    if cache_model is not None:
        if cache_model not in ("exact", "profile"):
            raise ConfigError(None, "--cache-model", f"expected exact or profile, got {cache_model!r}")
        if not any(h.kind == "cpu" for h, _ in points_hw):
            raise ConfigError(None, "--cache-model", "only the CPU engine simulates caches; no CPU "
                              "hwconfig is in the sweep")
    if framework is not None:
        from sim.frameworks import load_framework
        framework = os.fspath(framework)
        load_framework(framework)   # a bad name or file: one error line before any work
    n_src = len(traces or []) + len(workloads or [])
    check_budget("sweep_points", n_src * len(points_hw) * len(specs), None, "--hw/--grid/--method",
                 yes_large=yes_large, error=ConfigError,
                 what=f"{n_src} trace(s) x {len(points_hw)} hardware x {len(specs)} method(s)")
    # synthesis and replay work, before either starts
    check_sweep_work(workloads, traces, batch or DEFAULT_BATCH, len(points_hw), len(specs),
                     yes_large)
    if store is None and db is None:
        raise ConfigError(None, "--db", "a sweep needs a result store")
    own_store = store is None
    st = store if store is not None else ResultStore(db)
    res = SweepResult(str(db) if db is not None else st.path)
    try:
        refs = []
        for t in traces or []:
            refs.append(trace_ref(t, "trace"))
            check_columns(specs, open_trace(t))   # a trajectory that cannot be placed: now
        for w in workloads or []:
            refs.append(trace_ref(synthetic_trace(w, batch or DEFAULT_BATCH, seed, stats, cache,
                                                  progress, yes_large), "synthetic"))
        workers = dask_workers(scheduler) if scheduler else (jobs or os.cpu_count() or 1)
        done = st.keys()
        tasks, n_run, n_skip = plan(refs, points_hw, specs, seed, done, workers, cache_model,
                                    framework)
        prof = _profiles(points_hw, framework)
        wanted = {point_key(planned_record(tr, h, m, seed, cache_model, prof[h.kind]))
                  for tr in refs for h, _ in points_hw for m in specs}
        res.points, res.skipped, res.groups = len(wanted), n_skip, len(tasks)
        res.keys = sorted(wanted)
        say(f"sweep: {len(refs)} trace(s) x {len(points_hw)} hardware point(s) x {len(specs)} "
            f"method(s) = {res.points} points; {n_skip} already stored, {n_run} to run in "
            f"{len(tasks)} group(s) on " + (f"Dask at {scheduler}" if scheduler else
                                              f"{min(workers, max(1, len(tasks)))} local worker(s)"))
        first_error, n_failed = None, 0
        results = _run_dask(tasks, scheduler) if scheduler else _run_local(tasks, workers)
        with Progress(n_run, "sweep", "points", force=progress) as bar:
            try:
                for out in results:
                    if "error" in out:
                        n_failed += 1
                        first_error = first_error or out["error"]
                        bar.write(f"group failed: {_error_text(out['error'])}")
                        continue
                    new = 0
                    for p in out["points"]:
                        if point_key(p["record"]) not in wanted:  # planning and replay disagree
                            raise RuntimeError(f"internal error: point {p['record']['hw']} x "
                                               f"{p['record']['method']} has an unplanned key")
                        # points of the group stored earlier (dense, run for the speedups) are
                        # ignored by the store's INSERT OR IGNORE
                        if st.put(p["record"], p["layers"]):
                            new += 1
                    res.stored += new
                    bar.update(new)
            except KeyboardInterrupt:
                res.interrupted = True
                results.close()  # terminates the pool / cancels the Dask futures
                raise
        if first_error is not None:
            e = first_error
            cls = {c.__name__: c for c in (ConfigError, TraceError)}.get(e["type"], PrunesimError)
            more = f"; {n_failed - 1} other group(s) failed too" if n_failed > 1 else ""
            raise cls(e["file"], e["field"], e["message"] + f" ({res.stored} points of the other "
                      f"groups stored{more}; a rerun runs only the missing points)")
    finally:
        if own_store:
            st.close()
    return res


def _error_text(e: dict) -> str:
    return ": ".join(p for p in (e.get("file"), e.get("field"), e.get("message")) if p)


def cmd_sweep(args) -> int:
    progress = None if not args.json else False
    try:
        res = sweep(args.hw, workloads=args.workload, traces=args.trace, methods=args.method,
                    db=args.db, batch=args.batch, grid=args.grid, jobs=args.jobs,
                    scheduler=args.scheduler, seed=args.seed, cache=args.cache,
                    stats=getattr(args, "stats", None), progress=progress,
                    log=None if args.json else (lambda s: print(s, file=sys.stderr, flush=True)),
                    yes_large=getattr(args, "yes_large", False),
                    cache_model=getattr(args, "cache_model", None),
                    framework=getattr(args, "framework", None))
    except KeyboardInterrupt:
        print(f"prunesim: sweep interrupted; finished points are in {args.db}: rerun the same "
              "command to resume", file=sys.stderr)
        raise
    if args.json:
        print(json.dumps(res.as_dict(), indent=1))
        return 0
    from sim.results.tables import SPEEDUP_RULE, STEP_CAPTION, performance_table
    from sim.replay import summary_lines
    with ResultStore(args.db, create=False) as st:
        wanted = set(res.keys or ())
        recs = [r for r in st.records("network") if r["key"] in wanted]
    from sim.methods import is_dense_id
    recs.sort(key=lambda r: (r["workload"], r["hw"], not is_dense_id(r["method_id"]), r["method"]))
    print(f"per training iteration, mean over each trace's captured iterations; {STEP_CAPTION}; "
          f"{SPEEDUP_RULE}):")
    print(performance_table(recs, workload=True))
    for line in summary_lines(recs):
        print(line, file=sys.stderr)
    print(f"{res.stored} new point(s) stored in {args.db} ({res.skipped} already there, "
          f"{res.points} in the sweep)")
    return 0
