"""Replay: the main job. Streams a trace layer by layer through the methods and every engine.

`replay_layers` is a generator: per captured (iteration, layer) it computes each method's result
once, on the recorded tensor, and hands it to every hardware engine (so a sweep over many hwconfigs
pays for the trace statistics once per method). `Totals` keeps only per-(hardware, method) running
sums and turns them into network-level records. `cmd_replay` prints rows as layers finish.
"""
from __future__ import annotations

import importlib
import json
import re
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

from sim.results.tables import SPEEDUP_RULE, StreamTable, format_table, performance_table
from sim import __version__
from sim.errors import ConfigError
from sim.engines.base import Unsupported, fallback_of, unsupported_reason
from sim.engines.energy import NA as NA_ENERGY, kernels_energy
from sim.hwconfig import KINDS, HwConfig, load_hwconfig
from sim.methods import MethodSpec, apply_method, parse_method, refuse_unused, stream_key
from sim.methods.base import MethodResult, scale_work
from sim.traces.format import Trace, open_checked_trace, stream_checked
from sim.traces.inspect import finite_or_none
from sim.workload import Layer, lower

DEFAULT_METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "approx:schedule=1")
PHASES = ("fwd", "agbp", "wgc")
_FALLBACK_WARNING = r".*(running|runs) dense"   # the engines' sparse-fallback warnings


def engines_for(hws: list[HwConfig | str]) -> list[tuple[HwConfig, object]]:
    """(hwconfig, engine module) pairs; strings are loaded (names or paths)."""
    out = []
    for h in hws:
        hw = h if isinstance(h, HwConfig) else load_hwconfig(h)
        out.append((hw, importlib.import_module(KINDS[hw.kind])))
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
        if spec.id == "prunetrain":
            raise ConfigError(None, "--method", "prunetrain needs a channel trajectory, not a "
                              "gradient trace (use `prunesim train`)")
        out.append(spec)
    if not any(m.id == "dense" for m in out):
        out.insert(0, parse_method("dense"))  # every speedup is relative to dense
    return out


def layer_kernels(hw: HwConfig, engine, layer: Layer, batch: int, mr: MethodResult | None,
                  seed: int = 0) -> dict[str, list]:
    """Every kernel of one layer's phases on one engine; AGBP is skipped where nothing needs it.

    mr is the method's result on the recorded tensor, with its work already scaled to the full
    batch; the method's own kernels are charged once, on the first phase it touches.
    """
    gemms = lower(layer, batch)
    run = [ph for ph in PHASES if ph != "agbp" or layer.needs_agbp]
    charge_at = next((ph for ph in run if mr is not None and ph in mr.phases), None)
    for ph in run:
        why = unsupported_reason(hw, layer, mr, ph)
        if why:
            raise Unsupported(None, ph, why)
    return {ph: engine.simulate_phase(gemms[ph], mr, hw, layer=layer, batch=batch, seed=seed,
                                      charge_method=(ph == charge_at) if mr else None)
            for ph in run}


def replay_layers(trace: Trace, methods: list[MethodSpec], engines: list[tuple[HwConfig, object]],
                  seed: int = 0, iteration: int | None = None) -> Iterator[dict]:
    """Per recorded (iteration, layer): shapes, dO statistics, and per method its density, work and
    per-hardware phase seconds (with the method-overhead share). A (hardware, method) pair the
    engine does not model for this layer has its reason in `not_run` instead of seconds; one that
    ran some phase dense although the method asked for sparsity has the reason in `fallback`."""
    w = trace.workload
    conv_index = {l.name: i for i, l in enumerate(w.convs)}
    need_csr = any(hw.kind == "cpu" for hw, _ in engines)
    scale = trace.batch / trace.recorded_batch
    for rec, arr, stats in stream_checked(trace, "dO", iteration):
        layer = w.layer(rec.layer)
        g = lower(layer, trace.batch)
        per_method = {}
        for m in methods:
            res = apply_method(m, layer, arr, key=stream_key(seed, layer.index, rec.iteration),
                               batch=trace.batch, conv_index=conv_index.get(layer.name, 0),
                               batch_index=rec.iteration, n_conv=len(w.convs), build_csr=need_csr,
                               dense_output=False)
            mr = None if res.structure == "dense" and not res.phases else scale_work(res, scale)
            entry = {"density": res.density, "structure": res.structure,
                     "work": res.work.as_dict(), "seconds": {}, "overhead": {}, "not_run": {},
                     "fallback": {}, "energy": {},
                     **{k: v for k, v in res.extra.items() if k != "work_scaled_by"}}
            for hw, engine in engines:
                try:
                    with warnings.catch_warnings():
                        # a fallback is the row's `fallback` field, summarized once by the caller
                        warnings.filterwarnings("ignore", _FALLBACK_WARNING, RuntimeWarning)
                        ks = layer_kernels(hw, engine, layer, trace.batch, mr, seed)
                except Unsupported as e:
                    entry["not_run"][hw.name] = e.message
                    continue
                entry["fallback"][hw.name] = fallback_of(ks)
                entry["seconds"][hw.name] = {ph: sum(k.seconds for k in kl) for ph, kl in ks.items()}
                entry["overhead"][hw.name] = sum(k.seconds for kl in ks.values() for k in kl
                                                 if k.kernel.endswith("-overhead"))
                entry["energy"][hw.name] = kernels_energy(hw, [k for kl in ks.values() for k in kl])
            per_method[m.label] = entry
        yield {"iteration": rec.iteration, "epoch": rec.epoch, "layer": rec.layer, "op": layer.op,
               "block": layer.block, "shape": list(rec.shape),
               "agbp_mnk": [g["agbp"].m, g["agbp"].n, g["agbp"].k],
               "wgc_mnk": [g["wgc"].m, g["wgc"].n, g["wgc"].k], "stats": stats,
               "methods": per_method}


@dataclass
class Totals:
    """Running sums over replayed layers; nothing per layer is kept."""

    trace: Trace
    methods: list[MethodSpec]
    engines: list[tuple[HwConfig, object]]
    seed: int = 0
    iterations: set = field(default_factory=set)
    dens: dict = field(default_factory=lambda: defaultdict(lambda: [0.0, 0]))
    time: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    not_run: dict = field(default_factory=dict)      # (hw, method) -> first reason
    fallback: dict = field(default_factory=dict)     # (hw, method) -> [layers, first reason]
    energy: dict = field(default_factory=dict)       # (hw, method) -> {cause: J} or None (n/a)

    def add(self, row: dict) -> None:
        self.iterations.add(row["iteration"])
        for label, e in row["methods"].items():
            for hw, why in e.get("not_run", {}).items():
                self.not_run.setdefault((hw, label), why)
            for hw, why in e.get("fallback", {}).items():
                if why:
                    fb = self.fallback.setdefault((hw, label), [set(), why])
                    fb[0].add(row["layer"])
            if row["op"] == "conv":
                self.dens[label][0] += e["density"]
                self.dens[label][1] += 1
            for hw, sec in e["seconds"].items():
                t = self.time[(hw, label)]
                for ph, v in sec.items():
                    t[ph] += v
                t["overhead"] += e["overhead"][hw]
                en = e.get("energy", {}).get(hw)
                key = (hw, label)
                if en is None:
                    self.energy[key] = None          # one layer without a table: no network total
                elif self.energy.setdefault(key, dict.fromkeys(en, 0.0)) is not None:
                    for k, v in en.items():
                        self.energy[key][k] += v

    def mean_density(self) -> dict[str, float]:
        return {m.label: self.dens[m.label][0] / self.dens[m.label][1]
                for m in self.methods if self.dens[m.label][1]}

    def records(self) -> list[dict]:
        """One flat record per (hardware, method): per-iteration phase times and speedups."""
        n = max(1, len(self.iterations))
        dens = self.mean_density()
        tr = self.trace
        tr_sum = trace_checksum(tr)
        out = []
        for hw, _ in self.engines:
            base = self.time.get((hw.name, "dense"))
            for m in self.methods:
                t = self.time[(hw.name, m.label)]
                fwd, agbp, wgc = t["fwd"] / n, t["agbp"] / n, t["wgc"] / n
                rec = {"prunesim": __version__, "hw": hw.name, "hw_kind": hw.kind,
                       "hw_checksum": hw.checksum, "workload": tr.workload.name,
                       "trace": str(tr.path), "trace_checksum": tr_sum,
                       "batch": tr.batch, "iterations": n, "seed": self.seed,
                       "method": m.label, "method_id": m.id,
                       "method_params": json.dumps(dict(m.params), sort_keys=True),
                       "density": dens.get(m.label), "fwd_s": fwd, "agbp_s": agbp, "wgc_s": wgc,
                       "overhead_s": t["overhead"] / n, "backprop_s": agbp + wgc,
                       "step_s": fwd + agbp + wgc, "status": "ok", "reason": None,
                       "fallback": fallback_text(self.fallback.get((hw.name, m.label))),
                       "backprop_speedup": None, "step_speedup": None,
                       "energy_j": None, "energy_split": None}
                en = self.energy.get((hw.name, m.label))
                if en is not None:
                    rec["energy_j"] = en["total"] / n
                    rec["energy_split"] = json.dumps({k: v / n for k, v in en.items()
                                                      if k != "total"}, sort_keys=True)
                why = self.not_run.get((hw.name, m.label))
                if why is not None:
                    # no numbers: a partial sum over the layers the engine did model would pass
                    # for the network's time
                    rec.update({k: None for k in ("density", "fwd_s", "agbp_s", "wgc_s",
                                                  "overhead_s", "backprop_s", "step_s",
                                                  "energy_j", "energy_split")},
                               status="not run", reason=why, fallback=None)
                if self.not_run.get((hw.name, "dense")) is not None:
                    base = None
                if base is not None and why is None:
                    bbp = (base["agbp"] + base["wgc"]) / n
                    bstep = bbp + base["fwd"] / n
                    rec["backprop_speedup"] = bbp / rec["backprop_s"] if rec["backprop_s"] else None
                    rec["step_speedup"] = bstep / rec["step_s"] if rec["step_s"] else None
                out.append(rec)
        return out


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
            print("hardware: " + ", ".join(f"{hw.name} ({hw.kind})" for hw, _ in engines))
        print("methods: " + ", ".join(m.label for m in methods))
    header = ["iter", "layer", "block", "dO shape", "AGBP MxNxK", "mean |g|", "kurt"] + \
             [_short(m) for m in methods]
    table = StreamTable(header, [5, 22, 12, 14, 16, 9, 6] + [len(h) for h in header[7:]])
    totals = Totals(trace, methods, engines, seed)
    rows_out = []
    layer_rows = []
    from sim.engines.cli import cache_model_for
    with warnings.catch_warnings(record=True) as caught, \
            cache_model_for(args, {hw.kind for hw, _ in engines}):
        warnings.simplefilter("always")
        _replay_rows(args, trace, methods, engines, seed, totals, table, rows_out, layer_rows)
    _print_warnings(caught)
    training = training_report(trace, methods, *cluster) if cluster else None
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
                    samples: int) -> list[dict]:
    """The training-level estimate of the trace's workload on a cluster (sim.system), per method:
    whole-run time and communication at the trace's batch, next to dense (see training_setup)."""
    from sim.system.prunetrain import simulate_run
    w = trace.workload
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = {m.label: simulate_run(w, cluster, m, epochs=epochs, batch=trace.batch,
                                      samples=samples) for m in methods}
    _print_warnings(caught)
    dense = runs["dense"]
    return [{"method": label, "cluster": cluster.name, "devices": cluster.devices,
             "epochs": epochs, "train_samples": samples, "batch_per_device": trace.batch,
             "train_s": r.train_seconds, "comm_bytes_per_device": r.comm_bytes,
             "comm_s": r.comm_seconds,
             "speedup_vs_dense": (dense.train_seconds / r.train_seconds
                                  if system_level_available(r) and r.train_seconds else None),
             "timing": r.timing_source, "notes": list(r.notes)} for label, r in runs.items()]


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
          f"per-layer times: {r0['timing']}; {SPEEDUP_RULE}; 'not available': the method's "
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
    for row in replay_layers(trace, methods, engines, seed, args.iteration):
        totals.add(row)
        if args.json:
            rows_out.append(row)
            continue
        st = row["stats"]
        table.row([row["iteration"], row["layer"], row["block"], "x".join(map(str, row["shape"])),
                   "x".join(map(str, row["agbp_mnk"])), f"{st['mean_abs']:.2e}",
                   f"{st['kurtosis']:.1f}"] + [f"{row['methods'][m.label]['density']:.4f}"
                                               for m in methods])
        if getattr(args, "layers", False) and engines:
            for m in methods:
                for hw, _ in engines:
                    e = row["methods"][m.label]
                    sec = e["seconds"].get(hw.name)
                    if sec is None:   # not run: the engine does not model this combination
                        layer_rows.append([row["iteration"], row["layer"], hw.name, m.label,
                                           "-", "-", "-", "not run"])
                        continue
                    layer_rows.append([row["iteration"], row["layer"], hw.name, m.label,
                                       *(f"{sec.get(ph, 0.0) * 1e6:.1f}" for ph in PHASES),
                                       "dense (fallback)" if e["fallback"].get(hw.name) else ""])


def _report(args, trace, engines, totals, rows_out, layer_rows, store, training=None) -> None:
    w = trace.workload
    records = totals.records()
    from sim.results.store import cache_model_field
    for rec in records:  # part of a stored point's key: exact and profile points never collide
        rec["cache_model"] = cache_model_field(rec["hw_kind"], getattr(args, "cache_model", None))
    if store is not None:
        for rec in records:
            # a replay of one iteration is a different point from the whole trace's
            rec["only_iteration"] = args.iteration
            store.put(rec)
        store.close()
    if args.json:
        print(json.dumps(finite_or_none({"trace": str(trace.path), "workload": w.name,
                                         "batch": trace.batch,
                                         "hardware": [hw.name for hw, _ in engines],
                                         "layers": rows_out,
                                         "mean_conv_density": totals.mean_density(),
                                         "performance": records,
                                         **({"training": training} if training else {})}),
                         indent=1))
        return
    print()
    print("mean operand density over conv layers and captured iterations "
          "(the average Ye et al. report in their Table 1):")
    print(format_table(["method", "density"],
                       [[k, f"{v:.4f}"] for k, v in totals.mean_density().items()]))
    if layer_rows:
        print()
        print(format_table(["iter", "layer", "hardware", "method", "FWD us", "AGBP us", "WGC us",
                            "status"],
                           layer_rows))
    if engines:
        print()
        print(f"per training iteration at batch {trace.batch} (mean over {len(totals.iterations)} "
              "captured iterations; FC layers included; the GEMM phases only: BN, ReLU, pooling "
              "and the optimizer are not timed here; " + SPEEDUP_RULE + "):")
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
