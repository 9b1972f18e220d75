"""Recreate the long-run real captures that `prunesim trace fit` uses (docs/synthetic-traces.md).

    python tools/long_captures.py [--out build/long-captures] [--only NAME ...] [--threads 1]

Each run trains one zoo network on a real offline dataset well past 100 % training accuracy
(cosine schedule to zero) and records dO of every conv/FC layer at 0, 10 %, ..., 100 % of the
schedule (`prunesim capture --record-every 0.1`). Runs go one after the other, each with a
progress bar; a run whose trace is already complete is skipped, an interrupted one (its manifest
says complete: false) is captured again from scratch, so re-running the command resumes the set.
A summary per run (wall time, machine, accuracies) goes to OUT/summary-NAME.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

# name: (workload, dataset, epochs, batch, lr, train_samples or None)
# (sizes chosen to fit a 2-core machine shared with other jobs; each run still goes far past
# 100 % training accuracy: see OUT/summary-NAME.json)
RUNS = {
    "cnn2-digits": ("cnn2", "digits", 60, 32, 0.02, None),
    "resnet20-digits": ("resnet20", "digits", 40, 32, 0.05, None),
    "cnn2-mnist5k": ("cnn2", "mnist5k", 30, 32, 0.02, 1000),
    "resnet20-mnist5k": ("resnet20", "mnist5k", 30, 32, 0.05, 640),
    "alexnet-cifar-digits": ("alexnet-cifar", "digits", 30, 32, 0.02, 480),
    "resnet32-digits": ("resnet32", "digits", 30, 32, 0.05, 480),
    "vgg11-cifar-digits": ("vgg11-cifar", "digits", 25, 32, 0.05, 480),
    "resnet56-digits": ("resnet56", "digits", 25, 32, 0.05, 480),
}
RECORD_EVERY = 0.1
SUBSAMPLE = 2


def _complete(path: Path) -> bool:
    try:
        return json.loads((path / "manifest.json").read_text()).get("complete") is True
    except (OSError, ValueError):
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/long-captures")
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(RUNS))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    from sim.capture.trainer import train_and_capture
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
               "load_average_at_start": os.getloadavg()}
    for name in args.only or list(RUNS):
        wl, ds, epochs, batch, lr, n = RUNS[name]
        path = out / name
        if _complete(path):
            print(f"{name}: complete, skipped")
            continue
        cmd = (f"prunesim capture --workload {wl} --dataset {ds} --epochs {epochs} --batch {batch} "
               f"--lr {lr} --record-every {RECORD_EVERY} --subsample {SUBSAMPLE} --seed 0 "
               f"--threads {args.threads}" + (f" --train-samples {n}" if n else "")
               + f" --out {shlex.quote(str(path))} --force")
        t0 = time.perf_counter()
        res = train_and_capture(wl, ds, epochs, path, batch=batch, lr=lr, subsample=SUBSAMPLE,
                                record_every=RECORD_EVERY, train_samples=n, seed=0,
                                threads=args.threads, force=True, command=cmd)
        summary = {"name": name, "machine": machine, "command": cmd, "wall_time_s": round(time.perf_counter() - t0, 1),
                         "final_val_acc": res["val_acc"],
                         "final_train_acc": res["epochs"][-1]["train_acc"],
                         "first_epoch_train_acc_1": next((e["epoch"] for e in res["epochs"]
                                                          if e["train_acc"] >= 0.999), None),
                         "train_acc": res["epochs"][-1]["train_acc"],
                         "epochs": [{k: e[k] for k in ("train_loss", "train_acc", "val_acc")}
                                    for e in res["epochs"]],
                         "recorded": res["recorded"]}
        (out / f"summary-{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
