"""`prunesim calibrate --gpu`, tested from a recorded measurement file: the
bundled fixture is synthetic (generated from the model, and says so), so the fit must recover the
parameters it was generated with; held-out entries are reported one by one."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sim.engines.gpu import calibrate as cg
from sim.hwconfig import load_hwconfig

FIXTURE = Path(__file__).parent / "data" / "gpu_measurements_example.json"


from conftest import run_main as _run  # noqa: E402  (prunesim ARGV in-process)


def _one_line_error(rc, err) -> str:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("prunesim: error:"), err
    return lines[0]


def test_fixture_is_labeled_synthetic():
    doc = json.loads(FIXTURE.read_text())
    assert "SYNTHETIC" in doc["note"] and "not a measurement" in doc["note"]
    assert doc["device"].startswith("synthetic")
    assert {e["role"] for e in doc["entries"]} == {"fit", "check"}
    assert {e["kind"] for e in doc["entries"]} == set(cg.SHAPES)


def test_fit_recovers_the_generating_parameters(tmp_path, capsys):
    doc = json.loads(FIXTURE.read_text())
    out = tmp_path / "cal.yaml"
    rc, text, err = _run(["calibrate", "--gpu", "--from-measurements", str(FIXTURE), "--hw",
                          doc["base"], "--out", str(out), "--json"], capsys)
    assert rc == 0, err
    res = json.loads(text)
    truth = load_hwconfig(doc["base"])
    from sim.hwconfig import with_overrides
    truth = with_overrides(truth, doc["truth"])
    for f in ("sustained_clock", "hbm_bandwidth"):
        assert res["fitted"][f] == pytest.approx(truth.value(f), rel=2e-3), f
    hw = load_hwconfig(out)
    assert hw.value("sustained_clock") == pytest.approx(truth.value("sustained_clock"), rel=2e-3)
    for f in ("sustained_clock", "hbm_bandwidth"):
        assert "calibrated on synthetic" in hw.params[f].source
        assert "by prunesim calibrate --gpu" in hw.params[f].source
    assert "by prunesim calibrate --gpu" not in hw.params["sm_count"].source  # from the base
    # every held-out entry reported, each with its own error; none was fitted
    checks = [e for e in doc["entries"] if e["role"] == "check"]
    assert len(res["held_out"]) == len(checks)
    assert all(abs(r["error"]) < 5e-3 for r in res["held_out"])


def test_check_prints_per_entry_errors(capsys):
    rc, text, err = _run(["calibrate", "--gpu", "--check", "--hw", "a100-sxm4-40gb",
                          "--from-measurements", str(FIXTURE)], capsys)
    assert rc == 0, err
    checks = [e for e in json.loads(FIXTURE.read_text())["entries"] if e["role"] == "check"]
    rows = [l for l in text.splitlines() if l.split() and l.split()[0] in cg.SHAPES]
    assert len(rows) == len(checks)
    # the bundled A100 runs at 1410 MHz / 1555 GB/s: faster than the fixture's truth
    assert "median |error|" in text and all("-" in r.split()[-1] for r in rows)


def test_no_gpu_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)     # no PyTorch at all: the same refusal
    rc, _, err = _run(["calibrate", "--gpu", "--out", str(tmp_path / "x.yaml")], capsys)
    assert "no NVIDIA GPU" in _one_line_error(rc, err)


@pytest.mark.parametrize("edit,field", [
    (lambda e: e.pop("seconds"), "seconds: missing"),
    (lambda e: e.__setitem__("seconds", float("nan")), "seconds: must be a finite"),
    (lambda e: e.__setitem__("seconds", float("inf")), "seconds: must be a finite"),
    (lambda e: e.__setitem__("shape", [1, 2]), ".shape:"),
])
def test_bad_entries_are_refused_naming_the_entry(edit, field, tmp_path, capsys):
    doc = json.loads(FIXTURE.read_text())
    edit(doc["entries"][4])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))        # NaN / Infinity as Python's json writes them
    rc, _, err = _run(["calibrate", "--gpu", "--from-measurements", str(bad), "--out",
                       str(tmp_path / "o.yaml")], capsys)
    line = _one_line_error(rc, err)
    assert "entries[4]" in line and field in line and not (tmp_path / "o.yaml").exists()


def test_gpu_options_need_gpu_and_check_writes_nothing(capsys, tmp_path):
    rc, _, err = _run(["calibrate", "--from-measurements", str(FIXTURE)], capsys)
    assert "add --gpu" in _one_line_error(rc, err)
    rc, _, err = _run(["calibrate", "--gpu", "--check", "--hw", "a100-sxm4-40gb",
                       "--from-measurements", str(FIXTURE), "--out", str(tmp_path / "o")], capsys)
    assert "--out" in _one_line_error(rc, err)


def test_base_for_device_names():
    assert cg.base_for("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert cg.base_for("NVIDIA A100-SXM4-40GB") == "a100-sxm4-40gb"
    assert cg.base_for("NVIDIA H100 80GB HBM3") == "h100-sxm5-80gb"
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="--hw"):
        cg.base_for("NVIDIA GeForce RTX 4090")
