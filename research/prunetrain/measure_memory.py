#!/usr/bin/env python
"""Measure a training step's peak GPU memory and put it beside sim.system.memory's footprint.

The dynamic mini-batch rows of validation C depend on how memory falls as channels are pruned
(docs/explanation/system.md, "a depth tilt"): fed the authors' own pruned ResNet-50, the model's autograd
footprint keeps 87 % of the dense activations, too much for the paper's 64 -> 96 -> 128 growth.
This tool measures what PyTorch really holds, for the dense network and for the pruned widths of
a trajectory, so a run on a device can check the memory model and the capacity rule:

    python -m research.prunetrain.measure_memory --workload resnet50-imagenet --batch 32 64 96 128
    python -m research.prunetrain.measure_memory --workload resnet50-imagenet --batch 64 \\
        --rho 0.25 --epochs 90 --interval 5 --at 10 30 89
    python -m research.prunetrain.measure_memory --fit hwconfigs/measurements/memory-h200-torch2.11-resnet50.json

One forward, backward and SGD-with-momentum step per (widths, batch), fp32, after a warm-up step
(cuDNN's algorithm search allocates its own workspace once); reports torch.cuda's peak allocated
and reserved bytes and the model's footprint (activations, transients, workspace, weights,
gradients, momentum; no reserve): as counted op by op, and with the default framework
profile's peak extra, the share of the activations that `--fit` fits to such rows
(research.prunetrain.memory_fit). Measuring needs CUDA: on a machine without it the tool says so and
stops. `--json` writes the rows in the schema of hwconfigs/measurements/memory-*.json, ready
for `--fit` (repeat rows marked by hand when one file gathers several runs).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(model, batch: int, chw: tuple[int, int, int], classes: int, device) -> dict:
    """Peak bytes of one training step (after a warm-up step) at `batch`."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *chw, device=device)
    y = torch.randint(0, classes, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=False)
        out = model(x)
        torch.nn.functional.cross_entropy(out.reshape(batch, -1), y).backward()
        opt.step()

    step()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return {"allocated": torch.cuda.max_memory_allocated(device),
            "reserved": torch.cuda.max_memory_reserved(device)}


def _fit(path: Path) -> int:
    from sim.errors import PrunesimError
    from research.prunetrain.memory_fit import fit_activation_overhead, load_memory_measurements
    try:
        m = load_memory_measurements(path)
        fit = fit_activation_overhead(m)
    except PrunesimError as e:
        print(f"measure_memory: {e}", file=sys.stderr)
        return 2
    print(f"{m.workload} on {m.device}, torch {m.torch}: peak extra = {fit.share:.3f} x activations "
          f"(least squares over {sum(not c.row.repeat for c in fit.checks)} rows; RMS error "
          f"{100 * fit.rms:.1f} %)")
    print(f"{'widths':44s} {'batch':>5s} {'measured GB':>11s} {'counted':>8s} {'+extra':>8s}")
    for c in fit.checks:
        print(f"{c.row.widths + (' (repeat)' if c.row.repeat else ''):44s} {c.row.batch:5d} "
              f"{c.row.allocated / 1e9:11.3f} {100 * (c.counted / c.row.allocated - 1):+7.1f}% "
              f"{100 * c.error:+7.1f}%")
    return 0


def _device(torch):
    return torch.device("cuda")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload")
    ap.add_argument("--batch", type=int, nargs="+")
    ap.add_argument("--fit", type=Path, metavar="JSON",
                    help="no measuring: fit a framework's activation_overhead to a measurement "
                         "file (hwconfigs/measurements/memory-*.json) and print every row's error")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--trajectory", help="widths from a trajectory file (default: dense only)")
    src.add_argument("--rho", type=float, help="widths from the lasso-dose model at this rho")
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--interval", type=int, default=5)
    ap.add_argument("--at", type=int, nargs="+", default=None,
                    help="epochs of the trajectory to measure (default: the last)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    if a.fit:
        return _fit(a.fit)
    if not a.workload or not a.batch:
        ap.error("--workload and --batch are needed to measure (or --fit JSON)")
    try:
        import torch
    except ImportError:
        print("measure_memory: needs torch (the capture extra)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("measure_memory: needs a CUDA device (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    from sim.capture.torchnet import build_model
    from sim.system.memory import footprint
    from sim.system.prunetrain import lasso_trajectory, load_trajectory
    from sim.system.trajectory import apply_widths
    from sim.workload import load_workload, tensor_chw
    w = load_workload(a.workload)
    # (label, network, the row's widths and epoch in the measurement-file schema)
    nets = [("dense", w, {"widths": "dense"})]
    if a.trajectory is not None or a.rho is not None:
        tr = (load_trajectory(a.trajectory, w) if a.trajectory else
              lasso_trajectory(w, a.rho, a.interval, a.epochs, min(a.batch)))
        src = (_repo_path(a.trajectory) if a.trajectory else
               f"lasso model rho={a.rho} interval={a.interval} epochs={a.epochs}")
        nets += [(f"epoch {e}", apply_widths(w, tr.widths_at(e)), {"widths": src, "epoch": e})
                 for e in (a.at or [a.epochs - 1])]
    dev = _device(torch)
    chw = tensor_chw(w)[w.layers[0].in_tensor]
    classes = w.layers[-1].c_out
    rows = []
    from sim.system.timeline import resolve_framework
    over = resolve_framework(None).activation_overhead   # the default profile's peak extra
    print(f"{'widths':10s} {'batch':>5s} {'allocated GB':>12s} {'reserved GB':>11s} "
          f"{'counted GB':>10s} {'alloc/counted':>13s} {f'+{over:g} x act':>11s}")
    for label, net, where in nets:
        model = build_model(net).to(dev).train()
        for b in a.batch:
            try:
                got = measure(model, b, chw, classes, dev)
            except torch.cuda.OutOfMemoryError:
                print(f"{label:10s} {b:5d} {'out of memory':>12s}")
                torch.cuda.empty_cache()
                continue
            mod, full = footprint(net, b, 4).total, footprint(net, b, 4, 0, over).total
            rows.append({**where, "batch": b, **got})
            print(f"{label:10s} {b:5d} {got['allocated'] / 1e9:12.3f} {got['reserved'] / 1e9:11.3f} "
                  f"{mod / 1e9:10.3f} {got['allocated'] / mod:13.3f} {full / 1e9:11.3f}")
        del model
        torch.cuda.empty_cache()
    if a.json:
        # the schema of hwconfigs/measurements/memory-*.json (research.prunetrain.memory_fit); rows of
        # --rho widths name no file and are refused by --fit
        a.json.write_text(json.dumps({
            "schema": "prunesim-memory-measurements", "version": 1,
            "device": torch.cuda.get_device_name(dev), "torch": str(torch.__version__),
            "dtype": "fp32", "workload": w.name,
            "tool": "research.prunetrain.measure_memory: one forward, backward and SGD-momentum step after a "
                    "warm-up step; torch.cuda.max_memory_allocated / max_memory_reserved; "
                    "cudnn.benchmark off; model built by sim.capture.torchnet.build_model",
            "rows": rows}, indent=1) + "\n")
    return 0


def _repo_path(path: str) -> str:
    """A trajectory file as a path from the repository root where it is inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


if __name__ == "__main__":
    sys.exit(main())
