"""End-to-end replay throughput and peak memory, measured in child processes.

    python bench/bench_replay.py speed  [--batch 64] [--workdir DIR] [--cache exact|profile]
                                        [--sampling adaptive|fixed]
        ResNet-50 ImageNet synthetic trace (batch 64), replayed on every bundled engine hwconfig
        (A100, H100, V100, TITAN Xp, Xeon, Pi 4B) for every trace method. Target: <= 12 s (docs/explanation/performance.md).
    python bench/bench_replay.py memory [--batch 144] [--workdir DIR]
        a synthetic trace larger than a quarter of this machine's RAM (>= 6 GB) replayed on A100
        with DBTD and SDGP. Target: peak RSS < 2 GB.

The synthetic trace is written once (its own wall time and peak RSS are reported too) and reused.
A small warm-up replay runs first in the same child so Numba's JIT (cached on disk after the
first run anyway) is not in the timed part.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ["a100-sxm4-40gb", "h100-sxm5-80gb", "v100-sxm2", "titan-xp", "xeon-e5-2680v4", "rpi4b"]
METHODS = ["dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4", "sdgp-resmag:nm=2:4", "approx:schedule=1",
           "zero:schedule=1", "topk:keep=0.01"]

CHILD = r"""
import json, resource, sys, time
from sim.engines.cpu.spmm import CACHE_MODEL
from sim.replay import Totals, parse_methods
from sim.traces.format import open_trace
try:   # the driver (#19); a checkout from before it runs the same bench (before/after in one run)
    from sim.driver import engines_for, run_trace
except ImportError:
    from sim.replay import engines_for, replay_layers as run_trace
trace_dir, warm_dir, hws, methods = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(";")
CACHE_MODEL.set(sys.argv[5] if len(sys.argv) > 5 else "exact")
if len(sys.argv) > 6 and sys.argv[6] != "-":   # the CPU SpMM sampler (a checkout from before it: -)
    from sim.engines.cpu.spmm import SAMPLING
    SAMPLING.set(sys.argv[6])
engines = engines_for([h for h in hws if h])
ms = parse_methods(methods)
if warm_dir != "-":
    for _ in run_trace(open_trace(warm_dir), ms, engines):
        pass
t0, c0 = time.perf_counter(), time.process_time()
tr = open_trace(trace_dir)
tot = Totals(tr, ms, engines)
layers = 0
for row in run_trace(tr, ms, engines):
    tot.add(row)
    layers += 1
wall = time.perf_counter() - t0
cpu = time.process_time() - c0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import sim
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "layers": layers, "sim": sim.__file__,
                  "records": len(tot.records())}))
"""


def _root() -> str:
    # PRUNESIM_BENCH_ROOT: time another checkout with this bench (before/after a change). The
    # children run in that checkout: `python -c` and `-m` put the working directory first on
    # sys.path, so started from this checkout they would import its `sim`, not the other one's
    return str(Path(os.environ.get("PRUNESIM_BENCH_ROOT", str(ROOT))).resolve())


def _child(args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=_root())
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, check=True, cwd=_root(),
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _synth(workload: str, batch: int, out: Path, subsample: int | None = None) -> dict:
    if (out / "manifest.json").exists():
        return {"reused": str(out)}
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=_root())
    cmd = [sys.executable, "-m", "sim", "trace", "synth", "--workload", workload, "--batch",
           str(batch), "--out", str(out), "--force"]
    if subsample:
        cmd += ["--subsample", str(subsample)]
    r = subprocess.run(["/usr/bin/env", "time", "-f", "%M"] + cmd, env=env, check=True,
                       cwd=_root(), capture_output=True, text=True)
    rss_kb = int(r.stderr.strip().splitlines()[-1]) if r.stderr.strip() else 0
    size = sum(f.stat().st_size for f in out.rglob("*.npy"))
    return {"wall_s": time.perf_counter() - t0, "peak_rss_mb": rss_kb / 1024, "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=("speed", "memory"))
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--subsample", type=int, default=None,
                    help="record only S samples per batch (speed: default 8, as captures do)")
    ap.add_argument("--workdir", default=None, help="where synthetic traces go (default: a temp dir)")
    ap.add_argument("--cache", choices=("exact", "profile"), default="exact",
                    help="CPU cache model (speed only; default exact, as replay)")
    ap.add_argument("--sampling", choices=("adaptive", "fixed"), default=None,
                    help="CPU SpMM sampler (speed only; default: the checkout's own default)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="prunesim-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    warm = work / "warm-resnet20"
    _synth("resnet20", 4, warm)
    hws = [h for h in ENGINES if (ROOT / "hwconfigs" / f"{h}.yaml").exists()]
    if args.what == "speed":
        batch = args.batch or 64
        sub = args.subsample or 8
        tr = work / f"resnet50-imagenet-b{batch}-s{sub}"
        syn = _synth("resnet50-imagenet", batch, tr, sub)
        res = _child([str(tr), str(warm), ",".join(hws), ";".join(METHODS), args.cache,
                      args.sampling or "-"])
        print(f"synthetic trace: {syn}")
        print(f"replay ResNet-50 ImageNet batch {batch} (recorded {sub}/batch), cache model "
              f"{args.cache}, sampling {args.sampling or 'default'}, {len(hws)} hwconfigs "
              f"x {len(METHODS)} methods: {res['wall_s']:.1f} s wall, "
              f"{res.get('cpu_s', float('nan')):.1f} s CPU (all threads), peak RSS "
              f"{res['peak_rss_mb']:.0f} MB, {res['layers']} layers, {res['records']} records "
              f"(target <= 12 s; sim from {Path(res['sim']).parent.parent})")
    else:
        batch = args.batch or 144
        tr = work / f"resnet50-imagenet-b{batch}-full"
        syn = _synth("resnet50-imagenet", batch, tr)
        res = _child([str(tr), str(warm), "a100-sxm4-40gb", "dense;dbtd:p=0.99;sdgp-mag:nm=2:4"])
        print(f"synthetic trace: {syn['bytes'] / 1e9 if 'bytes' in syn else '?'} GB, {syn}")
        print(f"replay on a100 (dense, dbtd, sdgp): {res['wall_s']:.1f} s wall, peak RSS "
              f"{res['peak_rss_mb']:.0f} MB (target < 2048 MB)")


if __name__ == "__main__":
    main()
