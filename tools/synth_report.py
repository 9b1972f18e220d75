#!/usr/bin/env python3
"""Compare a synthetic trace with the captured trace its statistics were fitted on.

    python tools/synth_report.py TRACE [--stats STATS.yaml] [--seed 0] [--ks-samples 200000]

Fits TRACE (unless --stats is given), synthesizes a trace of the same workload, batch, recorded
sub-sample, iterations and storage dtype, then prints per layer (Markdown tables, pasted into
docs/explanation/synthetic-traces.md):

- non-zero density of each,
- two-sample Kolmogorov-Smirnov distance between the |g| distributions (all elements, zeros
  included, pooled over iterations; random sub-samples of at most --ks-samples values each),
  raw and after dividing every tensor by its mean |g| (scale-free: what threshold methods see),
- the expected density after DBTD + stochastic pruning (METHODS.md 1) at p in {0.7, 0.8, 0.9, 0.99}
  for the three sigma estimators: tau = Phi^-1((1+p)/2) * sigma_hat, density = mean over elements of
  [1 if |g| >= tau else |g|/tau] (an exact expectation: no random draws), averaged over iterations;
  then the average over conv layers, as in Ye et al.'s Table 1.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.traces import synth as sy  # noqa: E402
from sim.traces.format import open_trace  # noqa: E402

RATES = (0.7, 0.8, 0.9, 0.99)
SIGMAS = {"paper": math.sqrt(2 / math.pi), "unbiased": math.sqrt(math.pi / 2), "meanabs": 1.0}
_BLOCK = 1 << 20


def dbtd_density(arr: np.ndarray) -> dict[tuple[str, float], float]:
    """Expected density after DBTD + stochastic pruning, exact, for every (estimator, p)."""
    flat = arr.reshape(-1)
    total = flat.size
    s = 0.0
    for i in range(0, total, _BLOCK):
        s += float(np.abs(np.asarray(flat[i:i + _BLOCK], dtype=np.float64)).sum())
    mean_abs = s / total
    out = {}
    taus = {(e, p): NormalDist().inv_cdf((1 + p) / 2) * f * mean_abs for e, f in SIGMAS.items() for p in RATES}
    acc = {k: 0.0 for k in taus}
    for i in range(0, total, _BLOCK):
        a = np.abs(np.asarray(flat[i:i + _BLOCK], dtype=np.float64))
        for k, tau in taus.items():
            acc[k] += float(np.minimum(1.0, a / tau).sum()) if tau > 0 else float((a > 0).sum())
    for k in taus:
        out[k] = acc[k] / total
    return out


def normal_density(p: float, factor: float) -> float:
    """The same expectation for exactly normal g (VALIDATION.md A): 2Q(t) + (2/t)(phi(0) - phi(t))."""
    nd = NormalDist()
    t = nd.inv_cdf((1 + p) / 2) * factor * math.sqrt(2 / math.pi)
    return 2 * (1 - nd.cdf(t)) + (2 / t) * (nd.pdf(0) - nd.pdf(t))


def ks(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.abs(fa - fb).max())


def layer_stats(tr, layer: str, rng: np.random.Generator, m: int):
    raw, norm, dens, dd = [], [], [], []
    its = tr.iterations
    for it in its:
        x = np.asarray(tr.tensor(it, layer), dtype=np.float64).reshape(-1)
        ax = np.abs(x)
        take = rng.choice(ax.size, size=min(ax.size, m // len(its)), replace=False)
        raw.append(ax[take])
        mu = ax.mean()
        norm.append(ax[take] / mu if mu > 0 else ax[take])
        dens.append(float((x != 0).mean()))
        dd.append(dbtd_density(x))
    avg = {k: float(np.mean([d[k] for d in dd])) for k in dd[0]}
    return np.concatenate(raw), np.concatenate(norm), float(np.mean(dens)), avg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--stats", default=None, help="statistics YAML (default: fit TRACE)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ks-samples", type=int, default=200000)
    ap.add_argument("--keep", default=None, help="write the synthetic trace here (default: temp)")
    args = ap.parse_args(argv)

    cap = open_trace(args.trace)
    stats = sy.load_stats(args.stats) if args.stats else sy.fit(args.trace)
    dtype = cap.records[0].dtype if cap.records[0].dtype in ("float16", "float32") else "float32"
    tmp = tempfile.TemporaryDirectory(prefix="synth-report-")
    out = Path(args.keep) if args.keep else Path(tmp.name) / "synth"
    sy.synth(cap.workload, cap.batch, out, stats, iterations=len(cap.iterations), seed=args.seed,
             dtype=dtype, subsample=cap.recorded_batch if cap.recorded_batch != cap.batch else None,
             force=True)
    syn = open_trace(out)
    # the synthetic trace numbers its iterations 0..k-1; pair them with the captured ones in order
    print(f"captured: {args.trace} ({cap.workload.name}, batch {cap.batch}, recorded "
          f"{cap.recorded_batch}, iterations {cap.iterations}, {dtype})")
    print(f"synthetic: same workload/batch/sub-sample/dtype, {len(syn.iterations)} iterations, "
          f"seed {args.seed}, stats {'fitted on the captured trace' if not args.stats else args.stats}")
    print()
    rng = np.random.default_rng(12345)
    rows = []
    p_show = 0.9
    print("| layer | block | density cap | density syn | KS abs(g) | KS abs(g)/mean | "
          + " | ".join(f"DBTD p={p_show} {e} cap/syn" for e in SIGMAS) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(SIGMAS))
    for name in cap.layer_names("dO"):
        l = cap.workload.layer(name)
        rc, nc, dc, ddc = layer_stats(cap, name, rng, args.ks_samples)
        rs, ns, ds, dds = layer_stats(syn, name, rng, args.ks_samples)
        k_raw, k_norm = ks(rc, rs), ks(nc, ns)
        rows.append((name, l.op, dc, ds, k_raw, k_norm, ddc, dds))
        print(f"| {name} | {l.block} | {dc:.3f} | {ds:.3f} | {k_raw:.3f} | {k_norm:.3f} | "
              + " | ".join(f"{ddc[(e, p_show)]:.3f} / {dds[(e, p_show)]:.3f}" for e in SIGMAS) + " |")
    conv = [r for r in rows if r[1] == "conv"]
    print()
    print(f"Average over the {len(conv)} conv layers (as in Ye et al. Table 1):")
    print()
    print("| sigma estimator | trace | baseline | " + " | ".join(f"p={p}" for p in RATES) + " |")
    print("|---|---|---|" + "---|" * len(RATES))
    for e in SIGMAS:
        for label, di, dd in (("captured", 2, 6), ("synthetic", 3, 7)):
            base = np.mean([r[di] for r in conv])
            print(f"| {e} | {label} | {base:.3f} | "
                  + " | ".join(f"{np.mean([r[dd][(e, p)] for r in conv]):.3f}" for p in RATES) + " |")
        print(f"| {e} | normal g (analytic) | 1 | "
              + " | ".join(f"{normal_density(p, SIGMAS[e]):.3f}" for p in RATES)
              + " |")
    print()
    print(f"KS distance, median over conv layers: raw |g| {np.median([r[4] for r in conv]):.3f}, "
          f"scale-free |g|/mean {np.median([r[5] for r in conv]):.3f}; max {max(r[5] for r in conv):.3f} "
          f"({max(conv, key=lambda r: r[5])[0]})")
    worst = max(abs(r[6][(e, p)] - r[7][(e, p)]) for r in conv for e in SIGMAS for p in RATES)
    print(f"largest per-layer |captured - synthetic| expected DBTD density: {worst:.3f}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
