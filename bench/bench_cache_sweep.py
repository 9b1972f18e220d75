"""Cost of a sweep over CPU cache geometries: exact LRU per geometry vs one reuse profile.

    python bench/bench_cache_sweep.py [--geometries 20]

(A script's directory, not the working directory, leads sys.path: from a second checkout whose
Python has prunesim installed from another one, run it with PYTHONPATH=. to time this checkout.)

The sparse products are the AGBP and WGC SpMMs of four ResNet-50 ImageNet layers under DBTD
(p = 0.99) on synthetic dO (8 recorded samples, batch 64), on the Xeon E5-2680 v4 with its L1, L2
and L3 sizes and ways varied (20 geometries). Each model is timed once on one geometry and once on
all of them, in this one process after a warm-up (Numba's JIT not in the measurement), so the
ratios are comparable on a shared machine. Also printed: the largest difference in predicted
seconds between the two models over all geometries.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np

from sim.engines.cpu import reuse as rs
from sim.engines.cpu.spec import cpu_spec
from sim.engines.cpu.spmm import SpmmJob, csr_of_mask, simulate_spmm
from sim.hwconfig import load_hwconfig
from sim.methods import apply_method, parse_method, stream_key
from sim.methods.synthetic import synthetic_dO
from sim.workload import load_workload

LAYERS = ("res2a_branch2b", "res3a_branch2b", "res4a_branch2b", "res5a_branch2b")


def products() -> list[SpmmJob]:
    wl = load_workload("resnet50-imagenet")
    names = {l.name for l in wl.layers}
    layers = [l for l in wl.convs if l.name in LAYERS] if names & set(LAYERS) else wl.convs[2:12:3]
    grads = synthetic_dO(wl, 8, 64)
    spec = parse_method("dbtd:p=0.99")
    jobs = []
    for l in layers[:4]:
        mr = apply_method(spec, l, grads[l.name], key=stream_key(0, l.index, 0), batch=64)
        pq, crs = l.p * l.q, l.c_in // l.groups * l.r * l.s
        mask = np.zeros((8 * l.c_out, pq), bool)
        r = np.repeat(np.arange(8 * l.c_out), np.diff(mr.csr.indptr))
        mask[r, mr.csr.indices] = True
        ip, ix = csr_of_mask(mask)
        jobs.append(SpmmJob(ip, ix, l.c_out, pq, crs, 8, 8.0))                      # WGC
        mt = mask.reshape(8, l.c_out, pq).transpose(0, 2, 1).reshape(8 * pq, l.c_out)
        ip, ix = csr_of_mask(mt)
        jobs.append(SpmmJob(ip, ix, pq, l.c_out, crs, 8, 8.0))                      # AGBP
    return jobs


def geometries(base, n: int):
    out = []
    for l1 in ((16 << 10, 4), (32 << 10, 8), (48 << 10, 12), (64 << 10, 8)):
        for l2 in ((128 << 10, 8), (256 << 10, 8), (512 << 10, 8), (1 << 20, 16), (2 << 20, 16)):
            l3 = (base.l3[0] // (1 + len(out) % 3), base.l3[1])
            out.append(dataclasses.replace(base, l1=l1 + base.l1[2:], l2=l2 + base.l2[2:],
                                           l3=l3 + base.l3[2:]))
    return out[:n]


def run(model: str, cpus, jobs) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    secs = [sum(simulate_spmm(c, j, cache=model)[0] for j in jobs) for c in cpus]
    return time.perf_counter() - t0, secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--geometries", type=int, default=20)
    args = ap.parse_args()
    base = cpu_spec(load_hwconfig("xeon-e5-2680v4"))
    jobs = products()
    geos = geometries(base, args.geometries)
    run("exact", geos[:1], jobs[:1])
    run("profile", geos[:1], jobs[:1])            # JIT warm-up
    rs.clear_profiles()
    e1, _ = run("exact", geos[:1], jobs)
    eN, se = run("exact", geos, jobs)
    rs.clear_profiles()
    p1, _ = run("profile", geos[:1], jobs)
    rs.clear_profiles()
    pN, sp = run("profile", geos, jobs)
    diff = max(abs(p / e - 1) for p, e in zip(sp, se))
    print(f"{len(jobs)} SpMMs (ResNet-50 ImageNet, DBTD p=0.99, 8 recorded samples), "
          f"{len(geos)} Xeon cache geometries")
    print(f"exact  : 1 geometry {e1:.2f} s, {len(geos)} geometries {eN:.2f} s, ratio {eN / e1:.1f}x")
    print(f"profile: 1 geometry {p1:.2f} s, {len(geos)} geometries {pN:.2f} s, ratio {pN / p1:.2f}x "
          f"(target <= 1.5x); {len(geos)} geometries vs exact: {eN / pN:.1f}x faster")
    print(f"largest |profile / exact - 1| of predicted seconds over the geometries: {diff:.3f}")
    print("per geometry (L1, L2, L3 KiB): profile / exact - 1 = " + ", ".join(
        f"{g.l1[0] >> 10}/{g.l2[0] >> 10}/{g.l3[0] >> 10}: {p / e - 1:+.3f}"
        for g, p, e in zip(geos, sp, se)))
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"profiles built {rs.cache_stats()['built']}, reused {rs.cache_stats()['reused']}; "
          f"load average at the end {load}")


if __name__ == "__main__":
    main()
