"""Every output path goes through sim.outputs: calibrate --out, workload export --out,
plot --out, validate --out, and trace directories. A new path is written; prunesim's own earlier
output is replaced; anything else needs --force; a link, a directory where a file is expected, a
FIFO or an input never. Refusals come before any work, as one line with exit status 2."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import run_main as run

ROOT = Path(__file__).resolve().parents[1]
XEON = ROOT / "hwconfigs" / "xeon-e5-2680v4.yaml"


def refused(argv, capsys, *needles):
    rc, out, err = run(argv, capsys)
    assert rc == 2, (rc, out[-300:], err[-300:])
    assert err.count("\n") == 1 and err.startswith("prunesim") and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


# ---- calibrate --------------------------------------------------------------------------------


@pytest.fixture
def fake_calibrate(monkeypatch):
    """calibrate() without the minutes of measurement: writes what _write writes, records calls."""
    from sim.engines.cpu import calibrate as cal
    calls = []

    def fake(out, quick=False, log=print):
        calls.append(Path(out))
        cal._write(Path(out), "box", "a CPU", {"clock": ("2 GHz", "test")})
        return Path(out)
    monkeypatch.setattr(cal, "calibrate", fake)
    return calls


def test_calibrate_out(tmp_path, monkeypatch, capsys, fake_calibrate):
    from sim.engines.cpu.calibrate import is_calibrated_hwconfig
    monkeypatch.chdir(tmp_path)
    assert run(["calibrate", "--quick"], capsys)[0] == 0          # default: hwconfigs/host.yaml
    host = tmp_path / "hwconfigs" / "host.yaml"
    assert fake_calibrate == [Path("hwconfigs/host.yaml")] and is_calibrated_hwconfig(host)
    assert run(["calibrate", "--quick"], capsys)[0] == 0          # its own file: replaced
    assert len(fake_calibrate) == 2
    # a hwconfig calibrate did not write (a bundled one, or an edited host file) needs --force
    other = tmp_path / "mine.yaml"
    shutil.copy(XEON, other)
    before = other.read_bytes()
    refused(["calibrate", "--out", other], capsys, str(other), "--out", "--force")
    sealed = host.read_text()
    host.write_text(sealed.replace("2 GHz", "3 GHz"))          # edited since: the user's
    refused(["calibrate"], capsys, "hwconfigs/host.yaml", "already exists")
    # a host file from before the seal line: recognized by its name, kind and description
    legacy = sealed[:sealed.rindex("# written by")]
    host.write_text(legacy)
    assert is_calibrated_hwconfig(host)
    host.write_text(legacy.replace("measured by prunesim calibrate", "my notes"))
    refused(["calibrate"], capsys, "hwconfigs/host.yaml", "already exists")
    assert len(fake_calibrate) == 2 and other.read_bytes() == before  # refused before measuring
    assert run(["calibrate", "--out", other, "--force"], capsys)[0] == 0
    assert is_calibrated_hwconfig(other)
    # never a directory, a FIFO or a link (not even with --force); nothing measured
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link.yaml").symlink_to(host)
    for bad, what in ((tmp_path / "hwconfigs", "not a regular file"),
                      (tmp_path / "fifo", "not a regular file"),
                      (tmp_path / "link.yaml", "symbolic link")):
        refused(["calibrate", "--out", bad, "--force"], capsys, str(bad), what)
    assert len(fake_calibrate) == 3
    # --check writes nothing: --out and --force would change nothing
    refused(["calibrate", "--check", "--hw", other, "--out", tmp_path / "x.yaml"], capsys,
            "--out", "--check")
    refused(["calibrate", "--check", "--hw", other, "--force"], capsys, "--force", "--check")


# ---- workload export --------------------------------------------------------------------------


def test_workload_export_out(tmp_path, capsys):
    out = tmp_path / "ss"
    argv = ["workload", "export", "cnn2", "--format", "scalesim", "--out", out]
    assert run(argv, capsys)[0] == 0
    cfg = out / "scale.cfg"
    assert run(argv + ["--batch", "2"], capsys)[0] == 0        # its own files: replaced
    gemm = (out / "cnn2_gemm.csv").read_text()
    # a file edited since (or one the user put there) is not prunesim's any more
    cfg.write_text(cfg.read_text() + "# mine\n")
    refused(argv + ["--batch", "4"], capsys, str(cfg), "already exists", "--force")
    assert (out / "cnn2_gemm.csv").read_text() == gemm         # checked before the first write
    assert cfg.read_text().endswith("# mine\n")
    assert run(argv + ["--batch", "4", "--force"], capsys)[0] == 0
    assert (out / "cnn2_gemm.csv").read_text() != gemm and not cfg.read_text().endswith("# mine\n")
    assert run(argv, capsys)[0] == 0                           # and then it is ours again
    # a link in place of an output file is never replaced; a file where the directory goes
    (out / "README.txt").unlink()
    (out / "README.txt").symlink_to(XEON)
    refused(argv + ["--force"], capsys, "README.txt", "symbolic link")
    f = tmp_path / "file"
    f.write_text("x")
    refused(["workload", "export", "cnn2", "--format", "scalesim", "--out", f], capsys,
            "not a directory")
    # a manifest that is not a regular file is not taken over
    d = tmp_path / "d"
    (d / ".prunesim-outputs.json").mkdir(parents=True)
    refused(["workload", "export", "cnn2", "--format", "scalesim", "--out", d], capsys,
            ".prunesim-outputs.json", "not a regular file")


def test_workload_export_never_over_its_input(tmp_path, capsys):
    d = tmp_path / "ss"
    d.mkdir()
    src = d / "scale.cfg"        # an odd name for a workload, but the file is the input
    shutil.copy(ROOT / "workloads" / "cnn2.yaml", tmp_path / "w.yaml")
    os.link(tmp_path / "w.yaml", src)
    before = src.read_bytes()
    refused(["workload", "export", tmp_path / "w.yaml", "--format", "scalesim", "--out", d,
             "--force"], capsys, "scale.cfg", "also an input")
    assert src.read_bytes() == before


# ---- plot -------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    from sim.results.store import ResultStore
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as st:
        for i, (m, mid) in enumerate((("dense", "dense"), ("dbtd:p=0.99,sigma=paper", "dbtd"))):
            st.put({"prunesim": "test", "hw": "gpu-a", "hw_kind": "gpu", "hw_checksum": "h",
                    "workload": "net1", "trace_checksum": "t", "batch": 8, "iterations": 1,
                    "seed": 0, "method": m, "method_id": mid, "method_params": "{}",
                    "density": 1.0 - 0.5 * i, "fwd_s": 1.0, "agbp_s": 1.0 - 0.3 * i,
                    "wgc_s": 1.0 - 0.3 * i, "backprop_s": 2.0 - 0.6 * i,
                    "step_s": 3.0 - 0.6 * i, "backprop_speedup": 2.0 / (2.0 - 0.6 * i),
                    "step_speedup": 3.0 / (3.0 - 0.6 * i), "status": "ok"})
    return db


def test_plot_out(tmp_path, store, capsys):
    out = tmp_path / "o"
    argv = ["plot", store, "--kind", "speedup", "--format", "png", "--out", out]
    rc, printed, err = run(argv, capsys)
    assert rc == 0, err
    (png,) = [Path(x) for x in printed.split()]
    assert png.parent == out and png.is_file()
    assert run(argv, capsys)[0] == 0                            # its own plot: replaced
    png.write_bytes(b"my edited figure")                        # not prunesim's any more
    refused(argv, capsys, str(png), "already exists", "--force")
    assert png.read_bytes() == b"my edited figure"
    assert run(argv + ["--force"], capsys)[0] == 0 and png.read_bytes() != b"my edited figure"
    # another directory: a file of the same name there is the user's
    other = tmp_path / "other"
    other.mkdir()
    (other / png.name).write_bytes(b"theirs")
    refused(["plot", store, "--kind", "speedup", "--format", "png", "--out", other], capsys,
            png.name, "already exists")
    # never a link, even with --force; --out a file (the store itself) is refused before work
    png.unlink()
    png.symlink_to(store)
    refused(argv + ["--force"], capsys, png.name, "symbolic link")
    assert Path(store).stat().st_size > 0 and png.is_symlink()
    refused(["plot", store, "--kind", "speedup", "--out", store], capsys, str(store),
            "not a directory")


# ---- validate -----------------------------------------------------------------------------------


def test_validate_out(tmp_path, monkeypatch, capsys):
    from analysis.validation import report as validation
    calls = []
    monkeypatch.setattr(validation, "compute", lambda *a, **k: calls.append(1) or [])
    mine = tmp_path / "notes.md"
    mine.write_text("# my notes\n")
    refused(["validate", "--out", mine, "--quick"], capsys, str(mine), "already exists", "--force")
    assert calls == [] and mine.read_text() == "# my notes\n"   # refused before the hours of work
    rep = tmp_path / "v.md"
    assert run(["validate", "--out", rep, "--quick", "--json"], capsys)[0] == 0
    assert validation.is_validation_report(rep)
    assert run(["validate", "--out", rep, "--quick", "--json"], capsys)[0] == 0   # its own
    assert validation.is_validation_report(ROOT / "docs" / "validation.md")      # `make docs`
    assert run(["validate", "--out", mine, "--quick", "--json", "--force"], capsys)[0] == 0
    assert validation.is_validation_report(mine)
    for bad in (tmp_path, ):
        refused(["validate", "--out", bad, "--force"], capsys, "not a regular file")
    (tmp_path / "l.md").symlink_to(rep)
    refused(["validate", "--out", tmp_path / "l.md", "--force"], capsys, "symbolic link")
    assert len(calls) == 3


# ---- trace directories (trace synth, capture: sim.traces.format.TraceWriter) ---------------------


def test_trace_out_never_a_link_or_an_existing_trace_without_force(tmp_path, capsys, monkeypatch):
    from sim.errors import TraceError
    from sim.traces.format import TraceWriter
    from sim.workload import load_workload
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")
    link = tmp_path / "t"
    link.symlink_to(tmp_path / "nowhere")
    for force in ((), ("--force",)):
        refused(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out", link, *force],
                capsys, str(link), "symbolic link")
    # capture writes through the same TraceWriter: a link was a NotADirectoryError traceback
    with pytest.raises(TraceError, match="symbolic link"):
        TraceWriter(link, load_workload("cnn2"), batch=2, provenance={}, overwrite=True)
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]        # no staging directory left
    real = tmp_path / "real"
    assert run(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out", real], capsys)[0] == 0
    refused(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out", real], capsys,
            str(real), "already exists", "--force")
    with pytest.raises(TraceError, match="already exists"):
        TraceWriter(real, load_workload("cnn2"), batch=2, provenance={})
