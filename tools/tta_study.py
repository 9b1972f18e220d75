"""SDGP time-to-accuracy studies across n:m settings (SDGP Fig. 10-style TTA).

    PYTHONPATH=. python tools/tta_study.py [--hw a100-nm-hypothetical] [--json]

(a) ResNet-9 on CIFAR-10, batch 512, 150 epochs (the authors' setting): per-iteration time of every
    n:m setting from the tensor-core engine on a hypothetical A100 whose sparse tensor cores run
    that pattern at m/n times the dense rate (prune and compress passes charged), times 98
    iterations per epoch. We have no training curves for these settings, only the authors' final
    accuracies (VALIDATION.md D, used here as inputs), so the study reports the training time and
    whether the final accuracy reaches the target; where it does, TTA <= that time (the target
    is reached at the latest in the last epoch).
(b) ResNet-20 on our real MNIST sample: the per-epoch time of each SDGP setting from the same
    engine, combined with OUR measured accuracy curves (docs/data/accuracy/*.log.csv, from
    tools/accuracy_runs.py), gives a real time to the target accuracy and the speedup over dense.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.validation import PUB_D_ACCURACY, PUB_D_NM_ACCURACY  # noqa: E402  (inputs)
from sim.driver import simulate_workload  # noqa: E402
from sim.hwconfig import load_hwconfig, with_overrides  # noqa: E402
from sim.methods import parse_method  # noqa: E402
from sim.system.tta import curve_for, load_curves, time_to_accuracy  # noqa: E402
from sim.workload import load_workload  # noqa: E402

CURVES = {"dense": "dense", "sdgp-random:nm=2:4": "sdgp-random-2of4",
          "sdgp-mag:nm=2:4": "sdgp-mag-2of4", "sdgp-resmag:nm=2:4": "sdgp-resmag-2of4",
          "sdgp-resmag:nm=4:32": "sdgp-resmag-4of32"}


def iteration_seconds(hw, workload, batch: int, method: str | None) -> float:
    spec = parse_method(method) if method else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an unsupported pattern must not pass
        rows = simulate_workload(hw, workload, batch, method=spec)
    return sum(k.seconds for r in rows for ks in r["phases"].values() for k in ks)


def study_resnet9(hw_name: str, target: float) -> list[dict]:
    wl = load_workload("resnet9")
    batch, epochs = 512, 150
    iters = math.ceil(50_000 / batch)
    patterns = sorted(PUB_D_NM_ACCURACY, key=lambda s: (int(s.split(":")[1]), int(s.split(":")[0])))
    base = load_hwconfig(hw_name)
    # the what-if device: every studied pattern at m/n times the dense rate (METHODS.md §4)
    hw = with_overrides(base, {"sparse_patterns": {
        "value": patterns, "source": "hypothetical: every n:m SDGP studies, at m/n times dense"}},
        name=f"{base.name}[all-nm]")
    dense_it = iteration_seconds(hw, wl, batch, None)
    out = [{"setting": "dense", "iteration_s": dense_it, "train_s": dense_it * iters * epochs,
            "final_acc": PUB_D_ACCURACY["CIFAR-10 ResNet-9"][0], "speedup": 1.0,
            "reaches_target": PUB_D_ACCURACY["CIFAR-10 ResNet-9"][0] >= target}]
    for nm in patterns:
        if nm == "dense":
            continue
        it = iteration_seconds(hw, wl, batch, f"sdgp-resmag:nm={nm}")
        acc = PUB_D_NM_ACCURACY[nm]
        out.append({"setting": f"resmag {nm}", "iteration_s": it, "train_s": it * iters * epochs,
                    "final_acc": acc, "speedup": dense_it / it,
                    "reaches_target": acc >= target})
    return out


def study_resnet20(hw_name: str, target: float) -> list[dict]:
    wl = load_workload("resnet20")
    data = ROOT / "docs" / "data" / "accuracy"
    hw = load_hwconfig(hw_name)
    out = []
    dense_tta = None
    for method, stem in CURVES.items():
        f = data / f"{stem}.log.csv"
        if not f.exists():
            continue
        curves = load_curves(f)
        curve = curve_for(curves, method) or (curves[0] if len(curves) == 1 else None)
        logrow = curve.points if curve else ()
        batch = 64
        iters = 62  # 4000 training images / 64 (the runs' own epoch)
        it = iteration_seconds(hw, wl, batch, None if method == "dense" else method)
        epoch_s = [it * iters] * len(logrow)
        tta, ep = time_to_accuracy(epoch_s, curve, target) if curve else (None, None)
        if method == "dense":
            dense_tta = tta
        out.append({"method": method, "epoch_s": it * iters,
                    "final_acc": logrow[-1][1] if logrow else None, "tta_s": tta, "tta_epoch": ep,
                    "tta_speedup": (dense_tta / tta) if (tta and dense_tta) else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hw", default="a100-nm-hypothetical")
    ap.add_argument("--target9", type=float, default=95.0, help="ResNet-9 target top-1 (%%)")
    ap.add_argument("--target20", type=float, default=0.97, help="ResNet-20/MNIST target accuracy")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r9 = study_resnet9(a.hw, a.target9)
    r20 = study_resnet20(a.hw, a.target20)
    if a.json:
        print(json.dumps({"resnet9": r9, "resnet20": r20}, indent=1))
        return
    print(f"(a) ResNet-9 CIFAR-10, batch 512, 150 epochs, {a.hw} + every n:m pattern; "
          f"target {a.target9}% (final accuracies: authors' README, inputs)")
    print(f"{'setting':<14}{'iter ms':>9}{'train h':>9}{'speedup':>9}{'final %':>9}  target")
    for r in r9:
        reach = "reached" if r["reaches_target"] else "NOT reached"
        print(f"{r['setting']:<14}{r['iteration_s'] * 1e3:9.2f}{r['train_s'] / 3600:9.3f}"
              f"{r['speedup']:9.3f}{r['final_acc'] if r['final_acc'] is not None else '-':>9}  {reach}")
    print()
    print(f"(b) ResNet-20 on our MNIST sample, batch 64, our measured curves; {a.hw}; target "
          f"{a.target20}")
    print(f"{'method':<22}{'epoch ms':>10}{'final':>8}{'TTA ms':>12}{'epoch':>7}{'TTA x':>8}")
    for r in r20:
        tta = f"{r['tta_s'] * 1e3:12.1f}" if r["tta_s"] is not None else f"{'not reached':>12}"
        sp = f"{r['tta_speedup']:8.3f}" if r["tta_speedup"] else f"{'-':>8}"
        ep = r["tta_epoch"] if r["tta_epoch"] is not None else "-"
        print(f"{r['method']:<22}{r['epoch_s'] * 1e3:10.1f}{r['final_acc']:8.3f}{tta}{ep:>7}{sp}")


if __name__ == "__main__":
    main()
