"""prunesim next to SCALE-Sim v3 on the same dense ResNet-50 (ImageNet) conv-layer set, in one run.

    python bench/bench_scalesim.py [--scalesim-python .venv-scalesim/bin/python] [--layers N]
                                   [--docs docs/explanation/performance.md]

1. `prunesim workload export resnet50-imagenet --format scalesim --convs-only` writes SCALE-Sim's
   conv topology (53 convs, padded IFMAPs, trailing commas) and a 128x128 weight-stationary
   scale.cfg into a temporary directory (with --layers N only the first N convs are kept, for both
   tools).
2. Untimed: SCALE-Sim's own parsers (scale_config.read_conf_file, topologies.load_arrays, conv and
   GEMM mode) read the exported files in SCALE-Sim's venv, and the layer count and every layer's
   M, N, K must equal prunesim's FWD lowering.
3. SCALE-Sim child (its venv): the forward pass of every layer, which is all SCALE-Sim models,
   batch 1 (its conv mode has no batch), through its Python API with save_disk_space=True so the
   per-cycle traces stay in memory instead of being written as CSV files (the timing is then of
   the simulation, not of the disk).
4. prunesim child (this interpreter): the tensor-core engine, A100 hwconfig, dense, the FULL
   training step of the same layers (FWD + AGBP + WGC), at batch 1 and at batch 256. The Numba JIT
   is warmed on resnet9 first in the same child and the GEMM cache cleared before timing; repeated
   identical GEMMs inside one network still share one simulation, as the engine always does.

Each child's wall time is taken inside the child around the simulation only (imports, parsing and
warm-up excluded), and also around the whole process by the parent; each child's peak RSS comes
from `/usr/bin/time -f %M` (whole process, warm-up and imports included). The ratio is SCALE-Sim's
simulation wall time over prunesim's at batch 1 (the same layers at the same batch; prunesim also
simulates the two backward GEMMs of each layer, SCALE-Sim only the forward one).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.workload import load_workload, lower  # noqa: E402
from sim.workload_export import export_scalesim  # noqa: E402

WORKLOAD = "resnet50-imagenet"
HW = "a100-sxm4-40gb"
SCALESIM_PYTHON = ".venv-scalesim/bin/python"  # made by `make bench-scalesim`
HEADING = "## SCALE-Sim v3 side by side"

# Run inside SCALE-Sim's venv. argv: mode ("check" | "run"), cfg, topology, layout, gemm, results dir
SCALESIM_CHILD = r"""
import json, sys, time
mode, cfg, topo, layout, gemm, out = sys.argv[1:7]
if mode == "check":
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies
    c = scale_config(); c.read_conf_file(cfg)
    t = topologies(); t.load_arrays(topofile=topo)
    g = topologies(); g.load_arrays(topofile=gemm, mnk_inputs=True)
    from importlib.metadata import version
    print(json.dumps({"valid": c.valid_conf_flag, "array": [c.array_rows, c.array_cols],
                      "dataflow": c.df, "names": [a[0] for a in t.topo_arrays],
                      "mnk": t.get_transformed_mnk_dimensions(),
                      "gemm_names": [a[0] for a in g.topo_arrays],
                      "gemm_mnk": g.get_transformed_mnk_dimensions(),
                      "version": version("scalesim")}))
else:
    t0 = time.perf_counter()
    from scalesim.scale_sim import scalesim
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout)
    t1 = time.perf_counter()
    s.run_scale(top_path=out)
    t2 = time.perf_counter()
    cycles = sum(l.get_compute_report_items()[0] for l in s.runner.single_layer_sim_object_list)
    print(json.dumps({"import_parse_s": t1 - t0, "sim_s": t2 - t1, "cycles": int(cycles),
                      "layers": s.topo.get_num_layers()}))
"""

# Run with this interpreter. argv: n_layers, batch, batch, ...
PRUNESIM_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from sim.driver import simulate_workload
from sim.engines.gpu import gemm as tc   # its GEMM cache statistics only
from sim.hwconfig import load_hwconfig
from sim.workload import load_workload
n = int(sys.argv[2]); batches = [int(b) for b in sys.argv[3:]]
hw = load_hwconfig("%(hw)s")
wl = load_workload("%(wl)s")
simulate_workload(hw, load_workload("resnet9"), 2)   # JIT warm-up, all phases
layers = wl.convs[:n]
out = []
for b in batches:
    tc._gemm_cached.cache_clear()
    t0 = time.perf_counter()
    rows = simulate_workload(hw, wl, b, layers=layers)
    dt = time.perf_counter() - t0
    out.append({"batch": b, "sim_s": dt, "layers": len(rows),
                "gemms": sum(len(r["phases"]) for r in rows),
                "distinct": tc._gemm_cached.cache_info().misses,
                "simulated_s": sum(k.seconds for r in rows for ks in r["phases"].values() for k in ks),
                "phases": sorted({ph for r in rows for ph in r["phases"]})})
print(json.dumps(out))
""" % {"hw": HW, "wl": WORKLOAD}


def timed_child(argv: list[str], tmp: Path, tag: str, timeout: float | None) -> dict:
    """Run argv under /usr/bin/time; return its last stdout line as JSON, wall and peak RSS."""
    rss_file = tmp / f"{tag}.rss"
    cmd = ["/usr/bin/time", "-o", str(rss_file), "-f", "%M"] + argv
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{tag} child failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    rss_kb = int(rss_file.read_text().strip().splitlines()[-1])
    return {"result": json.loads(p.stdout.strip().splitlines()[-1]), "process_s": wall,
            "rss_mib": rss_kb / 1024}


def check_parse(ss_python: str, files: dict, wl, layers, tmp: Path) -> dict:
    """SCALE-Sim's own parsers read the export; every layer's M, N, K equals prunesim's FWD GEMM."""
    p = subprocess.run([ss_python, "-c", SCALESIM_CHILD, "check", str(files["config"]),
                        str(files["topology"]), str(files["layout"]), str(files["gemm"]), str(tmp)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"SCALE-Sim could not parse the export:\n{p.stderr[-3000:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["valid"] and got["array"] == [128, 128] and got["dataflow"] == "ws", got
    assert got["names"] == [l.name for l in layers], "layer names/count differ"
    # scalesim's get_transformed_mnk_dimensions reports M as ofmap pixels x filters (P*Q*N)
    mnk = lambda g: [g.m * g.n, g.n, g.k]
    want = [mnk(lower(l, 1)["fwd"]) for l in layers]
    assert got["mnk"] == want, "SCALE-Sim's M, N, K differ from prunesim's FWD GEMMs"
    # the GEMM topology (FWD/AGBP/WGC at batch 1) parses too, to the same M, N, K
    gw = [mnk(g) for l in wl.convs for ph, g in lower(l, 1).items()
          if ph != "agbp" or l.needs_agbp]
    assert got["gemm_mnk"] == gw, "SCALE-Sim's GEMM-mode M, N, K differ from prunesim's lowering"
    return got


def machine() -> str:
    model = "unknown CPU"
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = m.group(1).strip() if m else model
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 2**20:.1f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}{mem}, " \
           f"Linux {platform.release()}, Python {platform.python_version()}"


def write_docs(path: Path, section: str) -> None:
    """Replace (or append) only this benchmark's section of docs/explanation/performance.md."""
    text = path.read_text() if path.exists() else "# Performance\n\nMeasured numbers, with the " \
        "machine and the command for each.\n"
    start = text.find(HEADING + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[nxt + 1:] if nxt >= 0 else "")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scalesim-python", default=SCALESIM_PYTHON,
                    help="python of the venv with scalesim==3.0.0 (default %(default)s)")
    ap.add_argument("--layers", type=int, default=None,
                    help="only the first N conv layers, for both tools (default all 53)")
    ap.add_argument("--timeout", type=float, default=1800, help="SCALE-Sim child limit (s)")
    ap.add_argument("--docs", default=None, help="also write the table into this Markdown file")
    args = ap.parse_args()

    wl = load_workload(WORKLOAD)
    layers = wl.convs[:args.layers] if args.layers else wl.convs
    n = len(layers)
    with tempfile.TemporaryDirectory(prefix="bench_scalesim_") as td:
        tmp = Path(td)
        files = export_scalesim(wl, tmp / "export", 1, convs_only=True)
        if n < len(wl.convs):  # keep the header and the first n rows
            lines = files["topology"].read_text().splitlines(keepends=True)
            files["topology"].write_text("".join(lines[:1 + n]))
        check = check_parse(args.scalesim_python, files, wl, layers, tmp)
        print(f"SCALE-Sim {check['version']} parsed the export: {len(check['names'])} "
              f"layers, M/N/K equal to prunesim's FWD GEMMs; GEMM topology "
              f"{len(check['gemm_names'])} rows equal to FWD/AGBP/WGC", flush=True)

        print(f"running SCALE-Sim on {n} conv layers (128x128 WS, forward, batch 1) ...", flush=True)
        ss = timed_child([args.scalesim_python, "-c", SCALESIM_CHILD, "run", str(files["config"]),
                          str(files["topology"]), str(files["layout"]), str(files["gemm"]),
                          str(tmp / "results")], tmp, "scalesim", args.timeout)
        print(f"  simulation {ss['result']['sim_s']:.1f} s, process {ss['process_s']:.1f} s, "
              f"peak RSS {ss['rss_mib']:.0f} MiB", flush=True)

        print(f"running prunesim tensor-core engine on the same {n} layers (FWD+AGBP+WGC) ...",
              flush=True)
        ps = timed_child([sys.executable, "-c", PRUNESIM_CHILD, str(ROOT), str(n), "1", "256"],
                         tmp, "prunesim", None)
    p1, p256 = ps["result"]
    assert p1["layers"] == n and set(p1["phases"]) == {"fwd", "agbp", "wgc"}
    ratio = ss["result"]["sim_s"] / p1["sim_s"]
    ratio_rss = ss["rss_mib"] / ps["rss_mib"]

    subset = "all 53 conv layers" if n == len(wl.convs) else f"the first {n} of 53 conv layers"
    hdr = ["tool", "what is simulated", "GEMMs", "sim wall (s)", "process wall (s)",
           "peak RSS (MiB)", "simulated result"]
    rows = [
        [f"SCALE-Sim {check['version']}", "FWD, batch 1, 128x128 WS systolic array", str(n),
         f"{ss['result']['sim_s']:.2f}", f"{ss['process_s']:.2f}", f"{ss['rss_mib']:.0f}",
         f"{ss['result']['cycles']:,} cycles"],
        ["prunesim tensorcore", f"FWD+AGBP+WGC, batch 1, {HW}", f"{p1['gemms']} "
         f"({p1['distinct']} distinct)", f"{p1['sim_s']:.3f}", f"{ps['process_s']:.2f}",
         f"{ps['rss_mib']:.0f} (one process, both batches)", f"{p1['simulated_s'] * 1e3:.3f} ms"],
        ["prunesim tensorcore", f"FWD+AGBP+WGC, batch 256, {HW}", f"{p256['gemms']} "
         f"({p256['distinct']} distinct)", f"{p256['sim_s']:.3f}", "(same process)",
         "(same process)", f"{p256['simulated_s'] * 1e3:.2f} ms"],
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    table = "\n".join([fmt(hdr), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                      + [fmt(r) for r in rows])
    summary = (f"SCALE-Sim / prunesim (batch 1) simulation wall time: **{ratio:.0f}x** "
               f"(SCALE-Sim forward only, prunesim the full training step); "
               f"peak RSS ratio {ratio_rss:.1f}x. Per GEMM actually simulated: SCALE-Sim "
               f"{ss['result']['sim_s'] / n * 1e3:.0f} ms ({n} layers), prunesim "
               f"{p1['sim_s'] / p1['distinct'] * 1e3:.2f} ms ({p1['distinct']} distinct GEMMs).")
    print()
    print(f"{WORKLOAD}, {subset}")
    print(table)
    print(summary)

    if args.docs:
        argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
        section = f"""{HEADING}

Same dense {WORKLOAD} conv-layer set ({subset}; the FC layer left out), both tools in one run of
`bench/bench_scalesim.py`. SCALE-Sim v3 simulates what it models, the forward pass on a 128x128
weight-stationary systolic array at batch 1 (CALC bandwidth, traces kept in memory:
`save_disk_space=True`); prunesim's tensor-core engine simulates the full training step (FWD + AGBP +
WGC) of the same layers on the A100 hwconfig. "sim wall" is timed inside each child process around
the simulation only (prunesim's Numba JIT warmed on resnet9 first, GEMM cache cleared); "process
wall" and peak RSS (`/usr/bin/time -f %M`) cover the whole child, imports and warm-up included.
prunesim simulates each distinct GEMM shape once per network (the "distinct" count).
The inputs are written by `prunesim workload export {WORKLOAD} --format scalesim --convs-only`, and
SCALE-Sim's own parsers read them back to the same M, N, K as prunesim's lowering before timing.
The two are not the same kind of model, so the ratio measures cost, not equal work: SCALE-Sim builds
each layer's cycle-by-cycle operand demand matrices and SRAM/DRAM address traces for a systolic
array, and its memory grows with the layers simulated; prunesim's engine models a GPU's GEMM
kernels tile by tile and wave by wave, without per-cycle traces.

{table}

{summary}

- Machine: {machine()}; shared with other work (1-minute load average
  {os.getloadavg()[0]:.2f} at the end of the run).
- Command: `PYTHONPATH=. /tmp/venvtest/bin/python bench/bench_scalesim.py {argv}`
  (SCALE-Sim 3.0.0 in its own venv, `{args.scalesim_python}`, numpy<2.3).
- Date: {datetime.date.today().isoformat()}.
"""
        write_docs(Path(args.docs), section)
        print(f"wrote the table into {args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
