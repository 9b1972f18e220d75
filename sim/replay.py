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
from sim.errors import ConfigError
from sim.driver import LayerRun, Sums, engines_for, run_trace  # noqa: F401 (engines_for: API)
from sim.engines.energy import NA as NA_ENERGY
from sim.methods import MethodSpec, parse_method, refuse_unused
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


def step_phase_kernels(engines, workload, batch: int, methods, framework=None) -> dict:
    """{(hw name, method label): (profile, {phase: [KernelResult]})}: the step's non-GEMM kernels
    (sim.driver.step_kernels), once per (hardware, method): they depend on the workload, batch,
    profile and method, never on the recorded gradient values."""
    from sim.driver import step_kernels
    out = {}
    for e in engines:
        prof = framework_for(framework, e.hw.kind)
        for m in methods:
            out[(e.hw.name, m.label)] = (prof, step_kernels(e, workload, batch, prof, method=m))
    return out


def parse_methods(texts: list[str] | tuple[str, ...]) -> list[MethodSpec]:
    out = []
    for t in texts or DEFAULT_METHODS:
        try:
            if "+" in str(t):
                raise ValueError(f"combined method {t!r}: replay applies one method per column; "
                                 "combinations with prunetrain run in `prunesim train`")
            spec = parse_method(t)
            refuse_unused(spec, "replay")
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
        if method_info(spec).is_channel_plan:
            raise ConfigError(None, "--method", "prunetrain needs a channel trajectory, not a "
                              "gradient trace (use `prunesim train`)")
        out.append(spec)
    if not any(method_info(m).is_dense for m in out):
        out.insert(0, parse_method("dense"))  # every speedup is relative to dense
    return out


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
    _step: dict | None = None

    def add(self, step: LayerRun) -> None:
        self.iterations.add(step.iteration)
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

    def step(self) -> dict:
        """The step's non-GEMM kernels per (hardware, method) (step_phase_kernels, computed once)."""
        if self._step is None:
            self._step = step_phase_kernels(self.engines, self.trace.workload, self.trace.batch,
                                            self.methods, self.framework)
        return self._step

    def records(self) -> list[dict]:
        """One flat record per (hardware, method): per-iteration phase times and speedups."""
        return network_records(self.sums.result(), [e.hw for e in self.engines], self.methods,
                               self.trace, self.seed, max(1, len(self.iterations)),
                               self.mean_density(), self.step())


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
    methods = parse_methods(getattr(args, "method", []))
    seed = getattr(args, "seed", 0)
    store = None
    if getattr(args, "db", None):
        from sim.results.store import ResultStore
        store = ResultStore(args.db)
    cluster = None
    for opt in ("gpus", "epochs", "train_samples"):
        if getattr(args, opt, None) and not getattr(args, "cluster", None):
            raise ConfigError(None, "--" + opt.replace("_", "-"), "only meaningful with --cluster")
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
    whole-run time and communication at the trace's batch, next to dense (see training_setup)."""
    from sim.system.prunetrain import simulate_run
    w = trace.workload
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = {m.label: simulate_run(w, cluster, m, epochs=epochs, batch=trace.batch,
                                      samples=samples, framework=framework) for m in methods}
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
                    ops = layer_step_seconds(totals.step()[(e.hw.name, m.label)][1], {l0.layer})
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
