"""Plots from plain records (lists of dicts), matplotlib with the Agg backend.

Every `fig_*` function builds and returns a Figure (the tests inspect its axes); every `plot_*`
function builds, writes PNG plus SVG and/or PDF into a folder, closes the figure and returns the
paths. The data helpers (`layer_records`, `tta_points`, `comm_runs`) turn a trace, accuracy curves
or the system model into those records; `cmd_plot` reads a result store and dispatches.

Kinds: speedup (Ye et al. Fig. 4 style), layers (SDGP Fig. 9), tta (SDGP Fig. 10), comm
(PruneTrain Fig. 11), pareto (accuracy versus time to accuracy, all methods) and roofline (one per
GPU hwconfig, every dense layer phase as a point). Ratios are speedups (> 1 faster); the TTA
target rule (TTA_RULE) and its accuracy curves (default_curves) are the demo's.
"""
from __future__ import annotations

import math
import sys
from collections import defaultdict
from contextvars import ContextVar
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # headless: the demo and the tests run without a display
import matplotlib.pyplot as plt  # noqa: E402

from sim.errors import ConfigError  # noqa: E402
from sim.methods import is_dense_id as _is_dense  # noqa: E402
from sim.methods.info import method_info  # noqa: E402

FORMATS = ("png", "svg", "pdf")
PHASE_COLORS = {"fwd": "#4C72B0", "agbp": "#DD8452", "wgc": "#55A868"}
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo")


# ---------------------------------------------------------------------------------------------
# helpers


def parse_formats(text: str | Sequence[str]) -> tuple[str, ...]:
    fm = [f.strip().lower() for f in (text.split(",") if isinstance(text, str) else text) if f.strip()]
    bad = [f for f in fm if f not in FORMATS]
    if bad or not fm:
        raise ConfigError(None, "--format", f"unknown format(s) {', '.join(bad) or '(none)'}; "
                          f"choose from {', '.join(FORMATS)}")
    if "png" not in fm:
        fm.insert(0, "png")  # PNG always: it is what people glance at
    return tuple(fm)


# (force, inputs) of the files _save writes: `plot --force` and the command's input files; API
# callers get the safe default (replace only plots prunesim wrote in that directory)
_OUTPUTS: ContextVar[tuple[bool, tuple]] = ContextVar("prunesim_plot_outputs", default=(False, ()))


def _save(fig, out: str | Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """Write one figure in every format into `out` (sim.outputs.OutputDir: an existing file is
    replaced only if an earlier plot wrote it there and it is unchanged since, or with --force)."""
    from sim.outputs import OutputDir
    force, inputs = _OUTPUTS.get()
    try:
        d = OutputDir(out, inputs=inputs, force=force)
        names = [f"{stem}.{f}" for f in formats]
        for n in names:  # every format refused before the first is written
            d.check(n)
        return [d.write(n, lambda tmp, f=f: fig.savefig(tmp, format=f, bbox_inches="tight",
                                                      dpi=130 if f == "png" else None))
                for n, f in zip(names, formats)]
    finally:
        plt.close(fig)


def _short_method(label: str) -> str:
    """'dbtd:p=0.99,sigma=paper' -> 'dbtd p=0.99' (defaults that never vary are dropped)."""
    mid, _, params = label.partition(":")
    keep = [kv for kv in params.split(",") if kv and not kv.startswith(("sigma=paper",
                                                                        "rescale=sample-channel"))]
    return mid + (" " + ",".join(keep) if keep else "")


def _uniq(seq: Iterable) -> list:
    out = []
    for x in seq:
        if x not in out:
            out.append(x)
    return out


def _batches(records: Sequence[dict]) -> str:
    b = _uniq(r.get("batch") for r in records)
    return "batch " + "/".join(str(x) for x in b)


# ---------------------------------------------------------------------------------------------
# speedup bars (Ye et al. Fig. 4 style)


# what each speedup metric of a network record compares (the bar plots' titles and axes)
SPEEDUP_WHAT = {"backprop_speedup": "conv back-prop (AGBP + WGC GEMMs)",
                "step_speedup": "GEMM step (FWD + AGBP + WGC)",
                "whole_step_speedup": "whole step (GEMMs, BN/ReLU/pool/loss, optimizer)"}


def fig_speedup(records: Sequence[dict], metric: str = "backprop_speedup"):
    """One panel per hardware; x = network, one bar per method; y = speedup over dense (x)."""
    recs = [r for r in records if r.get(metric) is not None and not _is_dense(r.get("method_id"))]
    if not recs:
        raise ValueError(f"no records with {metric} (only dense, or no dense baseline)")
    hws = _uniq(r["hw"] for r in recs)
    nets = _uniq(r["workload"] for r in recs)
    methods = _uniq(r["method"] for r in recs)
    ncol = min(3, len(hws))  # wrap: five platforms side by side are unreadable
    nrow = math.ceil(len(hws) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.5 + ncol * max(3.2, 0.35 * len(nets) * len(methods)),
                                                  0.8 + 3.4 * nrow), squeeze=False, sharey=True)
    for ax in axes.flat[len(hws):]:
        ax.set_visible(False)
    width = 0.8 / len(methods)
    val = {(r["hw"], r["workload"], r["method"]): r[metric] for r in recs}
    what = SPEEDUP_WHAT.get(metric, metric)
    for ax, hw in zip(axes.flat, hws):
        for j, m in enumerate(methods):
            xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(nets))]
            ys = [val.get((hw, n, m), float("nan")) for n in nets]
            bars = ax.bar(xs, ys, width, label=_short_method(m), color=f"C{j}")
            for b, y in zip(bars, ys):
                if math.isfinite(y):
                    # on a white box above the 1x line: a bar ending near 1 would hide it
                    ax.annotate(f"{y:.2f}", (b.get_x() + b.get_width() / 2, y), ha="center",
                                va="bottom", fontsize=6, rotation=90, xytext=(0, 3),
                                textcoords="offset points", zorder=4,
                                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none"))
        ax.axhline(1.0, color="k", lw=0.8, ls="--", zorder=1)
        ax.set_xticks(range(len(nets)), nets, rotation=20, ha="right")
        hw_kind = next((r.get("hw_kind") for r in recs if r["hw"] == hw), "")
        ax.set_title(f"{hw} ({hw_kind})", fontsize=9)
        ax.set_xlabel("network (workload)")
        ax.margins(y=0.15)
    for row in axes:
        row[0].set_ylabel(f"{what.split(' (')[0]} speedup\nover dense (×)")  # the title explains
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{what[0].upper() + what[1:]} speedup per network and platform, "
                 f"{_batches(recs)}; dashed: dense = 1×", fontsize=10)
    fig.tight_layout()
    return fig


def plot_speedup(records, out, formats=("png", "svg"), metric="backprop_speedup") -> list[Path]:
    return _save(fig_speedup(records, metric), out, f"speedup-{metric.split('_')[0]}", formats)


def plot_speedups(records, out, formats=("png", "svg")) -> list[Path]:
    """The conv back-prop speedup plot, and the whole-step one where records carry it (stores
    written before the whole step do not): speedup-backprop.*, speedup-whole.*."""
    paths = plot_speedup(records, out, formats)
    if any(r.get("whole_step_speedup") is not None and not _is_dense(r.get("method_id"))
           for r in records):
        paths += plot_speedup(records, out, formats, "whole_step_speedup")
    return paths


# ---------------------------------------------------------------------------------------------
# per-layer stacked FWD / AGBP / WGC time (SDGP Fig. 9 style)


def layer_records(trace, hws, methods, seed: int = 0) -> list[dict]:
    """Per (captured iteration, layer, hardware, method): the phase seconds at the trace's batch,
    from sim.driver.run_trace (the same computation `prunesim replay` runs)."""
    from sim.driver import aggregate, engines_for, run_trace
    from sim.replay import parse_methods
    from sim.traces.format import Trace, open_trace
    tr = trace if isinstance(trace, Trace) else open_trace(trace)
    engines = engines_for(list(hws))
    specs = parse_methods(list(methods))
    hw_kind = {e.hw.name: e.hw.kind for e in engines}
    out = []
    for step in run_trace(tr, specs, engines, seed=seed):
        dens = {lr.method: lr.density for lr in step.methods}
        op = step.methods[0].op
        for (hw, label), a in aggregate(step.phases, ("hw", "method")).items():
            if a["reason"] is not None:
                continue
            out.append({"hw": hw, "hw_kind": hw_kind[hw], "workload": tr.workload.name,
                        "batch": tr.batch, "method": label, "iteration": step.iteration,
                        "layer": step.layer, "op": op, "fwd_s": a["fwd"], "agbp_s": a["agbp"],
                        "wgc_s": a["wgc"], "overhead_s": a["overhead_s"], "density": dens[label]})
    return out


def _mean_layers(recs: Sequence[dict]) -> dict:
    """(hw, method, layer) -> mean phase seconds over captured iterations, layers in trace order."""
    acc: dict = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in recs:
        a = acc[(r["hw"], r["method"], r["layer"])]
        a[0] += r["fwd_s"]; a[1] += r["agbp_s"]; a[2] += r["wgc_s"]; a[3] += 1  # noqa: E702
    return {k: (v[0] / v[3], v[1] / v[3], v[2] / v[3]) for k, v in acc.items()}


def fig_layers(recs: Sequence[dict], methods: Sequence[str] | None = None, max_methods: int = 3):
    """One panel per hardware; per layer a stacked FWD/AGBP/WGC bar per method (hatched).
    One workload per figure (its layers are the x axis); one time unit for every panel."""
    if not recs:
        raise ValueError("no per-layer records")
    wls = _uniq(r["workload"] for r in recs)
    if len(wls) > 1:
        raise ValueError(f"per-layer records of {len(wls)} workloads ({', '.join(wls)}): plot one "
                         "workload at a time")
    hws = _uniq(r["hw"] for r in recs)
    methods = list(methods or _uniq(r["method"] for r in recs))[:max_methods]
    layers = _uniq(r["layer"] for r in recs)
    mean = _mean_layers(recs)
    fig, axes = plt.subplots(len(hws), 1, figsize=(min(20.0, max(7.0, 0.3 * len(layers) * len(methods))),
                                                   1.6 + 2.4 * len(hws)), squeeze=False, sharex=True)
    width = 0.8 / len(methods)
    # one unit for every panel (each panel keeps its own y range: CPUs take ~1000x a GPU)
    scale, unit = _time_unit([sum(v) for v in mean.values()])
    for ax, hw in zip(axes[:, 0], hws):
        for j, m in enumerate(methods):
            xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(layers))]
            bottom = [0.0] * len(layers)
            for p, ph in enumerate(("fwd", "agbp", "wgc")):
                ys = [mean.get((hw, m, l), (0.0, 0.0, 0.0))[p] * scale for l in layers]
                ax.bar(xs, ys, width, bottom=bottom, color=PHASE_COLORS[ph],
                       hatch=HATCHES[j % len(HATCHES)], edgecolor="white", lw=0.3,
                       label=f"{ph.upper()}" if j == 0 else None)
                bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set_ylabel(f"time / iteration ({unit})", fontsize=8)
        kind = next((r.get("hw_kind") for r in recs if r["hw"] == hw), "")
        ax.set_title(f"{hw} ({kind})", fontsize=9)
    axes[-1, 0].set_xticks(range(len(layers)), layers, rotation=60, ha="right",
                           fontsize=8 if len(layers) <= 40 else 7)
    axes[-1, 0].set_xlabel("layer (in network order)")
    # legend: phases by colour, methods by hatch
    from matplotlib.patches import Patch
    handles = [Patch(color=PHASE_COLORS[ph], label=ph.upper()) for ph in PHASE_COLORS] + \
        [Patch(facecolor="white", edgecolor="k", hatch=HATCHES[j % len(HATCHES)],
               label=_short_method(m)) for j, m in enumerate(methods)]
    axes[0, 0].legend(handles=handles, fontsize=7, ncol=2, loc="upper right")
    wl = _uniq(r["workload"] for r in recs)
    fig.suptitle(f"Per-layer FWD / AGBP / WGC time, {'/'.join(wl)}, {_batches(recs)} "
                 "(mean over captured iterations; method kernels included)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_layers(recs, out, formats=("png", "svg"), methods=None) -> list[Path]:
    return _save(fig_layers(recs, methods), out, "layers", formats)


# ---------------------------------------------------------------------------------------------
# time to accuracy (SDGP Fig. 10 style) and the accuracy-vs-TTA Pareto plot


def iterations_per_epoch(trace) -> int | None:
    """From the trace's provenance (what the capture actually ran), else samples / batch."""
    prov = getattr(trace, "provenance", {}) or {}
    t = prov.get("training", {}) or {}
    if t.get("iterations_per_epoch"):
        return int(t["iterations_per_epoch"])
    n = (prov.get("dataset", {}) or {}).get("train_samples")
    return int(n) // int(trace.batch) if n else None


REPO = Path(__file__).resolve().parents[1]
ACCURACY_RUNS = REPO / "docs" / "data" / "accuracy"
# the accuracy runs of tools/accuracy_runs.py: one setup, every method
ACCURACY_RUNS_SETUP = ("resnet20", "mnist5k")
TTA_RULE = "0.99 x the best validation accuracy of the dense curve"


def default_curves(trace) -> tuple[list, str]:
    """The accuracy curves a TTA uses when none are given, and where they come from: our accuracy
    runs (docs/data/accuracy, one curve per method) when the trace is of their setup, else the
    trace's own training log (its method only). The demo and `prunesim plot` both use this."""
    from sim.system.tta import load_curves
    from sim.traces.format import Trace, open_trace
    tr = trace if isinstance(trace, Trace) else open_trace(trace)
    ds = (tr.provenance or {}).get("dataset")
    ds = ds.get("name") if isinstance(ds, dict) else ds
    runs = sorted(ACCURACY_RUNS.glob("*.log.csv")) if ACCURACY_RUNS.is_dir() else []
    if runs and (tr.workload.name, ds) == ACCURACY_RUNS_SETUP:
        return ([c for f in runs for c in load_curves(f)],
                "docs/data/accuracy (tools/accuracy_runs.py)")
    return load_curves(tr.path), f"the trace's log ({tr.path.name})"


def tta_points(records: Sequence[dict], curves, iters_per_epoch: int, target: float,
               rule: str | None = None) -> list[dict]:
    """Per network record: simulated epoch time (step_s x iterations) and the time to reach
    `target` on the method's own accuracy curve. A non-dense method without its own curve gets no
    number (we never assume its accuracy equals dense's)."""
    from sim.system.tta import time_to_accuracy
    by_method = {c.method: c for c in curves}
    out = []
    for r in records:
        c = by_method.get(r["method"]) or by_method.get(r.get("method_id"))
        if c is None and _is_dense(r.get("method_id")):
            c = by_method.get(None)  # the trace's own log is the dense run
        ep_s = r["step_s"] * iters_per_epoch
        d = {"hw": r["hw"], "hw_kind": r.get("hw_kind"), "workload": r["workload"],
             "batch": r["batch"], "method": r["method"], "epoch_s": ep_s, "target": target,
             "tta_s": None, "epoch": None, "accuracy": None, "target_rule": rule,
             "status": "no accuracy curve for this method"}
        if c is not None:
            epochs = max(e for e, _ in c.points) + 1
            s, e = time_to_accuracy([ep_s] * epochs, c, target)
            d.update(tta_s=s, epoch=e, accuracy=max(a for _, a in c.points),
                     status="reached" if s is not None else "not reached")
        out.append(d)
    return out


def _time_unit(vals: Sequence[float]) -> tuple[float, str]:
    """A scale and unit that keep tick labels short (GPUs and CPUs differ by 1000x)."""
    m = max(vals) if vals else 1.0
    return ((1 / 3600, "h") if m >= 7200 else (1 / 60, "min") if m >= 120 else (1.0, "s")
            if m >= 1 else (1e3, "ms") if m >= 1e-3 else (1e6, "µs"))


def fig_tta(points: Sequence[dict]):
    """One panel per hardware; one bar per method: simulated time to the target accuracy."""
    pts = [p for p in points if p["tta_s"] is not None]
    if not pts:
        raise ValueError("no method reaches the target accuracy on its own curve")
    hws = _uniq(p["hw"] for p in pts)
    fig, axes = plt.subplots(1, len(hws), figsize=(2.2 + 2.6 * len(hws), 4.0), squeeze=False)
    for ax, hw in zip(axes[0], hws):
        ps = [p for p in pts if p["hw"] == hw]
        k, unit = _time_unit([p["tta_s"] for p in ps])  # per panel: CPUs take 1000x a GPU
        ys = [p["tta_s"] * k for p in ps]
        bars = ax.bar(range(len(ps)), ys, color=[f"C{i}" for i in range(len(ps))])
        for b, p in zip(bars, ps):
            ax.annotate(f"ep {p['epoch']}", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(ps)), [_short_method(p["method"]) for p in ps], rotation=30,
                      ha="right", fontsize=7)
        ax.set_xlabel("method")
        ax.set_ylabel(f"time to accuracy ({unit})")
        ax.set_title(f"{hw}", fontsize=9)
        ax.margins(y=0.15)
    tgt = pts[0]["target"]
    skipped = sorted({_short_method(p["method"]) for p in points if p["tta_s"] is None})
    rule = pts[0].get("target_rule")
    fig.suptitle(f"Simulated time to {tgt:g} validation accuracy, {pts[0]['workload']}, "
                 f"{_batches(pts)}" + (f"\ntarget = {rule}" if rule else "")
                 + (f"\n(no curve or not reached: {', '.join(skipped)})" if skipped else ""),
                 fontsize=9)
    fig.tight_layout()
    return fig


def plot_tta(points, out, formats=("png", "svg")) -> list[Path]:
    return _save(fig_tta(points), out, "tta", formats)


def fig_pareto(points: Sequence[dict]):
    """x = simulated time to target, y = best validation accuracy; one marker per hardware,
    one colour per method; the lower-left-to-upper-left frontier per hardware is drawn."""
    pts = [p for p in points if p["tta_s"] is not None and p["accuracy"] is not None]
    if not pts:
        raise ValueError("no (method, hardware) point has both an accuracy curve and a TTA")
    hws = _uniq(p["hw"] for p in pts)
    methods = _uniq(p["method"] for p in pts)
    k, unit = _time_unit([p["tta_s"] for p in pts])
    pct = all(p["accuracy"] <= 1.0 for p in pts)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    markers = "osD^vP*X"
    for i, hw in enumerate(hws):
        ps = sorted((p for p in pts if p["hw"] == hw), key=lambda p: p["tta_s"])
        for p in ps:
            j = methods.index(p["method"])
            ax.scatter(p["tta_s"] * k, p["accuracy"] * (100 if pct else 1), marker=markers[i % 8],
                       color=f"C{j}", s=40, zorder=3)
        front, best = [], -1.0
        for p in ps:  # Pareto frontier: faster first; keep points that improve accuracy
            if p["accuracy"] > best:
                front.append(p)
                best = p["accuracy"]
        ax.plot([p["tta_s"] * k for p in front], [p["accuracy"] * (100 if pct else 1) for p in front],
                color="0.5", lw=0.8, ls=":", zorder=2)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker="o", ls="", color=f"C{j}", label=_short_method(m))
               for j, m in enumerate(methods)] + \
        [Line2D([], [], marker=markers[i % 8], ls="", color="0.3", label=hw) for i, hw in enumerate(hws)]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    if len({p["tta_s"] for p in pts}) > 1 and max(p["tta_s"] for p in pts) / \
            min(p["tta_s"] for p in pts) > 50:
        ax.set_xscale("log")  # CPUs and GPUs differ by three orders of magnitude
    if pct:
        ax.set_ylim(top=min(100.0, ax.get_ylim()[1]))
    ax.set_xlabel(f"simulated time to {pts[0]['target']:g} accuracy ({unit})")
    ax.set_ylabel("best validation accuracy (%)" if pct else "best validation accuracy (as logged)")
    rule = pts[0].get("target_rule")
    ax.set_title(f"Accuracy vs time to accuracy, {pts[0]['workload']}, {_batches(pts)}; "
                 "dotted: frontier per hardware" + (f"\ntarget {pts[0]['target']:g} = {rule}"
                                                    if rule else ""), fontsize=9)
    fig.tight_layout()
    return fig


def plot_pareto(points, out, formats=("png", "svg")) -> list[Path]:
    return _save(fig_pareto(points), out, "pareto", formats)


# ---------------------------------------------------------------------------------------------
# communication over training (PruneTrain Fig. 11 style)


def comm_runs(workload: str, cluster: str, gpus: int | None = None, epochs: int | None = None,
              methods: Sequence[str] = ("dense", "prunetrain", "zero:schedule=1"),
              trace=None, samples: int | None = None) -> list[dict]:
    """Per-epoch series from sim.system.simulate_run (Run.to_json()), one per method.

    trace (a path or Trace): the workload, and the epochs, batch and training-set size of the run
    it captured (sim.replay.trace_training_defaults); else the workload's dataset defaults.
    A method sim.system does not model (its time would be dense's) is left out and named in the
    `left_out` field of every run."""
    from sim.methods import parse_method
    from sim.replay import (DEFAULT_GPUS, system_level_available, trace_training_defaults,
                            training_values)
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import lasso_trajectory, simulate_run
    from sim.workload import load_workload
    d: dict = {}
    if trace is not None:
        from sim.traces.format import Trace, open_trace
        tr = trace if isinstance(trace, Trace) else open_trace(trace)
        w, d = tr.workload, trace_training_defaults(tr)
    else:
        w = load_workload(workload)
    cl = load_cluster(cluster)
    cl = cl.with_devices(gpus or min(DEFAULT_GPUS, cl.devices))
    v = training_values(d, w.dataset, epochs=epochs, samples=samples)
    ds, epochs, batch, samples = v["dataset"], v["epochs"], v["batch"], v["samples"]
    if epochs is None or batch is None or samples is None:
        raise ConfigError(w.origin, "dataset", f"no default epochs/batch/training-set size for "
                          f"dataset {ds!r} (give --epochs; a stored trace's provenance has them)")
    out, left_out = [], []
    for m in _uniq(["dense", *methods]):
        spec = parse_method(m)
        traj = lasso_trajectory(w, spec.get("rho"), spec.get("interval"), epochs,
                                batch * cl.devices, samples, weight_decay=spec.get("wd")) \
            if method_info(spec).is_channel_plan else None
        run = simulate_run(w, cl, spec, epochs=epochs, batch=batch, trajectory=traj,
                           samples=samples)
        if not system_level_available(run):
            left_out.append(_short_method(spec.label))
            continue
        dd = run.to_json()
        dd.update(cluster=cl.name, batch=batch)
        out.append(dd)
    for dd in out:
        dd["left_out"] = left_out
    return out


def fig_comm(runs: Sequence[dict]):
    """Left: all-reduce payload per iteration over epochs; right: per-epoch communication time."""
    if not runs:
        raise ValueError("no system-model runs")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.9))
    k, unit = _time_unit([e["comm_seconds"] for r in runs for e in r["per_epoch"]])
    for i, r in enumerate(runs):
        ep = [e["epoch"] for e in r["per_epoch"]]
        per_it = [e["comm_bytes"] / e["iterations"] / 1e6 for e in r["per_epoch"]]
        a1.plot(ep, per_it, color=f"C{i}", label=_short_method(r["method"]))
        a2.plot(ep, [e["comm_seconds"] * k for e in r["per_epoch"]], color=f"C{i}",
                label=_short_method(r["method"]) + " (all-reduce)")
        a2.plot(ep, [e["exposed_comm_seconds"] * k for e in r["per_epoch"]], color=f"C{i}",
                ls=(0, (2, 1.5)), lw=2.0, marker="." if len(ep) <= 30 else None,
                label=_short_method(r["method"]) + " (exposed)")
    a1.set_xlabel("training epoch (epoch index)")
    a1.set_ylabel("all-reduce payload per iteration (MB/device)")
    a1.set_title("per iteration", fontsize=9)
    a1.set_ylim(bottom=0)
    a2.set_xlabel("training epoch (epoch index)")
    a2.set_ylabel(f"communication time per epoch ({unit})")
    a2.set_title("per epoch (dashed: not hidden behind back-prop)", fontsize=9)
    a2.set_ylim(bottom=0)
    a1.legend(fontsize=7)
    a2.legend(fontsize=6)
    r0 = runs[0]
    left_out = sorted({m for r in runs for m in r.get("left_out", ())})
    fig.suptitle(f"Communication over training, {r0['workload']} on {r0.get('cluster', '?')} "
                 f"({r0['devices']} devices), batch {r0.get('batch', '?')}/device at start; "
                 f"per-layer times: {r0['timing_source']}"
                 + (f"\n(not modeled at system level, left out: {', '.join(left_out)})"
                    if left_out else ""), fontsize=9)
    fig.tight_layout()
    return fig


def plot_comm(runs, out, formats=("png", "svg")) -> list[Path]:
    return _save(fig_comm(runs), out, "comm", formats)


# ---------------------------------------------------------------------------------------------
# roofline per GPU hwconfig (every dense layer-phase as a point)


def roofline_points(workload, batch: int, hw) -> list[dict]:
    """Per dense (layer, phase) on a GPU hwconfig: FLOPs, DRAM bytes and seconds of its kernels
    as the tensor-core engine models them (GEMM or direct kernel, col2im included)."""
    from sim.driver import engine_for, phase_kernels
    from sim.workload import lower
    if hw.kind != "gpu":
        raise ConfigError(hw.path, "kind", "the roofline plot is for GPU hwconfigs (the "
                          "tensor-core engine's rates); CPU configs have no single math roof here")
    out = []
    engine = engine_for(hw)
    for l in workload.layers:
        gs = lower(l, batch)
        for ph, ks in phase_kernels(engine, l, batch, None).items():
            g = gs[ph]
            secs = sum(k.seconds for k in ks)
            out.append({"hw": hw.name, "workload": workload.name, "batch": batch,
                        "layer": l.name, "phase": ph, "flops": g.flops,
                        "dram_bytes": sum(k.bytes.get("dram", 0) for k in ks), "seconds": secs,
                        "kernel": ks[0].kernel})
    return out


def fig_roofline(points: Sequence[dict], hw):
    """Log-log roofline of one GPU: the math roof (dense, the engine's default dtype), the DRAM
    roof, and each layer-phase at (FLOP per DRAM byte, achieved FLOP/s), coloured by phase."""
    from sim.engines.gpu.spec import gpu_spec
    if not points:
        raise ValueError("no layer-phase points")
    s = gpu_spec(hw)
    dtype = s.default_dtype()
    peak = 2 * s.sm * s.fma_rate(dtype) * s.clock / 1e12          # TFLOP/s
    bw = s.dram_bpc * s.clock / 1e12                                # TB/s
    pts = [p for p in points if p["dram_bytes"] > 0 and p["seconds"] > 0]
    ai = [p["flops"] / p["dram_bytes"] for p in pts]
    lo, hi = min(ai + [peak / bw]) / 4, max(ai + [peak / bw]) * 4
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    xs = [lo, peak / bw, hi]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="k", lw=1.2,
            label=f"roofs: {peak:.0f} TFLOP/s {dtype}, {bw * 1e3:.0f} GB/s DRAM")
    for ph in ("fwd", "agbp", "wgc"):
        sel = [p for p in pts if p["phase"] == ph]
        ax.scatter([p["flops"] / p["dram_bytes"] for p in sel],
                   [p["flops"] / p["seconds"] / 1e12 for p in sel], s=16,
                   color=PHASE_COLORS[ph], label=ph.upper(), zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte of DRAM traffic)")
    ax.set_ylabel("achieved (TFLOP/s)")
    ax.legend(fontsize=7, loc="lower right")
    p0 = points[0]
    ax.set_title(f"Roofline of {hw.name} (tensor-core engine), {p0['workload']}, batch "
                 f"{p0['batch']}: every dense layer phase", fontsize=9)
    fig.tight_layout()
    return fig


def plot_roofline(points, hw, out, formats=("png", "svg")) -> list[Path]:
    return _save(fig_roofline(points, hw), out, f"roofline-{hw.name}", formats)


# ---------------------------------------------------------------------------------------------
# the command


def _store_records(db: str, kind: str) -> list[dict]:
    try:
        from sim.results.store import ResultStore
    except ImportError as e:
        raise ConfigError("sim/results/store.py", None, f"the result store module is missing "
                          f"({e}); `prunesim plot` reads a store") from None
    if not Path(db).is_file():
        raise ConfigError(db, None, "no such result store")
    try:
        return list(ResultStore(db).records(kind=kind))
    except (KeyError, ValueError) as e:
        raise ConfigError(db, kind, f"cannot read {kind}-level records: {e}") from None


def _curves(paths: Sequence[str], trace_path: str | None):
    from sim.system.tta import load_curves
    curves = []
    for p in paths or ([trace_path] if trace_path else []):
        curves.extend(load_curves(p))
    if not curves:
        raise ConfigError(None, "--accuracy", "no accuracy curves (give --accuracy CSV or a trace "
                          "directory with log.csv)")
    return curves


def _default_target(curves) -> float:
    """Without --target: TTA_RULE, 99 % of the dense curve's best accuracy (a target every useful
    run meets near its end; stated in the plot title)."""
    dense = [c for c in curves if c.method is None or _is_dense(c.method)]
    best = max(a for c in (dense or curves) for _, a in c.points)
    return round(0.99 * best, 4)


def cmd_plot(args) -> int:
    from sim.outputs import OutputDir
    formats = parse_formats(args.format)
    kind = args.kind
    inputs = (args.db, *(getattr(args, "accuracy", None) or ()))
    OutputDir(args.out, inputs=inputs)   # --out itself: a directory or a new path, before any work
    token = _OUTPUTS.set((bool(getattr(args, "force", False)), inputs))
    try:
        return _cmd_plot(args, formats, kind)
    finally:
        _OUTPUTS.reset(token)


def _cmd_plot(args, formats, kind) -> int:
    recs = _store_records(args.db, "network")
    if not recs:
        raise ConfigError(args.db, "records", "no network-level records (fill it with `prunesim "
                          "replay --db` or `prunesim sweep`)")
    out = Path(args.out)
    if kind == "speedup":
        paths = plot_speedups(recs, out, formats)
    elif kind == "layers":
        try:
            lrec = _store_records(args.db, "layer")
        except ConfigError:
            lrec = []
        # one workload per plot: --workload, else the first stored (the others are named)
        wl = getattr(args, "workload", None) or recs[0]["workload"]
        others = [w for w in _uniq(r["workload"] for r in recs) if w != wl]
        if others:
            print(f"layers: plotting {wl}; the store also holds {', '.join(others)} "
                  "(choose with --workload)", file=sys.stderr)
        recs = [r for r in recs if r["workload"] == wl]
        lrec = [r for r in lrec if r["workload"] == wl]
        if not recs:
            raise ConfigError(args.db, "--workload", f"no records of workload {wl!r}")
        if not lrec:  # no per-layer rows stored: replay the trace the network rows came from
            traces = _uniq(r["trace"] for r in recs if r.get("trace"))
            if not traces or not Path(traces[0]).is_dir():
                raise ConfigError(args.db, "trace", "no per-layer records and the trace of the "
                                  "network records is not on disk")
            sel = [r for r in recs if r.get("trace") == traces[0]]
            lrec = layer_records(traces[0], _uniq(r["hw"] for r in sel),
                                 _uniq(r["method"] for r in sel))
        paths = plot_layers(lrec, out, formats, methods=getattr(args, "methods", None))
    elif kind in ("tta", "pareto"):
        from sim.traces.format import open_trace
        trace_path = next((r["trace"] for r in recs if r.get("trace")), None)
        ipe = getattr(args, "iterations_per_epoch", None)
        if ipe is None and trace_path and Path(trace_path).is_dir():
            ipe = iterations_per_epoch(open_trace(trace_path))
        if not ipe:
            raise ConfigError(args.db, "trace", "iterations per epoch unknown: give "
                              "--iterations-per-epoch")
        given = getattr(args, "accuracy", None) or []
        if given or not (trace_path and Path(trace_path).is_dir()):
            curves, src = _curves(given, trace_path), "the --accuracy curves"
        else:
            curves, src = default_curves(trace_path)
        target = getattr(args, "target", None)
        rule = "given (--target)" if target else f"{TTA_RULE} ({src})"
        target = target or _default_target(curves)
        # one trace's accuracy log and epoch length apply to that trace's records only
        sel = [r for r in recs if r.get("trace") == trace_path] or recs
        pts = tta_points(sel, curves, ipe, target, rule)
        try:
            paths = (plot_tta if kind == "tta" else plot_pareto)(pts, out, formats)
        except ValueError as e:
            raise ConfigError(args.db, kind, str(e)) from None
    elif kind == "comm":
        # the methods that were run (the store's), on the workload's trace when it is on disk
        wl = getattr(args, "workload", None) or recs[0]["workload"]
        sel = [r for r in recs if r["workload"] == wl]
        trace = next((r["trace"] for r in sel if r.get("trace") and Path(r["trace"]).is_dir()),
                     None)
        runs = comm_runs(wl, getattr(args, "cluster", None) or "dgx-a100-hdr",
                         getattr(args, "gpus", None), getattr(args, "epochs", None),
                         methods=_uniq(r["method"] for r in sel), trace=trace)
        paths = plot_comm(runs, out, formats)
    elif kind == "roofline":
        # one plot per GPU hwconfig of the store, on the first workload's trace (or zoo entry)
        from sim.hwconfig import load_hwconfig
        from sim.workload import load_workload
        wl_name = getattr(args, "workload", None) or recs[0]["workload"]
        sel = [r for r in recs if r["workload"] == wl_name]
        if not sel:
            raise ConfigError(args.db, "--workload", f"no records of workload {wl_name!r}")
        trace = next((r["trace"] for r in sel if r.get("trace") and Path(r["trace"]).is_dir()),
                     None)
        if trace:
            from sim.traces.format import open_trace
            w = open_trace(trace).workload
        else:
            w = load_workload(wl_name)
        paths = []
        for name in _uniq(r["hw"] for r in sel if r.get("hw_kind") == "gpu"):
            path = next((r.get("hw_path") for r in sel if r["hw"] == name and r.get("hw_path")),
                        None)
            hw = load_hwconfig(path or name)
            paths += plot_roofline(roofline_points(w, sel[0]["batch"], hw), hw, out, formats)
        if not paths:
            raise ConfigError(args.db, "hw", "no GPU records: the roofline plot is for GPUs")
    else:  # argparse restricts kind; kept for API callers
        raise ConfigError(None, "--kind", f"unknown plot kind {kind!r}")
    for p in paths:
        print(p)
    return 0
