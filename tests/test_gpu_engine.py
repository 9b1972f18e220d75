"""GpuEngine behind the Engine interface: the registry, PhaseJobs, categories, charge_method,
supports(), the spec built by keyword, dram_latency as a time, and sim/engines/gpu's import graph."""
from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from sim.driver import simulate_layer
from sim.engines.base import CATEGORIES, PhaseJob, engine_for
from sim.engines.gpu.engine import GpuEngine
from sim.engines.gpu.params import HW_FIELDS
from sim.engines.gpu.spec import gpu_spec
from sim.hwconfig import load_hwconfig
from sim.methods import parse_method
from sim.methods.synthetic import method_result_for
from sim.workload import load_workload, lower, workload_from_dict

ROOT = Path(__file__).resolve().parent.parent
GPUS = ("a100-sxm4-40gb", "a100-nm-hypothetical", "h100-sxm5-80gb", "v100-sxm2", "titan-xp",
        "gtx1080ti")
METHODS = ("dense", "dbtd:p=0.99", "topk:keep=0.01", "sdgp-mag:nm=2:4", "sdgp-resmag:nm=1:4",
           "approx:schedule=1", "zero:schedule=1", "random:schedule=1", "approx-topk:k=2")


@pytest.fixture(scope="module")
def a100():
    return load_hwconfig("a100-sxm4-40gb")


def _jobs(layer, batch, method, charge_at="first"):
    mr = method_result_for(parse_method(method), layer, batch)
    gemms = lower(layer, batch)
    run = [ph for ph in ("fwd", "agbp", "wgc") if ph != "agbp" or layer.needs_agbp]
    first = next((ph for ph in run if mr is not None and ph in mr.phases), None)
    return [PhaseJob(layer, ph, gemms[ph], batch, mr, charge_method=(ph == first)) for ph in run]


def test_registry_builds_the_gpu_engine(a100):
    e = engine_for(a100)
    assert isinstance(e, GpuEngine) and e.kind == "gpu" and e.hw is a100


@pytest.mark.parametrize("method", ["dense", "sdgp-mag:nm=2:4", "dbtd:p=0.99", "approx:schedule=1"])
def test_simulate_equals_the_driver_layer_path(a100, method):
    """PhaseJobs built by hand (method charged on its first phase) give the driver's kernels."""
    layer = load_workload("resnet18-imagenet").layer("layer2.0.conv1")
    old = simulate_layer(a100, layer, 8, method=parse_method(method))
    eng = GpuEngine(a100)
    for job in _jobs(layer, 8, method):
        new = eng.simulate(job)
        assert [k.kernel for k in new] == [k.kernel for k in old[job.phase]]
        assert [k.cycles for k in new] == [k.cycles for k in old[job.phase]]
        assert [k.breakdown for k in new] == [k.breakdown for k in old[job.phase]]


def _expected_category(kernel: str) -> str:
    if kernel.endswith("-overhead"):
        return "method-overhead"
    if kernel == "random-dw":
        return "generate"
    if kernel in ("col2im", "zero-dW") or kernel.startswith("transpose-"):
        return "memory"
    return "math"        # gemm, direct-conv, approx-wgc, wgc-skipped


def test_every_kernel_has_its_category():
    hws = [load_hwconfig(n) for n in ("a100-sxm4-40gb", "titan-xp")]
    wl = workload_from_dict({
        "name": "cat", "input": {"channels": 16, "height": 16, "width": 16},
        "layers": [{"name": "c0", "op": "conv", "in": "x", "out": "a", "c_out": 32, "kernel": 3,
                    "pad": 1},
                   {"name": "s2", "op": "conv", "in": "a", "out": "b", "c_out": 32, "kernel": 3,
                    "pad": 1, "stride": 2},
                   {"name": "dw", "op": "conv", "in": "b", "out": "c", "c_out": 32, "kernel": 3,
                    "pad": 1, "groups": 32}]}, origin="test")
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for hw in hws:
            eng = GpuEngine(hw)
            for layer in wl.layers:
                for m in METHODS:
                    for job in _jobs(layer, 4, m):
                        if eng.supports(job):
                            continue
                        for k in eng.simulate(job):
                            assert k.category in CATEGORIES
                            assert k.category == _expected_category(k.kernel), k.kernel
                            seen.add(k.category)
        assert eng.gemm(64, 64, 64)[0].category == "math"
    # step-op and framework kernels come from Engine.stream / driver.step_kernels (test_stepops)
    assert seen == set(CATEGORIES) - {"step-op", "framework"}


def test_charge_method_is_the_drivers_decision(a100):
    layer = load_workload("resnet9").layers[2]
    eng = GpuEngine(a100)
    for job in _jobs(layer, 16, "sdgp-mag:nm=2:4"):
        names = {k.kernel for k in eng.simulate(job)}
        assert ("sdgp-mag-overhead" in names) == job.charge_method
        flipped = PhaseJob(job.layer, job.phase, job.gemm, job.batch, job.method,
                           charge_method=not job.charge_method)
        names = {k.kernel for k in eng.simulate(flipped)}
        assert ("sdgp-mag-overhead" in names) == flipped.charge_method
    # Wang's kernels fuse the method's work: never charged on top
    wgc = next(j for j in _jobs(layer, 16, "approx:schedule=1") if j.phase == "wgc")
    forced = PhaseJob(wgc.layer, wgc.phase, wgc.gemm, wgc.batch, wgc.method, charge_method=True)
    ks = eng.simulate(forced)
    assert "approx-wgc" in {k.kernel for k in ks}
    assert not any(k.category == "method-overhead" for k in ks)


def test_supports_reasons(a100):
    eng = GpuEngine(a100)
    deconv = workload_from_dict({
        "name": "d", "input": {"channels": 8, "height": 8, "width": 8},
        "layers": [{"name": "up", "op": "conv", "in": "x", "out": "y", "c_out": 8, "kernel": 4,
                    "stride": 2, "pad": 1, "transposed": True}]}, origin="test").layers[0]
    jobs = {j.phase: j for j in _jobs(deconv, 4, "approx:schedule=1")}
    assert "transposed conv" in eng.supports(jobs["wgc"])
    assert eng.supports(jobs["fwd"]) is None
    assert all(eng.supports(j) is None for j in _jobs(deconv, 4, "dense"))
    dw = workload_from_dict({
        "name": "g", "input": {"channels": 8, "height": 8, "width": 8},
        "layers": [{"name": "dw", "op": "conv", "in": "x", "out": "y", "c_out": 8, "kernel": 3,
                    "pad": 1, "groups": 8}]}, origin="test").layers[0]
    jobs = {j.phase: j for j in _jobs(dw, 4, "approx:schedule=1")}
    why = eng.supports(jobs["wgc"])
    assert why and "ungrouped convs" in why
    from sim.engines.base import Unsupported
    with pytest.raises(Unsupported, match="ungrouped convs"):
        eng.simulate(jobs["wgc"])
    assert all(eng.supports(j) is None for j in _jobs(dw, 4, "sdgp-mag:nm=2:4"))


@pytest.mark.parametrize("name", GPUS)
def test_spec_by_keyword_equals_the_old_positional_values(name):
    hw = load_hwconfig(name)
    s, v = gpu_spec(hw), hw.value
    clock = float(v("clock"))
    old = dict(sm=int(v("sm_count")), clock=clock,
               cuda_ratio=float(v("cuda_core_clock", clock)) / clock,
               tc_rate=tuple((d, float(v(f"tc_fma_per_clk_{d}"))) for d in ("fp16", "bf16", "tf32")
                             if v(f"tc_fma_per_clk_{d}") is not None),
               cuda_rate=float(v("cuda_fma_per_clk_fp32")), sparse_rate=v("sparse_rate"),
               dram_bpc=float(v("hbm_bandwidth")) / clock, l2_size=float(v("l2_size")),
               l2_bpc=float(v("l2_bandwidth")), l2_lat=float(v("l2_latency")),
               smem=float(v("smem_per_sm")), smem_bpc=float(v("smem_bandwidth")),
               regs=int(v("registers_per_sm")), max_regs=int(v("max_registers_per_thread")),
               max_threads=int(v("max_threads_per_sm")), max_blocks=int(v("max_blocks_per_sm")),
               max_stages=int(v("max_pipeline_stages")), mma_lat=float(v("mma_latency")),
               launch=float(v("launch_overhead")) * clock)
    for k, want in old.items():
        assert getattr(s, k) == want, k
    assert all(f.attr for n, f in HW_FIELDS.items() if not n.startswith("energy_"))


OLD_DRAM_CYCLES = {"a100-sxm4-40gb": 400, "a100-sxm4-80gb": 400, "a100-nm-hypothetical": 400,
                   "h100-sxm5-80gb": 400, "v100-sxm2": 400, "titan-xp": 450, "gtx1080ti": 450}


@pytest.mark.parametrize("name", sorted(OLD_DRAM_CYCLES))
def test_dram_latency_is_a_time_and_the_cycles_did_not_move(name):
    assert HW_FIELDS["dram_latency"].dimension == "time"
    hw = load_hwconfig(name)
    assert hw.value("dram_latency") < 1e-6                 # seconds, not cycles
    assert gpu_spec(hw).dram_lat == OLD_DRAM_CYCLES[name]  # exactly: the pipeline steps cycles
    assert "cycles at" in hw.params["dram_latency"].source


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_import_cycle_in_the_gpu_package():
    pkg = ROOT / "sim" / "engines" / "gpu"
    mods = {f"sim.engines.gpu.{p.stem}": p for p in pkg.glob("*.py") if p.stem != "__init__"}
    graph = {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph[m]:
            assert state.get(n) != 1, "import cycle: " + " -> ".join(stack + [m, n])
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])
    # the routing is by imports, one way: engine -> gemm/patch -> stream -> spec -> params
    assert {"sim.engines.gpu.gemm", "sim.engines.gpu.patch"} <= graph["sim.engines.gpu.engine"]
    below = graph["sim.engines.gpu.patch"] | graph["sim.engines.gpu.gemm"]
    assert "sim.engines.gpu.engine" not in below


def test_params_and_hwconfig_import_no_numba():
    code = ("import sys; import sim.hwconfig as h; h.load_hwconfig('a100-sxm4-40gb'); "
            "import sim.engines.gpu.params; print('numba' in sys.modules, 'numpy' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "False"
