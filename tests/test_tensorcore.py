"""The tensor-core engine: the Numba block pipeline against its references, roofline sanity,
sparsity, fallbacks, monotonicity in the hardware, method kernels, and the CLI's JSON."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main
from sim.driver import simulate_layer
from sim.engines.base import PhaseJob
from sim.engines.gpu.engine import GpuEngine
from sim.engines.gpu.gemm import simulate_gemm
from sim.engines.gpu.kernels import N_OUT, block_pipeline, block_pipeline_reference
from sim.engines.gpu.spec import gpu_spec
from sim.hwconfig import load_hwconfig
from sim.methods import parse_method
from sim.methods.synthetic import nominal_nm_result
from sim.workload import load_workload, lower

A100 = "a100-sxm4-40gb"

# (n_iter, stages, load_bytes, load_bw, mem_lat, work, mma_frac, mma_lat, epi)
CASES = [
    (20, 3, 4096.0, 30.0, 200.0, 100.0, 0.8, 30.0, 50.0),     # memory-bound
    (50, 2, 8192.0, 10.0, 400.0, 512.0, 1.0, 30.0, 100.0),    # latency-bound (too few stages)
    (40, 4, 16384.0, 100.0, 300.0, 512.0, 0.7, 30.0, 10.0),   # compute-bound
    (64, 5, 1000.0, 7.3, 333.0, 17.3, 0.5, 3.0, 1.0),         # fractional rates
    (1, 3, 5000.0, 50.0, 100.0, 80.0, 1.0, 10.0, 20.0),       # a single k-tile
]


def run_kernel(case, max_sim=10 ** 9, py=False):
    out = np.zeros(N_OUT)
    fn = block_pipeline.py_func if py else block_pipeline
    fn(*case, max_sim, out)
    return out


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_its_python_form(case):
    np.testing.assert_allclose(run_kernel(case), run_kernel(case, py=True), rtol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_event_reference(case):
    """The independent event-list reference differs only by the stepper's sub-cycle rounding."""
    got, ref = run_kernel(case), block_pipeline_reference(*case)
    assert got[0] == pytest.approx(ref[0], rel=0.01)
    np.testing.assert_allclose(got[2:4], ref[2:4], rtol=1e-9)       # math and smem are exact
    assert got[5] == ref[5]
    # fill + math + smem + stall + drain = total
    assert got[1:].sum() == pytest.approx(got[0], rel=1e-9)


@pytest.mark.parametrize("case", CASES)
def test_steady_state_extrapolation(case):
    full, short = run_kernel(case), run_kernel(case, max_sim=2 * case[1] + 4)
    assert short[0] == pytest.approx(full[0], rel=0.01)


def test_steady_state_period_is_the_bottleneck():
    # enough stages to hide latency: period = max(transfer time, consumer work)
    for load_bw, work in ((10.0, 100.0), (100.0, 100.0), (50.0, 300.0)):
        a = run_kernel((400, 6, 4096.0, load_bw, 300.0, work, 1.0, 0.0, 0.0))
        b = run_kernel((200, 6, 4096.0, load_bw, 300.0, work, 1.0, 0.0, 0.0))
        assert (a[0] - b[0]) / 200 == pytest.approx(max(4096.0 / load_bw, work), rel=0.01)


@pytest.fixture(scope="module")
def a100():
    return load_hwconfig(A100)


def peak_tflops(hw, dtype="fp16"):
    s = gpu_spec(hw)
    return 2 * s.sm * s.fma_rate(dtype) * s.clock / 1e12


def test_huge_square_gemm_is_compute_bound_near_peak(a100):
    r = simulate_gemm(a100, 8192, 8192, 8192)
    assert 0.8 * peak_tflops(a100) < r.tflops <= peak_tflops(a100)
    assert r.breakdown["math"] > 0.8 * r.seconds
    assert sum(r.breakdown.values()) == pytest.approx(r.seconds, rel=1e-9)
    assert r.details["tile"] and r.details["candidates"] > 1


def test_skinny_gemm_is_memory_bound(a100):
    r = simulate_gemm(a100, 4 * 1024 * 1024, 64, 64)
    assert r.tflops < 0.2 * peak_tflops(a100)
    # two k-tiles per block: the time is waiting on memory (pipeline fill and stalls), not math
    assert r.breakdown["memory"] + r.breakdown["fill_drain"] > 3 * r.breakdown["math"]
    # cannot beat DRAM (its compulsory bytes at peak bandwidth), and stays close to that floor
    floor = r.bytes["dram"] / a100.value("hbm_bandwidth")
    assert floor <= r.seconds < 1.3 * floor
    assert sum(r.breakdown.values()) == pytest.approx(r.seconds, rel=1e-9)


def test_sparse_24_faster_but_not_2x(a100):
    d = simulate_gemm(a100, 8192, 8192, 8192)
    s = simulate_gemm(a100, 8192, 8192, 8192, sparse="2:4")
    assert 1.0 < d.seconds / s.seconds < 2.0
    assert s.details["sparse"] == "2:4" and s.flops * 2 == d.flops
    # A streams kept values plus 2-bit metadata: 9/16 of its dense bytes
    assert s.bytes["l2"] < d.bytes["l2"]


def test_unsupported_pattern_falls_back_with_warning(a100):
    v100 = load_hwconfig("v100-sxm2")
    with pytest.warns(RuntimeWarning, match="running dense"):
        r = simulate_gemm(v100, 2048, 2048, 2048, sparse="2:4")
    assert r.details["sparse"] is None and "sparse_fallback" in r.details
    assert r.seconds == simulate_gemm(v100, 2048, 2048, 2048).seconds
    with pytest.warns(RuntimeWarning, match="1:4"):
        simulate_gemm(a100, 2048, 2048, 2048, sparse="1:4")
    hyp = load_hwconfig("a100-nm-hypothetical")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = simulate_gemm(hyp, 4096, 4096, 4096, sparse="1:4")
        h = simulate_gemm(hyp, 4096, 4096, 4096, sparse="2:4")
    assert q.seconds < h.seconds


def test_dtypes(a100):
    f16 = simulate_gemm(a100, 4096, 4096, 4096, dtype="fp16")
    tf32 = simulate_gemm(a100, 4096, 4096, 4096, dtype="tf32")
    fp32 = simulate_gemm(a100, 4096, 4096, 4096, dtype="fp32")
    assert f16.seconds < tf32.seconds < fp32.seconds
    with pytest.raises(Exception, match="bf16"):
        simulate_gemm(load_hwconfig("v100-sxm2"), 64, 64, 64, dtype="bf16")


def _variant(tmp_path, name, params):
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\nbase: {A100}\nparams:\n" + "".join(
        f"  {k}: {{value: {v}, source: test}}\n" for k, v in params.items()))
    return load_hwconfig(p)


SHAPES = [(4096, 4096, 4096), (802816, 64, 576), (64, 576, 802816), (12544, 512, 4608),
          (256, 1000, 512), (3000, 3000, 100)]


def test_more_sms_or_bandwidth_never_slower(a100, tmp_path):
    better = [_variant(tmp_path, "sm", {"sm_count": 132}),
              _variant(tmp_path, "hbm", {"hbm_bandwidth": "3 TB/s"}),
              _variant(tmp_path, "l2", {"l2_bandwidth": "8192 B/clk", "l2_size": "80 MB"})]
    for m, n, k in SHAPES:
        base = simulate_gemm(a100, m, n, k).seconds
        for hw in better:
            assert simulate_gemm(hw, m, n, k).seconds <= base * (1 + 1e-9), (hw.name, m, n, k)


def test_sdgp_only_agbp_sparse_and_overhead_charged(a100):
    wl = load_workload("resnet9")
    layer = wl.layers[2]
    res = simulate_layer(a100, layer, 64, method=parse_method("sdgp-mag:nm=2:4"))
    agbp = {k.kernel: k for k in res["agbp"]}
    assert agbp["gemm"].details["sparse"] == "2:4"
    assert "sdgp-mag-overhead" in agbp and agbp["sdgp-mag-overhead"].breakdown["method_overhead"] > 0
    assert [k.kernel for k in res["wgc"]] == ["gemm"] and res["wgc"][0].details["sparse"] is None
    assert [k.kernel for k in res["fwd"]] == ["gemm"]
    dense = simulate_layer(a100, layer, 64)
    assert agbp["gemm"].seconds < dense["agbp"][0].seconds
    assert dense["wgc"][0].seconds == res["wgc"][0].seconds


def test_strided_agbp_has_col2im_and_stem_has_no_agbp(a100):
    wl = load_workload("resnet18-imagenet")
    res = simulate_layer(a100, wl.layer("layer2.0.conv1"), 8)
    assert [k.kernel for k in res["agbp"]] == ["gemm", "col2im"]
    assert "agbp" not in simulate_layer(a100, wl.layers[0], 8)


def test_dbtd_runs_dense_gemm_plus_its_passes(a100):
    wl = load_workload("resnet9")
    res = simulate_layer(a100, wl.layers[2], 16, method=parse_method("dbtd"))
    kern = [k.kernel for k in res["agbp"]]
    assert kern[0] == "gemm" and "dbtd-overhead" in kern
    assert "cannot skip" in res["agbp"][0].details["note"]
    assert [k.kernel for k in res["wgc"]] == ["gemm"]


def test_phase_api_matches_engine_contract(a100):
    wl = load_workload("resnet9")
    g = lower(wl.layers[3], 32)["fwd"]
    (kr,) = GpuEngine(a100).simulate(PhaseJob(None, g.phase, g, 32))
    assert kr.engine == "tensorcore" and kr.phase == "fwd" and kr.flops == g.flops
    assert set(kr.bytes) == {"dram", "l2", "smem"}


def run_cli(capsys, argv):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_gemm_json(capsys):
    rc, out, _ = run_cli(capsys, ["gemm", "--hw", A100, "--m", "2048", "--n", "2048", "--k", "2048",
                                  "--sparse", "2:4", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["seconds"] > 0 and d["cycles"] > 0 and d["tflops"] > 0
    assert d["cycles"] / 1.41e9 == pytest.approx(d["seconds"])
    assert d["details"]["sparse"] == "2:4"


def test_cli_layer_json_conv_and_workload(capsys):
    rc, out, _ = run_cli(capsys, ["layer", "--hw", A100, "--conv", "32,64,64,28,28,3,3,1,1",
                                  "--method", "sdgp-mag", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["batch"] == 32
    lay = d["runs"][0]["layers"][0]
    assert set(lay["phases"]) == {"fwd", "agbp", "wgc"}
    for ph in lay["phases"].values():
        assert ph["seconds"] > 0 and ph["cycles"] > 0
    rc, out, _ = run_cli(capsys, ["layer", "--hw", A100, "--workload", "resnet9", "--layer", "1",
                                  "--phase", "agbp", "--batch", "64", "--json"])
    d = json.loads(out)
    assert rc == 0 and list(d["runs"][0]["layers"][0]["phases"]) == ["agbp"]
    assert d["seconds"] == pytest.approx(d["runs"][0]["layers"][0]["seconds"])


def test_cli_bad_arguments_one_line(capsys):
    for argv in (["gemm", "--hw", A100, "--m", "8", "--n", "8", "--k", "8", "--sparse", "5:4"],
                 ["gemm", "--hw", A100, "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp8"],
                 ["layer", "--hw", A100, "--conv", "1,2,3"],
                 ["layer", "--hw", A100, "--workload", "resnet9", "--layer", "99"]):
        rc, _, err = run_cli(capsys, argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("prunesim: error:")


@pytest.mark.parametrize("method", ["sdgp-mag:nm=2:4", "sdgp-random:nm=1:4", "sdgp-resmag:nm=4:32"])
def test_nominal_nm_result_equals_the_method_on_data(method):
    from sim.methods import apply_method
    wl = load_workload("resnet9")
    layer = wl.layers[2]
    spec = parse_method(method)
    g = np.random.default_rng(0).laplace(size=layer.tensor_shapes(3)["dO"]).astype(np.float32)
    real = apply_method(spec, layer, g, key=1, batch=3)
    nom = nominal_nm_result(spec, layer, 3)
    assert nom.work == real.work and nom.structure == real.structure == "nm"
    assert nom.density == pytest.approx(real.density) and nom.phases == real.phases


def test_edge_tiles_move_only_their_real_bytes():
    """A narrow GEMM (a pruned 16- or 9-channel 1x1 conv at 32 x 32 x 128 on the GTX 1080 Ti,
    fp32): the padded columns of its edge tiles are predicated off, so fewer channels take less
    time (they took the same 101 us when the epilogue stored the padded tile), the time stays
    within 1.5x of the DRAM floor of its real bytes, and a GEMM that fills its tiles is not
    touched by the edge rule (its DRAM bytes are the operands' and the output's)."""
    hw = load_hwconfig("gtx1080ti")
    bw = hw.value("hbm_bandwidth")
    m = 131072
    t = {}
    for n in (16, 9):
        r = simulate_gemm(hw, m, n, n, dtype="fp32")
        floor = 2 * m * n * 4 / bw
        assert r.bytes["dram"] == pytest.approx(2 * m * n * 4, rel=0.01)
        assert floor < r.seconds < 1.5 * floor + 4e-6, n
        t[n] = r.seconds
    assert t[9] < 0.8 * t[16]
    full = simulate_gemm(hw, m, 64, 64, dtype="fp32")
    assert full.bytes["dram"] == pytest.approx(2 * m * 64 * 4, rel=0.01)
