"""Measure dense vs 2:4 semi-structured FP16 GEMMs on a real NVIDIA GPU (A100/H100) for the AGBP
GEMM shapes of ResNet-18 and ResNet-50, and write them as data to compare with the engine.

    python bench/gpu_measure.py --out bench/data/gpu-$(hostname).json [--batch 256] [--repeat 50]

Needs a CUDA build of PyTorch with `torch.sparse.to_sparse_semi_structured` (2.1+) and an sm_80+
GPU; never run by tests or CI. For each AGBP GEMM (M = N*H*W or N*P*Q, N = C_in[*R*S], K = C_out[*R*S]
as sim.workload.lower() gives it) the A operand (dO, M x K) is made 2:4 along K, which is what
SDGP prunes, and timed with CUDA events after warm-up, dense (torch.mm) vs semi-structured. Then
`python bench/gpu_measure.py --compare FILE --hw hwconfigs/h100-sxm5-80gb.yaml` prints measured vs
modeled and the median absolute error.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.workload import load_workload, lower  # noqa: E402


def agbp_shapes(batch: int) -> list[dict]:
    seen = {}
    for name in ("resnet18-imagenet", "resnet50-imagenet"):
        for l in load_workload(name).convs:
            if not l.needs_agbp or l.groups != 1:
                continue
            g = lower(l, batch)["agbp"]
            seen.setdefault((g.m, g.n, g.k), {"m": g.m, "n": g.n, "k": g.k, "layers": []})
            seen[(g.m, g.n, g.k)]["layers"].append(f"{name}:{l.name}")
    return list(seen.values())


def measure(batch: int, repeat: int) -> dict:
    import torch
    from torch.sparse import to_sparse_semi_structured
    dev = torch.device("cuda")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "host": platform.node(), "batch": batch, "rows": []}

    def timed(fn) -> float:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeat):
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        return statistics.median(times)

    for s in agbp_shapes(batch):
        m, n, k = s["m"], s["n"], s["k"]
        row = dict(s)
        if k % 64 or m % 64 or n % 8:
            row["skipped"] = "shape not supported by the semi-structured kernels"
            out["rows"].append(row)
            continue
        a = torch.randn(m, k, device=dev, dtype=torch.float16)
        mask = torch.tensor([1, 1, 0, 0], device=dev, dtype=torch.bool).repeat(m, k // 4)
        a = a * mask
        b = torch.randn(k, n, device=dev, dtype=torch.float16)
        row["dense_s"] = timed(lambda: torch.mm(a, b))
        try:
            a_sp = to_sparse_semi_structured(a)
            row["sparse_s"] = timed(lambda: torch.mm(a_sp, b))
            row["speedup"] = row["dense_s"] / row["sparse_s"]
        except (RuntimeError, NotImplementedError) as e:
            row["sparse_error"] = str(e)[:200]
        out["rows"].append(row)
        print(f"{m}x{n}x{k}: {row}", flush=True)
    return out


def compare(path: str, hw_name: str) -> None:
    from sim.engines.gpu.gemm import simulate_gemm
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig(hw_name)
    data = json.loads(Path(path).read_text())
    errs = []
    print(f"{'M x N x K':>22} {'meas x':>8} {'model x':>8}  measured on {data['device']}")
    for r in data["rows"]:
        if "speedup" not in r:
            continue
        d = simulate_gemm(hw, r["m"], r["n"], r["k"]).seconds
        sp = simulate_gemm(hw, r["m"], r["n"], r["k"], sparse=(2, 4, 2)).seconds
        model = d / sp
        errs.append(abs(model - r["speedup"]))
        print(f"{r['m']:>8}x{r['n']:>5}x{r['k']:>6} {r['speedup']:8.2f} {model:8.2f}")
    if errs:
        print(f"median absolute error of the 2:4 speedup: {statistics.median(errs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--compare", default=None, help="measurement JSON to compare with the model")
    ap.add_argument("--hw", default="h100-sxm5-80gb")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare, a.hw)
        return
    res = measure(a.batch, a.repeat)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
