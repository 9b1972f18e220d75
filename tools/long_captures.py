"""Recreate the long-run real captures that `prunesim trace fit` uses (docs/explanation/synthetic-traces.md).

    python tools/long_captures.py [--set full|sub2] [--out DIR] [--only NAME ...] [--threads 1]

Each run trains one zoo network on a real offline dataset well past 100 % training accuracy
(cosine schedule to zero) and records dO of every conv/FC layer at points spread over the whole
schedule (`prunesim capture --record-every F`). Runs go one after the other, each with a
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
# Two sets. "full" (the shipped statistics' data) records every sample of each recorded batch:
# DBTD's threshold is a mean over the whole batch, and how unequal the samples' gradient scales
# are (most samples are classified right late in training) only shows in whole batches.
# "sub2" (the first set) kept 2 samples per batch, as the bundled sample traces do.
# Sizes are chosen to fit a 2-core machine shared with other jobs; each run still goes far past
# 100 % training accuracy (see OUT/summary-NAME.json).
# name: (workload, dataset, epochs, batch, lr, train_samples or None, record_every, subsample)
SETS = {
    "full": {
        "resnet20-digits480": ("resnet20", "digits", 30, 32, 0.05, 480, 0.25, None),
        "cnn2-digits": ("cnn2", "digits", 40, 32, 0.02, None, 0.2, None),
        "resnet32-digits480": ("resnet32", "digits", 30, 32, 0.05, 480, 0.2, None),
        "vgg11-cifar-digits480": ("vgg11-cifar", "digits", 25, 32, 0.05, 480, 0.2, None),
        "resnet56-digits480": ("resnet56", "digits", 25, 32, 0.05, 480, 0.2, None),
    },
    "sub2": {
        "cnn2-digits": ("cnn2", "digits", 60, 32, 0.02, None, 0.1, 2),
        "resnet20-digits": ("resnet20", "digits", 40, 32, 0.05, None, 0.1, 2),
        "cnn2-mnist5k": ("cnn2", "mnist5k", 30, 32, 0.02, 1000, 0.1, 2),
        "resnet20-mnist5k": ("resnet20", "mnist5k", 30, 32, 0.05, 640, 0.1, 2),
    },
}
DEFAULT_OUT = {"full": "build/long-captures-full", "sub2": "build/long-captures"}


def _complete(path: Path) -> bool:
    try:
        return json.loads((path / "manifest.json").read_text()).get("complete") is True
    except (OSError, ValueError):
        return False


def report(out: Path, runs: dict) -> str:
    """Markdown table of the completed runs, read from the traces themselves (manifest + log)."""
    import csv
    rows = ["| run | network | dataset (train samples) | epochs x iterations | recorded points "
            "(samples each) | 100 % train acc. from epoch | final train / val acc. | wall time |",
            "|---|---|---|---|---|---|---|---|"]
    for name, (wl, ds, epochs, batch, lr, n, every, sub) in runs.items():
        if not _complete(out / name):
            rows.append(f"| {name} | {wl} | {ds} | {epochs} epochs | not captured | | | |")
            continue
        m = json.loads((out / name / "manifest.json").read_text())
        tp = m["provenance"]["training"]
        log = list(csv.DictReader(open(out / name / "log.csv")))
        acc = tp.get("train_acc") or []
        first = next((i + 1 for i, a in enumerate(acc) if a >= 0.9995), None)
        rows.append(f"| {name} | {wl} | {ds} ({m['provenance']['dataset']['train_samples']}) | "
                    f"{tp['epochs']} x {tp['iterations_per_epoch']} | {len(m['iterations'])} "
                    f"({m.get('batch_subsample') or m['batch']}) | {first or 'never'} | "
                    f"{100 * acc[-1]:.1f} % / {100 * float(log[-1]['val_acc']):.1f} % | "
                    f"{float(log[-1]['wall_time_s']):.0f} s |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=sorted(SETS), default="full")
    ap.add_argument("--out", default=None, help="default: build/long-captures-full (full), "
                    "build/long-captures (sub2)")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", action="store_true",
                    help="capture nothing; print a markdown table of the runs' summaries")
    args = ap.parse_args(argv)
    RUNS = SETS[args.set]
    bad = [n for n in args.only or [] if n not in RUNS]
    if bad:
        ap.error(f"--only: unknown run(s) {', '.join(bad)} in set {args.set} "
                 f"(known: {', '.join(RUNS)})")
    args.out = args.out or DEFAULT_OUT[args.set]
    if args.report:
        print(report(Path(args.out), RUNS))
        return 0
    from sim.capture.trainer import train_and_capture
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
               "load_average_at_start": os.getloadavg()}
    for name in args.only or list(RUNS):
        wl, ds, epochs, batch, lr, n, every, sub = RUNS[name]
        path = out / name
        if _complete(path):
            print(f"{name}: complete, skipped")
            continue
        cmd = (f"prunesim capture --workload {wl} --dataset {ds} --epochs {epochs} --batch {batch} "
               f"--lr {lr} --record-every {every}" + (f" --subsample {sub}" if sub else "")
               + " --seed 0 "
               f"--threads {args.threads}" + (f" --train-samples {n}" if n else "")
               + f" --out {shlex.quote(str(path))} --force")
        t0 = time.perf_counter()
        res = train_and_capture(wl, ds, epochs, path, batch=batch, lr=lr, subsample=sub,
                                record_every=every, train_samples=n, seed=0,
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
