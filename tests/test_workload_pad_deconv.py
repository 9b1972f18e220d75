"""Per-axis conv padding and transposed convs in the workload schema, no torch needed."""
from __future__ import annotations

import pytest

from sim.engines.base import PhaseJob, engine_for
from sim.errors import WorkloadError
from sim.hwconfig import load_hwconfig
from sim.workload import load_workload, lower, workload_from_dict, zoo_names


def _wl(conv: dict, c=4, h=8, w=8):
    return workload_from_dict({"name": "t", "input": {"channels": c, "height": h, "width": w},
                               "layers": [{"name": "c", "op": "conv", "in": "x", "out": "y",
                                           **conv}]})


def _mnk(g):
    return {ph: (x.m, x.n, x.k, x.form, x.a_tensor, x.b_tensor) for ph, x in g.items()}


@pytest.mark.parametrize("stride", [1, 2])
def test_square_pad_as_a_pair_is_the_same_layer(stride):
    one = _wl({"c_out": 6, "kernel": 3, "stride": stride, "pad": 1})
    two = _wl({"c_out": 6, "kernel": 3, "stride": stride, "pad": [1, 1]})
    assert one.layers[0] == two.layers[0] and one.layers[0].pad == 1
    assert _mnk(lower(one.layers[0], 5)) == _mnk(lower(two.layers[0], 5))


def test_every_zoo_workload_reloads_with_its_pads_written_as_pairs():
    # the same files with every conv pad written [p, p] lower to the same GEMMs
    for name in zoo_names():
        wl = load_workload(name)
        doc = wl.to_dict()
        for op in doc["layers"]:
            if op["op"] == "conv" and "pad" in op:
                op["pad"] = [op["pad"], op["pad"]]
        again = workload_from_dict(doc)
        assert [_mnk(lower(l, 3)) for l in again.layers] == [_mnk(lower(l, 3)) for l in wl.layers]


def test_per_axis_pad_geometry_and_gemms():
    # a Conv1d(4, 6, 5, padding=2) on L = 10 is a conv over a 1 x 10 map, kernel [1, 5], pad [0, 2]:
    # P = (1 + 0 - 1) + 1 = 1 row, Q = (10 + 4 - 5) + 1 = 10 columns
    l = _wl({"c_out": 6, "kernel": [1, 5], "pad": [0, 2]}, h=1, w=10).layers[0]
    assert (l.p, l.q, l.pad, l.pad_h, l.pad_w) == (1, 10, (0, 2), 0, 2)
    g = lower(l, 3)
    assert (g["fwd"].m, g["fwd"].n, g["fwd"].k) == (3 * 10, 6, 4 * 5)
    assert (g["wgc"].m, g["wgc"].n, g["wgc"].k) == (6, 4 * 5, 3 * 10)
    # the same layer with the schema's old single pad would pad the one row too: 1 + 4 - 1 + 1 rows
    assert _wl({"c_out": 6, "kernel": [1, 5], "pad": 2}, h=1, w=10).layers[0].p == 5


@pytest.mark.parametrize("pad, why", [([0, 5], "not smaller"), ([1, 2, 3], "height, width"),
                                      ([-1, 0], ">= 0"), ("1", "integer")])
def test_bad_pads_are_one_line_errors(pad, why):
    with pytest.raises(WorkloadError, match=why):
        _wl({"c_out": 6, "kernel": [1, 5], "pad": pad}, h=1, w=10)


def test_transposed_geometry_and_hand_derived_gemms():
    # ConvTranspose2d(4, 6, kernel 4, stride 2, padding 1) on 4 x 8 x 8, batch N = 5:
    # H_out = (8 - 1) * 2 - 2 * 1 + 4 = 16 (W likewise). Its forward is the data gradient of the conv
    # E: 6 x 16 x 16 -> 4 x 8 x 8 (same kernel, stride, pad); strided, so as E's strided AGBP it is
    # the scatter GEMM M = N*H_in*W_in = 5*64, N = C_out*R*S = 6*16, K = C_in = 4, then col2im.
    # AGBP (dI, 4 x 8 x 8) is E's forward: M = N*H_in*W_in = 320, N = C_in = 4, K = C_out*R*S = 96.
    # WGC (dW, 4 x 6 x 4 x 4) is E's WGC: M = C_in = 4, N = C_out*R*S = 96, K = N*H_in*W_in = 320.
    wl = workload_from_dict({"name": "t", "input": {"channels": 3, "height": 8, "width": 8},
                             "layers": [
                                 {"name": "c", "op": "conv", "in": "x", "out": "a", "c_out": 4,
                                  "kernel": 3, "pad": 1},
                                 {"name": "up", "op": "conv", "in": "a", "out": "y", "c_out": 6,
                                  "kernel": 4, "stride": 2, "pad": 1, "transposed": True}]})
    l = wl.layer("up")
    assert (l.c_in, l.h, l.w, l.c_out, l.p, l.q, l.transposed) == (4, 8, 8, 6, 16, 16, True)
    assert l.tensor_shapes(5)["W"] == (4, 6, 4, 4) and l.tensor_shapes(5)["dO"] == (5, 6, 16, 16)
    assert l.macs(5) == 5 * 8 * 8 * 4 * 6 * 16
    g = lower(l, 5)
    assert _mnk(g) == {"fwd": (320, 96, 4, "scatter", "I", "W"),
                       "agbp": (320, 4, 96, "implicit", "dO", "W"),
                       "wgc": (4, 96, 320, "implicit", "I", "dO")}
    assert g["fwd"].c_elems == 5 * 6 * 16 * 16 and g["agbp"].c_elems == 5 * 4 * 8 * 8
    # every phase does the forward's multiply-adds
    assert {x.flops for x in g.values()} == {2 * l.macs(5)}


def test_stride_one_transposed_forward_is_implicit():
    # ConvTranspose2d(4, 6, 3) on 4 x 5 x 5: H_out = 4 + 3 = 7. As E's stride-1 AGBP the forward is
    # the implicit GEMM M = N*H_out*W_out = 2*49, N = C_out = 6, K = C_in*R*S = 36.
    l = _wl({"c_out": 6, "kernel": 3, "transposed": True}, h=5, w=5).layers[0]
    assert (l.p, l.q) == (7, 7)
    g = lower(l, 2)
    assert _mnk(g)["fwd"] == (98, 6, 36, "implicit", "I", "W")
    assert _mnk(g)["agbp"] == (50, 4, 54, "implicit", "dO", "W")


def _supports(hw, layer, method_result, phase):
    return engine_for(hw).supports(PhaseJob(layer, phase, None, 2, method_result))


def test_transposed_runs_dense_on_gpus_and_is_not_run_elsewhere():
    l = _wl({"c_out": 6, "kernel": 3, "transposed": True}, h=5, w=5).layers[0]
    gpu, cpu = load_hwconfig("a100-sxm4-40gb"), load_hwconfig("rpi4b")
    assert _supports(gpu, l, None, "wgc") is None
    assert "transposed conv" in _supports(cpu, l, None, "fwd")

    class Sparse:   # the fields supports() reads from a MethodResult
        method, phases, structure = "dbtd", ("agbp", "wgc"), "csr"
    assert "sparse WGC" in _supports(gpu, l, Sparse(), "wgc")
    # AGBP is the reverse conv's forward: an implicit GEMM with dO as A, as for any conv
    assert _supports(gpu, l, Sparse(), "agbp") is None


def test_deconvs_are_refused_where_no_model_holds_them(tmp_path):
    from sim.capture.methods import PruneTrain
    from sim.errors import CaptureError, PrunesimError
    from sim.workload_export import export_scalesim
    wl = _wl({"c_out": 6, "kernel": 3, "transposed": True}, h=5, w=5)
    with pytest.raises(CaptureError, match="transposed"):
        PruneTrain(wl)
    with pytest.raises(PrunesimError, match="transposed conv"):
        export_scalesim(wl, tmp_path / "s")
