"""Replay: the main job. Streams a trace layer by layer through whatever models exist.

This first version prints, per captured iteration and layer, the lowered GEMM shapes and the
gradient statistics of dO. Engines (tensor cores, CPU, patch extraction) plug in here as their
issues land; rows are printed as each layer finishes, so nothing accumulates.
"""
from __future__ import annotations

import json

from analysis.tables import StreamTable
from sim.errors import ConfigError
from sim.traces.format import open_trace
from sim.traces.inspect import finite_or_none
from sim.traces.stats import layer_stats
from sim.workload import lower
from sim.yamlio import load_yaml_file


def _check_hwconfigs(paths: list[str]) -> list[str]:
    names = []
    for p in paths:
        doc = load_yaml_file(p, ConfigError)
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            raise ConfigError(p, "name", "expected a hardware config mapping with a name")
        names.append(doc["name"])
    return names


def _name(v) -> str:
    return str(v.get("name", "?")) if isinstance(v, dict) else str(v if v is not None else "?")


def cmd_replay(args) -> int:
    trace = open_trace(args.trace)
    hw_names = _check_hwconfigs(args.hw)
    w = trace.workload
    b = trace.recorded_batch
    prov = trace.provenance
    header = ["iter", "epoch", "layer", "block", "dO shape", "AGBP MxNxK", "WGC MxNxK",
              "density", "zero frac", "mean |g|", "max |g|", "kurtosis"]
    if not args.json:
        print(f"trace {trace.path}: workload {w.name}, batch {trace.batch} "
              f"(recorded {b} per batch), method {_name(prov.get('method'))}, "
              f"dataset {_name(prov.get('dataset'))}"
              + ("" if trace.complete else "  [capture was interrupted: partial trace]"))
        if hw_names:
            print("hardware: " + ", ".join(hw_names) + " (no engine model is implemented yet: "
                  "shapes and gradient statistics only)")
    rows_out = []
    table = StreamTable(header, [5, 5, 24, 12, 18, 20, 20, 8, 9, 10, 10, 8])
    for rec, arr in trace.stream("dO", iteration=args.iteration):
        layer = w.layer(rec.layer)
        g = lower(layer, trace.batch)
        st = layer_stats(arr)
        row = {"iteration": rec.iteration, "epoch": rec.epoch, "layer": rec.layer,
               "block": layer.block, "shape": list(rec.shape),
               "agbp_mnk": [g["agbp"].m, g["agbp"].n, g["agbp"].k],
               "wgc_mnk": [g["wgc"].m, g["wgc"].n, g["wgc"].k], **st}
        if args.json:
            rows_out.append(row)
            continue
        table.row([rec.iteration, rec.epoch, rec.layer, layer.block, "x".join(map(str, rec.shape)),
                   "x".join(map(str, row["agbp_mnk"])), "x".join(map(str, row["wgc_mnk"])),
                   f"{st['density']:.4f}", f"{st['zero_fraction']:.4f}", f"{st['mean_abs']:.3e}",
                   f"{st['max_abs']:.3e}", f"{st['kurtosis']:.1f}"])
    if args.json:
        print(json.dumps(finite_or_none({"trace": str(trace.path), "workload": w.name,
                                          "hardware": hw_names, "layers": rows_out}), indent=1))
    return 0
