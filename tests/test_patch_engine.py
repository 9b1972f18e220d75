"""Patch-extraction engine (Wang et al.'s approximate WGC on a GPU): kernels, L2 model, CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim.engines.base import PhaseJob
from sim.engines.cli import conv_workload
from sim.engines.gpu import patch
from sim.engines.gpu.engine import GpuEngine
from sim.engines.gpu.gemm import simulate_gemm
from sim.engines.gpu.patch_kernels import lru_hits, lru_hits_reference
from sim.engines.gpu.spec import gpu_spec
from sim.errors import ConfigError
from sim.hwconfig import load_hwconfig
from sim.methods import apply_method, parse_method
from sim.workload import lower


@pytest.fixture(scope="module")
def txp():
    return load_hwconfig("titan-xp")


def conv(cin, cout, h, n=32, r=3):
    return conv_workload(f"{n},{cin},{cout},{h},{h},{r},{r},1,{r // 2}")[1][0]


def kernel(hw, layer, n, pos):
    return patch.approx_kernel(hw, layer, n, pos)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lru_kernel_matches_reference(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([32, 64, 96, 512], size=50).astype(np.int64)
    rows = rng.integers(0, 50, size=2000).astype(np.int64)
    for cap in (0, 200, 1000, 5000, 10 ** 6):
        got = np.zeros(rows.size, np.uint8)
        lru_hits(rows, sizes, cap, got)
        assert np.array_equal(got, lru_hits_reference(rows, sizes, cap))
        py = np.zeros(rows.size, np.uint8)
        lru_hits.py_func(rows, sizes, cap, py)
        assert np.array_equal(py, got)


def test_gathers_match_the_reference_wgc(txp):
    """The access stream gathers exactly the in-bounds patch rows approx_wgc (NumPy-level
    reference of the method) multiplies, so the kernel's FMA count equals the reference's."""
    from sim.methods.approx import approx_wgc
    layer = conv(8, 6, 5, n=3)
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 25, size=(3, 6, 1))
    geo = patch.launch_geometry(8, 6, 3, 3, 3, 1, gpu_spec(txp))
    rows, sizes, kind = patch.access_stream(layer, 3, pos, geo, 4)
    ones = np.ones((3, 6, 1), np.float32)
    I = np.ones((3, 8, 5, 5), np.float32)
    dw = np.zeros((6, 8, 3, 3), np.float32)
    approx_wgc(I, pos.astype(np.int32), ones, 5, 3, 3, 1, 1, dw)
    assert (kind == 1).sum() * 8 == dw.sum()             # one row of C_in values per gather
    assert (kind == 0).sum() == 3 * 6                     # one dO map per (sample, channel)


def test_l2_hit_rate_depends_on_argmax_positions(txp):
    layer = conv(64, 128, 32, n=64)
    n, pq = 64, 32 * 32
    rng = np.random.default_rng(1)
    scattered = rng.integers(0, pq, size=(n, 128, 1))
    clustered = np.repeat(rng.integers(0, pq, size=(n, 1, 1)), 128, axis=1)  # same spot per sample
    a, b = kernel(txp, layer, n, clustered), kernel(txp, layer, n, scattered)
    assert a.details["l2_hit_rate"] > b.details["l2_hit_rate"] + 0.1
    assert a.bytes["dram"] < b.bytes["dram"]
    assert a.seconds <= b.seconds


def test_time_scales_with_c_in_not_with_map(txp):
    n = 64
    rng = np.random.default_rng(2)

    def t(cin, h):
        layer = conv(cin, 128, h, n=n)
        return kernel(txp, layer, n, rng.integers(0, h * h, size=(n, 128, 1))).seconds
    base = t(64, 8)
    assert t(64, 16) < 1.6 * base          # 4x the map, same patch size
    assert t(256, 8) > 2.5 * base          # 4x the patch
    dense = lambda cin, h: simulate_gemm(txp, **dict(zip("mnk", (128, cin * 9, n * h * h))),
                                            dtype="fp32").seconds
    assert dense(64, 16) > 2.5 * dense(64, 8)   # cuDNN-class wgrad scales with C_in*H*W


def test_zero_random_and_approx_phases(txp):
    layer = conv(32, 32, 8, n=16)
    g = lower(layer, 16)["wgc"]
    dO = np.random.default_rng(3).laplace(size=(16, 32, 8, 8)).astype(np.float32)
    res = {}
    for m in ("zero", "random", "approx", "approx-topk:k=3"):
        mr = apply_method(parse_method(m), layer, dO, key=1, batch=16, scheduled=True)
        ks = GpuEngine(txp).simulate(PhaseJob(layer, "wgc", g, 16, mr, charge_method=True))
        assert all(k.engine == "patch" for k in ks)
        for k in ks:
            assert sum(k.breakdown.values()) == pytest.approx(k.seconds, rel=1e-9, abs=1e-15)
        res[m] = ks
    assert sum(k.seconds for k in res["zero"]) == 0.0
    assert [k.kernel for k in res["random"]] == ["random-dw"]
    assert res["random"][0].details["bound"] == "memory"
    kinds = [k.kernel for k in res["approx"]]
    assert kinds == ["zero-dW", "approx-wgc", "transpose-I", "transpose-dW"]
    top = next(k for k in res["approx-topk:k=3"] if k.kernel == "approx-wgc")
    one = next(k for k in res["approx"] if k.kernel == "approx-wgc")
    assert top.details["picks_per_channel"] == 3 and top.flops > 2 * one.flops


def test_hwconfigs_load_without_tensor_cores(txp):
    gtx = load_hwconfig("gtx1080ti")
    for hw, sm in ((txp, 30), (gtx, 28)):
        s = gpu_spec(hw)
        assert s.sm == sm and s.tc_rate == () and s.default_dtype() == "fp32"
        assert all(q.source for q in hw.params.values())
    # fp16 on a GPU without tensor cores computes on the CUDA cores: same math as fp32
    a = simulate_gemm(txp, 1024, 1024, 1024, dtype="fp32")
    assert a.details["tile"] in ("128x128x16", "128x64x16", "64x128x16", "64x64x16", "128x32x16",
                                 "32x128x16")
    assert a.tflops < 2 * 30 * 128 * 1.582e9 / 1e12


def test_missing_smem_latency_is_a_config_error(tmp_path):
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "hwconfigs" / "v100-sxm2.yaml"
    text = "".join(l for l in src.read_text().splitlines(True) if "smem_latency" not in l)
    (tmp_path / "v100-no-smem-latency.yaml").write_text(text)
    v100 = load_hwconfig(tmp_path / "v100-no-smem-latency.yaml")
    layer = conv(16, 16, 8, n=4)
    with pytest.raises(ConfigError) as ei:
        patch.approx_kernel(v100, layer, 4, np.zeros((4, 16, 1), np.int64))
    assert ei.value.field == "params.smem_latency"


def test_cli_layer_json(capsys):
    from sim.cli import main
    rc = main(["layer", "--hw", "hwconfigs/titan-xp.yaml", "--conv", "32,64,64,8,8,3,3,1,1",
               "--phase", "wgc", "--method", "approx", "--method", "dense", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    approx, dense = d["runs"][0], d["runs"][1]
    ph = approx["layers"][0]["phases"]["wgc"]
    assert d["dtype"] == "fp32"
    assert {"patch_kernel", "transpose", "launch"} <= set(ph["breakdown"])
    assert ph["seconds"] == pytest.approx(sum(k["seconds"] for k in ph["kernels"]))
    assert dense["layers"][0]["phases"]["wgc"]["kernels"][0]["kernel"] == "gemm"
