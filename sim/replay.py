"""Replay: the main job. Streams a trace layer by layer through the methods and whatever engines exist.

Per captured iteration and layer: the lowered GEMM shapes, the gradient statistics of dO, and for
each method the operand density it produces and its own work. Rows are printed as each layer
finishes, so nothing accumulates but the per-method running sums of the summary.
"""
from __future__ import annotations

import json
from collections import defaultdict

from analysis.tables import StreamTable, format_table
from sim.errors import ConfigError
from sim.methods import MethodSpec, apply_method, parse_method, stream_key
from sim.traces.format import open_trace
from sim.traces.inspect import finite_or_none
from sim.traces.stats import layer_stats
from sim.workload import lower
from sim.yamlio import load_yaml_file

DEFAULT_METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "approx:schedule=1")


def _check_hwconfigs(paths: list[str]) -> list[str]:
    names = []
    for p in paths:
        doc = load_yaml_file(p, ConfigError)
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            raise ConfigError(p, "name", "expected a hardware config mapping with a name")
        names.append(doc["name"])
    return names


def _name(v) -> str:
    return str(v.get("id", v.get("name", "?"))) if isinstance(v, dict) else str(v if v is not None else "?")


def _short(m: MethodSpec) -> str:
    """Column header: the id and its parameter values, e.g. 'dbtd .99/paper'."""
    vals = "/".join(str(v).replace("0.", ".") for _, v in m.params if v != "sample-channel")
    return f"{m.id} {vals}".strip()


def _methods(texts: list[str]) -> list[MethodSpec]:
    out = []
    for t in texts or DEFAULT_METHODS:
        try:
            spec = parse_method(t)
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
        if spec.id == "prunetrain":
            raise ConfigError(None, "--method", "prunetrain needs a channel trajectory, not a "
                              "gradient trace (see the system model)")
        out.append(spec)
    return out


def cmd_replay(args) -> int:
    trace = open_trace(args.trace)
    hw_names = _check_hwconfigs(args.hw)
    methods = _methods(getattr(args, "method", []))
    w = trace.workload
    prov = trace.provenance
    seed = getattr(args, "seed", 0)
    conv_index = {l.name: i for i, l in enumerate(w.convs)}
    n_conv = len(w.convs)
    if not args.json:
        print(f"trace {trace.path}: workload {w.name}, batch {trace.batch} "
              f"(recorded {trace.recorded_batch} per batch), captured under {_name(prov.get('method'))}, "
              f"dataset {_name(prov.get('dataset'))}"
              + ("" if trace.complete else "  [capture was interrupted: partial trace]"))
        if hw_names:
            print("hardware: " + ", ".join(hw_names) + " (no engine model is wired into replay yet: "
                  "shapes, gradient statistics and method densities only)")
        print("methods: " + ", ".join(m.label for m in methods))
    header = ["iter", "layer", "block", "dO shape", "AGBP MxNxK", "mean |g|", "kurt"] + \
             [_short(m) for m in methods]
    table = StreamTable(header, [5, 22, 12, 14, 16, 9, 6] + [len(h) for h in header[7:]])
    rows_out = []
    dens_sum: dict[str, float] = defaultdict(float)
    dens_n: dict[str, int] = defaultdict(int)
    for rec, arr in trace.stream("dO", iteration=args.iteration):
        layer = w.layer(rec.layer)
        g = lower(layer, trace.batch)
        st = layer_stats(arr)
        per_method = {}
        for m in methods:
            res = apply_method(m, layer, arr, key=stream_key(seed, layer.index, rec.iteration),
                               batch=trace.batch, conv_index=conv_index.get(layer.name, 0),
                               batch_index=rec.iteration, n_conv=n_conv, build_csr=False)
            per_method[m.label] = {"density": res.density, "structure": res.structure,
                                   "work": res.work.as_dict(), **res.extra}
            if layer.op == "conv":
                dens_sum[m.label] += res.density
                dens_n[m.label] += 1
        row = {"iteration": rec.iteration, "epoch": rec.epoch, "layer": rec.layer,
               "block": layer.block, "shape": list(rec.shape),
               "agbp_mnk": [g["agbp"].m, g["agbp"].n, g["agbp"].k],
               "wgc_mnk": [g["wgc"].m, g["wgc"].n, g["wgc"].k], "stats": st, "methods": per_method}
        if args.json:
            rows_out.append(row)
            continue
        table.row([rec.iteration, rec.layer, layer.block, "x".join(map(str, rec.shape)),
                   "x".join(map(str, row["agbp_mnk"])), f"{st['mean_abs']:.2e}",
                   f"{st['kurtosis']:.1f}"] + [f"{per_method[m.label]['density']:.4f}" for m in methods])
    summary = {m.label: dens_sum[m.label] / dens_n[m.label] for m in methods if dens_n[m.label]}
    if args.json:
        print(json.dumps(finite_or_none({"trace": str(trace.path), "workload": w.name,
                                         "hardware": hw_names, "layers": rows_out,
                                         "mean_conv_density": summary}), indent=1))
        return 0
    print()
    print("mean operand density over conv layers and captured iterations "
          "(the average Ye et al. report in their Table 1):")
    print(format_table(["method", "density"], [[k, f"{v:.4f}"] for k, v in summary.items()]))
    return 0
