"""Pruning-kernel throughput next to a plain NumPy copy of the same tensor, in one run.

    python bench/bench_methods.py [--shape 64,256,28,28] [--repeat 3]

Reports GB/s of input processed (input bytes / wall time) and the ratio to the copy, single-threaded
kernels and the prange DBTD. JIT compilation happens in a warm-up call that is not timed.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numba
import numpy as np

from sim.methods import approx as ap
from sim.methods import dbtd as db
from sim.methods import nm as nmm


def best_time(fn, repeat: int) -> float:
    fn()  # warm-up: JIT (cached on disk after the first run) and page faults
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap_ = argparse.ArgumentParser(description=__doc__)
    ap_.add_argument("--shape", default="64,256,28,28", help="N,C,H,W of the dO tensor")
    ap_.add_argument("--repeat", type=int, default=3)
    args = ap_.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    rng = np.random.default_rng(0)
    g = (rng.standard_t(3, size=shape) * 1e-4).astype(np.float32)  # heavy-tailed, like real dO
    gb = g.nbytes / 1e9
    cases = [
        ("numpy copy", lambda: g.copy()),
        ("dbtd p=0.99 (1 thread)", lambda: db.dbtd(g, 0.99, 1, build_csr=False)),
        (f"dbtd p=0.99 (prange, {numba.get_num_threads()} threads)",
         lambda: db.dbtd(g, 0.99, 1, build_csr=False, parallel=True)),
        ("dbtd p=0.99 + CSR build", lambda: db.dbtd(g, 0.99, 1, build_csr=True)),
        ("topk keep=0.01", lambda: db.topk(g, 0.01, build_csr=False)),
        ("sdgp-random 2:4", lambda: nmm.sdgp(g, "2:4", "random", 1)),
        ("sdgp-mag 2:4", lambda: nmm.sdgp(g, "2:4", "mag", 1)),
        ("sdgp-mag 2:4, compressed only", lambda: nmm.sdgp(g, "2:4", "mag", 1, dense_output=False)),
        ("sdgp-random 2:4, compressed only",
         lambda: nmm.sdgp(g, "2:4", "random", 1, dense_output=False)),
        ("sdgp-resmag 2:4, compressed only",
         lambda: nmm.sdgp(g, "2:4", "resmag", 1, dense_output=False)),
        ("sdgp-resmag 2:4", lambda: nmm.sdgp(g, "2:4", "resmag", 1)),
        ("sdgp-mag 4:32", lambda: nmm.sdgp(g, "4:32", "mag", 1)),
        ("approx (argmax+sum per n,c)", lambda: ap.approx(g, 1)),
    ]
    print(f"tensor {shape} float32, {gb * 1e3:.0f} MB; numpy {np.__version__}, numba "
          f"{numba.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    copy_bw = None
    print(f"{'kernel':42s} {'time (ms)':>10s} {'GB/s':>8s} {'x copy':>7s}")
    for name, fn in cases:
        t = best_time(fn, args.repeat)
        bw = gb / t
        copy_bw = copy_bw or bw
        print(f"{name:42s} {t * 1e3:10.1f} {bw:8.2f} {bw / copy_bw:7.2f}")


if __name__ == "__main__":
    main()
