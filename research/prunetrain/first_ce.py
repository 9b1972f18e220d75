"""The first iteration's cross-entropy of a network at its initialisation, over ln(classes).

PruneTrain sets lambda at the first iteration from that loss (lambda = rho CE0 / ((1 - rho) R0)),
and the trajectory model takes CE0 = ln(classes) + Fit.ce0_offset, the offset the bundled runs
logged at 10-20 outputs (docs/explanation/system.md). This measures it directly for any
workload and class count: the network built from the workload (sim.capture.torchnet), the
authors' init (convs He fan-out, BN weight 1 / bias 0, FC PyTorch's default), one forward in
training mode (batch-norm on the batch's own statistics, as the first step is), offline images
at 32 x 32 resized to the workload's input (nearest neighbour) and labels drawn uniformly, since
at the init no class is favoured. Several init seeds; the mean, the spread, the ratio and the
offset are printed.

    python -m research.prunetrain.first_ce resnet50-imagenet --classes 1000 --batch 64 --seeds 4
    python -m research.prunetrain.first_ce resnet32 --classes 10 100 --batch 128 --seeds 8

Needs PyTorch (CPU is enough). Nothing here is fitted.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys


def first_ce(workload, classes: int, batch: int, seed: int, images) -> float:
    """The mean cross-entropy of one training-mode forward at the authors' init (module doc);
    images: an N x C x H x W float array, resized here to the workload's input."""
    import torch
    from sim.capture.torchnet import build_model
    from research.prunetrain.runs import _he_fan_out
    from sim.workload import with_classes
    w = with_classes(workload, classes)
    c, h, wd = w.input_shape
    torch.manual_seed(seed)
    model = build_model(w)
    _he_fan_out(model)
    model.train()
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(images), generator=gen)[:batch]
    x = torch.from_numpy(images[pick.numpy()])
    if x.shape[1] != c:
        x = x.mean(dim=1, keepdim=True).expand(-1, c, -1, -1)
    x = torch.nn.functional.interpolate(x, size=(h, wd), mode="nearest")
    y = torch.randint(0, classes, (batch,), generator=gen)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x), y))


def _record(path: str, entry: dict) -> None:
    """Merge one measurement into the YAML record at `path` (replacing the entry of the same
    workload, classes and batch)."""
    from pathlib import Path

    import torch
    import yaml
    f = Path(path)
    doc = yaml.safe_load(f.read_text()) if f.exists() else None
    doc = doc or {"schema": 1, "description": "first-iteration cross-entropy of each network at "
                  "the PruneTrain authors' init (convs He fan-out, BN weight 1 / bias 0, FC "
                  "PyTorch's default), one training-mode forward on offline images with uniform "
                  "labels, the mean over init seeds; written by `python -m research.prunetrain.first_ce --record`",
                  "measurements": []}
    key = lambda m: (m["workload"], m["classes"], m["batch"])  # noqa: E731
    doc["measurements"] = sorted([m for m in doc["measurements"] if key(m) != key(entry)]
                                 + [{**entry, "torch": str(torch.__version__)}], key=key)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(yaml.safe_dump(doc, sort_keys=False, width=100))


def main(argv=None) -> int:
    from sim.errors import PrunesimError
    from sim.workload import load_workload
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("--classes", type=int, nargs="+", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--dataset", default="cifar10", help="offline images (sim.capture.datasets)")
    p.add_argument("--record", default=None, metavar="FILE",
                   help="merge the results into this YAML record (one entry per workload, "
                        "classes and batch; validation C reads research/prunetrain/data/init/first-ce.yaml)")
    a = p.parse_args(argv)
    try:
        from sim.capture.datasets import load_dataset
        w = load_workload(a.workload)
        images = load_dataset(a.dataset, (3, 32, 32)).x_train    # resized per batch
        for k in a.classes:
            ce = [first_ce(w, k, a.batch, s, images)
                  for s in range(a.first_seed, a.first_seed + a.seeds)]
            mean = statistics.mean(ce)
            sd = statistics.stdev(ce) if len(ce) > 1 else 0.0
            print(f"{w.name} {k} classes, batch {a.batch}, {a.seeds} seeds: first CE "
                  f"{mean:.4f} (sd {sd:.4f}) = {mean / math.log(k):.4f} x ln {k} = ln {k} + "
                  f"{mean - math.log(k):.4f}")
            if a.record:
                _record(a.record, {"workload": w.name, "classes": k, "batch": a.batch,
                                   "seeds": a.seeds, "dataset": a.dataset,
                                   "first_ce": round(mean, 4), "sd": round(sd, 4)})
    except PrunesimError as e:
        print(f"first_ce: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
