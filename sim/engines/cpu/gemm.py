"""The CPU family's dense GEMM: a Goto/BLIS-style model of one fp32 BLAS call.

A register micro-kernel (mr x nr tile; FMA units, FMA latency, load ports and issue width bound
each k step), edge tiles padded, packing of A and B blocks, C tile traffic, operands served by the
cache level their footprint fits. No per-network factor: the only library constant is
gemm_library_efficiency, 1.0 on datasheet configs and measured by `prunesim calibrate` on a host.
"""
from __future__ import annotations

import math

from sim.engines.cpu.spec import F32, Cpu


def kstep_cycles(cpu: Cpu) -> tuple[float, dict[str, float]]:
    """Cycles of one k step of the mr x nr micro-kernel, and each bound (the largest wins)."""
    nvec = max(1, math.ceil(cpu.nr / cpu.simd))
    fmas = cpu.mr * nvec
    a_loads = cpu.mr if cpu.isa == "x86" else math.ceil(cpu.mr / cpu.simd)
    loads = nvec + a_loads
    bounds = {"fma": fmas / cpu.fma_units, "load": loads / cpu.ld_ports,
              "issue": (fmas + loads + 1) / cpu.issue,
              # each accumulator takes one FMA per k step: steps are at least one latency apart
              "fma-latency": cpu.fma_lat}
    return max(bounds.values()), bounds


def gemm_model(cpu: Cpu, m: int, n: int, k: int, *, a_bytes_src: float | None = None,
               b_bytes_src: float | None = None) -> tuple[float, dict[str, float], dict[str, int], dict]:
    """Cycles of C[m,n] (+)= A[m,k] B[k,n] in fp32 on `cpu.threads` threads, BLIS loop order."""
    mr, nr, mc, kc, nc = cpu.mr, cpu.nr, cpu.mc, cpu.kc, cpu.nc
    ck, bounds = kstep_cycles(cpu)
    # the A micro-panel streams from L2 (mr floats per k step): L2 bandwidth can bound the step
    ck = max(ck, mr * F32 / cpu.l2[3])
    mt, nt = math.ceil(m / mr), math.ceil(n / nr)
    kernel = mt * nt * k * ck
    # C tile: load and store mr x nr once per kc block, from the level C lives in
    c_bytes = m * n * F32
    c_lvl, c_bw = cpu.level_of(c_bytes)
    c_updates = mt * nt * math.ceil(k / kc)
    tile_vec = mr * max(1, math.ceil(nr / cpu.simd))
    c_traffic = c_updates * mr * nr * F32 * 2
    c_cycles = max(c_updates * 2 * tile_vec / min(cpu.ld_ports, cpu.st_ports), c_traffic / c_bw)
    # packing: B (k x n) once; A (m x k) once per nc block of columns; vector copies
    a_src = float(m * k * F32 if a_bytes_src is None else a_bytes_src)
    b_src = float(k * n * F32 if b_bytes_src is None else b_bytes_src)
    a_lvl, a_bw = cpu.level_of(a_src)
    b_lvl, b_bw = cpu.level_of(b_src)
    a_packs = math.ceil(n / nc)
    pack_a = a_packs * max(m * k / cpu.simd * 2 / cpu.issue, m * k * F32 / a_bw)
    pack_b = max(k * n / cpu.simd * 2 / cpu.issue, k * n * F32 / b_bw)
    # B panels (kc x nc, packed) are re-read from L3 (or DRAM) once per mc block of rows
    b_rereads = math.ceil(m / mc)
    b_panel_lvl, b_panel_bw = cpu.level_of(min(k, kc) * min(n, nc) * F32)
    b_stream = b_rereads * k * n * F32 / b_panel_bw
    kernel_t = max(kernel, b_stream)
    par = min(cpu.threads, mt * nt)
    # threads split the jr/ir loops; packing is shared work split the same way
    cycles = (kernel_t + c_cycles + pack_a + pack_b) / par / cpu.gemm_eff
    dram = sum(b for lvl, b in ((a_lvl, a_src * a_packs), (b_lvl, b_src), (c_lvl, c_traffic))
               if lvl == "dram")
    cycles = max(cycles, dram / cpu.dram_bw)
    peak = 2 * cpu.simd * cpu.fma_units
    flops = 2 * m * n * k
    details = {"micro_kernel": f"{mr}x{nr}", "kstep_cycles": ck, "kstep_bounds": bounds,
               "tile_utilization": (m * n) / (mt * mr * nt * nr),
               "efficiency": flops / (cycles * peak * cpu.threads) if cycles else 0.0,
               "c_level": c_lvl, "a_level": a_lvl, "b_level": b_lvl}
    bd = {"micro-kernel": kernel_t, "c-update": c_cycles, "pack-a": pack_a, "pack-b": pack_b}
    by = {"l2": int(mt * nt * k * mr * F32), b_panel_lvl: int(b_rereads * k * n * F32)}
    by[c_lvl] = by.get(c_lvl, 0) + int(c_traffic)
    if dram:
        by["dram"] = by.get("dram", 0) + int(dram)
    return cycles, bd, by, details
