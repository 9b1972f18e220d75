"""Grouped and depthwise convs on the GPU: a direct CUDA-core kernel (memory-bound) or the grouped
GEMM, whichever is faster, as cuDNN picks; checked against hand-derived bytes and FLOPs."""
from __future__ import annotations

import pytest

from sim.engines.base import PhaseJob
from sim.engines.gpu.engine import GpuEngine
from sim.engines.gpu.gemm import direct_grouped_conv
from sim.engines.gpu.spec import gpu_spec
from sim.hwconfig import load_hwconfig
from sim.workload import lower, workload_from_dict


def _net(c=32, hw=16):
    return workload_from_dict({"schema": 1, "name": "t", "input": {"channels": c, "height": hw,
                                                                  "width": hw}, "layers": [
        {"name": "dw", "op": "conv", "in": "x", "out": "dw", "c_out": c, "kernel": 3, "pad": 1,
         "groups": c},
        {"name": "pw", "op": "conv", "in": "dw", "out": "pw", "c_out": c, "kernel": 1},
        {"name": "g4", "op": "conv", "in": "pw", "out": "g4", "c_out": 4 * c, "kernel": 3,
         "pad": 1, "groups": 4}]})


def _phase(g, hw):
    """The kernels of one lowered dense GEMM (no layer: the engine sees the GEMM alone)."""
    return GpuEngine(hw).simulate(PhaseJob(None, g.phase, g, 0))


def test_depthwise_phase_is_a_direct_kernel_with_the_hand_derived_bytes_and_flops():
    hw = load_hwconfig("a100-sxm4-40gb")
    n, c, h = 8, 32, 16
    dw = _net(c, h).layer("dw")
    # by hand: every phase reads two of (input N*C*H*W, weights C*3*3, output N*C*P*Q) and writes
    # the third, once, in fp16; 9 FMAs per output (one input channel per group)
    act, wts = n * c * h * h, c * 9
    want_bytes = {"fwd": (act + wts + act) * 2, "agbp": (act + wts + act) * 2,
                  "wgc": (act + act + wts) * 2}
    fmas = n * c * h * h * 9
    s = gpu_spec(hw)
    for ph, g in lower(dw, n).items():
        (k,) = _phase(g, hw)
        assert k.kernel == "direct-conv" and "direct" in k.details["algorithm"]
        assert k.bytes["dram"] == want_bytes[ph]
        assert k.flops == 2 * fmas
        # launch + max(bytes / streaming bandwidth, FMAs / CUDA-core rate) + one DRAM latency
        mem = want_bytes[ph] / s.stream_bpc
        alu = fmas / (s.sm * s.cuda_rate * s.cuda_ratio)
        assert k.cycles == pytest.approx(s.launch + max(mem, alu) + s.dram_lat, rel=1e-12)
        assert mem > alu and k.details["bound"] == "memory"   # depthwise is memory-bound
        assert "grouped GEMM" in k.details["rejected"]


def test_depthwise_is_no_slower_than_the_pointwise_conv_with_more_flops():
    """The new-user report: depthwise FWD 56.5 us beside a pointwise conv with ~5x its FLOPs at
    7.2 us. Both move the same activation bytes; the depthwise conv must not take longer."""
    hw = load_hwconfig("a100-sxm4-40gb")
    w = _net(64, 56)
    for ph in ("fwd", "agbp", "wgc"):
        dw, pw = (lower(w.layer(x), 64)[ph] for x in ("dw", "pw"))
        assert pw.flops > 5 * dw.flops
        t_dw = sum(k.seconds for k in _phase(dw, hw))
        t_pw = sum(k.seconds for k in _phase(pw, hw))
        assert t_dw <= t_pw * 1.05, ph


def test_wide_groups_keep_the_grouped_gemm_when_it_is_faster():
    hw = load_hwconfig("a100-sxm4-40gb")
    g = lower(_net(64, 56).layer("g4"), 64)["fwd"]      # 16 input channels per group, 144 K
    (k,) = _phase(g, hw)
    assert k.kernel == "gemm" and k.details["algorithm"] == "grouped GEMM"
    direct = direct_grouped_conv(hw, g, "fp16")
    assert k.seconds < direct.seconds and "direct kernel" in k.details["rejected"]


def test_nm_pruned_depthwise_agbp_takes_the_direct_kernel_and_says_so():
    """SDGP's n:m groups run along dO's channels; a depthwise AGBP reduces over one channel's taps,
    so its sparse grouped GEMM has nothing to skip. The engine picks the dense direct kernel,
    as for a dense dO (no slower than dense), and names the rejected sparse GEMM; an ungrouped
    conv keeps its sparse GEMM."""
    from types import SimpleNamespace

    from sim.engines.gpu.gemm import gemm_phase
    hw = load_hwconfig("a100-sxm4-40gb")
    w = _net(64, 56)
    mr = SimpleNamespace(nm=None, params={"nm": "2:4"})
    dw = lower(w.layer("dw"), 64)["agbp"]
    (k,) = gemm_phase(hw, dw, mr, "nm", "fp16")
    assert k.kernel == "direct-conv" and "n:m sparse grouped GEMM" in k.details["rejected"]
    assert k.seconds <= sum(x.seconds for x in _phase(dw, hw)) * (1 + 1e-9)
    assert "direct kernel" in k.details["fallback"]
    (kp,) = gemm_phase(hw, lower(w.layer("pw"), 64)["agbp"], mr, "nm", "fp16")
    assert kp.kernel == "gemm" and "fallback" not in kp.details
