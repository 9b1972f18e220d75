"""`prunesim calibrate`: measurement kernels against their references, a quick calibration and check."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim.cli import main
from sim.engines.cpu import calibrate as cal
from sim.hwconfig import load_hwconfig


def test_kernels_match_references():
    got = cal.fma_throughput_kernel(50, np.float32(0.9), np.float32(1e-3))
    assert np.isclose(got, cal.fma_throughput_ref(50, 0.9, 1e-3), rtol=1e-4)
    nxt = cal._pointer_cycle(64 * 100, 64, seed=4)
    assert cal.chase_kernel(nxt, 77) == cal.chase_ref(nxt, 77)
    # one cycle through every line: 100 steps return to the start, fewer do not
    assert cal.chase_ref(nxt, 100) == 0 and all(cal.chase_ref(nxt, s) != 0 for s in range(1, 100))
    x = np.arange(10, dtype=np.float32)
    assert cal.read_kernel(x, 3) == pytest.approx(3 * x.sum())


def test_shape_sets_differ():
    calib = {s[1:] for s in cal.caffe_shapes("resnet20")}
    held = {s[1:] for s in cal.caffe_shapes("resnet18-cifar")}
    assert calib and held and len(held - calib) >= len(held) - 1


def test_quick_calibrate_and_check(tmp_path, capsys):
    pytest.importorskip("scipy")
    out = tmp_path / "host.yaml"
    assert main(["calibrate", "--out", str(out), "--quick"]) == 0
    hw = load_hwconfig(out)
    assert hw.kind == "cpu"
    for f in ("clock", "l1_latency", "dram_bandwidth", "gemm_library_efficiency",
              "spmm_library_efficiency", "fma_units"):
        assert hw.params[f].source.startswith("calibrated on "), f
    capsys.readouterr()
    assert main(["calibrate", "--check", "--hw", str(out), "--quick", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    kinds = {r["kind"] for r in res["rows"]}
    assert kinds == {"dense", "spmm"}
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in res["rows"])
    # a loose sanity bound: the 20% target is reported by the full check, not asserted on a shared box
    assert res["median_abs_error"]["all"] < 1.0


def test_check_without_config_is_one_line_error(tmp_path, capsys):
    assert main(["calibrate", "--check", "--hw", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "none.yaml" in err
