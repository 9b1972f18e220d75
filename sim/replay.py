"""Replay: the main job. Streams a trace layer by layer through the methods and every engine.

The loop itself is the driver's (sim.driver.run_trace: per captured (iteration, layer) each
method's result is computed once, on the recorded tensor, and handed to every hardware engine, so a
sweep over many hwconfigs pays for the trace statistics once per method). `Totals` keeps only
per-(hardware, method) running sums (sim.driver.Sums) and turns them into network-level records;
`json_row` is the `--json` view of one layer. `cmd_replay` prints rows as layers finish.
"""
from __future__ import annotations

import json
import re
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

from sim.results.tables import (SPEEDUP_RULE, STEP_CAPTION, StreamTable, format_table,
                                performance_table)
from sim import __version__
from sim.errors import ConfigError, TraceError
from sim.driver import LayerRun, Sums, engines_for, run_trace  # noqa: F401 (engines_for: API)
from sim.engines.energy import NA as NA_ENERGY
from sim.methods import (TRAJECTORY_MODEL_INPUTS, MethodSpec, parse_combination, parse_method,
                         refuse_unused)
from sim.methods.info import method_info
from sim.traces.format import Trace, open_checked_trace
from sim.traces.inspect import finite_or_none

DENSITY_OPS = ("conv", "linear")   # layers the network-level `density` averages over
DEFAULT_METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "approx:schedule=1")
PHASES = ("fwd", "agbp", "wgc")
# The framework profile a run uses unless --framework names one: the stack of the papers on that
# kind of hardware (GPUs: PyTorch eager, PruneTrain's and SDGP's; CPUs: Caffe, Ye et al.'s).
DEFAULT_FRAMEWORK = {"gpu": "pytorch-eager", "cpu": "caffe"}
# record field of each whole-step phase (sim.driver.STEP_PHASES)
STEP_FIELDS = {"fwd-ops": "fwd_ops_s", "bwd-ops": "bwd_ops_s", "optimizer": "optimizer_s",
               "framework": "framework_s"}


def framework_for(name, hw_kind: str):
    """The framework profile of one hardware point: `name` (bundled name, path or a loaded
    FrameworkProfile), else DEFAULT_FRAMEWORK for its kind."""
    from sim.frameworks import load_framework
    if name is not None and not isinstance(name, (str, bytes)) and hasattr(name, "checksum"):
        return name
    return load_framework(name if name is not None
                          else DEFAULT_FRAMEWORK.get(hw_kind, DEFAULT_FRAMEWORK["gpu"]))


def step_phase_kernels(engines, workload, batch: int, methods, framework=None,
                       epochs=None, trace: Trace | None = None) -> dict:
    """{(hw name, method label): (profile, {phase: [KernelResult]})}: the step's non-GEMM kernels
    (sim.driver.step_kernels), once per (hardware, method): they depend on the workload, batch,
    profile and method, never on the recorded gradient values. A PruneTrain column (Combined) runs
    them on the network narrowed at each of `epochs` (one per replayed iteration; None: epoch 0)
    with the group-lasso passes, each kernel's seconds divided by their number (a mean step);
    such columns need the `trace` (their trajectory is the trace's)."""
    from sim.driver import step_kernels
    out = {}
    for e in engines:
        prof = framework_for(framework, e.hw.kind)
        for m in methods:
            if not isinstance(m, Combined):
                out[(e.hw.name, m.label)] = (prof, step_kernels(e, workload, batch, prof, method=m))
                continue
            eps = list(epochs or (0,))
            per = {ep: step_kernels(e, m.workload_at(trace, ep), batch, prof, method=m.parts)
                   for ep in set(eps)}
            out[(e.hw.name, m.label)] = (prof, _mean_kernels([per[ep] for ep in eps]))
    return out


def _mean_kernels(steps: list[dict]) -> dict:
    """The kernels of several steps as one mean step: all of them, seconds / len(steps)."""
    if len(steps) == 1:
        return steps[0]
    from dataclasses import replace
    n = len(steps)
    return {ph: [replace(k, cycles=k.cycles / n, flops=k.flops // n,
                         breakdown={c: v / n for c, v in k.breakdown.items()})
                 for st in steps for k in st[ph]]
            for ph in steps[0]}


# what a replay can say of the channels PruneTrain keeps (a gradient trace does not record them)
KEPT_CHANNELS = ("the first k of each narrowed layer's channels (a gradient trace does not say "
                 "which channels a trajectory keeps)")


@dataclass(frozen=True)
class Combined:
    """A replay column `prunetrain[:...][+METHOD]`: the network at each replayed iteration's epoch
    narrowed to the PruneTrain trajectory's widths (sim.system.trajectory.apply_widths), each
    narrowed layer's captured dO cut to its first c_out channels (KEPT_CHANNELS), and METHOD (dense
    for prunetrain alone) applied to the cut dO exactly as on a trace of that narrower network.

    `trajectory`: "model" (the lasso-dose model, sim.system.prunetrain.lasso_trajectory, on the
    trace's dataset, epochs, batch and training-set size from its provenance) or a trajectory file
    (load_trajectory), resolved per trace on first use (`trajectory_for`)."""

    plan: MethodSpec
    method: MethodSpec
    trajectory: str = "model"
    epochs: int | None = None     # the model's training epochs / set size (None: the trace's)
    samples: int | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def parts(self) -> tuple[MethodSpec, ...]:
        return (self.plan,) if method_info(self.method).is_dense else (self.plan, self.method)

    @property
    def id(self) -> str:
        return "+".join(p.id for p in self.parts)

    @property
    def label(self) -> str:
        return "+".join(p.label for p in self.parts)

    @property
    def params(self) -> tuple:
        """Every part's parameters as `id.param` (flat, so records key on them as on a spec's),
        and the trajectory when it is a file."""
        out = [(f"{p.id}.{k}", v) for p in self.parts for k, v in p.params]
        if self.trajectory != "model":
            out.append(("trajectory", str(self.trajectory)))
        out += [(f"training.{k}", v) for k, v in (("epochs", self.epochs),
                                                   ("samples", self.samples)) if v is not None]
        return tuple(out)

    def trajectory_for(self, trace: Trace):
        """The Trajectory of this column on `trace` (resolved once per trace; one-line errors)."""
        from sim.system.prunetrain import lasso_trajectory, load_trajectory
        key = ("trajectory", str(trace.path))
        if key in self._cache:
            return self._cache[key]
        if self.trajectory != "model":
            traj = load_trajectory(self.trajectory, trace.workload)
        else:
            v = training_values(trace_training_defaults(trace), None, epochs=self.epochs,
                                samples=self.samples)
            for k, fld in (("epochs", "provenance.training.epochs"),
                           ("samples", "provenance.dataset.train_samples")):
                if v[k] is None:
                    raise ConfigError(trace.path / "manifest.json", fld, f"{self.label}: the "
                                      f"trace does not record it and dataset {v['dataset']!r} has "
                                      "no default, so the PruneTrain trajectory cannot be placed")
            traj = lasso_trajectory(trace.workload, self.plan.get("rho"),
                                    self.plan.get("interval"), int(v["epochs"]), trace.batch,
                                    int(v["samples"]), weight_decay=self.plan.get("wd"))
        self._cache[key] = traj
        return traj

    def workload_at(self, trace: Trace, epoch: int):
        """The trace's workload narrowed to the trajectory's widths at `epoch` (cached)."""
        from sim.system.trajectory import apply_widths
        key = ("workload", str(trace.path), epoch)
        if key not in self._cache:
            self._cache[key] = apply_widths(trace.workload,
                                            self.trajectory_for(trace).widths_at(epoch))
        return self._cache[key]

    def narrow(self, trace: Trace, layer, g, epoch: int):
        """(the narrowed layer, dO cut to its first channels, the gradient method): what
        sim.driver.run_trace replays for this column at a layer of an iteration of `epoch`; None
        where the trajectory has removed the layer's residual block by then (the column has no
        row for it: no work)."""
        narrowed = self.workload_at(trace, epoch)
        if all(l.name != layer.name for l in narrowed.layers):
            return None      # a dead block's layer, removed by this epoch (trajectory width 0)
        nl = narrowed.layer(layer.name)
        if nl is layer:
            return layer, g, self.method
        want = nl.tensor_shapes(g.shape[0])["dO"]
        if len(want) != g.ndim or any(a > b for a, b in zip(want, g.shape)):
            raise TraceError(trace.path, layer.name, f"narrowed dO {list(want)} does not fit the "
                             f"recorded {list(g.shape)}")
        return nl, g[tuple(slice(0, a) for a in want)], self.method

    def record_fields(self, trace: Trace, epochs) -> dict:
        """What a network record of this column says of its widths: source, epochs, channels."""
        return {"trajectory": self.trajectory_for(trace).source,
                "trajectory_epochs": sorted(set(epochs)), "channels_kept": KEPT_CHANNELS}


def is_dense_column(m) -> bool:
    return isinstance(m, MethodSpec) and method_info(m).is_dense


def parse_column(text: str, trajectory: str | None = None, epochs: int | None = None,
                 samples: int | None = None):
    """A replay column from a spec: a MethodSpec, or a Combined for `prunetrain[...][+METHOD]`
    (sim.methods.parse_combination refuses pairs that do not compose); `trajectory`, `epochs`
    and `samples` are a PruneTrain column's (Combined). Raises ValueError."""
    specs = parse_combination(text)
    plan = next((s for s in specs if method_info(s).is_channel_plan), None)
    if plan is None:
        return specs[0]
    other = next((s for s in specs if s is not plan), None)
    if trajectory not in (None, "model"):
        if set(plan.given) & TRAJECTORY_MODEL_INPUTS:
            raise ValueError("a trajectory file fixes the channels and their epochs: rho, "
                             "interval and wd change nothing, leave them out")
        if epochs or samples:
            raise ValueError("a trajectory file fixes the channels and their epochs: the "
                             "training's epochs and size change nothing")
    return Combined(plan, other or parse_method("dense"), trajectory or "model", epochs, samples)


def parse_methods(texts: list[str] | tuple[str, ...], command: str = "replay",
                  trajectory: str | None = None, epochs: int | None = None,
                  samples: int | None = None) -> list:
    """The columns of a replay or sweep (MethodSpec, or Combined for PruneTrain), dense first
    unless given; every part's options checked against `command` (refuse_unused)."""
    out = []
    for t in texts or DEFAULT_METHODS:
        try:
            col = parse_column(t, trajectory, epochs, samples)
            for spec in getattr(col, "parts", (col,)):
                refuse_unused(spec, command)
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
        out.append(col)
    if not any(is_dense_column(m) for m in out):
        out.insert(0, parse_method("dense"))  # every speedup is relative to dense
    return out


def check_columns(methods: list, trace: Trace) -> None:
    """Resolve every PruneTrain column's trajectory on `trace` now: its errors before any work."""
    for m in methods:
        if isinstance(m, Combined):
            m.trajectory_for(trace)


def json_row(step: LayerRun) -> dict:
    """A recorded layer as `replay --json` prints it (its "layers" entries): shapes, dO statistics,
    and per method its density, work and per-hardware phase seconds, overhead, energy, "not run"
    reasons and sparse fallbacks. Built from the driver's flat rows for that output only."""
    l0 = step.methods[0]
    per_method = {}
    for lr in step.methods:
        per_method[lr.method] = {"density": lr.density, "structure": lr.structure,
                                 "work": lr.work, "seconds": {}, "overhead": {}, "not_run": {},
                                 "fallback": {}, "energy": {}, **lr.extra}
    for r in step.phases:
        e = per_method[r.method]
        if r.status != "ok":
            e["not_run"][r.hw] = r.reason
            continue
        e["seconds"].setdefault(r.hw, {})[r.phase] = r.seconds
        e["overhead"][r.hw] = e["overhead"].get(r.hw, 0.0) + r.overhead_s
        e["fallback"][r.hw] = e["fallback"].get(r.hw) or r.fallback
        if r.hw not in e["energy"] or e["energy"][r.hw] is not None:
            en = e["energy"].get(r.hw, {})
            e["energy"][r.hw] = None if r.energy is None else \
                {k: en.get(k, 0.0) + v for k, v in r.energy.items()}
    return {"iteration": l0.iteration, "epoch": l0.epoch, "layer": l0.layer, "op": l0.op,
            "block": l0.block, "shape": list(l0.shape), "agbp_mnk": list(l0.agbp_mnk),
            "wgc_mnk": list(l0.wgc_mnk), "stats": l0.stats, "methods": per_method}


@dataclass
class Totals:
    """Running sums over replayed layers (sim.driver.Sums per (hardware, method)); nothing per
    layer is kept. `records()` gives one flat network-level record per (hardware, method)."""

    trace: Trace
    methods: list[MethodSpec]
    engines: list
    seed: int = 0
    framework: object = None   # a profile name/path/FrameworkProfile; None: DEFAULT_FRAMEWORK
    iterations: set = field(default_factory=set)
    dens: dict = field(default_factory=lambda: defaultdict(lambda: [0.0, 0]))
    sums: Sums = field(default_factory=lambda: Sums(("hw", "method")))
    epochs: dict = field(default_factory=dict)      # replayed iteration -> its epoch
    _step: dict = field(default_factory=dict)       # epochs -> step_phase_kernels

    def add(self, step: LayerRun) -> None:
        self.iterations.add(step.iteration)
        self.epochs[step.iteration] = step.methods[0].epoch
        for lr in step.methods:
            # Ye et al.'s average is over convs; a transformer's operands are its linears
            # (CNN FC layers stay out, as in their Table 1)
            if lr.op in DENSITY_OPS:
                self.dens[lr.method][0] += lr.density
                self.dens[lr.method][1] += 1
        self.sums.update(step.phases)

    def mean_density(self) -> dict[str, float]:
        return {m.label: self.dens[m.label][0] / self.dens[m.label][1]
                for m in self.methods if self.dens[m.label][1]}

    def step(self, epochs=None) -> dict:
        """The step's non-GEMM kernels per (hardware, method) (step_phase_kernels, computed once
        per set of epochs; `epochs` None: those of the replayed iterations)."""
        if epochs is None:
            epochs = tuple(self.epochs[i] for i in sorted(self.epochs))
        if not any(isinstance(m, Combined) for m in self.methods):
            epochs = ()    # nothing depends on them: one computation serves every call
        key = tuple(epochs)
        if key not in self._step:
            self._step[key] = step_phase_kernels(self.engines, self.trace.workload,
                                                 self.trace.batch, self.methods, self.framework,
                                                 key, self.trace)
        return self._step[key]

    def records(self) -> list[dict]:
        """One flat record per (hardware, method): per-iteration phase times and speedups."""
        recs = network_records(self.sums.result(), [e.hw for e in self.engines], self.methods,
                               self.trace, self.seed, max(1, len(self.iterations)),
                               self.mean_density(), self.step())
        cols = {m.label: m for m in self.methods if isinstance(m, Combined)}
        for r in recs:
            if r["method"] in cols:
                r.update(cols[r["method"]].record_fields(self.trace, self.epochs.values()))
        return recs


def network_records(sums: dict, hws, methods, trace: Trace, seed: int, n: int,
                    dens: dict, step: dict | None = None) -> list[dict]:
    """The network records of `aggregate(rows, ("hw", "method"))` over n iterations of a trace;
    `step` (step_phase_kernels) adds the whole-step columns (None: no profile, GEMMs only)."""
    tr_sum = trace_checksum(trace)
    out = []
    empty = {"fwd": 0.0, "agbp": 0.0, "wgc": 0.0, "overhead_s": 0.0, "energy": {}, "reason": None,
             "fallback": None, "fallback_layers": set()}
    for hw in hws:
        base = sums.get((hw.name, "dense"))
        if base is not None and base["reason"] is not None:
            base = None
        for m in methods:
            t = sums.get((hw.name, m.label), empty)
            fwd, agbp, wgc = t["fwd"] / n, t["agbp"] / n, t["wgc"] / n
            rec = {"prunesim": __version__, "hw": hw.name, "hw_kind": hw.kind,
                   "hw_checksum": hw.checksum, "workload": trace.workload.name,
                   "trace": str(trace.path), "trace_checksum": tr_sum,
                   "batch": trace.batch, "iterations": n, "seed": seed,
                   "method": m.label, "method_id": m.id,
                   "method_params": json.dumps(dict(m.params), sort_keys=True),
                   "density": dens.get(m.label), "fwd_s": fwd, "agbp_s": agbp, "wgc_s": wgc,
                   "overhead_s": t["overhead_s"] / n, "backprop_s": agbp + wgc,
                   "step_s": fwd + agbp + wgc, "status": "ok", "reason": None,
                   "fallback": fallback_text((t["fallback_layers"], t["fallback"])
                                             if t["fallback"] else None),
                   "backprop_speedup": None, "step_speedup": None,
                   "energy_j": None, "energy_split": None}
            en = t["energy"]
            if en:
                rec["energy_j"] = en["total"] / n
                rec["energy_split"] = json.dumps({k: v / n for k, v in en.items()
                                                  if k != "total"}, sort_keys=True)
            why = t["reason"]
            if why is not None:
                # no numbers: a partial sum over the layers the engine did model would pass
                # for the network's time
                rec.update({k: None for k in ("density", "fwd_s", "agbp_s", "wgc_s",
                                              "overhead_s", "backprop_s", "step_s",
                                              "energy_j", "energy_split")},
                           status="not run", reason=why, fallback=None)
            if base is not None and why is None:
                bbp = (base["agbp"] + base["wgc"]) / n
                bstep = bbp + base["fwd"] / n
                rec["backprop_speedup"] = bbp / rec["backprop_s"] if rec["backprop_s"] else None
                rec["step_speedup"] = bstep / rec["step_s"] if rec["step_s"] else None
            _whole_step(rec, (step or {}).get((hw.name, m.label)),
                        (step or {}).get((hw.name, "dense")), None if base is None else
                        base["fwd"] / n + (base["agbp"] / n + base["wgc"] / n))
            out.append(rec)
    return out


def _whole_step(rec: dict, step, base, base_gemm_s: float | None) -> None:
    """Add the whole-step fields to a network record: the profile, per STEP_PHASES the seconds of
    its kernels, whole_step_s = step_s + those, and its speedup over dense's whole step (`base`:
    dense's step kernels, `base_gemm_s`: dense's GEMM step)."""
    prof, kernels = step if step is not None else (None, {})
    rec["framework"] = prof.name if prof is not None else None
    rec["framework_checksum"] = prof.checksum if prof is not None else None
    secs = _phase_seconds(kernels)
    ok = rec["status"] == "ok"
    for f, v in secs.items():
        rec[f] = v if ok else None
    rec["whole_step_s"] = rec["step_s"] + sum(secs.values()) if ok else None
    rec["whole_step_speedup"] = None
    if ok and base_gemm_s is not None and base is not None and rec["whole_step_s"]:
        bwhole = base_gemm_s + sum(_phase_seconds(base[1]).values())
        rec["whole_step_speedup"] = bwhole / rec["whole_step_s"]


def _phase_seconds(kernels: dict) -> dict[str, float]:
    return {f: sum(k.seconds for k in kernels.get(ph, ())) for ph, f in STEP_FIELDS.items()}


def fallback_text(fb) -> str | None:
    """A record's `fallback` field: how many layers ran dense for want of a sparse kernel, and why."""
    if not fb:
        return None
    layers, why = fb
    return f"{len(layers)} layer(s) dense: {why}"


def summary_lines(records: list[dict]) -> list[str]:
    """One stderr line for the sparse fallbacks and one for the "not run" points (replay, sweep)."""
    out = []
    fb = [r for r in records if r.get("fallback")]
    if fb:
        reasons = sorted({r["fallback"].split(": ", 1)[1] for r in fb})
        out.append(f"prunesim: note: {len(fb)} of {len(records)} (hardware, method) points ran some "
                   f"layers dense for want of a sparse kernel (the `fallback` field), e.g. "
                   f"{reasons[0]}" + (f" (+{len(reasons) - 1} other reasons)" if len(reasons) > 1
                                      else ""))
    nr = [r for r in records if r.get("status") == "not run"]
    if nr:
        out.append(f"prunesim: note: {len(nr)} of {len(records)} (hardware, method) points not run "
                   f"(unsupported combination, stored with its reason): "
                   + "; ".join(sorted({f"{r['hw']} x {r['method']}" for r in nr})[:4])
                   + (" ..." if len(nr) > 4 else ""))
    return out


def energy_table(records: list[dict]) -> str:
    """The --energy view: energy per training step (GEMM phases and the methods' kernels) by cause."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            rows.append([r["hw"], r["method"], "not run", "", "", "", ""])
        elif r["energy_j"] is None:
            rows.append([r["hw"], r["method"], NA_ENERGY, "", "", "", ""])
        else:
            sp = json.loads(r["energy_split"])
            rows.append([r["hw"], r["method"], f"{r['energy_j'] * 1e3:.3f}",
                         *(f"{sp[k] * 1e3:.3f}" for k in ("math", "dram", "l2", "smem"))])
    return ("energy per training iteration, mJ (FMAs and bytes per level x the hwconfig's "
            "energy table; no static power; sim/engines/energy.py):\n"
            + format_table(["hardware", "method", "energy mJ", "math", "DRAM", "L2", "smem"], rows))


def trace_checksum(trace: Trace) -> str:
    """A content checksum of a trace: the SHA-256 of its manifest, which holds every tensor's."""
    import hashlib
    return hashlib.sha256((trace.path / "manifest.json").read_bytes()).hexdigest()


# ----------------------------------------------------------------------------------------------
# CLI


def _name(v) -> str:
    return str(v.get("id", v.get("name", "?"))) if isinstance(v, dict) else str(v if v is not None else "?")


def _short(m: MethodSpec) -> str:
    """Column header: the id and its parameter values, e.g. 'dbtd .99/paper'."""
    if isinstance(m, Combined):
        return "+".join(_short(p) for p in m.parts)
    vals = "/".join(str(v).replace("0.", ".") for _, v in m.params if v != "sample-channel")
    return f"{m.id} {vals}".strip()


def cmd_replay(args) -> int:
    if getattr(args, "energy", False):
        # the flag adds a text table; refused where it would change nothing
        if args.json:
            raise ConfigError(None, "--energy", "JSON records always carry energy_j and "
                              "energy_split; --energy adds the table to the text output only")
        if not args.hw:
            raise ConfigError(None, "--energy", "needs --hw (energy is per hardware)")
    framework = getattr(args, "framework", None)
    if framework is not None:
        from sim.frameworks import load_framework
        framework = load_framework(framework)   # a bad profile: one error line before any work
    trace = open_checked_trace(args.trace)
    engines = engines_for(args.hw)
    methods = _replay_columns(args, trace)
    seed = getattr(args, "seed", 0)
    store = None
    if getattr(args, "db", None):
        from sim.results.store import ResultStore
        store = ResultStore(args.db)
    cluster = None
    if getattr(args, "cluster", None):
        from sim.system.cluster import load_cluster
        cluster = training_setup(trace, load_cluster(args.cluster), getattr(args, "gpus", None),
                                 getattr(args, "epochs", None),
                                 getattr(args, "train_samples", None))  # checked before any work
    w = trace.workload
    prov = trace.provenance
    if not args.json:
        print(f"trace {trace.path}: workload {w.name}, batch {trace.batch} "
              f"(recorded {trace.recorded_batch} per batch), captured under "
              f"{_name(prov.get('method'))}, dataset {_name(prov.get('dataset'))}"
              + ("" if trace.complete else "  [capture was interrupted: partial trace]"))
        if engines:
            print("hardware: " + ", ".join(f"{e.hw.name} ({e.hw.kind})" for e in engines))
        print("methods: " + ", ".join(m.label for m in methods))
    header = ["iter", "layer", "block", "dO shape", "AGBP MxNxK", "mean |g|", "kurt"] + \
             [_short(m) for m in methods]
    table = StreamTable(header, [5, 22, 12, 14, 16, 9, 6] + [len(h) for h in header[7:]])
    totals = Totals(trace, methods, engines, seed, framework)
    rows_out = []
    layer_rows = []
    from sim.engines.cli import cache_model_for
    with warnings.catch_warnings(record=True) as caught, \
            cache_model_for(args, {e.hw.kind for e in engines}):
        warnings.simplefilter("always")
        _replay_rows(args, trace, methods, engines, seed, totals, table, rows_out, layer_rows)
    _print_warnings(caught)
    training = (training_report(trace, methods, *cluster,
                                framework=getattr(args, "framework", None)) if cluster else None)
    _report(args, trace, engines, totals, rows_out, layer_rows, store, training)
    if training and not args.json:
        print_training(training)
    return 0


def _replay_columns(args, trace: Trace) -> list:
    """replay's columns; --epochs / --train-samples feed a PruneTrain column's trajectory model
    and --cluster's estimate, --trajectory a PruneTrain column: refused where nothing reads them."""
    traj = getattr(args, "trajectory", None)
    epochs, samples = getattr(args, "epochs", None), getattr(args, "train_samples", None)
    model = traj in (None, "model")
    methods = parse_methods(getattr(args, "method", []), "replay", traj,
                            epochs if model else None, samples if model else None)
    pt = any(isinstance(m, Combined) for m in methods)
    cl = getattr(args, "cluster", None)
    for opt, v, ok, why in (("gpus", getattr(args, "gpus", None), cl, "--cluster"),
                            ("epochs", epochs, cl or (pt and model),
                             "--cluster or a prunetrain method's model trajectory"),
                            ("train_samples", samples, cl or (pt and model),
                             "--cluster or a prunetrain method's model trajectory"),
                            ("trajectory", traj, pt, "a prunetrain method")):
        if v and not ok:
            raise ConfigError(None, "--" + opt.replace("_", "-"), f"only meaningful with {why}")
    check_columns(methods, trace)
    return methods


DEFAULT_GPUS = 16   # devices of a training-level estimate unless --gpus says otherwise (the demo's)


def trace_training_defaults(trace: Trace) -> dict:
    """What the trace knows about its own training run: dataset name, training-set size, epochs,
    per-device batch (None where its provenance does not say)."""
    prov = trace.provenance or {}
    ds = prov.get("dataset") if isinstance(prov.get("dataset"), dict) else {}
    tr = prov.get("training") if isinstance(prov.get("training"), dict) else {}
    name = ds.get("name") or (prov.get("dataset") if isinstance(prov.get("dataset"), str) else None)
    return {"dataset": name or trace.workload.dataset, "samples": ds.get("train_samples"),
            "epochs": tr.get("epochs"), "batch": trace.batch}


def training_values(defaults: dict, dataset: str | None, *, epochs: int | None = None,
                    batch: int | None = None, samples: int | None = None) -> dict:
    """Epochs, per-device batch and training-set size of a training-level estimate, each from the
    argument, else what a trace recorded (trace_training_defaults), else the dataset's default;
    None where none of them says. `dataset` is the name to look defaults up under."""
    from sim.system.prunetrain import DATASET_SAMPLES, DEFAULT_BATCH, DEFAULT_EPOCHS
    ds = defaults.get("dataset") or dataset or ""
    return {"dataset": ds,
            "epochs": epochs or defaults.get("epochs") or DEFAULT_EPOCHS.get(ds),
            "batch": batch or defaults.get("batch") or DEFAULT_BATCH.get(ds),
            "samples": samples or defaults.get("samples") or DATASET_SAMPLES.get(ds)}


def system_level_available(run) -> bool:
    """False when sim.system does not model the method's compute effect (it says so in a note):
    its time would be dense's, so no ratio is reported for it."""
    return not any("not wired" in n for n in run.notes)


def training_setup(trace: Trace, cluster, gpus: int | None = None, epochs: int | None = None,
                   samples: int | None = None) -> tuple:
    """(cluster cut to its devices, epochs, training-set size) of a training-level estimate: the
    arguments, else the trace's provenance, else the dataset's defaults. Checked before any work."""
    d = trace_training_defaults(trace)
    v = training_values(d, None, epochs=epochs, samples=samples)
    epochs, samples = v["epochs"], v["samples"]
    for opt, v in (("--epochs", epochs), ("--train-samples", samples)):
        if v is None:
            raise ConfigError(trace.path, opt, f"the trace (dataset {d['dataset']!r}) does not "
                              f"record it and the dataset has no default: give {opt}")
    return cluster.with_devices(gpus or min(DEFAULT_GPUS, cluster.devices)), int(epochs), int(samples)


def training_report(trace: Trace, methods: list[MethodSpec], cluster, epochs: int,
                    samples: int, framework=None) -> list[dict]:
    """The training-level estimate of the trace's workload on a cluster (sim.system), per method:
    whole-run time and communication at the trace's batch, next to dense (see training_setup).
    A PruneTrain column (Combined) runs on its own trajectory, the one its replayed rows use,
    with its gradient method on the remaining channels and the group lasso in every step."""
    from sim.system.prunetrain import simulate_run

    def run(m):
        col = (dict(trajectory=m.trajectory_for(trace), plan=m.plan)
               if isinstance(m, Combined) else {})
        return simulate_run(w, cluster, m.method if col else m, epochs=epochs, batch=trace.batch,
                            samples=samples, framework=framework, **col)
    w = trace.workload
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = {m.label: run(m) for m in methods}
    _print_warnings(caught)
    dense = runs["dense"]
    return [{"method": label, "cluster": cluster.name, "devices": cluster.devices,
             "epochs": epochs, "train_samples": samples, "batch_per_device": trace.batch,
             "train_s": r.train_seconds, "comm_bytes_per_device": r.comm_bytes,
             "comm_s": r.comm_seconds,
             "speedup_vs_dense": (dense.train_seconds / r.train_seconds
                                  if system_level_available(r) and r.train_seconds else None),
             "timing": r.timing_source, "framework": r.framework,
             "notes": list(r.notes)} for label, r in runs.items()]


def system_notes(notes, timing: str) -> list[str]:
    """sim.system's notes, without the roofline clause when the engine did the timing."""
    if str(timing).startswith("roofline"):
        return list(notes)
    return [n.replace("; roofline fallback: dense", "") for n in notes]


def print_training(rows: list[dict]) -> None:
    r0 = rows[0]
    print()
    print(f"training on {r0['cluster']} ({r0['devices']} devices), {r0['epochs']} epochs of "
          f"{r0['train_samples']} samples at batch {r0['batch_per_device']} per device (sim.system; "
          f"per-layer times: {r0['timing']}, non-GEMM ops under {r0['framework']}; {SPEEDUP_RULE}; 'not available': the method's "
          "compute effect is not modeled at system level):")
    print(format_table(["method", "train", "all-reduce", "payload per device GB", "speedup"],
                       [[r["method"], f"{r['train_s']:.4g} s", f"{r['comm_s']:.4g} s",
                         f"{r['comm_bytes_per_device'] / 1e9:.1f}",
                         f"{r['speedup_vs_dense']:.3f}" if r["speedup_vs_dense"] is not None
                         else "not available"] for r in rows]))
    for r in rows:
        for n in system_notes(r["notes"], r["timing"]):
            print(f"  {r['method']}: {n}")


def _print_warnings(caught) -> None:
    """Engine warnings once per kind, with the number of layers they hit ('layer phase: ' cut)."""
    counts: dict[str, int] = {}
    for w in caught:
        msg = re.sub(r"^\S+ (fwd|agbp|wgc): ", "", str(w.message))
        counts[msg] = counts.get(msg, 0) + 1
    for msg, n in counts.items():
        print(f"prunesim: warning: {msg} ({n} layer phases)", file=sys.stderr)


def _replay_rows(args, trace, methods, engines, seed, totals, table, rows_out, layer_rows) -> None:
    for step in run_trace(trace, methods, engines, seed=seed, iteration=args.iteration):
        totals.add(step)
        if args.json:
            rows_out.append(json_row(step))
            continue
        l0 = step.methods[0]
        st = l0.stats
        table.row([l0.iteration, l0.layer, l0.block, "x".join(map(str, l0.shape)),
                   "x".join(map(str, l0.agbp_mnk)), f"{st['mean_abs']:.2e}",
                   f"{st['kurtosis']:.1f}"] + [f"{lr.density:.4f}" for lr in step.methods])
        if getattr(args, "layers", False) and engines:
            by = {(r.method, r.hw): [] for r in step.phases}
            for r in step.phases:
                by[(r.method, r.hw)].append(r)
            for m in methods:
                for e in engines:
                    rs = by[(m.label, e.hw.name)]
                    if rs[0].status != "ok":   # not run: the engine does not model this combination
                        layer_rows.append([l0.iteration, l0.layer, e.hw.name, m.label,
                                           "-", "-", "-", "-", "-", "-", "not run"])
                        continue
                    sec = {r.phase: r.seconds for r in rs}
                    ops = layer_step_seconds(totals.step((l0.epoch,))[(e.hw.name, m.label)][1],
                                             {l0.layer})
                    layer_rows.append([l0.iteration, l0.layer, e.hw.name, m.label,
                                       *(f"{sec.get(ph, 0.0) * 1e6:.1f}" for ph in PHASES),
                                       *(f"{ops[ph] * 1e6:.1f}" for ph in ("fwd-ops", "bwd-ops")),
                                       "", "dense (fallback)" if any(r.fallback for r in rs) else ""])


def layer_step_seconds(kernels: dict, layers: set, *, attached: bool = True) -> dict[str, float]:
    """Seconds per STEP_PHASES of the step kernels whose `layer` is in `layers` (attached=False:
    of those whose layer is not: the loss, adds, pools, optimizer and framework time)."""
    return {ph: sum(k.seconds for k in ks if (k.layer in layers) == attached)
            for ph, ks in kernels.items()}


def _step_rows(totals: Totals, engines, layers: set) -> list[list]:
    """The --layers table's last rows, one per (hardware, method): the step kernels no replayed
    layer owns (loss, residual adds, pools, optimizer, the profile's per-step time)."""
    out = []
    for (hw, label), (prof, kernels) in totals.step().items():
        rec_ok = (hw, label) in totals.sums.result() and \
            totals.sums.result()[(hw, label)]["reason"] is None
        if not rec_ok:
            continue
        sec = layer_step_seconds(kernels, layers, attached=False)
        out.append(["-", "step", hw, label, "-", "-", "-", f"{sec['fwd-ops'] * 1e6:.1f}",
                    f"{sec['bwd-ops'] * 1e6:.1f}",
                    f"{(sec['optimizer'] + sec['framework']) * 1e6:.1f}", prof.name])
    return out


def _report(args, trace, engines, totals, rows_out, layer_rows, store, training=None) -> None:
    w = trace.workload
    from sim.results.store import point_record
    by_name = {e.hw.name: e.hw for e in engines}
    # one stored shape with sweeps and the API (a replay of one iteration is a different point)
    records = [{k: v for k, v in point_record(r, by_name[r["hw"]], cache_model=getattr(
        args, "cache_model", None), only_iteration=args.iteration).items() if k != "key"}
        for r in totals.records()]
    if store is not None:
        for rec in records:
            store.put(rec)
        store.close()
    if args.json:
        print(json.dumps(finite_or_none({"trace": str(trace.path), "workload": w.name,
                                         "batch": trace.batch,
                                         "hardware": [e.hw.name for e in engines],
                                         "layers": rows_out,
                                         "mean_conv_density": totals.mean_density(),
                                         "performance": records,
                                         **({"training": training} if training else {})}),
                         indent=1))
        return
    print()
    print("mean operand density over conv (and transformer linear) layers and captured "
          "iterations (the average Ye et al. report in their Table 1):")
    print(format_table(["method", "density"],
                       [[k, f"{v:.4f}"] for k, v in totals.mean_density().items()]))
    if layer_rows:
        print()
        layer_rows = layer_rows + _step_rows(totals, engines, {r[1] for r in layer_rows})
        print("per layer (us per step): FWD/AGBP/WGC = GEMM phases; fwd-ops/bwd-ops = the layer's "
              "BN, ReLU and bias kernels; the \"step\" rows: the kernels no layer owns (loss, "
              "residual adds, pooling; optim/framework = optimizer, zero_grad and the profile's "
              "per-step time) under the profile in their status column")
        print(format_table(["iter", "layer", "hardware", "method", "FWD us", "AGBP us", "WGC us",
                            "fwd-ops us", "bwd-ops us", "optim/framework us", "status"],
                           layer_rows))
    if engines:
        print()
        profs = sorted({f"{r['framework']} ({r['hw']})" for r in records if r.get("framework")})
        print(f"per training iteration at batch {trace.batch} (mean over {len(totals.iterations)} "
              "captured iterations; FC layers included; the whole step is timed under framework "
              "profile " + ", ".join(profs) + " (--framework; gemm-only: GEMM phases only); "
              + STEP_CAPTION + "; " + SPEEDUP_RULE + "):")
        print(performance_table(records))
        print("overhead = the methods' own kernels (thresholds, pruning, compression), included in "
              "the phase they belong to; backprop = AGBP + WGC; status: \"ok, N layer(s) dense\" = "
              "the method's sparsity has no kernel there (record field `fallback`)")
        if getattr(args, "energy", False):
            print()
            print(energy_table(records))
        for line in summary_lines(records):
            print(line, file=sys.stderr)
    if store is not None:
        print(f"{len(records)} records stored in {args.db}")
