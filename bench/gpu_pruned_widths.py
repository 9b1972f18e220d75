"""Where does a pruned network's saving go on a real GPU? For an NVIDIA GPU (PyTorch CUDA).

    python bench/gpu_pruned_widths.py OUTDIR [--quick] [--device cuda|cpu] [--batch 128]

Third-party logs of the PruneTrain authors' CIFAR-100 VGG-11 code on a V100 (validation C, rows
"pruned / dense step time of one V100 run";
research/prunetrain/data/reruns/vgg11-cifar100-v100-times.yaml)
show the dense step as the engine predicts it (13.5 vs 13.2 ms) but the pruned steps realizing
only 0.27-0.30 of the MACs cut, where the engine realizes 0.81-0.87. Candidate causes, which this
script separates:
- host-bound time: the authors' step syncs the host four times (loss.item(), two accuracy
  .item()s, the lasso share) and runs the group-lasso penalty as ~100 small ops in Python, the
  SGD of PyTorch 1.x as a per-parameter loop: a floor that pruning does not lower;
- odd channel counts: cuDNN kernels and algorithms for widths off multiples of 4 / 8.

Per network (dense; each pruned run's final widths; the same widths rounded up to multiples of
8) and per mode it writes one JSON record to OUTDIR/widths.jsonl (flushed as it goes):
- `authors`: the step as the authors' cifar.py runs it (penalty as pow / sum / add / sqrt,
  the four syncs, zero_grad to zeros, SGD with foreach off), wall seconds per step;
- `device`: the same step with no host sync inside, steps back to back, and the profiler's sum
  of kernel times per step and kernel count (the GPU's own time);
- `no-lasso`: `authors` without the penalty (what the authors' own timing leaves out: its
  forward).
fp32 with TF32 off (V100 has no TF32), cudnn.benchmark on, NCHW, random data. A GPU other than
a V100 answers which cause dominates, not the V100's numbers. Never run by tests or CI on a GPU;
`--device cpu --quick` is the smoke test.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RUN_FILES = {"otf": "vgg11-cifar100-rho0.2-otf.yaml",
             "dynamic": "vgg11-cifar100-rho0.2-391steps.yaml"}


def networks(round_to: int = 8) -> dict[str, dict[str, int]]:
    """{label: {conv or fc layer: output width}}: dense, each run's final widths, and those
    widths rounded up to multiples of `round_to` (classifier outputs untouched)."""
    from research.prunetrain.fitting import DATA_DIR
    from sim.workload import with_classes
    from sim.system.prunetrain import load_trajectory
    from sim.workload import load_workload
    w = with_classes(load_workload("vgg11-cifar"), 100)
    out = {"dense": {}}
    for key, name in RUN_FILES.items():
        widths = load_trajectory(DATA_DIR / "reruns" / name, w).widths_at(179)
        final = {n: c_out for n, (_, c_out) in widths.items() if n != w.layers[-1].name}
        out[key] = final
        out[f"{key}-rounded{round_to}"] = {n: round_to * math.ceil(c / round_to)
                                            for n, c in final.items()}
    return out


def authors_lasso(torch, convs, fc):
    """The group-lasso penalty as the authors' scripts compute it: per grouping w.pow(2), .sum
    over the other dims; then cat, + 1e-8, sqrt and one sum (output channels of every conv,
    input channels of every conv but the first, FC input columns)."""
    parts = []
    for i, w in enumerate(convs):
        parts.append(w.pow(2).sum(dim=(1, 2, 3)))
        if i:
            parts.append(w.pow(2).sum(dim=(0, 2, 3)))
    parts.append(fc.pow(2).sum(dim=0))
    return torch.cat(parts).add(1e-8).sqrt().sum()


def build(torch, c_out: dict[str, int], device: str):
    from sim.workload import with_classes
    from sim.capture.methods import shrink_workload
    from sim.capture.torchnet import build_model
    from sim.workload import load_workload
    w = shrink_workload(with_classes(load_workload("vgg11-cifar"), 100), c_out)
    net = build_model(w).to(device)
    mods = net.prunesim_layer_modules
    convs = [mods[l.name].weight for l in w.layers if l.op == "conv"]
    return net, convs, mods[w.layers[-1].name].weight, w


def make_step(torch, net, convs, fc, opt, x, y, mode: str):
    F = torch.nn.functional

    def step():
        out = net(x)
        loss = F.cross_entropy(out, y)
        if mode != "no-lasso":
            loss = loss + 1e-4 * authors_lasso(torch, convs, fc)
        if mode != "device":
            # the authors' per-step bookkeeping: each .item() waits for the GPU
            loss.item()
            top5 = out.topk(5, dim=1).indices.eq(y[:, None])
            top5[:, :1].sum().item(), top5.sum().item()
            loss.item()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    return step


def wall_per_step(torch, fn, steps: int, device: str) -> float:
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def kernels_per_step(torch, fn, steps: int) -> tuple[float, float]:
    """(device seconds, kernel launches) per step from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    total = count = 0.0
    for ev in prof.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        t = getattr(ev, "self_cuda_time_total", 0) if t is None else t
        if t > 0:
            total += t
            count += ev.count
    return total / steps / 1e6, count / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true", help="few steps, batch 8 (smoke test)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_pruned_widths: needs PyTorch (pip install -e .[capture])", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_pruned_widths: no CUDA device (use --device cpu for the smoke test)",
              file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    a.out.mkdir(parents=True, exist_ok=True)
    batch, steps = (8, 2) if a.quick else (a.batch, 50)
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    dense_macs = None
    for label, c_out in networks().items():
        torch.manual_seed(0)
        net, convs, fc, w = build(torch, c_out, a.device)
        dense_macs = dense_macs or w.macs()      # the first network is the dense one
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4,
                              foreach=False)
        x = torch.randn(batch, 3, 32, 32, device=a.device)
        y = torch.randint(0, 100, (batch,), device=a.device)
        for mode in ("authors", "no-lasso", "device"):
            fn = make_step(torch, net, convs, fc, opt, x, y, mode)
            rec = {"rec": "step", "network": label, "mode": mode, "batch": batch, "gpu": gpu,
                   "macs_vs_dense": w.macs() / dense_macs,
                   "widths": [l.c_out for l in w.layers],
                   "step_s": wall_per_step(torch, fn, steps, a.device)}
            if mode == "device" and a.device == "cuda":
                rec["device_s"], rec["kernels"] = kernels_per_step(torch, fn, 10)
            with open(a.out / "widths.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec)[:200], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
