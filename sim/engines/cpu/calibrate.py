"""`prunesim calibrate`: measure this machine into a CPU hwconfig, and check the engine against it.

    prunesim calibrate --out hwconfigs/host.yaml [--quick]
    prunesim calibrate --check --hw hwconfigs/host.yaml [--quick] [--json]

Calibration measures the clock (/proc/cpuinfo), FMA throughput and latency (Numba loops), cache
geometry (sysfs) and latencies (pointer chasing), read bandwidth per level (Numba streaming sums),
and the efficiency of NumPy's BLAS (one thread) and SciPy's CSR x dense against the engine's own
prediction, on the per-sample GEMM shapes of ResNet-20's layers. `--check` then measures the same
two libraries on ResNet-18 (CIFAR) layer shapes, a different set, at several densities, and
reports the engine's error on them. Every calibrated field's source says where it came from;
fields no measurement here can reach say "[U] not measured".
"""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numba import njit

from sim.errors import ConfigError
from sim.hwconfig import SEAL, calibrated_entry, calibration_seal


# ---- measurement kernels (each small, typed, with a NumPy twin used in the tests) ---------------


@njit(cache=True, fastmath=True)
def fma_throughput_kernel(reps, a, b):
    """reps x 64 independent fp32 FMAs on a register-resident 64-lane accumulator; returns a sum."""
    acc = np.zeros(64, np.float32)
    for j in range(64):
        acc[j] = np.float32(j) * np.float32(1e-3)
    for _ in range(reps):
        for j in range(64):
            acc[j] = acc[j] * a + b
    return acc.sum()


def fma_throughput_ref(reps, a, b):
    acc = np.arange(64, dtype=np.float32) * np.float32(1e-3)
    for _ in range(reps):
        acc = acc * np.float32(a) + np.float32(b)
    return float(acc.sum())


@njit(cache=True, fastmath=True)
def fma_chain_kernel(reps, a, b):
    """One dependent FMA chain: each step waits for the previous (measures the latency)."""
    x = np.float32(0.5)
    for _ in range(reps):
        x = x * a + b
    return x


@njit(cache=True)
def chase_kernel(nxt, steps):
    """Follow a pointer cycle `steps` times; returns the final index (keeps the loads live)."""
    p = 0
    for _ in range(steps):
        p = nxt[p]
    return p


def chase_ref(nxt, steps):
    p = 0
    for _ in range(steps):
        p = int(nxt[p])
    return p


@njit(cache=True, fastmath=True)
def read_kernel(x, reps):
    """Sum an array `reps` times (streaming reads at the bandwidth of the level it fits)."""
    s = np.float32(0.0)
    for _ in range(reps):
        for i in range(x.size):
            s += x[i]
    return s


def _pointer_cycle(n_bytes: int, line: int, seed: int = 0) -> np.ndarray:
    """A random single cycle through one int64 slot per cache line of an n_bytes array."""
    per_line = line // 8
    n_lines = max(2, n_bytes // line)
    order = np.random.default_rng(seed).permutation(n_lines)
    nxt = np.zeros(n_lines * per_line, np.int64)
    nxt[order * per_line] = np.roll(order, -1) * per_line
    return nxt


def _best_time(fn, reps: int) -> float:
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ---- host facts --------------------------------------------------------------------------------


def _cpuinfo() -> dict[str, str]:
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


def _sysfs_caches() -> dict[int, dict]:
    out = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            typ = (d / "type").read_text().strip()
            if typ == "Instruction":
                continue
            lvl = int((d / "level").read_text())
            size = (d / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024 ** 2}.get(size[-1], 1)
            out[lvl] = {"size": int(size.rstrip("KM")) * mult,
                        "ways": int((d / "ways_of_associativity").read_text()),
                        "line": int((d / "coherency_line_size").read_text())}
            shared = (d / "shared_cpu_list").read_text().strip()
            out[lvl]["shared"] = shared
        except (OSError, ValueError):
            continue
    return out


@contextmanager
def one_thread():
    """Limit NumPy's BLAS to one thread (threadpoolctl if present; env vars are too late here)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the env vars only help if set before NumPy loads
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        yield "environment variables (effective only if set before NumPy was imported)"
        return
    with threadpool_limits(limits=1):
        yield "threadpoolctl"


# ---- shapes ------------------------------------------------------------------------------------


def _per_sample_shapes(workload: str, limit: int | None, sparse: bool) -> list[tuple[str, int, int, int]]:
    from sim.workload import load_workload
    seen, out = set(), []
    for l in load_workload(workload).convs:
        crs, pq = l.c_in * l.r * l.s, l.p * l.q
        # AGBP: Caffe's dense W^T x dO_n (CRS x PQ, K = C_out); Ye's sparse dO_n^T (PQ x C_out) x W
        agbp = (pq, crs, l.c_out) if sparse else (crs, pq, l.c_out)
        for ph, (m, n, k) in (("wgc", (l.c_out, crs, pq)), ("agbp", agbp)):
            if (m, n, k) not in seen:
                seen.add((m, n, k))
                out.append((f"{l.name}/{ph}", m, n, k))
    return out[:limit] if limit else out


def caffe_shapes(workload: str, limit: int | None = None) -> list[tuple[str, int, int, int]]:
    """Per-sample Caffe GEMM shapes (M, N, K) of a workload's convs, deduplicated: WGC and AGBP."""
    return _per_sample_shapes(workload, limit, sparse=False)


def sparse_shapes(workload: str, limit: int | None = None) -> list[tuple[str, int, int, int]]:
    """Ye's per-sample CSR products (M, N, K): WGC dO_n (C_out x PQ) x col^T (PQ x CRS) and AGBP
    dO_n^T (PQ x C_out) x W (C_out x CRS)."""
    return _per_sample_shapes(workload, limit, sparse=True)


# ---- measuring the libraries ---------------------------------------------------------------------


def measure_dense(m: int, n: int, k: int, reps: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    np.dot(a, b, out=c)
    return _best_time(lambda: np.dot(a, b, out=c), reps)


def measure_sparse(m: int, n: int, k: int, density: float, reps: int, seed: int = 0) -> float:
    import scipy.sparse as sp

    from sim.engines.cpu.spmm import random_csr
    indptr, indices = random_csr(m, k, density, seed)
    data = np.random.default_rng(seed).standard_normal(indices.size).astype(np.float32)
    a = sp.csr_matrix((data, indices, indptr), shape=(m, k))
    b = np.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    a @ b
    return _best_time(lambda: a @ b, reps)


def predict_dense(hw, m, n, k) -> float:
    from sim.engines.cpu.gemm import gemm_model
    from sim.engines.cpu.spec import cpu_spec
    cpu = cpu_spec(hw, 1)
    return gemm_model(cpu, m, n, k)[0] / cpu.clock


def predict_sparse(hw, m, n, k, density, seed=0) -> float:
    from sim.engines.cpu.spec import cpu_spec
    from sim.engines.cpu.spmm import SpmmJob, random_csr, simulate_spmm
    cpu = cpu_spec(hw, 1)
    indptr, indices = random_csr(m, k, density, seed)
    return simulate_spmm(cpu, SpmmJob(indptr, indices, m, k, n, 1, 1.0), seed=seed)[0] / cpu.clock


# ---- writing the hwconfig ------------------------------------------------------------------------


_U = "[U] not measured by calibrate; typical of current "


def _host_label() -> tuple[str, str, str, dict]:
    """(host name, CPU model, the source prefix of every calibrated field, /proc/cpuinfo)."""
    host = platform.node() or "this host"
    info = _cpuinfo()
    model = info.get("model name", platform.processor() or "unknown CPU")
    return host, model, f"calibrated on {host} ({model}) by prunesim calibrate", info


def _core_params(p: dict, info: dict, cal: str, out: str, quick: bool) -> tuple[float, int]:
    """ISA, cores, clock, SIMD, FMA throughput and latency, and the core fields no measurement
    here reaches; returns (clock Hz, fp32 SIMD lanes)."""
    flags = set(info.get("flags", info.get("Features", "")).split())
    x86 = platform.machine() in ("x86_64", "AMD64", "i686")
    mhz = float(info.get("cpu MHz", "0") or 0)
    if mhz <= 0:
        raise ConfigError(out, "clock", "cannot read the clock from /proc/cpuinfo")
    clock = mhz * 1e6
    p["isa"] = ("x86" if x86 else "arm", f"{cal}: platform.machine() = {platform.machine()}")
    p["cores"] = (os.cpu_count() or 1, f"{cal}: os.cpu_count()")
    p["clock"] = (f"{mhz:.1f} MHz", f"{cal}: /proc/cpuinfo 'cpu MHz' (nominal; turbo not seen)")
    simd = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    p["simd_width"] = (simd, f"{cal}: widest fp32 SIMD in the CPU flags "
                       f"({'avx512f' if simd == 16 else 'avx2' if simd == 8 else 'NEON/SSE'})")
    p["vector_registers"] = (32 if (simd == 16 or not x86) else 16, f"{cal}: ISA register count for "
                             "that SIMD extension")
    reps = 200_000 if quick else 2_000_000
    fma_throughput_kernel(10, np.float32(0.999), np.float32(1e-4))
    t = _best_time(lambda: fma_throughput_kernel(reps, np.float32(0.999), np.float32(1e-4)), 3)
    flop_per_cycle = 2 * 64 * reps / t / clock
    units = max(1, round(flop_per_cycle / (2 * simd)))
    p["fma_units"] = (units, f"{cal}: Numba 64-lane FMA loop reached {flop_per_cycle:.1f} fp32 "
                      f"flop/cycle = {units} x {simd}-lane FMA")
    fma_chain_kernel(10, np.float32(0.999), np.float32(1e-4))
    t = _best_time(lambda: fma_chain_kernel(reps, np.float32(0.999), np.float32(1e-4)), 3)
    p["fma_latency"] = (f"{max(1, round(t * clock / reps))} cycles",
                        f"{cal}: dependent FMA chain, {t * clock / reps:.2f} cycles per step")
    p["issue_width"] = (4, _U + "cores (4-6 wide)")
    p["load_ports"] = (2, _U + "x86 and ARM big cores")
    p["store_ports"] = (1, _U + "cores")
    p["branch_mispredict_penalty"] = ("15 cycles", _U + "cores (13-20 cycles)")
    return clock, simd


def _chase_ns(nbytes: int, line: int, quick: bool) -> float:
    """Nanoseconds per dependent load over an nbytes pointer cycle (one slot per line)."""
    nxt = _pointer_cycle(nbytes, line)
    steps = 200_000 if quick else 2_000_000
    chase_kernel(nxt, nbytes // line)
    t = _best_time(lambda: chase_kernel(nxt, steps), 3)
    return t / steps * 1e9


def _read_bw(nbytes: int, quick: bool) -> float:
    """Bytes per second of one thread's streaming read over nbytes."""
    x = np.ones(nbytes // 4, np.float32)
    r = max(1, int((2e7 if quick else 2e8) // nbytes))
    read_kernel(x, 1)
    t = _best_time(lambda: read_kernel(x, r), 3)
    return nbytes * r / t


def _memory_params(p: dict, cal: str, out: str, quick: bool, clock: float, log) -> None:
    """Cache geometry (sysfs), latency (pointer chase) and bandwidth per level, then DRAM."""
    caches = _sysfs_caches()
    if 1 not in caches or 2 not in caches:
        raise ConfigError(out, "l1_size", "cannot read cache geometry from sysfs")
    line = caches[1]["line"]
    p["line_size"] = (f"{line} B", f"{cal}: sysfs coherency_line_size")
    for lvl, key in {1: "l1", 2: "l2", 3: "l3"}.items():
        if lvl not in caches:
            continue
        c = caches[lvl]
        frac = 0.5 if lvl < 3 else 0.25
        lat = _chase_ns(int(c["size"] * frac), line, quick)
        bw = _read_bw(int(c["size"] * frac), quick)
        p[f"{key}_size"] = (f"{c['size'] // 1024} KiB", f"{cal}: sysfs size (cpu0 index, shared with "
                            f"cpus {c['shared']})")
        p[f"{key}_ways"] = (c["ways"], f"{cal}: sysfs ways_of_associativity")
        p[f"{key}_latency"] = (f"{max(1, round(lat * clock / 1e9))} cycles",
                               f"{cal}: pointer chase over {frac:g} x the {key.upper()} size, {lat:.2f} ns")
        p[f"{key}_bandwidth"] = (f"{bw / clock:.2f} B/clk", f"{cal}: one-thread streaming read over "
                                 f"{frac:g} x the {key.upper()} size, {bw / 1e9:.1f} GB/s")
        log(f"  {key}: {c['size'] // 1024} KiB {c['ways']}-way, {lat:.2f} ns, {bw / 1e9:.1f} GB/s")
    shared2 = caches[2]["shared"]
    p["l2_shared_by"] = (1 if shared2 in ("0", str(0)) or "," not in shared2 and "-" not in shared2
                         else 2, f"{cal}: sysfs shared_cpu_list of L2 = {shared2}")
    if 3 not in caches:
        p["l3_size"] = ("0 B", f"{cal}: no L3 in sysfs")
        p["l3_ways"] = (1, "unused: no L3")
        p["l3_latency"] = ("1 cycle", "unused: no L3")
        p["l3_bandwidth"] = ("1 B/clk", "unused: no L3")
    big = max(256 << 20, 4 * caches.get(3, caches[2])["size"]) if not quick else 128 << 20
    dlat = _chase_ns(big, line, quick)
    dbw = _read_bw(big, quick)
    p["dram_latency"] = (f"{dlat:.1f} ns", f"{cal}: pointer chase over {big >> 20} MiB")
    p["dram_bandwidth"] = (f"{dbw / 1e9:.2f} GB/s", f"{cal}: one-thread streaming read over "
                           f"{big >> 20} MiB (the socket's peak is higher)")
    p["mlp"] = (max(1, round(dbw * dlat * 1e-9 / line)), f"{cal}: Little's law, bandwidth x latency "
                "/ line of the two measurements above [D]")


def _library_params(p: dict, simd: int) -> None:
    """Prefetcher and BLAS blocking (not measured), and placeholders the fits below replace."""
    p["prefetch_streams"] = (16, _U + "L2 stream prefetchers (16-32 streams)")
    p["prefetch_distance"] = (16, _U + "L2 stream prefetchers")
    p["prefetch_degree"] = (2, _U + "L2 stream prefetchers")
    p["gemm_mr"] = (6, "BLIS config/haswell sgemm MR = 6 (flame/blis); the host BLAS's own kernel "
                    "is not inspected: the difference goes into gemm_library_efficiency")
    p["gemm_nr"] = (2 * simd, "[D] two SIMD vectors, as BLIS haswell (NR = 16 for 8 lanes)")
    p["gemm_mc"] = (144, "BLIS config/haswell sgemm MC = 144")
    p["gemm_kc"] = (256, "BLIS config/haswell sgemm KC = 256")
    p["gemm_nc"] = (4080, "BLIS config/haswell sgemm NC = 4080")
    p["gemm_library_efficiency"] = (1.0, "placeholder, replaced below")
    p["spmm_style"] = ("axpy", "SciPy's csr_matvecs: per nonzero, y[i, :] += a * x[j, :] "
                       "(scipy/sparse/sparsetools/csr.h)")
    p["spmm_simd_width"] = (simd, "placeholder, replaced below")
    p["spmm_library_efficiency"] = (1.0, "placeholder, replaced below")


def _fit_libraries(path: Path, p: dict, host: str, model: str, cal: str, simd: int, quick: bool,
                   log) -> None:
    """Library efficiencies: measured / modeled on ResNet-20's shapes (check uses ResNet-18's);
    the SpMM's vector width is the one whose ratios spread least. Rewrites `path` per trial."""
    from sim.hwconfig import load_hwconfig
    with one_thread() as how:
        hw = load_hwconfig(path)
        shapes = caffe_shapes("resnet20", 6 if quick else None)
        ratios = []
        for name, m, n, k in shapes:
            meas = measure_dense(m, n, k, 3 if quick else 7)
            ratios.append(predict_dense(hw, m, n, k) / meas)
        eff = statistics.median(ratios)
        p["gemm_library_efficiency"] = (round(eff, 4), f"{cal}: median modeled/measured time of "
                                        f"NumPy's BLAS ({how}, 1 thread) over {len(shapes)} per-sample "
                                        "GEMM shapes of resnet20")
        log(f"  dense GEMM efficiency vs model: {eff:.3f} over {len(shapes)} shapes")
        sshapes = sparse_shapes("resnet20", 4 if quick else None)
        dens = (0.1, 0.3)
        meas = {(s, d): measure_sparse(s[1], s[2], s[3], d, 3 if quick else 5)
                for s in sshapes for d in dens}
        best = None
        for lanes in sorted({1, 4, 8, simd}):
            p["spmm_simd_width"] = (lanes, "trial")
            p["spmm_library_efficiency"] = (1.0, "trial")
            _write(path, host, model, p)
            hw = load_hwconfig(path)
            r = [predict_sparse(hw, s[1], s[2], s[3], d) / meas[(s, d)] for s in sshapes for d in dens]
            e = statistics.median(r)
            err = statistics.median(abs(x / e - 1) for x in r)
            log(f"  SpMM with {lanes} lanes: efficiency {e:.3f}, spread {err:.1%}")
            if best is None or err < best[2]:
                best = (lanes, e, err)
        lanes, e, err = best
        src = (f"{cal}: of 1/4/8/{simd} lanes, the one whose modeled/measured SciPy CSR x dense "
               f"times over {len(sshapes)} resnet20 shapes x densities {dens} spread least "
               f"({err:.1%})")
        p["spmm_simd_width"] = (lanes, src)
        p["spmm_library_efficiency"] = (round(e, 4), f"{cal}: median modeled/measured SciPy CSR x "
                                        f"dense time with {lanes} lanes, same shapes")


def calibrate(out: str, quick: bool = False, log=print) -> Path:
    """Measure this machine into the CPU hwconfig `out` (every field with its source)."""
    from sim.engines.cpu.params import HW_FIELDS
    from sim.hwconfig import load_hwconfig
    host, model, cal, info = _host_label()
    p: dict[str, tuple] = {}
    clock, simd = _core_params(p, info, cal, out, quick)
    _memory_params(p, cal, out, quick, clock, log)
    _library_params(p, simd)
    missing = set(HW_FIELDS) - set(p)
    assert not missing, missing
    path = Path(out)
    _write(path, host, model, p)
    _fit_libraries(path, p, host, model, cal, simd, quick, log)
    _write(path, host, model, p)
    load_hwconfig(path)
    return path


DEFAULT_OUT = "hwconfigs/host.yaml"
MARK = "measured by prunesim calibrate"   # the end of every calibrated hwconfig's description


def _write(path: Path, host: str, model: str, p: dict) -> None:
    from sim.outputs import write_atomic
    lines = ["schema: 1", f"name: {json.dumps('host-' + host)}", "kind: cpu",
             f"description: {json.dumps(f'{model}, {MARK}')}", "params:"]
    lines += [calibrated_entry(k, v, s) for k, (v, s) in p.items()]
    body = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda tmp: tmp.write_text(body + calibration_seal(body)))


def is_calibrated_hwconfig(path: Path) -> bool:
    """True for a hwconfig `prunesim calibrate` wrote and nobody edited since: a rerun may replace
    it without --force, as it replaces its own trial writes. Files written before the seal line
    existed are recognized by their name (host-*), kind (cpu) and description."""
    from sim.errors import PrunesimError
    from sim.yamlio import load_yaml_file
    try:
        if path.stat().st_size > 1 << 20:   # a calibrated file is ~6 kB
            return False
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    body, sep, last = text[:-1].rpartition("\n")
    if last.startswith(SEAL):
        return text.endswith("\n") and calibration_seal(body + sep) == last + "\n"
    try:
        doc = load_yaml_file(path, ConfigError)
    except (PrunesimError, OSError):
        return False
    return (isinstance(doc, dict) and doc.get("kind") == "cpu"
            and str(doc.get("name", "")).startswith("host-")
            and str(doc.get("description", "")).endswith(MARK))


def check_calibrate_output(out: str | os.PathLike, force: bool = False) -> Path:
    """Before any measurement: --out is new, a calibrated hwconfig, or (with --force) another
    regular file; never a link, directory, device or FIFO (sim.outputs)."""
    from sim.outputs import check_output
    return check_output(out, force=force, field="--out", ours=is_calibrated_hwconfig)


# ---- --check -----------------------------------------------------------------------------------


def check(hw_path: str, quick: bool = False, log=print) -> dict:
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig(hw_path)
    rows = []
    with one_thread() as how:
        for name, m, n, k in caffe_shapes("resnet18-cifar", 5 if quick else None):
            meas = measure_dense(m, n, k, 3 if quick else 5)
            pred = predict_dense(hw, m, n, k)
            rows.append({"kind": "dense", "shape": name, "m": m, "n": n, "k": k, "density": 1.0,
                         "measured_s": meas, "predicted_s": pred, "error": pred / meas - 1})
            log(f"  dense  {name:<24} {m}x{n}x{k}: measured {meas * 1e3:.3f} ms, "
                f"predicted {pred * 1e3:.3f} ms ({pred / meas - 1:+.0%})")
        for name, m, n, k in sparse_shapes("resnet18-cifar", 4 if quick else None):
            for d in ((0.15,) if quick else (0.05, 0.15, 0.3)):
                meas = measure_sparse(m, n, k, d, 3 if quick else 5, seed=7)
                pred = predict_sparse(hw, m, n, k, d, seed=7)
                rows.append({"kind": "spmm", "shape": name, "m": m, "n": n, "k": k, "density": d,
                             "measured_s": meas, "predicted_s": pred, "error": pred / meas - 1})
                log(f"  spmm   {name:<24} {m}x{n}x{k} d={d}: measured {meas * 1e3:.3f} ms, "
                    f"predicted {pred * 1e3:.3f} ms ({pred / meas - 1:+.0%})")
    med = lambda kind: statistics.median(abs(r["error"]) for r in rows if kind in (None, r["kind"]))
    return {"hw": hw.name, "path": hw.path, "threads_control": how, "rows": rows,
            "median_abs_error": {"dense": med("dense"), "spmm": med("spmm"), "all": med(None)},
            "target": 0.20}


def cmd_calibrate(args) -> int:
    import sys
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    out = getattr(args, "out", None)
    force = getattr(args, "force", False)
    if args.check:
        # --check writes nothing: an output option would change nothing
        for opt, given in (("--out", out is not None), ("--force", force)):
            if given:
                raise ConfigError(None, opt, "--check measures and compares; it writes no "
                                  "hwconfig (leave it out, or run without --check)")
        if not Path(args.hw).is_file():
            raise ConfigError(args.hw, None, "no such hwconfig: run `prunesim calibrate --out "
                              f"{args.hw}` first")
        res = check(args.hw, args.quick, log)
        if args.json:
            print(json.dumps(res, indent=1))
        else:
            e = res["median_abs_error"]
            print(f"median |error| on resnet18-cifar shapes: dense {e['dense']:.1%}, CSR SpMM "
                  f"{e['spmm']:.1%}, all {e['all']:.1%} (target <= 20%)")
        return 0
    out = check_calibrate_output(out if out is not None else DEFAULT_OUT, force)
    t0 = time.perf_counter()
    path = calibrate(out, args.quick, log)
    msg = f"wrote {path} in {time.perf_counter() - t0:.0f} s"
    if args.json:
        print(json.dumps({"out": str(path)}))
    else:
        print(msg)
    return 0
