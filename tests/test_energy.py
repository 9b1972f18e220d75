"""Energy per step: counts x the hwconfig's per-op energy table, n/a without one."""
import pytest

from sim.engines.base import KernelResult
from sim.engines.energy import NA, kernel_energy, kernels_energy
from sim.engines.gpu.gemm import simulate_gemm
from sim.hwconfig import load_hwconfig

HYP = load_hwconfig("a100-nm-hypothetical")


def _kr(kernel="gemm", dtype="fp16", flops=2000, **by):
    details = {"dtype": dtype, **({"m": 10, "n": 10, "k": 10} if kernel == "gemm" else {})}
    return KernelResult("tensorcore", HYP.name, "l", "fwd", kernel, 1.0, 1e9, flops, {}, dict(by),
                        details)


def test_hand_computed_kernel_energy():
    # 1000 FMAs x 1.5 pJ + 100 B x 3.9 pJ/bit x 8 + 200 B x 12.5 pJ + 300 B x 1.25 pJ
    e = kernels_energy(HYP, [_kr(dram=100, l2=200, smem=300)])
    assert e["math"] == pytest.approx(1500e-12)
    assert e["dram"] == pytest.approx(3120e-12)
    assert e["total"] == pytest.approx((1500 + 3120 + 2500 + 375) * 1e-12)
    # fp32 and the direct depthwise kernel run on CUDA cores: 4.6 pJ per FMA
    assert kernel_energy(HYP, _kr(dtype="fp32"))["math"] == pytest.approx(4600e-12)
    assert kernel_energy(HYP, _kr(kernel="direct-conv"))["math"] == pytest.approx(4600e-12)
    assert kernel_energy(HYP, _kr(kernel="approx-wgc"))["math"] == pytest.approx(4600e-12)


def test_missing_field_or_table_is_none_not_a_guess():
    assert kernel_energy(HYP, _kr(dtype="bf16")) is None       # no sourced bf16 FMA energy
    assert kernels_energy(load_hwconfig("a100-sxm4-80gb"), [_kr()]) is None
    assert kernels_energy(load_hwconfig("xeon-e5-2680v4"), [_kr()]) is None


def test_sparse_gemm_spends_less_math_energy():
    dense = kernel_energy(HYP, simulate_gemm(HYP, 512, 512, 512))
    sparse = kernel_energy(HYP, simulate_gemm(HYP, 512, 512, 512, sparse="2:4"))
    assert sparse["math"] == pytest.approx(dense["math"] / 2)


def _replay(capsys, *extra):
    from sim.cli import main
    assert main(["replay", "traces/sample-cnn2-mnist5k", "--hw", "a100-nm-hypothetical",
                 "--iteration", "0", *extra]) == 0
    return capsys.readouterr().out


def test_replay_energy_table(capsys):
    import json
    recs = {r["hw"]: r for r in json.loads(_replay(capsys, "--hw", "a100-sxm4-80gb",
                                                   "--json"))["performance"]}
    assert recs["a100-sxm4-80gb"]["energy_j"] is None
    hyp = recs["a100-nm-hypothetical"]
    split = json.loads(hyp["energy_split"])
    assert hyp["energy_j"] == pytest.approx(sum(split.values())) and hyp["energy_j"] > 0
    txt = _replay(capsys, "--hw", "a100-sxm4-80gb", "--energy")
    assert NA in txt and "energy per training iteration" in txt
    assert "energy per training iteration" not in _replay(capsys)


def test_energy_flag_refused_where_it_changes_nothing(capsys):
    from sim.cli import main
    for extra in (["--hw", "a100-nm-hypothetical", "--json"], []):
        assert main(["replay", "traces/sample-cnn2-mnist5k", "--energy", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("prunesim: error:") and "--energy" in err[0]
