"""Pre-#19 GPU entry points kept until the driver lands (moved to the driver / sim.methods.synthetic
by #19; this whole file is deleted at merge).

The network loop (simulate_layer / simulate_workload), synthetic gradients (method_result_for,
nominal_nm_result), the old `simulate_phase(gemm, mr, hw, ...)` signature and the `prunesim gemm |
layer` back-ends (gemm_command, layer_command) live here and nowhere else in sim/engines/gpu/; all
of them go through GpuEngine. Names other callers still import from here are re-exported.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from sim.engines.base import KernelResult, PhaseJob
from sim.engines.gpu.engine import GpuEngine
from sim.engines.gpu.gemm import _gemm_cached, simulate_gemm  # noqa: F401 (re-exported)
from sim.engines.gpu.spec import DTYPE_BYTES, gpu_spec
from sim.errors import PrunesimError
from sim.hwconfig import HwConfig


def _first_phase(phases) -> str | None:
    for ph in ("fwd", "agbp", "wgc"):
        if ph in phases:
            return ph
    return None


def simulate_phase(gemm, method_result=None, hw: HwConfig = None, *, dtype: str | None = None,
                   charge_method: bool | None = None, layer=None, batch: int | None = None,
                   seed: int = 0) -> list[KernelResult]:
    """The old phase entry point over GpuEngine.simulate; charge_method None: the method's work is
    charged on the first phase it names (the driver decides this once it lands)."""
    if hw is None:
        raise TypeError("simulate_phase needs a hwconfig")
    mr = method_result
    if charge_method is None:
        charge_method = mr is not None and gemm.phase == _first_phase(mr.phases)
    job = PhaseJob(layer=layer, phase=gemm.phase, gemm=gemm, batch=batch, method=mr,
                   charge_method=bool(charge_method), dtype=dtype, seed=seed)
    return GpuEngine(hw).simulate(job)


def _sum_phase(krs: list[KernelResult], clock: float) -> dict:
    bd: dict[str, float] = {}
    by: dict[str, int] = {}
    for r in krs:
        for k, v in r.breakdown.items():
            bd[k] = bd.get(k, 0.0) + v
        for k, v in r.bytes.items():
            by[k] = by.get(k, 0) + v
    sec = sum(r.seconds for r in krs)
    return {"seconds": sec, "cycles": sec * clock, "breakdown": bd, "bytes": by,
            "kernels": [r.to_json() for r in krs]}


# ----------------------------------------------------------------------------------------------
# Layers of a workload, with a method on (synthesized) gradients

_SYNTH_MAX_ELEMS = 1 << 20


def nominal_nm_result(spec, layer, batch: int):
    """SDGP's MethodResult without data: on a dense dO the density is exactly n/m whatever the
    values, and the work account follows from the shape (the same counts sim.methods.nm.sdgp
    reports; a test keeps the two equal)."""
    from sim.methods import dense_result, sdgp_prunes
    from sim.methods.base import MethodResult, WorkAccount
    from sim.methods.nm import bits_per_index, parse_nm
    p = dict(spec.params)
    if not sdgp_prunes(layer):
        return dense_result(np.ones(1, np.float32), spec.id, p,
                            "not pruned: SDGP skips the stem and linear layers")
    n, m = parse_nm(p["nm"])
    shape = layer.tensor_shapes(batch)["dO"]
    nb, c = shape[0], shape[1]
    hw_ = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    total = nb * c * hw_
    groups = -(-c // m)
    bits = bits_per_index(m)
    kept = nb * hw_ * sum(min(n, c - g * m) for g in range(groups))
    meta = nb * hw_ * ((groups * n * bits + 31) // 32) * 4
    mode = spec.id.split("-", 1)[1]
    work = WorkAccount(elems_read=total, elems_written=kept, bytes_metadata=meta,
                       compares=kept * m, random_draws=total if mode == "random" else 0, passes=1)
    if mode == "resmag":
        work = work + WorkAccount(elems_read=kept, elems_written=2 * kept, flops=2 * total + kept,
                                  passes=1)
    return MethodResult(spec.id, {"nm": f"{n}:{m}", **({"rescale": p["rescale"]} if "rescale" in p
                                                       else {})},
                        "nm", n / m, work, phases=("agbp",), extra={"nominal": True})


def method_result_for(spec, layer, batch: int, seed: int = 0):
    """Apply a method to this layer's dO, or None for dense.

    No trace is at hand here. SDGP (n:m) on a dO of more than 2^20 elements uses the nominal
    result (density exactly n/m, work from the shape: nominal_nm_result). Otherwise dO is
    synthesized: seeded Laplace values (heavy-tailed like real activation gradients). For other
    methods a tensor over 2^20 elements is not built whole: the method runs on the first b samples
    that fit and its WorkAccount is scaled by batch / b (every method's work is linear in the
    batch); DBTD's density is then the sub-batch's.
    """
    from dataclasses import replace

    from sim.methods import apply_method, stream_key
    from sim.methods.base import scale_work
    if spec is None or spec.id == "dense":
        return None
    shape = layer.tensor_shapes(batch)["dO"]
    per = int(np.prod(shape[1:]))
    if spec.id.startswith("sdgp-") and per * batch > _SYNTH_MAX_ELEMS:
        return nominal_nm_result(spec, layer, batch)
    b = max(1, min(batch, _SYNTH_MAX_ELEMS // max(per, 1)))
    rng = np.random.default_rng([seed, layer.index])
    g = rng.laplace(size=(b,) + tuple(shape[1:])).astype(np.float32)
    key = stream_key(seed, layer.index, 0)
    # zero/random/approx on a layer asked about alone: that layer is the approximated one (the
    # schedule decides only in replay and in whole-network estimates)
    sched = True if spec.id in ("zero", "random", "approx", "approx-topk") else None
    mr = apply_method(spec, layer, g, key=key, batch=batch, build_csr=False, scheduled=sched)
    if b != batch:
        mr = scale_work(mr, batch / b)
        mr = replace(mr, extra=dict(mr.extra, synthesized_samples=b))
    return mr


def simulate_layer(hw: HwConfig, layer, batch: int, *, method=None, phases=("fwd", "agbp", "wgc"),
                   dtype: str | None = None, seed: int = 0) -> dict[str, list[KernelResult]]:
    """Kernels per phase of one layer; AGBP is absent for a layer reading the network input."""
    from sim.workload import lower
    gemms = lower(layer, batch)
    mr = method_result_for(method, layer, batch, seed)
    run = [ph for ph in phases if ph != "agbp" or layer.needs_agbp]
    charge_at = None
    if mr is not None:
        named = [ph for ph in ("fwd", "agbp", "wgc") if ph in mr.phases and ph in run]
        charge_at = named[0] if named else None
    out = {}
    for ph in run:
        out[ph] = simulate_phase(gemms[ph], mr, hw, dtype=dtype,
                                 charge_method=(ph == charge_at) if mr is not None else None,
                                 layer=layer, batch=batch)
    return out


def simulate_workload(hw: HwConfig, workload, batch: int, *, method=None, dtype: str | None = None,
                      phases=("fwd", "agbp", "wgc"), layers=None, seed: int = 0) -> list[dict]:
    """Per layer: {"layer", "op", "phases": {phase: [KernelResult, ...]}}."""
    rows = []
    for l in (layers if layers is not None else workload.layers):
        rows.append({"layer": l.name, "op": l.op,
                     "phases": simulate_layer(hw, l, batch, method=method, phases=phases,
                                              dtype=dtype, seed=seed)})
    return rows


# ----------------------------------------------------------------------------------------------
# CLI back-ends


def _dtype(args, default: str = "fp16") -> str:
    d = getattr(args, "dtype", None) or default
    if d not in DTYPE_BYTES:
        raise PrunesimError(None, "--dtype", f"unknown GPU dtype {d!r} (known: {', '.join(DTYPE_BYTES)})")
    return d


def gemm_command(args, hw: HwConfig) -> int:
    dtype = _dtype(args, gpu_spec(hw).default_dtype())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (r,) = GpuEngine(hw).gemm(args.m, args.n, args.k, sparse=args.sparse, dtype=dtype)
    eff = r.details["dense_equivalent_flops"] / r.seconds / 1e12
    if args.json:
        print(json.dumps({"hw": hw.name, "m": args.m, "n": args.n, "k": args.k, "dtype": dtype,
                          "sparse": r.details["sparse"], "seconds": r.seconds, "cycles": r.cycles,
                          "tflops": eff, "useful_tflops": r.tflops, "breakdown": r.breakdown,
                          "bytes": r.bytes, "details": r.details,
                          "warnings": [str(w.message) for w in caught]}, indent=1))
        return 0
    for w in caught:
        print(f"warning: {w.message}")
    d = r.details
    print(f"{hw.name}: GEMM {args.m}x{args.n}x{args.k} {dtype}"
          + (f" sparse {d['sparse']}" if d["sparse"] else " dense"))
    print(f"  {r.seconds * 1e6:.2f} us ({r.cycles:.0f} cycles), {eff:.1f} TFLOPS dense-equivalent")
    print(f"  tile {d['tile']} warp {d['warp_tile']} stages {d['stages']} split-K {d['split_k']}, "
          f"{d['blocks']} blocks, {d['blocks_per_sm']}/SM, {d['waves']} waves, "
          f"L2 hit {d['l2_hit_rate']:.1%}")
    print("  breakdown: " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in r.breakdown.items()))
    print("  bytes: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in r.bytes.items()))
    return 0


def _conv_workload(text: str):
    from sim.workload import workload_from_dict
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 9 or any(v < 0 for v in vals):
        raise PrunesimError(None, "--conv", f"expected N,C_in,C_out,H,W,R,S,stride,pad (9 "
                            f"non-negative integers), got {text!r}")
    nb, cin, cout, h, w, r, s_, stride, pad = vals
    doc = {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
           "layers": [{"name": "conv", "op": "conv", "in": "x", "out": "y", "c_out": cout,
                       "kernel": [r, s_], "stride": stride, "pad": pad}]}
    wl = workload_from_dict(doc, origin="--conv")
    # a one-off layer stands for a layer inside a network: its AGBP is wanted
    from dataclasses import replace
    l = replace(wl.layers[0], in_tensor="conv_input")
    return wl, [l], nb


def layer_command(args, hw: HwConfig) -> int:
    from sim.methods import parse_method
    from sim.workload import load_workload
    dtype = _dtype(args, gpu_spec(hw).default_dtype())
    if (args.workload is None) == (args.conv is None):
        raise PrunesimError(None, "--workload", "give either --workload or --conv")
    if args.conv is not None:
        wl, layers, batch = _conv_workload(args.conv)
        if args.batch is not None:
            batch = args.batch
    else:
        wl = load_workload(args.workload)
        batch = args.batch or 1
        if args.layer == "all":
            layers = list(wl.layers)
        else:
            by = {l.name: l for l in wl.layers}
            if args.layer in by:
                layers = [by[args.layer]]
            elif args.layer.isdigit() and int(args.layer) < len(wl.layers):
                layers = [wl.layers[int(args.layer)]]
            else:
                raise PrunesimError(wl.origin, "--layer", f"no layer {args.layer!r} (indices 0.."
                                    f"{len(wl.layers) - 1} or names)")
    phases = ("fwd", "agbp", "wgc") if args.phase == "all" else (args.phase,)
    specs = []
    for text in args.method or ["dense"]:
        try:
            specs.append(parse_method(text))
        except ValueError as e:
            raise PrunesimError(None, "--method", str(e)) from None
    s = gpu_spec(hw)
    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for spec in specs:
            rows = simulate_workload(hw, wl, batch, method=spec, dtype=dtype, phases=phases,
                                     layers=layers, seed=args.seed)
            lay = []
            for row in rows:
                ph = {p: _sum_phase(k, s.clock) for p, k in row["phases"].items()}
                sec = sum(v["seconds"] for v in ph.values())
                lay.append({"layer": row["layer"], "op": row["op"], "seconds": sec,
                            "cycles": sec * s.clock, "phases": ph})
            sec = sum(x["seconds"] for x in lay)
            runs.append({"method": spec.label, "seconds": sec, "cycles": sec * s.clock,
                         "layers": lay})
    msgs = sorted({str(w.message) for w in caught})
    if args.json:
        print(json.dumps({"hw": hw.name, "workload": wl.name, "batch": batch, "dtype": dtype,
                          "clock_hz": s.clock, "seconds": runs[0]["seconds"],
                          "cycles": runs[0]["cycles"], "runs": runs, "warnings": msgs}, indent=1))
        return 0
    for m_ in msgs:
        print(f"warning: {m_}")
    from sim.results.tables import format_table
    for run in runs:
        print(f"{hw.name}: {wl.name} batch {batch} {dtype}, method {run['method']}: "
              f"{run['seconds'] * 1e3:.3f} ms")
        rows = []
        for x in run["layers"]:
            cells = []
            for p in phases:
                v = x["phases"].get(p)
                if v is None:
                    cells.append("-")
                    continue
                g = next((k for k in v["kernels"] if k["kernel"] == "gemm"), None)
                tile = f" {g['details']['tile']}" + (f"/sk{g['details']['split_k']}"
                                                     if g["details"]["split_k"] > 1 else "") \
                    if g else ""
                cells.append(f"{v['seconds'] * 1e6:.1f}{tile}")
            rows.append([x["layer"], *cells, f"{x['seconds'] * 1e6:.1f}"])
        print(format_table(["layer", *(f"{p.upper()} us (tile)" for p in phases), "total us"], rows))
    return 0
