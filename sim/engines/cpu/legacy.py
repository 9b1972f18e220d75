"""Moved to the driver / sim.methods.synthetic by #19; deleted at merge.

The CPU family's old entry points, kept here (and nowhere else in the package) until the driver
lands: `simulate_phase` (sim/replay.py, analysis/validation.py), `gemm_command` and
`layer_command` (sim/engines/cli.py, reached through params.__getattr__), `synthetic_dO` and
`_one_conv_workload`. All of them go through `CpuEngine`.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from sim.engines.base import KernelResult, PhaseJob
from sim.engines.cpu.engine import CpuEngine
from sim.errors import ConfigError
from sim.hwconfig import HwConfig


def simulate_phase(gemm, method_result, hw: HwConfig, *, layer=None, batch: int | None = None,
                   threads: int = 1, seed: int = 0,
                   charge_method: bool | None = None) -> list[KernelResult]:
    """The old module-level entry: one PhaseJob for CpuEngine. The method's passes are charged only
    where the caller says so (None: not charged; the driver decides, not the engine)."""
    with_layer = layer is not None and batch is not None
    job = PhaseJob(layer if with_layer else None, gemm.phase, gemm, batch or 0, method_result,
                   charge_method=bool(charge_method), threads=threads, seed=seed)
    return CpuEngine(hw).simulate(job)


def gemm_command(args, hw: HwConfig) -> int:
    """`prunesim gemm --hw CPU.yaml --m M --n N --k K [--density D] [--threads T] [--json]`."""
    if args.sparse is not None:
        raise ConfigError(hw.path, "--sparse", "N:M sparsity is a GPU option; a CPU config takes "
                          "--density for CSR")
    (res,) = CpuEngine(hw).gemm(args.m, args.n, args.k, density=args.density, dtype=args.dtype,
                                threads=args.threads, seed=getattr(args, "seed", 0) or 0)
    doc = {"hw": hw.name, "m": args.m, "n": args.n, "k": args.k, "density": args.density,
           "threads": args.threads, "seconds": res.seconds, "cycles": res.cycles,
           "clock_hz": res.clock_hz, "gflops": res.flops / res.seconds / 1e9 if res.seconds else 0.0,
           "kernel": res.to_json()}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        kind = "dense" if args.density is None else f"CSR density {args.density:g}"
        print(f"{hw.name}: {args.m}x{args.n}x{args.k} {kind}, {args.threads} thread(s): "
              f"{res.seconds * 1e3:.4f} ms, {res.cycles:.4g} cycles, {doc['gflops']:.2f} GFLOP/s")
        for k, v in res.breakdown.items():
            print(f"  {k:<16} {v * 1e3:.4f} ms")
    return 0


def _one_conv_workload(spec: str):
    from sim.errors import WorkloadError
    from sim.workload import workload_from_dict
    try:
        n, cin, cout, h, w, r, s, stride, pad = (int(x) for x in spec.split(","))
    except ValueError:
        raise WorkloadError(None, "--conv", f"expected N,C_in,C_out,H,W,R,S,stride,pad, got {spec!r}") \
            from None
    doc = {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
           "tensors": {"t0": [cin, h, w]},
           "layers": [{"name": "conv", "op": "conv", "in": "t0", "out": "y", "c_out": cout,
                       "kernel": [r, s], "stride": stride, "pad": pad, "bn": True, "relu": True}]}
    return workload_from_dict(doc, "--conv"), n


def synthetic_dO(workload, samples: int, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """dO of every layer from the shipped gradient statistics (sim.traces.synth), `samples` deep."""
    from sim.traces import gradmodel as gm
    from sim.traces.synth import generate_layer, load_stats
    stats = load_stats(None)
    mapped, _ = gm.map_params(stats.layers, workload)
    out = {}
    for l in workload.layers:
        a = np.empty(l.tensor_shapes(samples)["dO"], np.float32)
        generate_layer(a, mapped[l.name], batch, seed, 0, l.index)
        out[l.name] = a
    return out


def layer_command(args, hw: HwConfig) -> int:
    from sim.methods import apply_method, parse_method, stream_key
    from sim.workload import load_workload
    engine = CpuEngine(hw)
    if bool(args.workload) == bool(args.conv):
        raise ConfigError(None, "--workload/--conv", "give exactly one of --workload or --conv")
    if args.conv:
        wl, batch = _one_conv_workload(args.conv)
        batch = args.batch or batch
    else:
        wl = load_workload(args.workload)
        batch = args.batch or 128
    layers = [l for l in wl.layers]
    if args.layer != "all":
        sel = [l for l in layers if l.name == args.layer or str(l.index) == args.layer]
        if not sel:
            raise ConfigError(None, "--layer", f"no layer {args.layer!r} in {wl.name}")
        layers = sel
    phases = ("agbp", "wgc") if args.phase == "all" else (args.phase,)
    methods = []
    for m in args.method or ["dense"]:
        try:
            methods.append(parse_method(m))
        except ValueError as e:
            raise ConfigError(None, "--method", str(e)) from None
    samples = min(batch, getattr(args, "samples", None) or 2)
    grads: dict[str, np.ndarray] = {}
    trace_iter = None
    if getattr(args, "trace", None):
        from sim.traces.format import open_trace
        tr = open_trace(args.trace)
        trace_iter = tr.iterations[0]
        batch = args.batch or tr.batch
        for l in layers:
            grads[l.name] = np.asarray(tr.tensor(trace_iter, l.name), np.float32)
        grad_source = f"trace {args.trace} iteration {trace_iter}"
    elif any(m.id != "dense" for m in methods):
        grads = synthetic_dO(wl, samples, batch, args.seed)
        grad_source = f"synthetic dO ({samples} samples, sim/data/synth-default.yaml)"
    else:
        grad_source = "none needed (dense)"
    rows = []
    for spec in methods:
        for l in layers:
            mr = None
            if spec.id != "dense":
                mr = apply_method(spec, l, grads[l.name], key=stream_key(args.seed, l.index, 0),
                                  batch=batch)
            for ph in phases:
                # the layer path needs no lowered GEMM; the method is not charged (as before)
                ks = engine.simulate(PhaseJob(l, ph, None, batch, mr, threads=args.threads,
                                              seed=args.seed))
                if not ks:
                    continue
                rows.append({"method": spec.label, "layer": l.name, "phase": ph,
                             "seconds": sum(k.seconds for k in ks),
                             "cycles": sum(k.cycles for k in ks),
                             "density": None if mr is None else mr.density,
                             "kernels": [k.to_json() for k in ks]})
    if args.json:
        print(json.dumps({"hw": hw.name, "workload": wl.name, "batch": batch, "threads": args.threads,
                          "gradients": grad_source, "layers": rows}, indent=1))
        return 0
    print(f"{hw.name}, {wl.name}, batch {batch}, {args.threads} thread(s); gradients: {grad_source}")
    for r in rows:
        dens = "" if r["density"] is None else f"  density {r['density']:.3f}"
        print(f"{r['method']:<24} {r['layer']:<16} {r['phase']:<5} {r['seconds'] * 1e3:10.3f} ms"
              f"{dens}  (" + ", ".join(f"{k['kernel']} {k['seconds'] * 1e3:.3f}" for k in r["kernels"])
              + ")", file=sys.stdout)
    for spec in methods:
        tot = sum(r["seconds"] for r in rows if r["method"] == spec.label)
        print(f"total {spec.label}: {tot:.4f} s")
    return 0
