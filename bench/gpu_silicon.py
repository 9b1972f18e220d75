"""Silicon study on an NVIDIA GPU: what `calibrate --gpu` does not time.

    python bench/gpu_silicon.py OUTDIR [--quick] [--nhwc] [--parts=clocks,pairs,prep,convs,step,kernels]

Writes OUTDIR/silicon.jsonl, one JSON record per line, flushed as each measurement ends (a run
killed at its time limit keeps what it measured):
- `pair`: dense vs 2:4 GEMM on one shape and dtype, the 2:4 operand through both PyTorch
  backends (cuSPARSELt, and CUTLASS, whose PyTorch kernels are Ampere sm80 templates);
- `prep`: the cost of making a 2:4 operand from a dense dO-shaped tensor: magnitude prune in plain
  PyTorch ops (unfused), the one-kernel prune+compress `prune_dense_static_sort`, compression of an
  already pruned tensor, and a copy of the same bytes (the memory floor);
- `clock`: nvidia-smi SM clock, power and throttle reasons sampled every 100 ms while one GEMM
  runs back to back for a few seconds (dense fp16, dense bf16, 2:4 fp16);
- `conv`: fwd / dgrad / wgrad of every conv of a bundled workload (ResNet-18 ImageNet b256,
  ResNet-9 b512), fp16, cuDNN autotuned, NCHW as the SDGP paper's PyTorch;
- `step`: one ResNet-18 (torchvision) AMP training step at b256, timed, and its device time by op
  from torch.profiler (how much of a step is not conv).
Timing: CUDA events, warm-up first, median of repeats; random inputs (never zeros).
Never run by tests or CI (needs a CUDA GPU).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import torch
except ImportError:
    torch = None

DEV = "cuda"
OUT: Path
QUICK = False
NHWC = False      # --nhwc: convs and the training step in channels_last (no layout transposes)


def emit(rec: dict) -> None:
    with open(OUT / "silicon.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec)[:220], flush=True)


def timed(fn, repeat: int = 20, warm: int = 3) -> float:
    from sim.engines.gpu.calibrate import _timed
    return _timed(torch, fn, 5 if QUICK else repeat, warm)


def mask24(x: torch.Tensor) -> torch.Tensor:
    """x with the two smallest-magnitude of every four along the last dim zeroed."""
    g = x.reshape(-1, 4)
    idx = g.abs().topk(2, dim=1).indices
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(1, idx, True)
    return (g * keep).reshape(x.shape)


def sparse_classes():
    from torch.sparse import (SparseSemiStructuredTensorCUSPARSELT,
                              SparseSemiStructuredTensorCUTLASS)
    libs = {"cutlass": SparseSemiStructuredTensorCUTLASS}
    if torch.backends.cusparselt.is_available():
        libs["cusparselt"] = SparseSemiStructuredTensorCUSPARSELT
    return libs


# (m, n, k, dtype, why): A (m x k) is the 2:4 operand; C = A B is m x n
PAIRS = [
    (4096, 4096, 4096, "fp16", "HARDWARE.md s3 A100 shape"),
    (3072, 3072, 10240, "fp16", "HARDWARE.md s3 PyTorch tutorial shape"),
    (768, 4096, 4096, "bf16", "HARDWARE.md s3 cutlass#1335 shape"),
    (8192, 8192, 8192, "fp16", "large square"),
    (8192, 8192, 8192, "bf16", "large square"),
    (16384, 2048, 6144, "fp16", "xformers#975 MLP fc1-like"),
    (2048, 2048, 2048, "fp16", "mid square"),
    (1024, 1024, 1024, "fp16", "small square"),
    (200704, 1152, 256, "fp16", "ResNet-18 b256 layer2 AGBP (dO 2:4)"),
    (50176, 2304, 512, "fp16", "ResNet-18 b256 layer3 AGBP (dO 2:4)"),
    (802816, 576, 64, "fp16", "ResNet-18 b256 layer1 AGBP (dO 2:4)"),
    (12544, 4608, 512, "fp16", "ResNet-18 b256 layer4 AGBP (dO 2:4)"),
    (6144, 6144, 6144, "fp16", "mid-large square"),
    (4096, 4096, 4096, "bf16", "bf16 of the A100 shape"),
]
TDT = {"fp16": torch.float16, "bf16": torch.bfloat16} if torch is not None else {}


def run_pairs() -> None:
    libs = sparse_classes()
    for m, n, k, dt, why in PAIRS:
        rec = {"rec": "pair", "m": m, "n": n, "k": k, "dtype": dt, "why": why}
        try:
            a = torch.randn(m, k, device=DEV, dtype=TDT[dt])
            b = torch.randn(k, n, device=DEV, dtype=TDT[dt])
            rec["dense_s"] = timed(lambda: torch.mm(a, b))
            ap = mask24(a)
            ref = torch.mm(ap.float(), b.float())
            for lib, cls in libs.items():
                try:
                    sa = cls.from_dense(ap)
                    out = torch.mm(sa, b)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    rec[f"{lib}_s"] = timed(lambda sa=sa: torch.mm(sa, b))
                    rec[f"{lib}_relerr"] = err
                    del sa, out
                except Exception as e:  # noqa: BLE001 - a backend may refuse a shape
                    rec[f"{lib}_error"] = str(e).splitlines()[0][:200]
            del a, b, ap, ref
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e).splitlines()[0][:200]
        torch.cuda.empty_cache()
        emit(rec)


PREP_SHAPES = [(200704, 256), (50176, 512), (802816, 64), (12544, 512), (16384, 6144)]


def run_prep() -> None:
    libs = sparse_classes()
    for m, k in PREP_SHAPES:
        rec = {"rec": "prep", "m": m, "k": k, "dtype": "fp16", "bytes": 2 * m * k}
        try:
            x = torch.randn(m, k, device=DEV, dtype=torch.float16)
            dst = torch.empty_like(x)
            rec["copy_s"] = timed(lambda: dst.copy_(x))
            rec["mask_unfused_s"] = timed(lambda: mask24(x))
            xp = mask24(x)
            for lib, cls in libs.items():
                try:
                    rec[f"{lib}_compress_s"] = timed(lambda cls=cls: cls.from_dense(xp))
                except Exception as e:  # noqa: BLE001
                    rec[f"{lib}_compress_error"] = str(e).splitlines()[0][:200]
                try:
                    rec[f"{lib}_fused_prune_compress_s"] = timed(
                        lambda cls=cls: cls.prune_dense_static_sort(x))
                except Exception as e:  # noqa: BLE001
                    rec[f"{lib}_fused_error"] = str(e).splitlines()[0][:200]
            del x, dst, xp
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e).splitlines()[0][:200]
        torch.cuda.empty_cache()
        emit(rec)


SMI = ["clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu",
       "clocks_event_reasons.active"]


def _smi_fields() -> list[str]:
    fields = list(SMI)
    r = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        fields[-1] = "clocks_throttle_reasons.active"
    return fields


def run_clock(label: str, fn, seconds: float) -> None:
    fields = _smi_fields()
    p = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                          "--format=csv,noheader,nounits", "-lms", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    t = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    t.start()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        n += 10
        torch.cuda.synchronize()
    b.record()
    torch.cuda.synchronize()
    p.terminate()
    p.wait(timeout=10)
    t.join(timeout=5)
    samples = [dict(zip(fields, (v.strip() for v in ln.split(",")))) for ln in lines if ln.strip()]
    emit({"rec": "clock", "label": label, "calls": n, "mean_call_s": a.elapsed_time(b) / 1e3 / n,
          "fields": fields, "samples": samples})


def run_clocks() -> None:
    s = 2.0 if QUICK else 6.0
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.float16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.float16)
    run_clock("dense fp16 8192^3", lambda: torch.mm(a, b), s)
    ab, bb = a.bfloat16(), b.bfloat16()
    run_clock("dense bf16 8192^3", lambda: torch.mm(ab, bb), s)
    for lib, cls in sparse_classes().items():
        try:
            sa = cls.from_dense(mask24(a))
            run_clock(f"2:4 fp16 8192^3 {lib}", lambda sa=sa: torch.mm(sa, b), s)
        except Exception as e:  # noqa: BLE001
            emit({"rec": "clock", "label": f"2:4 fp16 8192^3 {lib}",
                  "error": str(e).splitlines()[0][:200]})
    del a, b, ab, bb
    torch.cuda.empty_cache()


def run_convs(name: str, batch: int) -> None:
    from sim.workload import load_workload
    torch.backends.cudnn.benchmark = True
    wl = load_workload(name)
    F = torch.nn.functional
    for L in wl.convs:
        if L.op != "conv" or L.groups != 1:
            continue
        pad = L.pad if isinstance(L.pad, int) else tuple(L.pad)
        rec = {"rec": "conv", "workload": name, "batch": batch, "layer": L.name,
               "shape": [batch, L.c_in, L.c_out, L.h, L.w, L.r, L.s, L.stride,
                         L.pad if isinstance(L.pad, int) else list(L.pad)],
               "needs_agbp": L.needs_agbp, "dtype": "fp16"}
        rec["format"] = "NHWC" if NHWC else "NCHW"
        mf = torch.channels_last if NHWC else torch.contiguous_format
        try:
            x = torch.randn(batch, L.c_in, L.h, L.w, device=DEV, dtype=torch.float16)
            wt = torch.randn(L.c_out, L.c_in, L.r, L.s, device=DEV, dtype=torch.float16)
            x, wt = x.to(memory_format=mf), wt.to(memory_format=mf)
            y = F.conv2d(x, wt, stride=L.stride, padding=pad)
            g = torch.randn_like(y).to(memory_format=mf)
            rec["fwd_s"] = timed(lambda: F.conv2d(x, wt, stride=L.stride, padding=pad))
            pd2 = [pad, pad] if isinstance(pad, int) else list(pad)

            def bwd(mask):
                return torch.ops.aten.convolution_backward(
                    g, x, wt, None, [L.stride, L.stride], pd2, [1, 1], False, [0, 0], 1, mask)
            rec["agbp_s"] = timed(lambda: bwd([True, False, False]))
            rec["wgc_s"] = timed(lambda: bwd([False, True, False]))
            del x, wt, y, g
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e).splitlines()[0][:200]
        emit(rec)
    torch.cuda.empty_cache()


def run_step() -> None:
    import torchvision
    torch.backends.cudnn.benchmark = True
    mf = torch.channels_last if NHWC else torch.contiguous_format
    net = torchvision.models.resnet18().to(DEV).to(memory_format=mf)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(256, 3, 224, 224, device=DEV).to(memory_format=mf)
    y = torch.randint(0, 1000, (256,), device=DEV)
    scaler = torch.amp.GradScaler("cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    rec = {"rec": "step", "net": "torchvision resnet18", "batch": 256, "amp": "fp16",
           "format": "NHWC" if NHWC else "NCHW", "step_s": timed(step, repeat=10, warm=5)}
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    ops = []
    for ev in prof.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = getattr(ev, "self_cuda_time_total", 0)
        if t > 0:
            ops.append({"op": ev.key, "self_device_us_per_step": t / 3, "count": ev.count / 3})
    ops.sort(key=lambda o: -o["self_device_us_per_step"])
    rec["ops"] = ops[:60]
    emit(rec)


def _kernels(fn, calls: int = 10) -> dict:
    """{kernel name: device seconds per call} of `calls` calls of fn, from torch.profiler."""
    from sim.engines.gpu.calibrate import kernel_times
    return kernel_times(torch, fn, calls)


def run_kernels() -> None:
    """Kernel-only device time of dense vs cuSPARSELt 2:4 (the event timing of the PyTorch call
    includes host-side cuSPARSELt plan set-up that leaves the GPU idle), with the best algorithm
    from cuSPARSELt's own search, and an event timing of a CUDA-graph replay where capturable."""
    for m, n, k, dt, why in PAIRS:
        rec = {"rec": "kernels", "m": m, "n": n, "k": k, "dtype": dt, "why": why}
        try:
            a = torch.randn(m, k, device=DEV, dtype=TDT[dt])
            b = torch.randn(k, n, device=DEV, dtype=TDT[dt])
            rec["dense"] = _kernels(lambda: torch.mm(a, b))
            ap = mask24(a)
            packed = torch._cslt_compress(ap)
            rec["cslt_mm_default"] = _kernels(lambda: torch._cslt_sparse_mm(packed, b))
            rec["cslt_mm_default_event_s"] = timed(lambda: torch._cslt_sparse_mm(packed, b))
            try:
                alg = torch._cslt_sparse_mm_search(packed, b)
                rec["cslt_best_alg"] = alg
                rec["cslt_mm_best"] = _kernels(lambda: torch._cslt_sparse_mm(packed, b,
                                                                             alg_id=alg))
                rec["cslt_mm_best_event_s"] = timed(
                    lambda: torch._cslt_sparse_mm(packed, b, alg_id=alg))
            except Exception as e:  # noqa: BLE001
                rec["search_error"] = str(e).splitlines()[0][:200]
            try:
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        torch._cslt_sparse_mm(packed, b)
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    for _ in range(10):
                        torch._cslt_sparse_mm(packed, b)
                rec["cslt_graph_event_s"] = timed(g.replay) / 10
                gd = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gd):
                    for _ in range(10):
                        torch.mm(a, b)
                rec["dense_graph_event_s"] = timed(gd.replay) / 10
            except Exception as e:  # noqa: BLE001
                rec["graph_error"] = str(e).splitlines()[0][:200]
            del a, b, ap, packed
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e).splitlines()[0][:200]
        torch.cuda.empty_cache()
        emit(rec)


PARTS = {"clocks": run_clocks, "pairs": run_pairs, "prep": run_prep,
         "convs": lambda: (run_convs("resnet18-imagenet", 256), run_convs("resnet9", 512)),
         "step": run_step, "kernels": run_kernels}


def main() -> int:
    global OUT, QUICK, NHWC
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print("usage: python bench/gpu_silicon.py OUTDIR [--quick] [--nhwc] [--parts=...]",
              file=sys.stderr)
        return 2
    flags = [a for a in sys.argv[1:] if a.startswith("--") and a not in ("--quick", "--nhwc")
             and not a.startswith("--parts=")]
    if flags:
        print(f"gpu_silicon: unknown option {flags[0]}", file=sys.stderr)
        return 2
    bad = [p for a in sys.argv if a.startswith("--parts=") for p in a[8:].split(",")
           if p not in PARTS]
    if bad:
        print(f"gpu_silicon: unknown part(s) {', '.join(bad)}; known: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    OUT = Path(args[0])
    QUICK = "--quick" in sys.argv
    NHWC = "--nhwc" in sys.argv
    if torch is None or not torch.cuda.is_available():
        print("gpu_silicon: no NVIDIA GPU here (PyTorch with CUDA finds none); run it on a GPU "
              "machine", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    p = torch.cuda.get_device_properties(0)
    emit({"rec": "device", "name": torch.cuda.get_device_name(0), "sm": p.multi_processor_count,
          "torch": torch.__version__, "cuda": torch.version.cuda,
          "cusparselt": (torch.backends.cusparselt.version()
                         if torch.backends.cusparselt.is_available() else None),
          "cudnn": torch.backends.cudnn.version()})
    want = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--parts=")]
    for name in (want[0] if want else ["clocks", "pairs", "prep", "convs", "step"]):
        try:
            PARTS[name]()
        except Exception as e:  # noqa: BLE001 - one failed part must not lose the others
            emit({"rec": "error", "part": name, "error": str(e).splitlines()[0][:300]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
