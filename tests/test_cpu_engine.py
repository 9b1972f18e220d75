"""The CPU engine: cache kernel against its reference, GEMM and SpMM models, sampling, CLI, and
CpuEngine behind the Engine interface (the old path's numbers, categories, charging, supports)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main
from sim.engines.base import PhaseJob
from sim.engines.cpu import cache as cs
from sim.engines.cpu.engine import CpuEngine
from sim.engines.cpu.gemm import gemm_model, kstep_cycles
from sim.engines.cpu.spec import cpu_spec
from sim.engines.cpu.spmm import SpmmJob, random_csr, simulate_spmm
from sim.errors import ConfigError
from sim.hwconfig import load_hwconfig
from sim.methods import apply_method, parse_method, stream_key
from sim.workload import load_workload


def simulate_layer_phase(layer, batch, phase, mr, hw, threads=1, seed=0):
    """The layer path of CpuEngine, the method not charged."""
    return CpuEngine(hw).simulate(PhaseJob(layer, phase, None, batch, mr, threads=threads, seed=seed))


@pytest.fixture(scope="module")
def xeon():
    return load_hwconfig("xeon-e5-2680v4")


@pytest.fixture(scope="module")
def pi():
    return load_hwconfig("rpi4b")


@pytest.mark.parametrize("chunk,threads,l2_private", [(0, 1, True), (24, 2, True), (0, 2, False)])
def test_spmm_stream_matches_reference(chunk, threads, l2_private):
    indptr, indices = random_csr(40, 30, 0.2, seed=3)
    starts = np.array([[0, 20], [5, 25], [10, 30]], np.int64)[:, :threads]
    nrows = np.array([[5, 5], [5, 5], [6, 6]], np.int64)[:, :threads]
    measure = np.array([False, True, True])
    line, n_b = 64, 40
    fresh = lambda: [cs.make_level(threads, 1024, 2, line),
                     cs.make_level(threads if l2_private else 1, 4096, 4, line),
                     cs.make_level(1, 16384, 8, line)]
    lv = fresh()
    counts = np.zeros((3, threads, cs.N_COUNTS), np.int64)
    pf = [np.full((threads, 3), -10, np.int64), np.full((threads, 3), -10, np.int64),
          np.zeros((threads, 3), np.int64)]
    cs.spmm_stream(indptr, indices, starts, nrows, measure, n_b, chunk, line, *lv, l2_private,
                   False, *pf, 4, 2, counts)
    ref = cs.spmm_stream_ref(indptr, indices, starts, nrows, measure, n_b, chunk, line, fresh(),
                             l2_private, False, 3, 4, 2)
    assert counts.sum() > 0 and counts[0].sum() == 0
    np.testing.assert_array_equal(counts, ref)



@pytest.mark.parametrize("streams,chunk", [(32, 96), (8, 0), (2, 24)])
def test_spmm_stream_stream_table_matches_reference(streams, chunk):
    """The stream table's recency list and hash counts choose the entries a full scan would: a
    product whose B rows are 256 lines apart (every stream's last line in one hash bucket, so
    the scan fallback runs) matches the reference count for count."""
    indptr, indices = random_csr(120, 64, 0.15, seed=5)
    n_b, line = 4096, 64                                 # a B row = 256 lines
    starts = np.array([[0], [40], [80]], np.int64)
    nrows = np.full((3, 1), 40, np.int64)
    measure = np.array([False, True, True])
    fresh = lambda: [cs.make_level(1, 4096, 2, line), cs.make_level(1, 32768, 4, line),
                     cs.make_level(1, 262144, 8, line)]
    pf = [np.full((1, streams), -10, np.int64), np.full((1, streams), -10, np.int64),
          np.zeros((1, streams), np.int64)]
    counts = np.zeros((3, 1, cs.N_COUNTS), np.int64)
    cs.spmm_stream(indptr, indices, starts, nrows, measure, n_b, chunk, line, *fresh(), True,
                   False, *pf, 20, 2, counts)
    ref = cs.spmm_stream_ref(indptr, indices, starts, nrows, measure, n_b, chunk, line, fresh(),
                             True, False, streams, 20, 2)
    assert counts[..., cs.PF_L3:].sum() > 0
    np.testing.assert_array_equal(counts, ref)


def test_stream_table_index_orders_as_the_scan():
    """_pf_index, rebuilt from a table's state when a call resumes it: the recency list runs by
    stamp, then entry (the scan's LRU choice; unused entries have stamp 0), and the hash counts
    add up the entries' last lines."""
    rng = np.random.default_rng(2)
    stamps = np.where(rng.random((2, 32)) < 0.3, 0, rng.permutation(64)[:64].reshape(2, 32) + 1)
    last = rng.integers(-10, 5000, (2, 32))
    lru, bucket = cs._pf_index(last.astype(np.int64), stamps.astype(np.int64))
    for t in range(2):
        order, e = [], lru[t, 64]
        while e >= 0:
            order.append(e)
            e = lru[t, 32 + e]
        assert order == sorted(range(32), key=lambda x: (stamps[t, x], x))
        assert lru[t, 65] == order[-1] and lru[t, order[0]] == -1
        np.testing.assert_array_equal(bucket[t], np.bincount(last[t] & 255, minlength=256))

def test_lru_evicts_least_recent():
    lv = cs.make_level(1, 2 * 64, 2, 64)               # one set, two ways
    assert not cs._lookup(lv, 0, 1, 1)
    assert not cs._lookup(lv, 0, 2, 2)
    assert cs._lookup(lv, 0, 1, 3)            # 1 is now most recent
    assert not cs._lookup(lv, 0, 3, 4)        # evicts 2
    assert cs._lookup(lv, 0, 1, 5) and not cs._lookup(lv, 0, 2, 6)


def test_hwconfigs_load_and_reject_bad_fields(xeon, pi, tmp_path):
    assert cpu_spec(xeon).simd == 8 and cpu_spec(pi).l3[0] == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text((open(xeon.path).read()).replace("value: register", "value: csr5"))
    with pytest.raises(ConfigError) as e:
        load_hwconfig(bad)
    assert str(bad) in str(e.value) and "params.spmm_style.value" in str(e.value)
    with pytest.raises(ConfigError, match="threads"):
        cpu_spec(pi, 8)


def test_micro_kernel_bounds(xeon, pi):
    # Broadwell 6x16: 12 FMAs on 2 pipes = 6 cycles per k step, i.e. the 32 flop/cycle peak
    ck, bounds = kstep_cycles(cpu_spec(xeon))
    assert ck == 6 and bounds["fma"] == 6
    # A72 8x12: 24 FMAs on one 128-bit pipe
    assert kstep_cycles(cpu_spec(pi))[0] == 24


def test_gemm_efficiency_follows_shape(xeon):
    cpu = cpu_spec(xeon)
    big = gemm_model(cpu, 576, 1024, 256)[3]["efficiency"]
    skinny = gemm_model(cpu, 16, 27, 1024)[3]["efficiency"]
    assert 0.6 < big <= 1.0
    assert skinny < 0.7 * big          # 16 x 27 pads to 18 x 32 with 6 x 16 tiles


def test_sampling_within_3_percent_of_exhaustive(xeon):
    # AGBP of a 128-channel 16x16 layer, 4 samples at density 0.2: (256 x 128) x (128 x 1152) each
    indptr, indices = random_csr(4 * 256, 128, 0.2, seed=11)
    job = SpmmJob(indptr, indices, 256, 128, 1152, 4, 32.0)
    cpu = cpu_spec(xeon)
    ex = simulate_spmm(cpu, job, exhaustive=True)
    sa = simulate_spmm(cpu, job, exhaustive=False, unit_rows=4, seed=1)
    assert sa[3]["simulation"] == "sampled" and ex[3]["simulation"] == "exhaustive"
    assert abs(sa[0] / ex[0] - 1) <= 0.03
    lo, hi = sa[3]["ci95_cycles"]
    assert lo < sa[0] < hi


def test_spmm_time_grows_with_density_and_threads_help(pi):
    t = {}
    for d in (0.05, 0.3):
        ip, ix = random_csr(256, 256, d, seed=2)
        t[d] = simulate_spmm(cpu_spec(pi), SpmmJob(ip, ix, 256, 256, 576, 1, 1.0))[0]
    assert t[0.3] > 3 * t[0.05]
    ip, ix = random_csr(256, 256, 0.3, seed=2)
    four = simulate_spmm(cpu_spec(pi, 4), SpmmJob(ip, ix, 256, 256, 576, 1, 1.0))[0]
    assert four < t[0.3] / 2
    assert gemm_model(cpu_spec(pi, 4), 512, 512, 512)[0] < gemm_model(cpu_spec(pi), 512, 512, 512)[0] / 3


def test_layer_sparse_path_kernels(xeon):
    wl = load_workload("resnet20")
    layer = wl.convs[3]
    rng = np.random.default_rng(0)
    g = (rng.standard_t(3, size=layer.tensor_shapes(2)["dO"]) * 1e-3).astype(np.float32)
    mr = apply_method(parse_method("dbtd"), layer, g, key=stream_key(0, layer.index, 0), batch=64)
    dense = simulate_layer_phase(layer, 64, "agbp", None, xeon)
    sparse = simulate_layer_phase(layer, 64, "agbp", mr, xeon)
    assert [k.kernel for k in dense] == ["gemm", "col2im"]
    assert [k.kernel for k in sparse] == ["transpose-dO", "csr-build", "transpose-W", "spmm",
                                          "col2im-trans"]
    spmm = sparse[3]
    assert spmm.flops < dense[0].flops and math.isclose(sum(spmm.breakdown.values()), spmm.seconds)
    wgc = simulate_layer_phase(layer, 64, "wgc", mr, xeon)
    assert [k.kernel for k in wgc] == ["csr-build", "im2col-trans", "spmm"]
    assert simulate_layer_phase(wl.convs[0], 64, "agbp", mr, xeon) == []   # reads the image


def test_gemm_cli_json(capsys):
    assert main(["gemm", "--hw", "xeon-e5-2680v4", "--m", "64", "--n", "576", "--k", "256",
                 "--density", "0.1", "--dtype", "fp32", "--json"]) == 0
    sparse = json.loads(capsys.readouterr().out)
    assert main(["gemm", "--hw", "xeon-e5-2680v4", "--m", "64", "--n", "576", "--k", "256",
                 "--dtype", "fp32", "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert sparse["kernel"]["kernel"] == "spmm" and dense["kernel"]["kernel"] == "gemm"
    assert 0 < sparse["seconds"] and math.isclose(dense["cycles"] / 2.4e9, dense["seconds"])
    assert main(["gemm", "--hw", "rpi4b", "--m", "8", "--n", "8", "--k", "8", "--density", "2",
                 "--dtype", "fp32"]) == 2
    assert "--density" in capsys.readouterr().err


def test_layer_cli_conv_json(capsys):
    assert main(["layer", "--hw", "rpi4b", "--conv", "4,16,16,8,8,3,3,1,1", "--method", "dense",
                 "--method", "dbtd", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {(r["method"], r["phase"]): r for r in doc["layers"]}
    # --phase all means FWD, AGBP and WGC on every engine (#19)
    assert set(rows) == {(m, ph) for m in ("dense", "dbtd:p=0.99,sigma=paper")
                         for ph in ("fwd", "agbp", "wgc")}
    assert all(r["seconds"] > 0 and r["cycles"] > 0 for r in rows.values())


# ---- the Engine interface (#19) ----------------------------------------------------------------

OLD_PATH = Path(__file__).parent / "data" / "cpu_engine_old_path.json"


def _old_path_cases():
    """The jobs tests/data/cpu_engine_old_path.json was recorded on, with sim/engines/cpu.py's
    simulate_phase at commit 677686d (before the package): (key, hw, layer or None, gemm, method
    result, threads, charge_method). Batch 16, seed 3; dO from a t(3) draw, 2 samples deep."""
    from sim.workload import lower, workload_from_dict
    r20, cnn2 = load_workload("resnet20"), load_workload("cnn2")
    # the old `prunesim layer --conv 16,16,32,8,8,1,1,1,0` layer of the CPU engine (BN and ReLU
    # after it, reading a tensor that is not the network input)
    one = workload_from_dict({"name": "conv", "input": {"channels": 16, "height": 8, "width": 8},
                              "tensors": {"t0": [16, 8, 8]},
                              "layers": [{"name": "conv", "op": "conv", "in": "t0", "out": "y",
                                          "c_out": 32, "kernel": [1, 1], "stride": 1, "pad": 0,
                                          "bn": True, "relu": True}]}, "--conv")
    layers = [r20.layers[0], r20.layers[3], r20.layers[7], r20.layers[21], cnn2.layers[3],
              one.layers[0]]
    plans = [("xeon-e5-2680v4", 1, layers, (None, "dbtd:p=0.99", "sdgp-mag:nm=2:4"),
              ("fwd", "agbp", "wgc")),
             ("rpi4b", 2, [layers[1], layers[3], layers[5]], (None, "dbtd:p=0.99"), ("agbp", "wgc"))]

    def method(m, l):
        rng = np.random.default_rng(l.index + 7)
        g = (rng.standard_t(3, size=l.tensor_shapes(2)["dO"]) * 1e-3).astype(np.float32)
        return None if m is None else apply_method(parse_method(m), l, g,
                                                   key=stream_key(0, l.index, 0), batch=16)
    for hwn, threads, ls, methods, phases in plans:
        hw = load_hwconfig(hwn)
        for l in ls:
            gemms = lower(l, 16)
            for m in methods:
                mr = method(m, l)
                for ph in phases:
                    yield (f"{hwn}/t{threads}/{l.name}/{m}/{ph}", hw, l, gemms[ph], mr, threads,
                           ph == "agbp")
    hw, l = load_hwconfig("xeon-e5-2680v4"), r20.layers[3]
    for m in (None, "dbtd:p=0.99"):
        mr = method(m, l)
        for ph in ("agbp", "wgc"):
            yield f"gemm-only/{l.name}/{m}/{ph}", hw, None, lower(l, 16)[ph], mr, 1, False


def _close(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def engine_runs():
    """(key, job, kernels) of every recorded case, through CpuEngine.simulate."""
    out = []
    for key, hw, layer, gemm, mr, threads, charge in _old_path_cases():
        job = PhaseJob(layer, gemm.phase, gemm, 16, mr, charge_method=charge and mr is not None,
                       threads=threads, seed=3)
        out.append((key, job, CpuEngine(hw).simulate(job)))
    return out


def test_engine_simulate_equals_the_old_path(engine_runs):
    old = json.loads(OLD_PATH.read_text())
    assert set(old) == {key for key, _, _ in engine_runs}
    for key, _, ks in engine_runs:
        new = [{k: v for k, v in kr.to_json().items() if k != "category"} for kr in ks]
        _close(new, old[key], key)


def test_every_kernel_has_its_category(engine_runs):
    expect = {"gemm": "math", "spmm": "math", "im2col": "memory", "col2im": "memory",
              "im2col-trans": "memory", "col2im-trans": "memory", "transpose-I": "memory",
              "transpose-dO": "memory", "transpose-W": "memory", "csr-build": "memory"}
    seen = set()
    for key, _, ks in engine_runs:
        for k in ks:
            want = "method-overhead" if k.kernel.endswith("-overhead") else expect[k.kernel]
            assert k.category == want, (key, k.kernel, k.category)
            seen.add(k.category)
    assert seen == {"math", "memory", "method-overhead"}


def test_charge_method_is_the_drivers_decision(xeon, engine_runs):
    for key, job, ks in engine_runs:
        over = [k for k in ks if k.category == "method-overhead"]
        assert len(over) == (1 if job.charge_method and job.method.work.elems_read else 0), key
    # any phase the driver names is charged, the first one or not; none is charged by itself
    (key, job, _), = [r for r in engine_runs if r[0] == "xeon-e5-2680v4/t1/layer1.1.conv1/dbtd:p=0.99/agbp"]
    engine = CpuEngine(xeon)
    for ph in ("fwd", "agbp", "wgc"):
        free = engine.simulate(PhaseJob(job.layer, ph, None, 16, job.method))
        charged = engine.simulate(PhaseJob(job.layer, ph, None, 16, job.method, charge_method=True))
        assert not [k for k in free if k.category == "method-overhead"]
        assert [k.kernel for k in charged] == [k.kernel for k in free] + ["dbtd-overhead"]


def test_supports_gives_the_cpu_reasons(xeon):
    from sim.engines.base import Unsupported
    from sim.workload import workload_from_dict
    doc = {"name": "g", "input": {"channels": 8, "height": 8, "width": 8},
           "layers": [{"name": "c0", "op": "conv", "in": "x", "out": "x1", "c_out": 8,
                       "kernel": [3, 3], "stride": 1, "pad": 1},
                      {"name": "dw", "op": "conv", "in": "x1", "out": "y", "c_out": 8,
                       "kernel": [3, 3], "stride": 1, "pad": 1, "groups": 8},
                      {"name": "up", "op": "conv", "in": "y", "out": "z", "c_out": 4,
                       "kernel": [2, 2], "stride": 2, "pad": 0, "transposed": True}]}
    wl = workload_from_dict(doc, "test")
    _, dw, up = wl.layers     # dw is not first: its AGBP is needed
    g = np.random.default_rng(0).standard_normal(dw.tensor_shapes(2)["dO"]).astype(np.float32)
    mr = apply_method(parse_method("dbtd"), dw, g, key=stream_key(0, 0, 0), batch=4)
    engine = CpuEngine(xeon)
    for layer, m, ph, want in ((dw, mr, "agbp", "ungrouped convs only (groups=8)"),
                               (dw, mr, "wgc", "ungrouped convs only (groups=8)"),
                               (dw, None, "agbp", None), (up, None, "wgc", "has no deconv")):
        job = PhaseJob(layer, ph, None, 4, m)
        why = engine.supports(job)
        if want is None:
            assert why is None and engine.simulate(job)
            continue
        assert want in why and why.startswith(f"layer {layer.name}: ")   # one line, names the layer
        with pytest.raises(Unsupported, match=want.replace("(", r"\(").replace(")", r"\)")):
            engine.simulate(job)


def _old_positional_view(hw, threads):
    """sim/engines/cpu.py's cpu_view before #19, as the tuple its positional Cpu(...) was built from."""
    v = hw.value
    clock = v("clock")
    lvl = lambda p: (int(v(f"{p}_size")), int(v(f"{p}_ways")), float(v(f"{p}_latency")),  # noqa: E731
                     float(v(f"{p}_bandwidth")))
    return (hw.name, v("isa"), clock, int(v("cores")), threads, int(v("simd_width")),
            int(v("vector_registers")), int(v("fma_units")), float(v("fma_latency")),
            int(v("issue_width")), int(v("load_ports")), int(v("store_ports")),
            float(v("branch_mispredict_penalty")), int(v("line_size")), lvl("l1"), lvl("l2"),
            int(v("l2_shared_by")), lvl("l3"), int(v("prefetch_streams")),
            int(v("prefetch_distance")), int(v("prefetch_degree")), v("dram_bandwidth") / clock,
            v("dram_latency") * clock, int(v("mlp")), int(v("gemm_mr")), int(v("gemm_nr")),
            int(v("gemm_mc")), int(v("gemm_kc")), int(v("gemm_nc")),
            float(v("gemm_library_efficiency")), v("spmm_style"), int(v("spmm_simd_width")),
            float(v("spmm_library_efficiency")))


OLD_CPU_FIELDS = ("name", "isa", "clock", "cores", "threads", "simd", "vregs", "fma_units", "fma_lat",
                  "issue", "ld_ports", "st_ports", "mispredict", "line", "l1", "l2", "l2_shared_by",
                  "l3", "pf_streams", "pf_dist", "pf_degree", "dram_bw", "dram_lat", "mlp", "mr",
                  "nr", "mc", "kc", "nc", "gemm_eff", "spmm_style", "spmm_simd", "spmm_eff")


@pytest.mark.parametrize("name,threads", [("xeon-e5-2680v4", 1), ("xeon-e5-2680v4", 7),
                                          ("rpi4b", 4)])
def test_spec_by_keyword_equals_the_old_positional_view(name, threads):
    from sim.engines.cpu.params import HW_FIELDS
    hw = load_hwconfig(name)
    new = cpu_spec(hw, threads)
    old = dict(zip(OLD_CPU_FIELDS, _old_positional_view(hw, threads)))
    for f, v in old.items():
        got = getattr(new, f)
        assert got == v and type(got) is type(v), (f, got, v)
    assert all(f.attr for f in HW_FIELDS.values())
    assert len({f.attr for f in HW_FIELDS.values()}) == len(HW_FIELDS)


def test_package_has_no_import_cycle_and_params_stays_light():
    import ast
    import subprocess
    import sys
    pkg = Path(__file__).resolve().parent.parent / "sim" / "engines" / "cpu"
    mods = sorted(p.stem for p in pkg.glob("*.py") if p.stem != "__init__")
    deps = {}
    for m in mods:
        tree = ast.parse((pkg / f"{m}.py").read_text())
        names = set()
        # module-level imports: what runs when the module loads (function-level ones are lazy)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("sim.engines.cpu."):
                    names.add(node.module.rsplit(".", 1)[1])
                elif node.module == "sim.engines.cpu":
                    names.update(a.name for a in node.names)
        deps[m] = names & set(mods)
    done, stack = set(), []

    def visit(m):
        assert m not in stack, f"import cycle: {' -> '.join(stack + [m])}"
        if m in done:
            return
        stack.append(m)
        for d in deps[m]:
            visit(d)
        stack.pop()
        done.add(m)
    for m in mods:
        visit(m)
    code = ("import sys; import sim.hwconfig as h; h.load_hwconfig('rpi4b'); "
            "print(sorted(m for m in ('numba', 'numpy', 'scipy', 'sim.engines.cpu.engine') "
            "if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


def test_engine_for_and_gemm(xeon):
    from sim.engines.base import engine_for
    engine = engine_for(xeon)
    assert isinstance(engine, CpuEngine) and engine.kind == "cpu" == xeon.kind
    (dense,) = engine.gemm(64, 576, 256)
    (sparse,) = engine.gemm(64, 576, 256, density=0.1, threads=2)
    assert dense.kernel == "gemm" and sparse.kernel == "spmm"
    assert dense.category == sparse.category == "math" and sparse.details["threads"] == 2
    with pytest.raises(ConfigError, match="--density"):
        engine.gemm(8, 8, 8, density=2.0)
    with pytest.raises(ConfigError, match="fp64"):
        engine.gemm(8, 8, 8, dtype="fp64")


def test_row_lines_bound_holds_for_every_row():
    for chunk, n_b in ((0, 40), (24, 40), (24, 100), (0, 1)):
        indptr, indices = random_csr(60, 50, 0.3, seed=5)
        bound = cs.row_lines_bound(indptr, n_b, chunk, 64)
        li, lv = np.full(1, -1, np.int64), np.full(1, -1, np.int64)
        buf = np.empty(bound, np.int64)
        most = max(cs.spmm_row_lines(indptr, indices, r, n_b, chunk, 6, 0, li, lv, buf)
                   for r in range(60))
        assert 0 < most <= bound


@pytest.mark.parametrize("hw", ["xeon-e5-2680v4", "rpi4b"])
def test_warming_empty_levels_directly_is_the_simulated_state(hw):
    # B smaller than L1, between L1 and L2, past every level (the Xeon's L3: 28672 sets, a modulo)
    from sim.engines.cpu import cache as cs
    cpu = cpu_spec(load_hwconfig(hw))
    for n_bytes in (0, 4, 3000, 200_000, 3_000_000, 60_000_000):
        levels = []
        for _ in range(2):
            levels.append([cs.make_level(1, cpu.l1[0], cpu.l1[1], cpu.line),
                           cs.make_level(1, cpu.l2[0], cpu.l2[1], cpu.line),
                           cs.make_level(1, cpu.l3[0], cpu.l3[1], cpu.line)])
        args = (cs.B_BASE + 64, n_bytes, cpu.line, 1)
        now_sim = cs.warm_region(*args, *levels[0], cpu.l2_private, False, 5)
        now_dir = cs.warm_region_empty(*args, *levels[1], cpu.l2_private, False, 5)
        assert now_sim == now_dir
        for a, b in zip(*levels):
            assert np.array_equal(a, b), n_bytes
