"""Leave-one-network-out check of the gradient model (`prunesim trace fit --check`).

For each captured network: fit the model on the other traces only, synthesize the held-out
network at each of its recorded training-progress points (same samples, same batch scale), and
compare what the methods see in the synthetic and in the real gradients:

- DBTD density (Ye's definition: nonzeros over all conv gradients) at p in DBTD_P,
- SDGP's kept-L1 fraction (sum |kept| / sum |g|, magnitude n:m, no rescale) per n:m in SDGP_NM,
  over the conv layers SDGP prunes,
- approx's argmax spread: per conv layer with a spatial plane, the standard deviation of the
  rows and columns of the per-(sample, channel) argmax |g| positions, relative to a uniform
  position's (1 = spread like uniform picks, 0 = always the same pixel), averaged over layers.

Run averages (mean over the recorded progress points) give the summary table; per-point values
are kept for the density-versus-progress evidence (docs/explanation/synthetic-traces.md).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from sim.errors import TraceError
from sim.traces import gradmodel as gm
from sim.traces import synth
from sim.traces.synth import Stats, fit_many, iteration_progress, synthetic_grads
from sim.traces.format import open_trace

DBTD_P = (0.7, 0.8, 0.9, 0.99)
SDGP_NM = ("1:4", "2:4", "2:8")


def method_metrics(grads: dict[str, np.ndarray], workload, seed: int, iteration: int) -> dict:
    """DBTD densities, SDGP kept-L1 fractions and approx argmax spread of one set of dO tensors."""
    from sim.methods import apply_method, parse_method, sdgp_prunes, stream_key
    from sim.methods import approx as ap
    from sim.methods import nm as nmm
    convs = [l for l in workload.layers if l.op == "conv" and l.name in grads]
    out: dict[str, float] = {}
    total = sum(grads[l.name].size for l in convs)
    out["density"] = sum(float(np.count_nonzero(grads[l.name])) for l in convs) / total
    for p in DBTD_P:
        spec = parse_method(f"dbtd:p={p}")
        nnz = 0.0
        for l in convs:
            r = apply_method(spec, l, grads[l.name], key=stream_key(seed, l.index, iteration),
                             batch=1, build_csr=False)
            nnz += r.density * grads[l.name].size
        out[f"dbtd{p}"] = nnz / total
    pr = [l for l in convs if sdgp_prunes(l)]
    for nm in SDGP_NM:
        kept = tot = 0.0
        for l in pr:
            g = grads[l.name]
            r = nmm.sdgp(g, nm, "mag", stream_key(seed, l.index, iteration))
            kept += float(np.abs(r.pruned).sum(dtype=np.float64))
            tot += float(np.abs(g).sum(dtype=np.float64))
        out[f"sdgp{nm}"] = kept / tot if tot > 0 else float("nan")
    spreads = []
    for l in convs:
        g = grads[l.name]
        if g.ndim != 4 or g.shape[2] * g.shape[3] < 4:
            continue
        idx = ap.approx(g, 1).pick.index[:, :, 0].reshape(-1)
        h, w = g.shape[2], g.shape[3]
        rows, cols = idx // w, idx % w
        # a uniform position's standard deviation along a side of n pixels: sqrt((n^2 - 1) / 12)
        su = lambda n: math.sqrt((n * n - 1) / 12.0)  # noqa: E731
        spreads.append(0.5 * (float(rows.std()) / su(h) + float(cols.std()) / su(w)))
    out["argmax_spread"] = float(np.mean(spreads)) if spreads else float("nan")
    return out


METRICS = ("density",) + tuple(f"dbtd{p}" for p in DBTD_P) + tuple(f"sdgp{nm}" for nm in SDGP_NM) \
    + ("argmax_spread",)


def loo_check(trace_paths: list[str], seed: int = 0,
              progress: Callable[[str], None] | None = None) -> list[dict]:
    """One entry per held-out network: per-point and run-mean metrics, real and synthetic."""
    if len(trace_paths) < 2:
        raise TraceError(None, "--check", "leave-one-network-out needs at least two traces")
    full = fit_many(trace_paths, progress=None)
    prefixes = [s["prefix"] for s in full.provenance["sources"]]
    results = []
    for tp, prefix in zip(trace_paths, prefixes):
        rest = [lp for lp in full.layers if gm.network_of(lp) != prefix]
        stats = Stats(layers=rest, provenance={"loo_without": prefix})
        tr = open_trace(tp)
        prog = iteration_progress(tr) or {i: None for i in tr.iterations}
        points = []
        for it in tr.iterations:
            real = {}
            for rec, arr in tr.stream("dO", iteration=it):
                real[rec.layer] = np.array(arr, dtype=np.float32)
            wl = tr.workload
            syn = synthetic_grads(wl, tr.recorded_batch, tr.batch, seed, stats=stats,
                                  train_progress=prog[it], iteration=it)
            syn = {k: v for k, v in syn.items() if k in real}
            points.append({"iteration": it, "progress": prog[it],
                           "real": method_metrics(real, wl, seed, it),
                           "synth": method_metrics(syn, wl, seed, it)})
            if progress:
                progress(f"{prefix} it {it}: done")
        mean = {side: {m: float(np.nanmean([p[side][m] for p in points])) for m in METRICS}
                for side in ("real", "synth")}
        results.append({"network": prefix, "trace": str(tp), "points": points, "mean": mean})
    return results


def _rel(s: float, r: float) -> str:
    return "-" if not (r and math.isfinite(r) and math.isfinite(s)) else f"{100 * (s - r) / r:+.0f}%"


def loo_table(results: list[dict]) -> str:
    """Markdown: one row per held-out network, run means real / synthetic / error per metric."""
    cols = [f"dbtd{p}" for p in DBTD_P] + [f"sdgp{nm}" for nm in SDGP_NM] + ["argmax_spread"]
    heads = [f"DBTD p={p}" for p in DBTD_P] + [f"SDGP kept-L1 {nm}" for nm in SDGP_NM] \
        + ["approx argmax spread"]
    lines = ["| held-out network | " + " | ".join(heads) + " |",
             "|---|" + "---|" * len(cols)]
    errs = {c: [] for c in cols}
    for r in results:
        cells = []
        for c in cols:
            re_, sy = r["mean"]["real"][c], r["mean"]["synth"][c]
            cells.append(f"{re_:.3f} / {sy:.3f} ({_rel(sy, re_)})")
            if re_ and math.isfinite(re_) and math.isfinite(sy):
                errs[c].append(abs(sy - re_) / re_)
        lines.append(f"| {r['network']} | " + " | ".join(cells) + " |")
    lines.append("| median abs. error | " + " | ".join(
        f"{100 * float(np.median(errs[c])):.0f}%" if errs[c] else "-" for c in cols) + " |")
    return "\n".join(lines)


def progress_table(results: list[dict], p: float = 0.99) -> str:
    """Markdown: DBTD density at p versus training progress, real / synthetic, per network."""
    lines = [f"| network | " + " | ".join(["progress", f"real DBTD p={p}", f"synthetic DBTD p={p}",
                                           "real dense density", "synthetic dense density"]) + " |",
             "|---|---|---|---|---|---|"]
    for r in results:
        for pt in r["points"]:
            pr = "?" if pt["progress"] is None else f"{pt['progress']:.2f}"
            lines.append(f"| {r['network']} | {pr} | {pt['real'][f'dbtd{p}']:.3f} | "
                         f"{pt['synth'][f'dbtd{p}']:.3f} | {pt['real']['density']:.3f} | "
                         f"{pt['synth']['density']:.3f} |")
    return "\n".join(lines)


def cmd_fit(args) -> int:
    """`prunesim trace fit`: with --check, the leave-one-network-out tables first; then the fit
    itself (sim.traces.synth.cmd_fit) when --out is given. The check lives here, not in synth, so
    that loo depends on synth and never the other way (no import cycle)."""
    if getattr(args, "check", False):
        t0 = time.perf_counter()
        res = loo_check(args.trace, progress=lambda s: print(s, file=sys.stderr, flush=True))
        print("leave-one-network-out, run means over the recorded progress points: "
              "real / synthetic (error)")
        print(loo_table(res))
        print()
        print(progress_table(res))
        print(f"({time.perf_counter() - t0:.0f} s)")
        if args.out is None:
            return 0
    return synth.cmd_fit(args)
