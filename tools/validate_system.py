"""Validation of the system level against VALIDATION.md C (PruneTrain): published vs modeled.

Every modeled number comes from the parametric channel trajectory (sim.system.prunetrain, not
fitted to these rows), the workloads' layer shapes, the memory model and the per-layer times (the
tensorcore engine where its hwconfig exists, else the labeled roofline fallback). The published
numbers below are only compared against, never used by the model.

    python tools/validate_system.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.methods import parse_method  # noqa: E402
from sim.system.cluster import load_cluster  # noqa: E402
from sim.system.prunetrain import (apply_widths, parametric_trajectory,  # noqa: E402
                                   simulate_run)
from sim.workload import load_workload  # noqa: E402

# VALIDATION.md C, Table 1: (row, workload, epochs, interval, batch, flops, {device: time}, inference)
TABLE1 = [
    ("CIFAR-10 ResNet-32", "resnet32", 182, 10, 128, 0.47, {"gtx1080ti-11gb": 0.81}, 0.34),
    ("CIFAR-10 ResNet-50", "resnet50-cifar", 182, 10, 128, 0.50, {"gtx1080ti-11gb": 0.81}, 0.30),
    ("CIFAR-10 VGG-11", "vgg11-cifar", 182, 10, 128, 0.43, {"gtx1080ti-11gb": 0.57}, 0.35),
    ("CIFAR-10 VGG-13", "vgg13-cifar", 182, 10, 128, 0.44, {"gtx1080ti-11gb": 0.57}, 0.37),
    ("CIFAR-100 ResNet-50", "resnet50-cifar", 182, 10, 128, 0.47, {"gtx1080ti-11gb": 0.66}, 0.31),
    ("ImageNet ResNet-50 rho=0.25", "resnet50-imagenet", 90, 5, 64, 0.60,
     {"gtx1080ti-11gb": 0.71, "prunetrain-v100-128": 0.66}, 0.47),
    ("ImageNet ResNet-50 rho=0.20", "resnet50-imagenet", 90, 5, 64, 0.70,
     {"gtx1080ti-11gb": 0.76, "prunetrain-v100-128": 0.72}, 0.56),
]
PUB_BATCH = {"ImageNet ResNet-50 (64 -> 96 @10 -> 128 @30)": ("resnet50-imagenet", 90, 5, 64),
             "CIFAR-100 ResNet-50 (128 -> 192 @20, 224 @30, 256 @50, 288 @70, 320 @120)":
                 ("resnet50-cifar", 182, 10, 128)}


def err(model: float, pub: float) -> str:
    return f"{(model - pub) / pub:+.0%}"


def schedule(run) -> str:
    out, prev = [], None
    for e in run.epochs:
        if e.batch != prev:
            out.append(f"{e.batch}" + (f" @{e.epoch}" if e.epoch else ""))
            prev = e.batch
    return " -> ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="CIFAR rows and fewer scales only")
    args = ap.parse_args()
    t0 = time.time()
    dense_m, pt_m = parse_method("dense"), parse_method("prunetrain")
    one = {c: load_cluster(c).with_devices(1) for c in ("gtx1080ti-11gb", "prunetrain-v100-128")}

    print("== VALIDATION.md C, Table 1: PruneTrain vs dense, same iterations (fixed batch), 1 device")
    print("trajectory: parametric model defaults (keep 0.5, residual 0.75, tau 0.2*epochs), identical"
          " for both rho rows: the model has no rho input")
    hdr = f"{'row':30s} {'metric':22s} {'published':>9s} {'modeled':>8s} {'error':>6s}  source"
    print(hdr)
    print("-" * len(hdr))
    rows = TABLE1[:2] if args.quick else TABLE1
    label = {"gtx1080ti-11gb": "1080 Ti", "prunetrain-v100-128": "V100"}
    fallbacks: set[str] = set()

    def src(run) -> str:
        if run.timing_source.startswith("roofline"):
            fallbacks.add(run.timing_source)
            return "ROOFLINE FALLBACK (*)"
        return run.timing_source
    for name, wl, epochs, interval, batch, pf, ptimes, pinf in rows:
        w = load_workload(wl)
        tr = parametric_trajectory(w, epochs, interval)
        final = apply_widths(w, tr.widths_at(epochs - 1))
        first = True
        for cname, ptime in ptimes.items():
            cl = one[cname]
            d = simulate_run(w, cl, dense_m, epochs=epochs, batch=batch)
            p = simulate_run(w, cl, pt_m, epochs=epochs, batch=batch, trajectory=tr)
            if first:
                fr = sum(e.flops for e in p.epochs) / sum(e.flops for e in d.epochs)
                ar = sum(e.authors_macs for e in p.epochs) / sum(e.authors_macs for e in d.epochs)
                inf = final.macs() / w.macs()
                print(f"{name:30s} {'train FLOPs (GEMMs)':22s} {pf:9.0%} {fr:8.1%} {err(fr, pf):>6s}  {wl}")
                print(f"{'':30s} {'train FLOPs (authors)':22s} {pf:9.0%} {ar:8.1%} {err(ar, pf):>6s}  "
                      "METHODS.md 3 accounting")
                print(f"{'':30s} {'inference FLOPs':22s} {pinf:9.0%} {inf:8.1%} {err(inf, pinf):>6s}")
                first = False
            rt = p.train_seconds / d.train_seconds
            print(f"{'':30s} {'train time ' + label[cname]:22s} {ptime:9.0%} {rt:8.1%} "
                  f"{err(rt, ptime):>6s}  {src(p)}")
            print(f"{'':30s} {'  (time / FLOPs ratio)':22s} {ptime / pf:9.2f} {rt / fr:8.2f}")

    for f in sorted(fallbacks):
        print(f"(*) {f}: time ratios then track FLOPs ratios; the SIMD/odd-channel gap needs the engine")
    print("\n== Dynamic mini-batch on 11 GB devices (gtx1080ti-11gb), growth in steps of 32")
    for label, (wl, epochs, interval, batch) in PUB_BATCH.items():
        if args.quick and "ImageNet" in label:
            continue
        w = load_workload(wl)
        tr = parametric_trajectory(w, epochs, interval)
        print(f"published {label}")
        for mode in ("device", "relative"):
            r = simulate_run(w, one["gtx1080ti-11gb"], pt_m, epochs=epochs, batch=batch,
                             trajectory=tr, dynamic_batch=mode, engine="roofline")
            print(f"  modeled [{mode:8s}]: {schedule(r)}")
            for n in r.notes:
                if "does not fit" in n:
                    print(f"    note: {n}")
    print("  device: capacity = 11 GB minus 0.5 GB reserve; relative: the initial batch is taken to "
          "fill the device (capacity = dense footprint at the initial batch)")

    print("\n== Communication saving, ImageNet ResNet-50 (prunetrain-v100-128 hierarchy: 4 GPUs/node "
          "NVLink2, EDR between nodes), 90 epochs, batch 64/GPU")
    print("published: the saving stays about the same at every scale (no number in VALIDATION.md C)")
    base = load_cluster("prunetrain-v100-128")
    big = replace(base, dimensions=(base.dimensions[0], replace(base.dimensions[1], devices=64)))
    w = load_workload("resnet50-imagenet")
    tr = parametric_trajectory(w, 90, 5)
    print(f"{'GPUs':>5s} {'bytes ratio':>11s} {'comm-time ratio':>15s} {'exposed ratio':>13s} "
          f"{'train-time ratio':>16s} {'dyn-batch comm ratio':>20s}")
    for g in ((16, 128) if args.quick else (16, 32, 64, 128, 256)):
        cl = big.with_devices(g)
        d = simulate_run(w, cl, dense_m, epochs=90, batch=64)
        p = simulate_run(w, cl, pt_m, epochs=90, batch=64, trajectory=tr)
        pdyn = simulate_run(w, cl, pt_m, epochs=90, batch=64, trajectory=tr, dynamic_batch="relative")
        ex = lambda r: sum(e.exposed_comm_seconds for e in r.epochs)
        print(f"{g:5d} {p.comm_bytes / d.comm_bytes:11.3f} {p.comm_seconds / d.comm_seconds:15.3f} "
              f"{ex(p) / ex(d) if ex(d) else float('nan'):13.3f} "
              f"{p.train_seconds / d.train_seconds:16.3f} {pdyn.comm_seconds / d.comm_seconds:20.3f}")
    print(f"timing: {d.timing_source}")
    print(f"\n(validate_system: {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
