"""Measured peak memory vs the memory model: the bundled measurement, the fitted activation
overhead of the pytorch-eager profile, and bad measurement files."""
from __future__ import annotations

import json

import pytest

from research.prunetrain.memory_fit import (PYTORCH_MEMORY_FILE, fit_activation_overhead,
                                            load_memory_measurements)
from sim.errors import ConfigError
from sim.frameworks import load_framework
from sim.system.memory import footprint, max_batch
from sim.workload import load_workload


def test_the_profile_overhead_is_the_fit_of_the_bundled_measurement():
    m = load_memory_measurements(PYTORCH_MEMORY_FILE)
    fit = fit_activation_overhead(m)
    assert load_framework("pytorch-eager").activation_overhead == pytest.approx(fit.share, abs=0.005)
    for c in fit.checks:
        # the op-by-op count alone is 12-15 % short of every measured peak ...
        assert -0.2 < c.counted / c.row.allocated - 1 < -0.1
        # ... and one share of the activations closes it for the dense and both pruned networks
        assert abs(c.error) < 0.03, (c.row, c.error)
    authors = "research/prunetrain/data/authors"
    assert {c.row.widths for c in fit.checks} >= {"dense", f"{authors}/resnet50-imagenet-01.yaml",
                                                 f"{authors}/resnet50-imagenet-02.yaml"}


def test_overhead_is_a_share_of_the_activations_and_moves_the_batch_limit():
    w = load_workload("resnet50-imagenet")
    f0, f1 = footprint(w, 64, 4), footprint(w, 64, 4, 0, 0.19)
    assert f1.peak_extra == round(0.19 * f0.activations)
    assert f1.total - f0.total == f1.peak_extra and f1.to_json()["peak_extra"] == f1.peak_extra
    cap = 11e9
    assert max_batch(w, cap, 4, overhead=0.19) < max_batch(w, cap, 4)


def _write(tmp_path, doc):
    f = tmp_path / "mem.json"
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return f


def _doc(**row):
    r = {"widths": "dense", "batch": 64, "allocated": 7_000_000_000, "reserved": 8_000_000_000}
    r.update(row)
    return {"schema": "prunesim-memory-measurements", "workload": "resnet50-imagenet",
            "device": "d", "torch": "t", "rows": [{k: v for k, v in r.items() if v is not None}]}


@pytest.mark.parametrize("doc, field", [
    ("{not json", None),
    ({"schema": "other"}, "schema"),
    (_doc(allocated=-5), "rows[0].allocated"),
    (_doc(batch=None), "rows[0].batch"),
    (_doc(widths="research/prunetrain/data/authors/nope.yaml", epoch=89), "rows[0].widths"),
    (_doc(widths="research/prunetrain/data/authors/resnet50-imagenet-01.yaml"), "rows[0].epoch"),
    ({**_doc(), "workload": "no-such-net"}, "workload"),
    (_doc(repeat=True), "rows"),
])
def test_bad_measurement_file_is_one_line_naming_the_field(tmp_path, doc, field):
    f = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as ei:
        fit_activation_overhead(load_memory_measurements(f))
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(str(f)) and (field is None or f": {field}: " in msg)


def test_measure_memory_writes_what_fit_reads(tmp_path, monkeypatch, capsys):
    """research.prunetrain.measure_memory's --json rows are the bundled schema: measured rows
    written by the tool (a stand-in for the CUDA measurement that holds the count plus 0.3 x the
    activations) give back 0.3 through --fit's loader and fit, dense and trajectory widths
    alike."""
    torch = pytest.importorskip("torch")
    from research.prunetrain import measure_memory as tool
    from research.prunetrain.memory_fit import REPO
    planted = {}

    def fake_measure(model, batch, chw, classes, device):
        fp = footprint(planted["net"], batch, 4)
        return {"allocated": fp.total + round(0.3 * fp.activations), "reserved": 2 * fp.total}

    real_build = __import__("sim.capture.torchnet", fromlist=["build_model"]).build_model

    def remember_build(net):
        planted["net"] = net
        return real_build(net)

    monkeypatch.setattr(tool, "measure", fake_measure)
    monkeypatch.setattr(tool, "_device", lambda t: t.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "stand-in")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr("sim.capture.torchnet.build_model", remember_build)
    traj = ("research/prunetrain/data/fitted/resnet20-cifar10-16-rho0.25-i10-e182-b128-lr0.1-"
            "s391-fixedb-aug2-flip-hefanout.yaml")
    out = tmp_path / "rows.json"
    assert tool.main(["--workload", "resnet20", "--batch", "32", "64", "--trajectory",
                      str(REPO / traj), "--at", "90", "--json", str(out)]) == 0
    m = load_memory_measurements(out)
    assert [(r.widths, r.epoch, r.batch) for r in m.rows] == [
        ("dense", 0, 32), ("dense", 0, 64), (traj, 90, 32), (traj, 90, 64)]
    assert fit_activation_overhead(m).share == pytest.approx(0.3, abs=1e-6)
    assert tool.main(["--fit", str(out)]) == 0
    assert "peak extra = 0.300 x activations" in capsys.readouterr().out
