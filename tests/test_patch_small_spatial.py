"""The approximate WGC at small spatial sizes and few channels (the ResNet-20 stage-2/3 shapes).

What sets the per-layer speedup there (docs/explanation/engines/patch.md, "Small spatial sizes"):
- the approx path is four kernels (dW zero-fill, patch kernel, two transposes), each paying the
  hwconfig's launch gap, so a fixed cost that does not shrink with C_in * C_out;
- the dense WGC GEMM (M = C_out, N = C_in*R*S, K = N*P*Q) has fewer output tiles than the
  TITAN Xp has SMs and is split along K to fill them, with a C_out-wide (32) tile when C_out is 32,
  as cuDNN's Maxwell/Pascal wgrad kernels do (maxwell_scudnn_128x32_stridedB_splitK_*);
- so at a fixed map size the speedup grows with the channel count: the narrow layers cannot reach
  the figures Wang et al. print for 128- and 256-channel layers.
"""
from __future__ import annotations

import math

import pytest

from sim.driver import simulate_layer
from sim.engines.cli import conv_workload
from sim.engines.gpu.spec import gpu_spec
from sim.hwconfig import load_hwconfig
from sim.methods import parse_method

BATCH = 128
SMALL = [(32, 32, 16), (64, 64, 8)]      # ResNet-20 stage 2 and stage 3 convs (C_in, C_out, H=W)
WIDE = [(128, 128, 16), (256, 256, 8)]   # the same map sizes at the channel counts Wang et al. time


@pytest.fixture(scope="module")
def txp():
    return load_hwconfig("titan-xp")


def _layer(cin, cout, hw_):
    return conv_workload(f"{BATCH},{cin},{cout},{hw_},{hw_},3,3,1,1")[1][0]


@pytest.fixture(scope="module")
def wgc(txp):
    """(C_in, C_out, H) -> (dense WGC kernels, approx WGC kernels) at batch 128 on the TITAN Xp."""
    approx = parse_method("approx")
    out = {}
    for shape in SMALL + WIDE:
        layer = _layer(*shape)
        out[shape] = (simulate_layer(txp, layer, BATCH, phases=("wgc",))["wgc"],
                      simulate_layer(txp, layer, BATCH, method=approx, phases=("wgc",))["wgc"])
    return out


def _seconds(ks):
    return sum(k.seconds for k in ks)


def _launch_s(txp):
    sp = gpu_spec(txp)
    return sp.launch / sp.clock


def test_approx_path_is_four_launched_kernels(txp, wgc):
    """memset, patch kernel, two transposes: each charges exactly the hwconfig's launch gap."""
    launch = _launch_s(txp)
    assert launch > 0
    for shape in SMALL:
        ks = wgc[shape][1]
        assert [k.kernel for k in ks] == ["zero-dW", "approx-wgc", "transpose-I", "transpose-dW"]
        for k in ks:
            assert k.breakdown["launch"] == pytest.approx(launch, rel=1e-9)
            assert k.seconds > k.breakdown["launch"]


def test_fixed_costs_dominate_the_small_layers(txp, wgc):
    """At 32-64 channels the four launches are over 30 % of the approx WGC and launches plus
    transposes over half of it; at 128-256 channels the launches are under 10 %."""
    launch = _launch_s(txp)
    for shape in SMALL:
        ks = wgc[shape][1]
        tot = _seconds(ks)
        tr = sum(k.breakdown["transpose"] for k in ks if k.kernel.startswith("transpose"))
        assert 4 * launch / tot > 0.30, shape
        assert (4 * launch + tr) / tot > 0.5, shape
    for shape in WIDE:
        assert 4 * launch / _seconds(wgc[shape][1]) < 0.10, shape


def test_dense_small_wgc_is_split_to_fill_the_sms(txp, wgc):
    """The small layers' WGC GEMM has fewer output tiles than SMs; the model splits K so its blocks
    cover every SM (cuDNN's wgrad kernels are split-K too) and charges the split-K reduction."""
    sm = gpu_spec(txp).sm
    for cin, cout, hw_ in SMALL:
        g = wgc[(cin, cout, hw_)][0][0]
        d = g.details
        assert (d["m"], d["n"], d["k"]) == (cout, cin * 9, BATCH * hw_ * hw_)
        bm, bn, _ = (int(x) for x in d["tile"].split("x"))
        tiles = math.ceil(d["m"] / bm) * math.ceil(d["n"] / bn)
        assert tiles < sm
        assert d["split_k"] > 1
        assert d["blocks"] == tiles * d["split_k"] >= sm
        assert g.breakdown["splitk_reduce"] > 0


def test_dense_32_channel_wgc_uses_a_32_wide_tile(wgc):
    """C_out = 32 is not padded to a 64-row tile (cuDNN has a 128x32 split-K wgrad kernel): the
    tile's C_out side is 32."""
    d = wgc[(32, 32, 16)][0][0].details
    assert int(d["tile"].split("x")[0]) == 32


def test_speedup_grows_with_channels_at_fixed_map(wgc):
    """Dense WGC work scales with C_in * C_out, the approx path with C_out * C_in plus fixed
    costs: at the same map size the narrow layer's speedup is well below the wide one's."""
    def speedup(shape):
        dense, approx = wgc[shape]
        return _seconds(dense) / _seconds(approx)
    for narrow, wide in zip(SMALL, WIDE):
        assert narrow[2] == wide[2]
        assert speedup(narrow) < 0.8 * speedup(wide), (narrow, wide)
        assert speedup(narrow) > 1.0, narrow
