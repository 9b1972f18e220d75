"""Speed of the tensor-core engine: full ResNet-50 (ImageNet, batch 256), FWD + AGBP + WGC of every
layer, dense and SDGP 2:4, on the A100 hwconfig. Target: <= 2 s after JIT warm-up.

    python bench/bench_tensorcore.py

Warm-up compiles (or loads from cache) the Numba kernels on one small layer; the GEMM cache is then
cleared, so the timed run simulates every distinct GEMM of the network from scratch (repeated
identical layers inside the run still share one simulation, as the engine always does).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.driver import simulate_layer, simulate_workload  # noqa: E402
from sim.engines.gpu.gemm import _gemm_cached  # noqa: E402
from sim.hwconfig import load_hwconfig  # noqa: E402
from sim.methods import parse_method  # noqa: E402
from sim.workload import load_workload  # noqa: E402

TARGET_S = 2.0


def main() -> int:
    hw = load_hwconfig("a100-sxm4-40gb")
    wl = load_workload("resnet50-imagenet")
    simulate_layer(hw, load_workload("resnet9").layers[2], 2,   # JIT warm-up, engine + methods
                   method=parse_method("sdgp-mag:nm=2:4"))
    _gemm_cached.cache_clear()
    t0 = time.perf_counter()
    totals = {}
    n_kernels = 0
    for label, method in (("dense", None), ("sdgp 2:4", parse_method("sdgp-mag:nm=2:4"))):
        rows = simulate_workload(hw, wl, 256, method=method)
        totals[label] = sum(k.seconds for r in rows for ks in r["phases"].values() for k in ks)
        n_kernels += sum(len(ks) for r in rows for ks in r["phases"].values())
    wall = time.perf_counter() - t0
    info = _gemm_cached.cache_info()
    print(f"resnet50-imagenet batch 256 on {hw.name}: dense {totals['dense'] * 1e3:.2f} ms, "
          f"2:4 {totals['sdgp 2:4'] * 1e3:.2f} ms simulated")
    print(f"{n_kernels} kernels, {info.misses} distinct GEMMs simulated; wall {wall:.3f} s "
          f"(target <= {TARGET_S} s): {'OK' if wall <= TARGET_S else 'TOO SLOW'}")
    return 0 if wall <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
