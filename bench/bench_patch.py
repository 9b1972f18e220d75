"""Speed of the patch-extraction engine: the approximate WGC (patch kernel with its L2 replay, and
the transposes) of every conv layer of ResNet-20 (batch 128) plus the four VALIDATION.md B layers
(batch 128, up to 590k L2 accesses each), on the TITAN Xp. Target: <= 3 s after JIT warm-up.

    python bench/bench_patch.py

The argmax positions are fixed seeded uniform picks, so the time is the engine's alone (no method
run, no dO synthesis). The biggest cost is building and replaying the access stream (one L2 access
per (sample, channel, r, s)); it is linear in N * C_out * R * S, times log for the LRU.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sim.engines.cli import conv_workload  # noqa: E402
from sim.engines.gpu import patch  # noqa: E402
from sim.hwconfig import load_hwconfig  # noqa: E402
from sim.workload import load_workload  # noqa: E402

TARGET_S = 3.0
BATCH = 128


def main() -> int:
    hw = load_hwconfig("titan-xp")
    layers = list(load_workload("resnet20").convs)
    for cin, cout, h in ((256, 256, 8), (128, 128, 16), (512, 512, 4), (512, 512, 2)):
        layers.append(conv_workload(f"{BATCH},{cin},{cout},{h},{h},3,3,1,1")[1][0])
    rng = np.random.default_rng(0)
    pos = [rng.integers(0, l.p * l.q, size=(BATCH, l.c_out, 1)) for l in layers]
    patch.approx_kernel(hw, layers[1], 4, pos[1][:4])          # JIT warm-up
    t0 = time.perf_counter()
    total, accesses = 0.0, 0
    for l, p in zip(layers, pos):
        k = patch.approx_kernel(hw, l, BATCH, p)
        total += k.seconds + sum(x.seconds for x in patch.transposes(hw, l, BATCH, "fp32"))
        accesses += sum(v["accesses"] for v in k.details["traffic"].values())
    dt = time.perf_counter() - t0
    print(f"{len(layers)} layers, {accesses / 1e6:.2f} M modeled L2 accesses: {dt:.2f} s "
          f"(target <= {TARGET_S} s); simulated GPU time {total * 1e3:.2f} ms")
    return 0 if dt <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
