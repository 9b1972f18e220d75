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

from sim.system.lasso_runs import RunConfig, bar, run_one, write_run  # noqa: E402

OUT = ROOT / "sim" / "data" / "prunetrain"

# the bundled grid: ResNet-20 on digits at rho 0.3 / 0.25 / 0.2 / 0.1 (interval 5), two rho again at
# interval 10, then the same dose reached two other ways (half the lr; twice the batch = half the
# steps), then ResNet-32. VGG-11 needs 32 x 32 inputs (five 2x2 pools), ~50 min a run on one
# core: not bundled. Batch 16 and a late lr decay (80 %, 90 %) buy lasso dose lr*lambda*steps on a
# CPU budget: what sets the pruning speed (docs/system.md).
_R20 = dict(epochs=60, batch=16, decay_at=(0.8, 0.9))
GRID = ([RunConfig("resnet20", r, 5, **_R20) for r in (0.3, 0.25, 0.2, 0.1)]
        + [RunConfig("resnet20", r, 10, **_R20) for r in (0.25, 0.2)]
        + [RunConfig("resnet20", 0.25, 5, **{**_R20, "lr": 0.05}),
           RunConfig("resnet20", 0.25, 5, **{**_R20, "batch": 32})]
        + [RunConfig("resnet32", r, 5, **_R20) for r in (0.3, 0.1)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--force", action="store_true", help="rerun existing files")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
