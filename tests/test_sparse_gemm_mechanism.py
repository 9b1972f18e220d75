"""The 2:4 sparse GEMM's shared-memory mechanism and the power-limited configs it sits beside.

- the sparse mainloop on the mma.sync route is bound by shared memory, so the sustained
  shared-memory rate (`smem_bandwidth_sustained`) moves its time, not a dense GEMM's or a wgmma
  kernel's;
- the metadata is counted once (`sparse_meta_load` bytes replace the index bits, never add to them);
- the 2:4 speedup falls toward 1 on small and skinny GEMMs and approaches, without reaching, 2 on
  large ones;
- the A100 PCIe card (250 W) and the V100s run power-limited tensor-core GEMMs below their boost
  clock, memory-bound and CUDA-core GEMMs at it.
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from sim.engines.gpu import gemm as G
from sim.engines.gpu.gemm import GemmShape, simulate_gemm
from sim.engines.gpu.params import HW_FIELDS
from sim.engines.gpu.spec import gpu_spec
from sim.hwconfig import load_hwconfig

A100 = "a100-sxm4-40gb"


def _variant(tmp_path: Path, base: str, name: str, params: dict):
    lines = [f"name: {name}", "kind: gpu", f"base: {base}", "params:"]
    lines += [f"  {k}: {{value: {v}, source: test}}" for k, v in params.items()]
    p = tmp_path / f"{name}.yaml"
    p.write_text("\n".join(lines) + "\n")
    return load_hwconfig(str(p))


def _run(hw, m, n, k, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_gemm(hw, m, n, k, **kw)


def _speedup(hw, m, n, k, dtype="fp16") -> float:
    return _run(hw, m, n, k, dtype=dtype).seconds / _run(hw, m, n, k, dtype=dtype,
                                                         sparse="2:4").seconds


# ---- the sustained shared-memory rate --------------------------------------------------------

def test_field_is_declared_with_unit_and_the_configs_source_it():
    f = HW_FIELDS["smem_bandwidth_sustained"]
    assert f.dimension == "bytes_per_cycle" and not f.required and f.attr == "smem_sus"
    for cfg in (A100, "a100-sxm4-80gb", "a100-pcie-40gb", "h100-sxm5-80gb"):
        hw = load_hwconfig(cfg)
        q = hw.params["smem_bandwidth_sustained"]
        assert len(q.source) > 40, cfg
        # never above the nominal bank bandwidth
        assert hw.value("smem_bandwidth_sustained") <= hw.value("smem_bandwidth")


def test_sustained_smem_moves_the_sparse_gemm_not_the_dense_one(tmp_path):
    a100 = load_hwconfig(A100)
    nominal = _variant(tmp_path, A100, "nominal", {"smem_bandwidth_sustained": '"128 B/clk"'})
    lower = _variant(tmp_path, A100, "lower", {"smem_bandwidth_sustained": '"96 B/clk"'})
    shape = (8192, 8192, 8192)
    sp = [_run(h, *shape, sparse="2:4").seconds for h in (nominal, a100, lower)]
    assert sp[0] < sp[1] < sp[2]
    # the large dense GEMM's mainloop is MMA-bound at every one of these rates
    dense = [_run(h, *shape).seconds for h in (nominal, a100, lower)]
    assert dense[0] == pytest.approx(dense[1], rel=1e-3)
    assert dense[1] == pytest.approx(dense[2], rel=1e-3)
    # so the 2:4 speedup is what falls
    assert _speedup(nominal, *shape) > _speedup(a100, *shape) > _speedup(lower, *shape)


def test_sustained_smem_only_on_the_mma_sync_route(tmp_path):
    """wgmma reads its operands through descriptors: the field leaves H100 dense and native 2:4
    kernels alone, and moves the Ampere mma.sp kernel recompiled for Hopper."""
    args = (4096, 4096, 4096)
    native = load_hwconfig("h100-sxm5-80gb")
    native_low = _variant(tmp_path, "h100-sxm5-80gb", "native_low",
                          {"smem_bandwidth_sustained": '"64 B/clk"'})
    assert _run(native_low, *args).seconds == _run(native, *args).seconds
    assert _run(native_low, *args, sparse="2:4").seconds == \
        _run(native, *args, sparse="2:4").seconds
    ampere = load_hwconfig("h100-sxm5-80gb-ampere-sparse")
    ampere_low = _variant(tmp_path, "h100-sxm5-80gb-ampere-sparse", "ampere_low",
                          {"smem_bandwidth_sustained": '"64 B/clk"'})
    assert _run(ampere_low, *args, sparse="2:4").seconds > \
        _run(ampere, *args, sparse="2:4").seconds
    assert _run(ampere_low, *args).seconds == _run(ampere, *args).seconds


def test_cuda_core_gemms_keep_the_nominal_rate(tmp_path):
    a100 = load_hwconfig(A100)
    low = _variant(tmp_path, A100, "low_simt", {"smem_bandwidth_sustained": '"32 B/clk"'})
    assert _run(low, 2048, 2048, 2048, dtype="fp32").seconds == \
        _run(a100, 2048, 2048, 2048, dtype="fp32").seconds


# ---- metadata counted once -------------------------------------------------------------------

def test_metadata_bytes_replace_the_index_bits():
    """64 B per 16 rows and sparse k-step is exactly the 2-bit indices of an m16n8k32 fp16 MMA,
    so the field set to that value equals the bits-only accounting; 128 B adds exactly the
    difference (per warp row block and k-step), never a second copy of the bits."""
    s = gpu_spec(load_hwconfig(A100))
    g = GemmShape(4096, 4096, 4096, 1, "fp16", (2, 4, 2))
    tile = G._SPARSE_TILES[0]
    f = G._fit(s, g, tile)
    bits_only = G._smem_per_ktile(dataclasses.replace(s, meta_load=None), g, f, tile)
    at64 = G._smem_per_ktile(dataclasses.replace(s, meta_load=64.0), g, f, tile)
    at128 = G._smem_per_ktile(dataclasses.replace(s, meta_load=128.0), g, f, tile)
    assert at64 == pytest.approx(bits_only)
    rows = f.warps * tile[2]                         # every warp reads its own A rows
    k_steps = f.bk / 32                              # m16n8k32 sparse steps per k-tile
    assert at128 - at64 == pytest.approx(rows / 16 * k_steps * 64)
    # the A fragments are the kept values (half the dense bytes) plus their metadata
    dense_g = GemmShape(4096, 4096, 4096, 1, "fp16", None)
    assert f.a_eb == pytest.approx(2 * 0.5 + f.meta_eb) and f.meta_eb == pytest.approx(0.125)
    assert G._fit(s, dense_g, G._TILES[0]).meta_eb == 0.0


# ---- where the 2:4 speedup lands -------------------------------------------------------------

def test_speedup_falls_toward_one_for_small_and_skinny_gemms():
    a100 = load_hwconfig(A100)
    large = _speedup(a100, 8192, 8192, 8192)
    mid = _speedup(a100, 2048, 2048, 2048)
    small = _speedup(a100, 512, 512, 512)
    # M = 64: the sparse operand is the small one; the dense B streams as before
    skinny = _speedup(a100, 64, 65536, 1024)
    assert 1.3 < large < 2.0
    assert small < mid < large
    assert small < 1.1
    assert skinny < 1.1
    # a memory-bound GEMM whose sparse operand dominates the traffic gains its bytes, not 2x
    tall = _speedup(a100, 65536, 64, 1024)
    assert skinny < tall < 2.0


def test_short_k_loses_more_than_long_k():
    """Fixed per-tile costs (prologue, pipeline fill, epilogue) do not shrink with the halved
    mainloop, so a short reduction gains less than a long one at the same output size."""
    a100 = load_hwconfig(A100)
    assert _speedup(a100, 4096, 4096, 512) < _speedup(a100, 4096, 4096, 8192)


# ---- A100 PCIe and the V100 sustained clocks -------------------------------------------------

def test_a100_pcie_loads_and_is_the_sxm4_part_at_a_lower_power_limit():
    pcie, sxm = load_hwconfig("a100-pcie-40gb"), load_hwconfig(A100)
    assert pcie.value("sm_count") == sxm.value("sm_count")
    assert pcie.value("clock") == sxm.value("clock")
    assert pcie.value("sustained_clock") < sxm.value("sustained_clock")
    big_p, big_s = _run(pcie, 8192, 8192, 8192), _run(sxm, 8192, 8192, 8192)
    assert big_p.seconds > 1.05 * big_s.seconds
    assert big_p.details["clock_mhz"] < big_s.details["clock_mhz"]
    # a memory-bound GEMM keeps the boost clock on both: same HBM, same time
    sk_p, sk_s = _run(pcie, 65536, 8, 4096), _run(sxm, 65536, 8, 4096)
    assert sk_p.seconds == pytest.approx(sk_s.seconds, rel=1e-6)


def test_a100_pcie_runs_from_the_cli(capsys):
    from sim.cli import main
    main(["gemm", "--hw", "a100-pcie-40gb", "--m", "1024", "--n", "1024", "--k", "1024",
          "--sparse", "2:4"])
    assert "a100-pcie-40gb" in capsys.readouterr().out


def test_v100_tensor_core_gemms_are_power_limited_cuda_core_ones_are_not(tmp_path):
    for cfg in ("v100-sxm2", "v100-pcie-16gb"):
        hw = load_hwconfig(cfg)
        boost = _variant(tmp_path, cfg, cfg + "-boost",
                         {"sustained_clock": f'"{hw.params["clock"].written}"'})
        r = _run(hw, 8192, 8192, 8192)
        assert r.details["clock_mhz"] < hw.value("clock") / 1e6
        assert r.seconds > 1.1 * _run(boost, 8192, 8192, 8192).seconds
        # fp32 runs on the CUDA cores: no power law there, the boost clock stays
        f32 = _run(hw, 2048, 2048, 2048, dtype="fp32")
        assert f32.seconds == _run(boost, 2048, 2048, 2048, dtype="fp32").seconds
    # the 250 W PCIe card holds a lower tensor-core clock than the 300 W SXM2 module
    assert load_hwconfig("v100-pcie-16gb").value("sustained_clock") < \
        load_hwconfig("v100-sxm2").value("sustained_clock")
