"""Replay: the main job. Streams a trace layer by layer through the methods and whatever engines exist.

Per captured iteration and layer: the lowered GEMM shapes, the gradient statistics of dO, and for
each method the operand density it produces and its own work. Rows are printed as each layer
finishes, so nothing accumulates but the per-method running sums of the summary.
"""
from __future__ import annotations

import importlib
import json
from collections import defaultdict

from analysis.tables import StreamTable, format_table
from sim.errors import ConfigError
from sim.hwconfig import KINDS, HwConfig, load_hwconfig
from sim.methods import MethodSpec, apply_method, parse_method, stream_key
from sim.methods.base import MethodResult, scale_work
from sim.traces.format import open_trace
from sim.traces.inspect import finite_or_none
from sim.traces.stats import layer_stats
from sim.workload import Layer, lower

DEFAULT_METHODS = ("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "approx:schedule=1")


def _engines(paths: list[str]) -> list[tuple[HwConfig, object]]:
    out = []
    for p in paths:
        hw = load_hwconfig(p)
        out.append((hw, importlib.import_module(KINDS[hw.kind])))
    return out


def layer_kernels(hw: HwConfig, engine, layer: Layer, batch: int, mr: MethodResult | None,
                  seed: int = 0) -> dict[str, list]:
    """Every kernel of one layer's phases on one engine; AGBP is skipped where nothing needs it.

    mr is the method's result on the recorded tensor, with its work already scaled to the full
    batch; the method's own kernels are charged once, on the first phase it touches.
    """
    gemms = lower(layer, batch)
    run = [ph for ph in ("fwd", "agbp", "wgc") if ph != "agbp" or layer.needs_agbp]
    charge_at = next((ph for ph in run if mr is not None and ph in mr.phases), None)
    out = {}
    for ph in run:
        out[ph] = engine.simulate_phase(gemms[ph], mr, hw, layer=layer, batch=batch, seed=seed,
                                        charge_method=(ph == charge_at) if mr else None)
    return out


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
    engines = _engines(args.hw)
    hw_names = [hw.name for hw, _ in engines]
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
            print("hardware: " + ", ".join(f"{hw.name} ({hw.kind})" for hw, _ in engines))
        print("methods: " + ", ".join(m.label for m in methods))
    header = ["iter", "layer", "block", "dO shape", "AGBP MxNxK", "mean |g|", "kurt"] + \
             [_short(m) for m in methods]
    table = StreamTable(header, [5, 22, 12, 14, 16, 9, 6] + [len(h) for h in header[7:]])
    rows_out = []
    dens_sum: dict[str, float] = defaultdict(float)
    dens_n: dict[str, int] = defaultdict(int)
    # (hw, method) -> phase -> seconds summed over layers and iterations; plus method overhead
    timing: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    iterations = set()
    need_csr = any(hw.kind == "cpu" for hw, _ in engines)
    scale = trace.batch / trace.recorded_batch
    for rec, arr in trace.stream("dO", iteration=args.iteration):
        layer = w.layer(rec.layer)
        g = lower(layer, trace.batch)
        st = layer_stats(arr)
        per_method = {}
        for m in methods:
            res = apply_method(m, layer, arr, key=stream_key(seed, layer.index, rec.iteration),
                               batch=trace.batch, conv_index=conv_index.get(layer.name, 0),
                               batch_index=rec.iteration, n_conv=n_conv, build_csr=need_csr)
            per_method[m.label] = {"density": res.density, "structure": res.structure,
                                   "work": res.work.as_dict(), **res.extra}
            mr = None if res.structure == "dense" and not res.phases else scale_work(res, scale)
            for hw, engine in engines:
                t = timing[(hw.name, m.label)]
                ks = layer_kernels(hw, engine, layer, trace.batch, mr, seed)
                sec = {ph: sum(k.seconds for k in kl) for ph, kl in ks.items()}
                over = sum(k.seconds for kl in ks.values() for k in kl
                           if k.kernel.endswith("-overhead"))
                for ph, v in sec.items():
                    t[ph] += v
                t["overhead"] += over
                per_method[m.label].setdefault("seconds", {})[hw.name] = sec
            if layer.op == "conv":
                dens_sum[m.label] += res.density
                dens_n[m.label] += 1
        iterations.add(rec.iteration)
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
    perf = _performance(engines, methods, timing, max(1, len(iterations)))
    if args.json:
        print(json.dumps(finite_or_none({"trace": str(trace.path), "workload": w.name,
                                         "batch": trace.batch, "hardware": hw_names,
                                         "layers": rows_out, "mean_conv_density": summary,
                                         "performance": perf}), indent=1))
        return 0
    print()
    print("mean operand density over conv layers and captured iterations "
          "(the average Ye et al. report in their Table 1):")
    print(format_table(["method", "density"], [[k, f"{v:.4f}"] for k, v in summary.items()]))
    if perf:
        print()
        print(f"per training iteration at batch {trace.batch} (mean over {len(iterations)} captured "
              "iterations; FC layers included; speedups over dense on the same hardware):")
        print(format_table(
            ["hardware", "method", "FWD ms", "AGBP ms", "WGC ms", "overhead ms", "backprop x",
             "step x"],
            [[p["hw"], p["method"], f"{p['fwd_s'] * 1e3:.3f}", f"{p['agbp_s'] * 1e3:.3f}",
              f"{p['wgc_s'] * 1e3:.3f}", f"{p['overhead_s'] * 1e3:.3f}",
              f"{p['backprop_speedup']:.3f}", f"{p['step_speedup']:.3f}"] for p in perf]))
        print("overhead = the methods' own kernels (thresholds, pruning, compression), included in "
              "the phase they belong to; backprop = AGBP + WGC")
    return 0


def _performance(engines, methods, timing, n_iter: int) -> list[dict]:
    out = []
    for hw, _ in engines:
        base = timing.get((hw.name, "dense"))
        for m in methods:
            t = timing[(hw.name, m.label)]
            bp = (t["agbp"] + t["wgc"]) / n_iter
            step = bp + t["fwd"] / n_iter
            row = {"hw": hw.name, "method": m.label, "fwd_s": t["fwd"] / n_iter,
                   "agbp_s": t["agbp"] / n_iter, "wgc_s": t["wgc"] / n_iter,
                   "overhead_s": t["overhead"] / n_iter}
            if base is not None:
                bbp = (base["agbp"] + base["wgc"]) / n_iter
                row["backprop_speedup"] = bbp / bp if bp > 0 else float("inf")
                row["step_speedup"] = (bbp + base["fwd"] / n_iter) / step if step > 0 else float("inf")
            else:
                row["backprop_speedup"] = row["step_speedup"] = float("nan")
            out.append(row)
    return out
