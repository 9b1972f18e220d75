"""Section S: silicon measured on a lent H100 SXM5 (hwconfigs/measurements/), the model fitted to
none of it."""
from __future__ import annotations

import json
import statistics
import warnings
from typing import Iterator

from .report import REPO, Row
from .sdgp import _conv_phase_seconds

# ---- S: silicon measured here (a lent H100, 2026-11-23) ------------------------------------------

SILICON = REPO / "hwconfigs" / "measurements"
SILICON_RUNS = SILICON / "h100-silicon-2026-11-23.jsonl"
SILICON_HW = "h100-sxm5-80gb"
# dO tensors of the prune+compress measurements as the conv whose AGBP they feed (N,C_in,C_out,H,..)
SILICON_PREP_CONV = {(200704, 256): "256,128,256,28,28,3,3,1,1",
                     (50176, 512): "256,256,512,14,14,3,3,1,1",
                     (12544, 512): "256,512,512,7,7,3,3,1,1", (802816, 64): "256,64,64,56,56,3,3,1,1"}


def _silicon_records() -> list[dict]:
    """Every record of the committed H100 runs, read once per report."""
    global _SILICON_CACHE
    if _SILICON_CACHE is None:
        with open(SILICON_RUNS, encoding="utf-8") as f:
            _SILICON_CACHE = [json.loads(line) for line in f if line.strip()]
    return _SILICON_CACHE


_SILICON_CACHE: list[dict] | None = None


def _silicon(rec: str) -> list[dict]:
    return [r for r in _silicon_records() if r.get("rec") == rec]


def _kernel_s(d: dict) -> float:
    return sum(v for k, v in d.items() if not k.startswith("Memset"))


def rows_s_silicon(quick: bool = False) -> Iterator[Row]:
    """Model vs this project's own measurements on a lent H100 SXM5 (bench/gpu_silicon.py and
    `prunesim calibrate --gpu`; files in hwconfigs/measurements/): GEMM kernels dense and native
    sm90 cuSPARSELt 2:4, the sustained clock, prune+compress of dO, ResNet-18 convs in a real
    training step and the whole step. The "published" column is the measurement; nothing in the
    model was fitted to these rows (the bundled h100 hwconfig predates them)."""
    from sim.engines.gpu.gemm import simulate_gemm
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig(SILICON_HW)
    where = "measured on an H100 SXM5 80GB (700 W), 2026-11-23"
    spd_err, dense_err = [], []
    for r in _silicon("kernels"):
        m, n, k, dt = r["m"], r["n"], r["k"], r["dtype"]
        d, sp = _kernel_s(r["dense"]), _kernel_s(r["cslt_mm_default"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rd = simulate_gemm(hw, m, n, k, dtype=dt)
            rs = simulate_gemm(hw, m, n, k, dtype=dt, sparse="2:4")
        shape = f"{m}x{n}x{k} {dt}"
        dense_err.append(abs(rd.seconds / d - 1))
        yield Row("S", f"dense GEMM throughput, H100 cuBLAS, {shape}", 2 * m * n * k / d / 1e12,
                  2 * m * n * k / rd.seconds / 1e12, "TFLOPS", f"{hw.name} / GEMM {shape}",
                  note=f"{where}: kernel time {d * 1e3:.3f} ms ({r['why']}); model tile "
                       f"{rd.details.get('tile')} at {float(rd.details.get('clock_mhz')):.0f} MHz")
        spd_err.append(abs(rd.seconds / rs.seconds - d / sp))
        best = _kernel_s(r["cslt_mm_best"]) if r.get("cslt_mm_best") else None
        yield Row("S", f"2:4 speedup, H100 cuSPARSELt sm90 kernel, {shape}", d / sp,
                  rd.seconds / rs.seconds, "x", f"{hw.name} / GEMM {shape} 2:4",
                  note=f"{where}: kernel times dense {d * 1e3:.3f}, 2:4 {sp * 1e3:.3f} ms "
                       f"(default algorithm; cuSPARSELt's own search: "
                       f"{d / best if best else float('nan'):.2f}x, alg {r.get('cslt_best_alg')}); "
                       f"model {rd.seconds * 1e3:.3f} / {rs.seconds * 1e3:.3f} ms")
    yield Row("S", "2:4 speedup on H100 silicon, median absolute error (kernel times)", None,
              statistics.median(spd_err), "x", status="qualitative",
              note=f"{len(spd_err)} shapes, none fitted; dense GEMM time median |error| "
                   f"{statistics.median(dense_err):.1%}")
    # PyTorch's call: host-side plan set-up per torch.mm with a semi-structured operand
    ov = [(r["cusparselt_s"], r) for r in _silicon("pair") if "cusparselt_s" in r]
    kern = {(r["m"], r["n"], r["k"], r["dtype"]): _kernel_s(r["cslt_mm_default"])
            for r in _silicon("kernels")}
    gaps = [t - kern[(r["m"], r["n"], r["k"], r["dtype"])] for t, r in ov
            if (r["m"], r["n"], r["k"], r["dtype"]) in kern]
    if gaps:
        yield Row("S", "PyTorch torch.mm on a cuSPARSELt SparseSemiStructuredTensor: time per call "
                  "beyond its kernel (ms)", statistics.median(gaps) * 1e3, None, "ms",
                  status="not-modeled",
                  note=f"{where}, torch 2.11 / cuSPARSELt 0.8: the event-timed call minus the "
                       f"kernel time, median over {len(gaps)} shapes (range "
                       f"{min(gaps) * 1e3:.2f}-{max(gaps) * 1e3:.2f} ms): the GPU idles while the "
                       "host sets up a plan, so through eager PyTorch 2:4 loses on every shape "
                       "under 8192^3 (event speedups 0.07-1.05x). The engine models kernels; "
                       "the CUTLASS backend refuses sm90 ('compute capability 8.x only'), so "
                       "the recompiled-Ampere H100 row of HARDWARE.md could not be re-measured")
    yield from _silicon_clock_rows(hw, where)
    yield from _silicon_prep_rows(hw, where)
    yield from _silicon_step_rows(hw, where)


def _silicon_clock_rows(hw, where: str) -> Iterator[Row]:
    from sim.engines.gpu.gemm import simulate_gemm
    clk = [float(s["clocks.sm"]) for r in _silicon("clock") if r["label"] == "dense fp16 8192^3"
           for s in r.get("samples", []) if s.get("clocks.sm", "").isdigit()]
    pw = [float(s["power.draw"]) for r in _silicon("clock") if r["label"] == "dense fp16 8192^3"
          for s in r.get("samples", []) if s.get("power.draw", "").replace(".", "").isdigit()]
    if not clk:
        return
    rd = simulate_gemm(hw, 8192, 8192, 8192, dtype="fp16")
    yield Row("S", "SM clock under back-to-back 8192^3 fp16 GEMMs (MHz)", statistics.median(clk),
              float(rd.details["clock_mhz"]), "MHz", f"{hw.name} / sustained_clock",
              note=f"{where}: nvidia-smi every 100 ms over two 6 s runs ({len(clk)} samples, "
                   f"p10-p90 {sorted(clk)[len(clk) // 10]:.0f}-{sorted(clk)[9 * len(clk) // 10]:.0f}"
                   f" MHz, power {statistics.median(pw):.0f} W of 700, throttle reason 0x4 = "
                   "software power cap); the hwconfig's 1500 MHz was an estimate. The model's "
                   "8192^3 time is within 5 % only because two errors cancel: a clock ~20 % high "
                   "and a per-clock efficiency ~20 % low (silicon: 715 TFLOPS at ~1350 MHz is "
                   "~98 % of that clock's peak; the model's Ampere-style pipeline gets ~80 %). "
                   "`calibrate --gpu` fits 1317 MHz (hwconfigs/gpu-nvidia-h100-80gb-hbm3.yaml)")


def _silicon_prep_rows(hw, where: str) -> Iterator[Row]:
    from sim.engines.cli import conv_workload
    from sim.methods import parse_method
    for r in _silicon("prep"):
        conv = SILICON_PREP_CONV.get((r["m"], r["k"]))
        if conv is None or "cutlass_fused_prune_compress_s" not in r:
            continue
        wl, layers, nb = conv_workload(conv)   # its one layer marked as needing AGBP
        _, un = _conv_phase_seconds(hw, wl, nb, parse_method("sdgp-mag:nm=2:4"), layers)
        _, fu = _conv_phase_seconds(hw, wl, nb, parse_method("sdgp-mag:nm=2:4,fused=true"),
                                    layers)
        meas = r["cutlass_fused_prune_compress_s"]
        yield Row("S", f"2:4 prune+compress of dO {r['m']}x{r['k']} fp16, one kernel (ms)",
                  meas * 1e3, un["pass"] * 1e3, "ms", f"{hw.name} / sdgp-mag:nm=2:4 pass",
                  note=f"{where}: PyTorch prune_dense_static_sort (magnitude 2:4 + compression "
                       f"in one kernel, which also writes the transposed copy for A^T) "
                       f"{meas * 1e3:.3f} ms, ~4x the model's streaming pass: the real kernel is "
                       f"not bandwidth-bound (the model charges bytes only); a copy of the same bytes "
                       f"{r['copy_s'] * 1e3:.3f} ms; compressing an already-pruned tensor "
                       f"{r['cutlass_compress_s'] * 1e3:.2f} ms; magnitude masking in plain PyTorch "
                       f"ops {r['mask_unfused_s'] * 1e3:.1f} ms. Model: a separate pass "
                       f"{un['pass'] * 1e3:.3f} ms, fused into dO's producer "
                       f"{fu['epilogue'] * 1e3:.3f} ms (not measurable without a fused kernel)")


def _silicon_step_rows(hw, where: str) -> Iterator[Row]:
    from sim.system.cluster import load_cluster
    from sim.system.timeline import layer_times
    from sim.workload import load_workload
    wl = load_workload("resnet18-imagenet")
    tot, _ = _conv_phase_seconds(hw, wl, 256)
    steps = {r["format"]: r for r in _silicon("step")}
    nhwc = steps.get("NHWC")
    if nhwc:
        cat = {"fwd": 0.0, "agbp": 0.0, "wgc": 0.0}
        for o in nhwc["ops"]:
            n = o["op"]
            ph = "fwd" if "fprop" in n else "agbp" if "dgrad" in n else "wgc" if "wgrad" in n \
                else None
            if ph:
                cat[ph] += o["self_device_us_per_step"] / 1e6
        for ph in ("fwd", "agbp", "wgc"):
            yield Row("S", f"ResNet-18 b256 conv {ph.upper()} time in a training step (ms)",
                      cat[ph] * 1e3, tot[ph] * 1e3, "ms", f"{hw.name} / resnet18-imagenet / fp16",
                      note=f"{where}: cuDNN sm90 kernels in a torchvision ResNet-18 AMP step, "
                           "channels_last, torch.profiler (the 60 costliest kernels)")
        yield Row("S", "ResNet-18 b256 AGBP share of conv time, in a training step",
                  100 * cat["agbp"] / sum(cat.values()), 100 * tot["agbp"] / sum(tot.values()),
                  "%", f"{hw.name} / resnet18-imagenet / fp16",
                  note=f"{where}; the SDGP paper's A100 figure is 33.17 % (section D)")
    cl = load_cluster("dgx-h100-ndr")
    t = layer_times(wl, 256, cl.device, cl.training)
    model = t.gemm_seconds + t.ops_seconds + t.optimizer + t.step_overhead
    for fmt, r in sorted(steps.items()):
        conv = sum(o["self_device_us_per_step"] for o in r["ops"]
                   if any(x in o["op"] for x in ("fprop", "dgrad", "wgrad"))) / 1e6
        lay = sum(o["self_device_us_per_step"] for o in r["ops"]
                  if "nchwToNhwc" in o["op"] or "nhwcToNchw" in o["op"]) / 1e6
        yield Row("S", f"ResNet-18 b256 AMP training step, {fmt} (ms)", r["step_s"] * 1e3,
                  model * 1e3, "ms", f"{cl.name} / resnet18-imagenet / pytorch-eager",
                  note=f"{where}: torchvision, SGD, GradScaler; conv kernels {conv * 1e3:.1f} ms, "
                       f"NCHW<->NHWC transposes {lay * 1e3:.1f} ms, the rest batch norm, max pool, "
                       f"elementwise and the optimizer. Model: GEMMs {t.gemm_seconds * 1e3:.2f} "
                       f"ms, non-GEMM kernels {t.ops_seconds * 1e3:.2f} ms, optimizer "
                       f"{t.optimizer * 1e3:.2f} ms (no layout transposes: the model is NHWC)")
