#!/usr/bin/env python
"""Rerun the bundled real PruneTrain (group lasso) runs that the trajectory model is fitted to.

    python tools/prunetrain_runs.py                 # every bundled run, skipping existing files
    python tools/prunetrain_runs.py --force --only resnet20   # rerun a subset
    python tools/prunetrain_runs.py --list

Writes sim/data/prunetrain/<run name>.yaml (the trajectory file format plus `run` and `per_epoch`),
single-threaded torch, one progress bar per run. Needs the capture extra (torch, scikit-learn).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.system.lasso_runs import PAPER_CIFAR, RunConfig, bar, run_one, write_run  # noqa: E402

OUT = ROOT / "sim" / "data" / "prunetrain"

# the bundled grid: ResNet-20 on digits at rho 0.3 / 0.25 / 0.2 / 0.1 (interval 5), two rho again at
# interval 10, then the same dose reached two other ways (half the lr; twice the batch = half the
# steps), then ResNet-32. VGG-11 needs 32 x 32 inputs (five 2x2 pools), ~50 min a run on one
# core: not bundled. Batch 16 and a late lr decay (80 %, 90 %) buy lasso dose lr*lambda*steps on a
# CPU budget: what sets the pruning speed (docs/system.md).
_R20 = dict(epochs=60, batch=16, decay_at=(0.8, 0.9))
GRID = ([RunConfig("resnet20", r, 5, **_R20) for r in (0.3, 0.25)]
        + [RunConfig("resnet20", 0.25, 5, **{**_R20, "lr": 0.05}),
           RunConfig("resnet20", 0.25, 5, **{**_R20, "batch": 32})]
        + [RunConfig("resnet20", r, 5, **_R20) for r in (0.2, 0.1)]
        + [RunConfig("resnet20", r, 10, **_R20) for r in (0.25, 0.2)]
        + [RunConfig("resnet32", r, 5, **_R20) for r in (0.3, 0.1)]
        # the paper's CIFAR schedule step for step (182 virtual epochs; lasso dose per epoch as in
        # the paper): what sets the trajectory's shape. On clean digits the lasso ends at ~10 % of
        # the channels with 99 % accuracy: the data is easy. Pixel noise (a difficulty dial, CE in
        # the high-lr phase ~0.1 / ~0.5 / ~1.5 at noise 0 / 1 / 2) gives the equilibrium's
        # dependence on how hard the data is to fit.
        + [RunConfig("resnet20", r, 10, **PAPER_CIFAR) for r in (0.2, 0.25)]
        + [RunConfig("resnet32", r, 10, **PAPER_CIFAR) for r in (0.2, 0.25)]
        + [RunConfig("resnet20", r, 10, **{**PAPER_CIFAR, "noise": 1.0}) for r in (0.2, 0.25, 0.1, 0.3)]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 2.0}),
           RunConfig("resnet32", 0.2, 10, **{**PAPER_CIFAR, "noise": 1.0})]
        # does the end point depend on the training-set size (360 / 720 of digits' 1437 images;
        # MNIST's 4000 at 8 x 8), or on the per-sample lr (lr / batch 1/2 and 1/4 of PAPER_CIFAR's,
        # the paper's lr 0.1 at batch 128 step for step: 391 steps a virtual epoch)?
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "subset": n})
           for n in (360, 720)]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "dataset": "mnist5k"})]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "batch": b, "lr": 0.1,
                                              "epoch_steps": 391}) for b in (64, 128)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--force", action="store_true", help="rerun existing files")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write-fit", action="store_true",
                    help="fit the trajectory model to the run files and store the fit (fit.json) "
                         "that `prunesim train` loads instead of refitting")
    ap.add_argument("--report", action="store_true",
                    help="print the bundled runs (epoch and dose of the first zeroed channel, final "
                         "kept fractions), the model fit and the leave-one-rho-out check")
    a = ap.parse_args(argv)
    if a.write_fit:
        from sim.system.lasso_model import bundled_runs, fit_runs, write_fit
        f = fit_runs(bundled_runs(str(a.out)))
        print(f"wrote {write_fit(a.out, f)} (RMS {f.rms:.3f} over {len(f.runs)} runs)")
        return 0
    if a.report:
        return report(a.out)
    todo = [c for c in GRID if not a.only or a.only in c.name]
    if a.list:
        for c in todo:
            print(c.name, "(exists)" if (a.out / f"{c.name}.yaml").exists() else "")
        return 0
    import torch
    torch.set_num_threads(a.threads)
    for k, c in enumerate(todo, 1):
        f = a.out / f"{c.name}.yaml"
        if f.exists() and not a.force:
            print(f"[{k}/{len(todo)}] {c.name}: exists, skipped")
            continue
        doc = run_one(c, progress=bar(f"[{k}/{len(todo)}] {c.name}"))
        write_run(doc, f)
        print(f"  -> {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}: "
              f"{doc['run']['seconds']} s, val acc {doc['run']['val_accuracy']:.3f}")
    return 0


def report(directory: Path) -> int:
    import numpy as np
    from sim.system.lasso_model import fit_runs, leave_one_out, read_run
    runs = [read_run(p) for p in sorted(directory.glob("*.yaml"))]
    print(f"{'run':64s} {'D':>6s} {'P':>6s} {'first zero':>10s} {'u':>6s}   final kept plain / residual")
    for r in runs:
        k = np.minimum(r.keep_plain, r.keep_residual)
        i = int(np.argmax(k < 1.0)) if (k < 1.0).any() else None
        print(f"{r.name:64s} {r.difficulty:6.3f} {r.pressure:6.2f} "
              f"{('-' if i is None else str(i)):>10s} "
              f"{('-' if i is None else f'{r.u(1.0)[i]:.2f}'):>6s}   {r.keep_plain[-1]:.3f} / "
              f"{r.keep_residual[-1]:.3f}")
    print("(D: training CE in the high-lr phase / ln classes, reported, not a model input; P = rho / "
          "(1 - rho); first zero: "
          "epoch; u: lasso dose, beta = 1, there)")
    f = fit_runs(runs)
    print(f"fit over {len(runs)} runs, RMS {f.rms:.3f}:")
    for name, k in (("plain spaces", f.plain), ("residual nodes", f.residual)):
        print(f"  {name:14s}: a {k.a:.3f}, pressure exponent {k.gamma:g}, clock beta {k.beta:g}, "
              f"u_on {k.u_on:.4g}, u_scale {k.u_scale:.4g}, shape {k.shape:g}, hovering share "
              f"{k.hover:g}, RMS {k.rms:.3f}")
    for by in ("rho", "noise"):
        for row in leave_one_out(tuple(runs), by):
            print(f"leave {by}={row[by]:g} out ({row['runs']} runs): RMS {row['rms']:.3f}; final "
                  f"kept (plain) measured {row['final_measured']}, predicted "
                  f"{row['final_predicted']}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
