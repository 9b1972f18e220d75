"""Write (or check) tests/data/golden_replay.json: every replayed number of the bundled sample traces.

The refactor guard: per (trace, iteration, layer, method, hardware) the phase seconds,
the method-overhead share and the energy, and per (trace, hardware, method) the network record, on
every bundled hwconfig and eight method columns. `tests/test_golden_replay.py` recomputes them and
compares; regenerate only when a change is meant to move numbers, and say which in the commit:

    python tools/golden_replay.py            # rewrite the file
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden_replay.json"
TRACES = ("sample-resnet20-mnist5k", "sample-cnn2-mnist5k")
METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "sdgp-mag:nm=1:4", "approx:schedule=1",
           "topk:keep=0.1", "zero:schedule=1", "random:schedule=1")
ITERATION = 0     # one captured iteration per trace keeps the test fast
RECORD_FIELDS = ("density", "fwd_s", "agbp_s", "wgc_s", "overhead_s", "backprop_s", "step_s",
                 "status", "reason", "fallback", "backprop_speedup", "step_speedup", "energy_j")


def compute() -> dict:
    from sim.driver import engines_for, run_trace
    from sim.replay import Totals, json_row, parse_methods
    from sim.traces.format import open_trace
    # the bundled configs; a calibration of one machine (written by `prunesim calibrate`) is a
    # measurement, added after the reference, not part of the engine guard
    hws = sorted(str(p) for p in (ROOT / "hwconfigs").glob("*.yaml")
                 if "written by prunesim calibrate" not in p.read_text(encoding="utf-8"))
    out: dict = {}
    for t in TRACES:
        tr = open_trace(ROOT / "traces" / t)
        engines = engines_for(hws)
        specs = parse_methods(list(METHODS))
        totals = Totals(tr, specs, engines, 0)
        layers = {}
        for step in run_trace(tr, specs, engines, seed=0, iteration=ITERATION):
            totals.add(step)
            row = json_row(step)
            for label, e in row["methods"].items():
                for hw, sec in e["seconds"].items():
                    layers[f"{row['layer']}|{label}|{hw}"] = {
                        **sec, "overhead": e["overhead"][hw], "energy": e["energy"].get(hw),
                        "fallback": e["fallback"].get(hw)}
                for hw, why in e["not_run"].items():
                    layers[f"{row['layer']}|{label}|{hw}"] = {"not_run": why}
        recs = {f"{r['hw']}|{r['method']}": {k: r[k] for k in RECORD_FIELDS}
                for r in totals.records()}
        out[t] = {"layers": layers, "records": recs}
    return out


if __name__ == "__main__":
    OUT.write_text(json.dumps(compute(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)
