"""The CPU engine: cache kernel against its reference, GEMM and SpMM models, sampling, CLI."""
from __future__ import annotations

import json
import math

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
    cs.spmm_stream(indptr, indices, starts, nrows, measure, n_b, chunk, line, lv[0][0], lv[0][1],
                   lv[1][0], lv[1][1], lv[2][0], lv[2][1], l2_private, False, *pf, 4, 2, counts)
    ref = cs.spmm_stream_ref(indptr, indices, starts, nrows, measure, n_b, chunk, line, fresh(),
                             l2_private, False, 3, 4, 2)
    assert counts.sum() > 0 and counts[0].sum() == 0
    np.testing.assert_array_equal(counts, ref)


def test_lru_evicts_least_recent():
    tags, stamps = cs.make_level(1, 2 * 64, 2, 64)     # one set, two ways
    assert not cs._lookup(tags, stamps, 0, 1, 1)
    assert not cs._lookup(tags, stamps, 0, 2, 2)
    assert cs._lookup(tags, stamps, 0, 1, 3)            # 1 is now most recent
    assert not cs._lookup(tags, stamps, 0, 3, 4)        # evicts 2
    assert cs._lookup(tags, stamps, 0, 1, 5) and not cs._lookup(tags, stamps, 0, 2, 6)


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
    assert set(rows) == {("dense", "agbp"), ("dense", "wgc"), ("dbtd:p=0.99,sigma=paper", "agbp"),
                         ("dbtd:p=0.99,sigma=paper", "wgc")}
    assert all(r["seconds"] > 0 and r["cycles"] > 0 for r in rows.values())
