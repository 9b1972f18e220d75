#!/usr/bin/env python3
"""Benchmark: ResNet-50 (CIFAR) AGBP + WGC of every conv at batch 128 on the CPU engine.

Target: at most 60 s on the 2-core development machine, Xeon config, 1 thread, dense and
DBTD p = 0.99 on a synthetic 2-sample trace of the batch (generation and pruning included).

    PYTHONPATH=. python bench/bench_cpu.py [--hw xeon-e5-2680v4] [--workload resnet50-cifar]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.engines.base import PhaseJob  # noqa: E402
from sim.engines.cpu.engine import CpuEngine  # noqa: E402
from sim.hwconfig import load_hwconfig  # noqa: E402
from sim.methods import apply_method, parse_method, stream_key  # noqa: E402
from sim.methods.synthetic import synthetic_dO  # noqa: E402
from sim.workload import load_workload  # noqa: E402

TARGET_S = 60.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hw", default="xeon-e5-2680v4")
    ap.add_argument("--workload", default="resnet50-cifar")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    hw = load_hwconfig(args.hw)
    wl = load_workload(args.workload)
    engine = CpuEngine(hw)
    run = lambda l, ph, mr: engine.simulate(PhaseJob(l, ph, None, args.batch, mr,  # noqa: E731
                                                     threads=args.threads))
    # compile (or load cached) Numba kernels outside the timed region
    engine.simulate(PhaseJob(wl.convs[1], "agbp", None, 2))
    t0 = time.perf_counter()
    grads = synthetic_dO(wl, 2, args.batch)
    spec = parse_method("dbtd:p=0.99")
    dense = sparse = 0.0
    for l in wl.convs:
        mr = apply_method(spec, l, grads[l.name], key=stream_key(0, l.index, 0), batch=args.batch)
        for ph in ("agbp", "wgc"):
            dense += sum(k.seconds for k in run(l, ph, None))
            sparse += sum(k.seconds for k in run(l, ph, mr))
    wall = time.perf_counter() - t0
    print(f"{wl.name} batch {args.batch} on {hw.name} ({args.threads} thread(s)), {len(wl.convs)} convs, "
          f"AGBP+WGC dense and dbtd: simulated in {wall:.1f} s (target {TARGET_S:.0f} s) "
          f"-> modeled dense {dense:.2f} s, sparse {sparse:.2f} s")
    return 0 if wall <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
