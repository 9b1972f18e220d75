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

# the bundled grid: 4 rho x 2 intervals on ResNet-20; rho extremes on ResNet-32 and VGG-11;
# one ResNet-20 run with half the learning rate and one with twice the batch (what sets the speed)
GRID = ([RunConfig("resnet20", r, i, epochs=100) for i in (5, 10) for r in (0.1, 0.2, 0.25, 0.3)]
        + [RunConfig("resnet20", 0.2, 5, epochs=100, lr=0.05),
           RunConfig("resnet20", 0.2, 5, epochs=100, batch=64)]
        + [RunConfig("resnet32", r, 5, epochs=100) for r in (0.1, 0.25)]
        + [RunConfig("vgg11-cifar", r, 5, size=32, epochs=30) for r in (0.1, 0.25)])


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
