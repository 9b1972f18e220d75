"""The demo (`make demo`): the bundled real traces replayed on every bundled platform with every
method that applies there, a summary table, a result store and the five plots.

    python -m analysis.report [--out out] [--trace DIR ...] [--quick]

One pass over each trace (sim.driver.run_trace) feeds both the network-level records and the
per-layer plot, so the methods run once per recorded tensor and every engine reuses the result.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = ("traces/sample-resnet20-mnist5k", "traces/sample-cnn2-mnist5k",
          "traces/sample-vit-tiny-mnist5k")   # a transformer (#18): linears and attention
HARDWARE = ("a100-sxm4-40gb", "h100-sxm5-80gb", "xeon-e5-2680v4", "rpi4b", "titan-xp")
METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "sdgp-resmag:nm=2:4", "approx:schedule=1",
           "zero:schedule=1", "topk")
# the per-layer time plot shows the baseline and one method of each structure (unstructured, n:m),
# as SDGP's Fig. 9 compares them
LAYER_PLOT_IDS = ("dense", "dbtd", "sdgp-mag")


def applies(method_id: str, hw) -> str | None:
    """None if the method has a kernel on this hardware, else why not. The engines would still
    return a number (modeled dense), which is not the method's, so the demo leaves it out."""
    from sim.methods.info import method_info
    return method_info(method_id).kernel_gap(hw.kind, hw.value)


def _load_hardware(hardware, log) -> list:
    from sim.hwconfig import load_hwconfig
    hws = []
    for h in hardware:
        try:
            hws.append(load_hwconfig(h))
        except Exception as e:  # noqa: BLE001 - a missing optional platform is reported, not fatal
            log(f"skipping hardware {h}: {e}")
    return hws


def _trace_path(tpath):
    return REPO / tpath if not Path(tpath).is_absolute() else tpath


def _replay(traces, hws, specs, log) -> tuple[list, list, dict]:
    """(network records, per-layer records, {what: why} left out) of every trace, one driver pass
    each; records of a method without a kernel on a platform are left out (applies())."""
    from sim.driver import aggregate, engines_for, run_trace
    from sim.replay import Totals
    from sim.traces.format import open_trace
    engines = engines_for(hws)
    records, layer_recs, skipped = [], [], {}
    for tpath in traces:
        tr = open_trace(_trace_path(tpath))
        t1 = time.perf_counter()
        totals = Totals(tr, specs, engines)
        with warnings.catch_warnings():
            # SDGP on the TITAN Xp falls back to dense with one warning per layer; those records
            # are dropped below (applies()) and reported once
            warnings.filterwarnings("ignore", message=".*running dense", category=RuntimeWarning)
            steps = list(run_trace(tr, specs, engines))
        for step in steps:
            totals.add(step)
            for (hw, label), a in aggregate(step.phases, ("hw", "method")).items():
                if a["reason"] is None:
                    layer_recs.append({"hw": hw, "workload": tr.workload.name, "batch": tr.batch,
                                       "method": label, "iteration": step.iteration,
                                       "layer": step.layer, "fwd_s": a["fwd"],
                                       "agbp_s": a["agbp"], "wgc_s": a["wgc"]})
        by_name = {hw.name: hw for hw in hws}
        for r in totals.records():
            why = applies(r["method_id"], by_name[r["hw"]]) or r.get("reason")
            if why:
                skipped.setdefault(f"{r['method_id']} on {r['hw']}", why)
                continue
            records.append(r)
        log(f"replayed {tpath} ({tr.workload.name}, batch {tr.batch}, {len(tr.iterations)} "
            f"captured iterations) on {len(hws)} platforms x {len(specs)} methods in "
            f"{time.perf_counter() - t1:.1f} s")
    for r in layer_recs:
        r["hw_kind"] = next(h.kind for h in hws if h.name == r["hw"])
    layer_recs = [r for r in layer_recs
                  if not applies(r["method"].split(":")[0], next(h for h in hws if h.name == r["hw"]))]
    return records, layer_recs, skipped


def _log_table(records, skipped, log) -> None:
    from analysis import plots
    from sim.results.tables import format_table
    log("")
    log("per training iteration (FC layers included; ops = BN, ReLU, pooling, adds, loss; "
        "optim = optimizer; whole step under the profile named (pytorch-eager on GPUs, caffe on "
        "CPUs); speedup = dense time / method time on the same hardware, > 1 is faster; conv "
        "back-prop = AGBP + WGC):")
    log(format_table(["workload", "hardware", "method", "framework", "density", "FWD ms",
                      "AGBP ms", "WGC ms", "ops ms", "optim ms", "overhead %",
                      "conv back-prop speedup", "whole step speedup"],
                     [[r["workload"], r["hw"], plots._short_method(r["method"]), r["framework"],
                       f"{r['density']:.3f}" if r["density"] is not None else "-",
                       f"{r['fwd_s'] * 1e3:.3f}", f"{r['agbp_s'] * 1e3:.3f}",
                       f"{r['wgc_s'] * 1e3:.3f}",
                       f"{(r['fwd_ops_s'] + r['bwd_ops_s']) * 1e3:.3f}",
                       f"{(r['optimizer_s'] + r['framework_s']) * 1e3:.3f}",
                       f"{100 * r['overhead_s'] / r['step_s']:.1f}",
                       f"{r['backprop_speedup']:.2f}", f"{r['whole_step_speedup']:.2f}"]
                      for r in records]))
    for k, why in skipped.items():
        log(f"  not run: {k}: {why}")


def _store(records, out: Path, log) -> None:
    """The records in out/demo.sqlite (the result store); plain JSON where it is missing."""
    try:
        from sim.results.store import ResultStore
    except ImportError:
        ResultStore = None
    if ResultStore is not None:
        db = out / "demo.sqlite"
        st = ResultStore(db)
        for r in records:
            st.put(r)
        if hasattr(st, "close"):
            st.close()
        log(f"\n{len(records)} records in {db}")
    else:
        p = out / "demo-records.json"
        p.write_text(json.dumps(records, indent=1))
        log(f"\n{len(records)} records in {p} (sim/results/store.py not present yet)")


def _plots(records, layer_recs, traces, specs, out: Path, log) -> list:
    from analysis import plots
    from sim.traces.format import open_trace
    paths = plots.plot_speedups(records, out)   # conv back-prop and whole step
    main = [r for r in layer_recs if r["workload"] == records[0]["workload"]]
    paths += plots.plot_layers(main, out, methods=[s.label for s in specs
                                                   if s.id in LAYER_PLOT_IDS])
    first = open_trace(_trace_path(traces[0]))
    # the same curves and target rule as `prunesim plot --kind tta` on this trace's records
    curves, src = plots.default_curves(first)
    target = plots._default_target(curves)
    pts = plots.tta_points([r for r in records if r["workload"] == first.workload.name], curves,
                           plots.iterations_per_epoch(first), target, f"{plots.TTA_RULE} ({src})")
    paths += plots.plot_tta(pts, out)
    paths += plots.plot_pareto(pts, out)
    # the methods that were run, with the trace's own training setup (as `plot --kind comm`)
    paths += plots.plot_comm(plots.comm_runs(
        first.workload.name, "dgx-a100-hdr", methods=[s.label for s in specs], trace=first), out)
    log("plots: " + ", ".join(str(p) for p in paths if p.suffix == ".png"))
    n_curve = len({p["method"] for p in pts if p["tta_s"] is not None})
    log(f"time to accuracy: target {target:g} = {plots.TTA_RULE} ({src}); {n_curve} method(s) "
        "reach it on their own accuracy curve")
    return paths


def run(out: Path, traces=TRACES, hardware=HARDWARE, methods=METHODS, log=print) -> dict:
    """The whole demo: replay, the summary table, the store and the plots under `out`."""
    from sim.replay import parse_methods
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    hws = _load_hardware(hardware, log)
    specs = parse_methods(list(methods))
    records, layer_recs, skipped = _replay(traces, hws, specs, log)
    _log_table(records, skipped, log)
    _store(records, out, log)
    paths = _plots(records, layer_recs, traces, specs, out, log)
    secs = time.perf_counter() - t0
    log(f"demo finished in {secs:.0f} s")
    return {"records": records, "layer_records": layer_recs, "paths": paths, "seconds": secs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--trace", action="append", default=None)
    ap.add_argument("--force", action="store_true",
                    help="replace plots in --out that the demo did not write (sim.outputs)")
    a = ap.parse_args(argv)
    from analysis import plots
    from sim.errors import PrunesimError
    from sim.jit import announce_compiles
    announce_compiles()      # on a terminal: say so while Numba compiles (a cold cache)
    token = plots._OUTPUTS.set((a.force, ()))
    try:
        run(Path(a.out), traces=tuple(a.trace) if a.trace else TRACES)
    except PrunesimError as e:
        print(f"prunesim: error: {e}", file=sys.stderr)
        return 2
    finally:
        plots._OUTPUTS.reset(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
