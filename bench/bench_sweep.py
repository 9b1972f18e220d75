"""A 1,000-point hardware sweep, end to end, into a fresh result store.

    python bench/bench_sweep.py [--jobs 2] [--trace traces/sample-resnet20-mnist5k]

100 A100 variants (a grid of 10 SM counts x 10 HBM bandwidths, each with the 2:4 sparse tensor
cores) x 10 methods on the bundled ResNet-20 trace = 1,000 points, with `prunesim sweep`'s local
process pool. Target: under 10 minutes on 2 cores. Reports wall time, points per second and the
store size; a second run over the same store measures the resume path (every point skipped).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["dense", "dbtd:p=0.9", "dbtd:p=0.99", "dbtd:p=0.99,sigma=unbiased", "topk:keep=0.05",
           "sdgp-random:nm=2:4", "sdgp-mag:nm=2:4", "sdgp-resmag:nm=2:4", "approx:schedule=1",
           "zero:schedule=1"]
GRID = """params:
  sm_count: [54, 72, 90, 108, 126, 144, 162, 180, 198, 216]
  hbm_bandwidth: ["800 GB/s", "1200 GB/s", "1555 GB/s", "2039 GB/s", "2500 GB/s", "3000 GB/s",
                  "3350 GB/s", "4000 GB/s", "4800 GB/s", "6000 GB/s"]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--trace", default=str(ROOT / "traces" / "sample-resnet20-mnist5k"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prunesim-sweep-"))
    grid = work / "grid.yaml"
    grid.write_text(GRID)
    db = work / "sweep.sqlite"
    cmd = [sys.executable, "-m", "sim", "sweep", "--hw", "a100-sxm4-40gb", "--trace", a.trace,
           "--grid", str(grid), "--db", str(db), "--jobs", str(a.jobs)]
    for m in METHODS:
        cmd += ["--method", m]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PRUNESIM_PROGRESS="0")
    # warm the JIT caches of every kernel on a 1-point run first (cached on disk afterwards)
    subprocess.run(cmd[:8] + ["--db", str(work / "warm.sqlite"), "--jobs", "1", "--method", "dense",
                              "--method", "dbtd:p=0.99", "--method", "sdgp-mag:nm=2:4"],
                   env=env, check=True, capture_output=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
        raise SystemExit(r.returncode)
    import sqlite3
    n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM records WHERE kind='network'").fetchone()[0]
    t1 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    resume = time.perf_counter() - t1
    print(f"{n} points ({len(METHODS)} methods x 100 A100 variants) on {Path(a.trace).name}, "
          f"--jobs {a.jobs}: {wall:.1f} s wall ({n / wall:.1f} points/s; target < 600 s); store "
          f"{db.stat().st_size / 1e6:.1f} MB; resume over the full store: {resume:.1f} s")


if __name__ == "__main__":
    main()
