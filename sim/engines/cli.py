"""`prunesim gemm` and `prunesim layer`: one implementation for every engine, over the Engine
protocol (sim.engines.base) and the driver (sim.driver).

Both commands mean the same on every hardware kind: one --conv syntax, one default batch
(LAYER_BATCH), --phase all = FWD, AGBP and WGC, the same synthetic gradients
(sim.methods.synthetic, or --trace), ConfigError / Unsupported as one-line errors, and one JSON
shape. The bounds live here, at the input layer, so no engine ever sees a GEMM whose counts
overflow or a layer whose tensors cannot be allocated (sim/limits.py holds the numbers).
"""
from __future__ import annotations

import json
import warnings

from sim.engines.base import Unsupported, engine_for
from sim.errors import ConfigError
from sim.hwconfig import load_hwconfig
from sim.limits import available_memory, check_budget, check_range, fmt_bytes
from sim.methods import is_dense_id
from sim.methods.info import method_info

LAYER_BATCH = 128      # `prunesim layer --workload` without --batch (a training batch)
GPU_DTYPES = ("fp16", "bf16", "tf32", "fp32")   # the tensor-core engine's data types
PHASES = ("fwd", "agbp", "wgc")
LAYER_SAMPLES = 2      # synthetic dO samples standing for the batch unless --samples says


def _engine(args):
    hw = load_hwconfig(args.hw)
    return engine_for(hw), hw


def cache_model_for(args, kinds):
    """The context of `--cache MODEL` (CPU cache misses: exact LRU or reuse profile); refused
    where no CPU hwconfig is simulated, since it would change nothing."""
    from contextlib import nullcontext

    from sim.engines.cpu.spmm import cache_model
    from sim.errors import ConfigError
    name = getattr(args, "cache_model", None)
    if name is None:
        return nullcontext()
    if "cpu" not in kinds:
        raise ConfigError(None, "--cache", "only the CPU engine simulates caches; no CPU hwconfig "
                          "is given")
    return cache_model(name)


def _gemm_options(args, hw) -> tuple[str | None, str]:
    """(--sparse, dtype) for the hardware kind. The CPU's fp16 default maps to the fp32 Caffe
    models; every other check (N:M vs CSR density, dtype, the pattern) is the engine's `gemm`."""
    if hw.kind == "cpu":
        if args.dtype not in ("fp32", "fp16"):
            raise ConfigError(hw.path, "--dtype", f"the CPU engine models fp32 (Caffe), not "
                              f"{args.dtype}")
        density = getattr(args, "density", None)
        if density is not None and not 0.0 < density <= 1.0:
            raise ConfigError(hw.path, "--density", f"must be in (0, 1], got {density}")
        return getattr(args, "sparse", None), "fp32"
    return getattr(args, "sparse", None), args.dtype


def cmd_gemm(args) -> int:
    engine, hw = _engine(args)
    check_budget("layer_macs", args.m * args.n * args.k, None, "--m/--n/--k",
                 what=f"{args.m}x{args.n}x{args.k}")
    sparse, dtype = _gemm_options(args, hw)
    with cache_model_for(args, {hw.kind}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # both families take both sparsities and refuse the other's (N:M on a GPU, CSR
            # density on a CPU) with a one-line error
            (r,) = engine.gemm(args.m, args.n, args.k, sparse=sparse, density=args.density,
                               dtype=dtype, threads=args.threads,
                               seed=getattr(args, "seed", 0) or 0)
        except ValueError as e:
            raise ConfigError(hw.path, "--m/--k", str(e)) from None
    d = r.details
    eff = d.get("dense_equivalent_flops", r.flops) / r.seconds if r.seconds else 0.0
    doc = {"hw": hw.name, "hw_kind": hw.kind, "m": args.m, "n": args.n, "k": args.k,
           "dtype": dtype, "sparse": d.get("sparse"), "density": args.density,
           "threads": args.threads, "seconds": r.seconds, "cycles": r.cycles,
           "clock_hz": r.clock_hz, "tflops": eff / 1e12, "useful_tflops": r.tflops,
           "gflops": r.flops / r.seconds / 1e9 if r.seconds else 0.0, "breakdown": r.breakdown,
           "bytes": r.bytes, "details": d, "kernel": r.to_json(),
           "warnings": [str(w.message) for w in caught]}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    for w in doc["warnings"]:
        print(f"warning: {w}")
    kind = (f"sparse {d['sparse']}" if d.get("sparse") else f"CSR density {args.density:g}"
            if args.density is not None else "dense")
    print(f"{hw.name}: GEMM {args.m}x{args.n}x{args.k} {dtype} {kind}, {args.threads} thread(s)"
          if hw.kind == "cpu" else f"{hw.name}: GEMM {args.m}x{args.n}x{args.k} {dtype} {kind}")
    print(f"  {r.seconds * 1e6:.2f} us ({r.cycles:.0f} cycles), {eff / 1e12:.1f} TFLOPS "
          f"dense-equivalent ({doc['gflops']:.2f} GFLOP/s useful)")
    if "tile" in d:
        print(f"  tile {d['tile']} warp {d['warp_tile']} stages {d['stages']} split-K "
              f"{d['split_k']}, {d['blocks']} blocks, {d['blocks_per_sm']}/SM, {d['waves']} waves, "
              f"L2 hit {d['l2_hit_rate']:.1%}")
    print("  breakdown: " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in r.breakdown.items()))
    print("  bytes: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in r.bytes.items()))
    return 0


def conv_workload(text: str):
    """(workload, [layer], N) of a --conv N,C_in,C_out,H,W,R,S,stride,pad spec; the one-off layer
    stands for a layer inside a network, so its AGBP is wanted."""
    from dataclasses import replace

    from sim.workload import workload_from_dict
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 9 or any(v < 0 for v in vals):
        raise ConfigError(None, "--conv", f"expected N,C_in,C_out,H,W,R,S,stride,pad (9 "
                          f"non-negative integers), got {text!r}")
    nb, cin, cout, h, w, r, s_, stride, pad = vals
    doc = {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
           "layers": [{"name": "conv", "op": "conv", "in": "x", "out": "y", "c_out": cout,
                       "kernel": [r, s_], "stride": stride, "pad": pad}]}
    wl = workload_from_dict(doc, origin="--conv")
    return wl, [replace(wl.layers[0], in_tensor="conv_input")], nb


def _conv_batch(spec: str) -> int | None:
    """N of a --conv spec (the engines parse the rest through the workload validator)."""
    head = spec.split(",", 1)[0].strip()
    try:
        n = int(head)
    except ValueError:
        return None  # the engine reports the malformed spec
    check_range("batch", n, None, "--conv (N)", ConfigError)
    return n


def _check_layer_work(args, hw) -> None:
    """Every selected layer lowers at the batch (lowering refuses inexact counts); on a CPU, the
    synthetic dO the engine allocates for the whole workload must fit in memory."""
    from sim.workload import load_workload, lower
    if args.conv is not None and args.workload is None:
        n = _conv_batch(args.conv)
        if n is None:
            return
        batch = args.batch or n
        from sim.workload import workload_from_dict
        try:
            cin, cout, h, w, r, s, stride, pad = (int(x) for x in args.conv.split(",")[1:])
        except ValueError:
            return
        wl = workload_from_dict(
            {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
             "layers": [{"name": "conv", "op": "conv", "in": "x", "out": "y", "c_out": cout,
                         "kernel": [r, s], "stride": stride, "pad": pad}]}, "--conv")
    elif args.workload is not None and args.conv is None:
        wl = load_workload(args.workload)
        batch = args.batch or 128
    else:
        return
    for l in wl.layers:
        lower(l, batch)
    if hw.kind != "cpu" or getattr(args, "trace", None) or \
            all(is_dense_id(m) for m in args.method):
        return
    samples = min(batch, getattr(args, "samples", None) or 2)
    elems = [samples * l.c_out * l.p * l.q for l in wl.layers]
    # the engine holds dO of every layer, and a method's pruned copy and CSR of the largest
    est = 4 * (sum(elems) + 3 * max(elems))
    check_budget("cpu_layer_bytes", est, None, "--samples/--batch",
                 yes_large=getattr(args, "yes_large", False),
                 what=f"synthetic dO of {wl.name} ({samples} samples)")
    avail = available_memory()
    if avail is not None and est > avail:
        raise ConfigError(None, "--samples/--batch", f"synthetic dO of {wl.name} needs about "
                          f"{fmt_bytes(est)}; {fmt_bytes(avail)} of memory is available")


def _layer_inputs(args, hw):
    """(workload, layers, batch, phases, method specs, dtype) of `prunesim layer`."""
    from sim.methods import parse_method, refuse_unused
    from sim.workload import load_workload
    if (args.workload is None) == (args.conv is None):
        raise ConfigError(None, "--workload/--conv", "give exactly one of --workload or --conv")
    if args.conv is not None:
        wl, layers, batch = conv_workload(args.conv)
        batch = args.batch or batch
    else:
        wl = load_workload(args.workload)
        batch = args.batch or LAYER_BATCH
        layers = list(wl.layers)
        if args.layer != "all":
            layers = [l for l in wl.layers if l.name == args.layer or str(l.index) == args.layer]
            if not layers:
                raise ConfigError(wl.origin, "--layer", f"no layer {args.layer!r} in {wl.name} "
                                  f"(indices 0..{len(wl.layers) - 1} or names)")
    phases = PHASES if args.phase == "all" else (args.phase,)
    specs = []
    for text in args.method or ["dense"]:
        try:
            if "+" in str(text):
                raise ValueError(f"{text!r}: layer times one layer at its dense widths; "
                                 "combinations with prunetrain run in replay, sweep and train")
            spec = parse_method(text)
            refuse_unused(spec, "layer")
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
        if method_info(spec).is_channel_plan:
            raise ConfigError(None, "--method", "prunetrain narrows channels over epochs, not "
                              "one layer's gradients: use replay (a trace) or train")
        specs.append(spec)
    dtype = args.dtype
    if hw.kind == "cpu" and dtype not in (None, "fp32"):
        raise ConfigError(hw.path, "--dtype", f"the CPU engine models fp32 (Caffe), not {dtype}")
    if hw.kind == "gpu" and dtype is not None and dtype not in GPU_DTYPES:
        raise ConfigError(None, "--dtype", f"unknown GPU dtype {dtype!r} (known: "
                          f"{', '.join(GPU_DTYPES)})")
    return wl, layers, batch, phases, specs, dtype


def _trace_grads(args, layers):
    """dO of the selected layers from a trace's first captured iteration (every engine)."""
    import numpy as np

    from sim.traces.format import open_trace
    tr = open_trace(args.trace)
    it = tr.iterations[0]
    return ({l.name: np.asarray(tr.tensor(it, l.name), np.float32) for l in layers}, tr.batch,
            f"trace {args.trace} iteration {it}")


def _phase_json(rows) -> dict:
    """{phase: seconds, cycles, breakdown, bytes, kernels} of one layer's PhaseRows."""
    out = {}
    for r in rows:
        bd: dict[str, float] = {}
        by: dict[str, int] = {}
        for k in r.kernels:
            for c, v in k.breakdown.items():
                bd[c] = bd.get(c, 0.0) + v
            for c, v in k.bytes.items():
                by[c] = by.get(c, 0) + v
        clock = r.kernels[0].clock_hz if r.kernels else 0.0
        out[r.phase] = {"seconds": r.seconds, "cycles": r.seconds * clock, "breakdown": bd,
                        "bytes": by, "overhead_s": r.overhead_s, "fallback": r.fallback,
                        "kernels": [k.to_json() for k in r.kernels]}
    return out


def _layer_runs(args, hw, engine, wl, layers, batch, phases, specs, dtype):
    """Per method: its layers' PhaseRows through the driver; a combination the engine does not
    model is an error here (one layer asked about), with the engine's reason."""
    from sim.driver import run_workload
    grads, grad_source = None, None
    if getattr(args, "trace", None):
        grads, tbatch, grad_source = _trace_grads(args, layers)
        batch = args.batch or tbatch
    elif not all(method_info(s).is_dense for s in specs):
        from sim.methods.synthetic import synthetic_dO
        samples = min(batch, getattr(args, "samples", None) or LAYER_SAMPLES)
        grads = synthetic_dO(wl, samples, batch, args.seed)
        grads = {l.name: grads[l.name] for l in layers}
        grad_source = (f"synthetic dO ({samples} samples standing for the batch, "
                       "sim/data/synth-default.yaml)")
    else:
        grad_source = "none needed (dense)"
    runs = []
    for spec in specs:
        lay = []
        for step in run_workload(wl, batch, [spec], [engine], layers=layers, phases=phases,
                                 dtype=dtype, threads=args.threads, seed=args.seed,
                                 samples=getattr(args, "samples", None), grads=grads):
            bad = next((r for r in step.phases if r.status != "ok"), None)
            if bad is not None:
                raise Unsupported(None, "--method", bad.reason)
            lay.append((step.methods[0], step.phases))
        runs.append((spec.label, lay))
    return runs, batch, grad_source


def cmd_layer(args) -> int:
    engine, hw = _engine(args)
    _check_layer_work(args, hw)
    wl, layers, batch, phases, specs, dtype = _layer_inputs(args, hw)
    with cache_model_for(args, {hw.kind}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs, batch, grad_source = _layer_runs(args, hw, engine, wl, layers, batch, phases,
                                               specs, dtype)
    msgs = sorted({str(w.message) for w in caught} |
                  {r.fallback for _, lay in runs for _, rs in lay for r in rs if r.fallback})
    clock = next((k.clock_hz for _, lay in runs for _, rs in lay for r in rs for k in r.kernels),
                 0.0)
    dtype = dtype or next((k.details.get("dtype") for _, lay in runs for _, rs in lay for r in rs
                           for k in r.kernels if k.details.get("dtype")),
                          "fp32" if hw.kind == "cpu" else None)
    doc_runs, flat = [], []
    for label, lay in runs:
        ls = []
        for lr, rs in lay:
            sec = sum(r.seconds for r in rs)
            ls.append({"layer": lr.layer, "op": lr.op, "density": lr.density, "seconds": sec,
                       "cycles": sec * clock, "phases": _phase_json(rs)})
            flat += [{"method": label, "layer": lr.layer, "phase": r.phase, "seconds": r.seconds,
                      "cycles": sum(k.cycles for k in r.kernels), "overhead_s": r.overhead_s,
                      "density": None if lr.structure == "dense" and is_dense_id(label)
                      else lr.density, "kernels": [k.to_json() for k in r.kernels]} for r in rs]
        sec = sum(x["seconds"] for x in ls)
        doc_runs.append({"method": label, "seconds": sec, "cycles": sec * clock, "layers": ls})
    if args.json:
        print(json.dumps({"hw": hw.name, "hw_kind": hw.kind, "workload": wl.name, "batch": batch,
                          "dtype": dtype, "threads": args.threads, "clock_hz": clock,
                          "phases": list(phases), "gradients": grad_source,
                          "seconds": doc_runs[0]["seconds"], "cycles": doc_runs[0]["cycles"],
                          "runs": doc_runs, "layers": flat, "warnings": msgs}, indent=1))
        return 0
    _print_layer_tables(hw, wl, batch, dtype, args.threads, grad_source, phases, doc_runs, msgs)
    return 0


def _print_layer_tables(hw, wl, batch, dtype, threads, grad_source, phases, runs, msgs) -> None:
    from sim.results.tables import format_table
    for m_ in msgs:
        print(f"warning: {m_}")
    print(f"gradients: {grad_source}")
    for run in runs:
        print(f"{hw.name}: {wl.name} batch {batch} {dtype}, {threads} thread(s), method "
              f"{run['method']}: {run['seconds'] * 1e3:.3f} ms")
        rows = []
        for x in run["layers"]:
            cells = []
            for p in phases:
                v = x["phases"].get(p)
                if v is None:
                    cells.append("-")
                    continue
                g = next((k for k in v["kernels"] if k["kernel"] == "gemm"
                          and "tile" in k["details"]), None)
                tile = (f" {g['details']['tile']}" + (f"/sk{g['details']['split_k']}"
                                                      if g["details"]["split_k"] > 1 else "")
                        if g else "")
                cells.append(f"{v['seconds'] * 1e6:.1f}{tile}")
            rows.append([x["layer"], f"{x['density']:.3f}", *cells, f"{x['seconds'] * 1e6:.1f}"])
        print(format_table(["layer", "density", *(f"{p.upper()} us (tile)" for p in phases),
                            "total us"], rows))
