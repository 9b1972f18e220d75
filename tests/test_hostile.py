"""Hostile and absurd input, case by case, through the real command line.

Each ends in exit status 2 and one line naming the file and the field (or the option), refused
before any work (the estimate is in the message), or is a legitimate run. Everything is written
under the test's tmp_path.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_main as run

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "sample-cnn2-mnist5k"
A100 = (ROOT / "hwconfigs" / "a100-sxm4-40gb.yaml").read_text()
DGX = (ROOT / "hwconfigs" / "clusters" / "dgx-a100-hdr.yaml").read_text()


def refused(argv, capsys, *needles: str) -> str:
    """Assert exit 2 and exactly one stderr line holding every needle (besides the progress lines
    of work that started); return that line."""
    rc, out, err = run(argv, capsys)
    lines = [x for x in err.strip().splitlines() if not x.startswith("[it ")]
    assert rc == 2, (rc, out[-500:], err[-500:])
    assert len(lines) == 1, err
    assert lines[0].startswith("prunesim"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Traceback" not in err and not re.search(r"\bnan\b", out)
    return lines[0]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRUNESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")


def _bomb(levels: int = 9) -> str:
    items = ["&b0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    items += [f"&b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


# ---- overwrites -------------------------------------------------------------------------------


@pytest.fixture
def npy(tmp_path) -> Path:
    f = tmp_path / "x.npy"
    np.save(f, np.random.default_rng(0).standard_normal((2, 4, 4, 4)).astype(np.float32))
    return f


def test_prune_refuses_its_own_input(npy, capsys):
    before = npy.read_bytes()
    refused(["prune", npy, npy, "--method", "dbtd"], capsys, str(npy), "OUTPUT", "also an input")
    refused(["prune", npy, npy, "--method", "dbtd", "--force"], capsys, "also an input")
    os.link(npy, npy.with_name("hard.npy"))  # the same file under another name
    refused(["prune", npy, npy.with_name("hard.npy"), "--method", "dbtd", "--force"], capsys,
            "also an input")
    assert npy.read_bytes() == before


def test_prune_refuses_what_is_not_a_regular_file(npy, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir.npy").mkdir()
    for out in (fifo, tmp_path / "dir.npy"):
        refused(["prune", npy, out, "--method", "dbtd", "--force"], capsys, str(out),
                "not a regular file")
    assert fifo.exists() and not fifo.is_file() and (tmp_path / "dir.npy").is_dir()
    if Path("/dev/full").exists():
        refused(["prune", npy, "/dev/full", "--method", "dbtd", "--force"], capsys,
                "not a regular file")


def test_prune_replaces_an_existing_result_only_with_force(npy, tmp_path, capsys):
    out = tmp_path / "out.npy"
    out.write_bytes(b"old result")
    refused(["prune", npy, out, "--method", "dbtd"], capsys, str(out), "--force")
    assert out.read_bytes() == b"old result"
    rc, _, err = run(["prune", npy, out, "--method", "dbtd", "--force"], capsys)
    assert rc == 0, err
    assert np.load(out).shape == (2, 4, 4, 4)


def test_prune_parameter_given_twice(npy, tmp_path, capsys):
    refused(["prune", npy, tmp_path / "o.npy", "--method", "dbtd:p=0.5", "--p", "0.9"], capsys,
            "--p", "given twice")
    assert not (tmp_path / "o.npy").exists()
    rc, _, _ = run(["prune", npy, tmp_path / "o.npy", "--method", "dbtd", "--p", "0.9"], capsys)
    assert rc == 0


def test_foreign_sqlite_is_never_touched(tmp_path, capsys):
    f = tmp_path / "theirs.sqlite"
    db = sqlite3.connect(f)
    db.execute("CREATE TABLE accounts (id INTEGER, owner TEXT)")
    db.execute("INSERT INTO accounts VALUES (1, 'them')")
    db.commit()
    db.close()
    before = f.read_bytes()
    refused(["replay", SAMPLE, "--hw", "a100-sxm4-40gb", "--method", "dense", "--db", f], capsys,
            str(f), "not a prunesim result store")
    refused(["export", f, "--csv", tmp_path / "o.csv"], capsys, "not a prunesim result store")
    assert f.read_bytes() == before
    assert not (tmp_path / "o.csv").exists()


def test_store_marker_and_legacy_stores(tmp_path):
    from sim.results.store import APPLICATION_ID, ResultStore, _SCHEMA
    with ResultStore(tmp_path / "new.sqlite"):
        pass
    db = sqlite3.connect(tmp_path / "new.sqlite")
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()
    # a store written before the marker existed: prunesim's tables, application_id 0
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.executescript(_SCHEMA)
    db.execute("INSERT INTO meta VALUES ('schema', '1')")
    db.commit()
    db.close()
    with ResultStore(old, create=False) as st:
        assert st.count() == 0
    db = sqlite3.connect(old)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()
    (tmp_path / "empty.sqlite").write_bytes(b"")   # e.g. from mktemp: ours to create
    ResultStore(tmp_path / "empty.sqlite").close()


def test_export_replaces_files_only_with_force(tmp_path, capsys):
    from sim.results.store import ResultStore
    ResultStore(tmp_path / "r.sqlite").close()
    out = tmp_path / "o.csv"
    out.write_text("mine")
    refused(["export", tmp_path / "r.sqlite", "--csv", out], capsys, str(out), "--force")
    refused(["export", tmp_path / "r.sqlite", "--csv", tmp_path / "r.sqlite", "--force"], capsys,
            "also an input")
    assert out.read_text() == "mine"
    rc, _, err = run(["export", tmp_path / "r.sqlite", "--csv", out, "--force"], capsys)
    assert rc == 0, err


def test_fit_out_replaces_only_with_force(tmp_path, capsys):
    out = tmp_path / "stats.yaml"
    out.write_text("mine")
    refused(["trace", "fit", SAMPLE, "--out", out], capsys, str(out), "--force")
    assert out.read_text() == "mine"


# ---- unbounded work ---------------------------------------------------------------------------


def test_yaml_alias_bomb_in_a_workload_and_a_hwconfig(tmp_path, capsys):
    w = tmp_path / "w.yaml"
    w.write_text("name: bomb\ninput: {channels: 3, height: 8, width: 8}\n"
                 f"description: {_bomb()}\n"
                 "layers:\n  - {name: c1, op: conv, in: x, out: y, c_out: 4, kernel: 3}\n")
    refused(["workload", "show", w], capsys, str(w), "line 3", "expands to more than")
    h = tmp_path / "h.yaml"
    h.write_text(A100.replace("description:", f"description: {_bomb()}\nxdescription:", 1)
                 .replace("xdescription:", "#"))
    refused(["gemm", "--hw", h, "--m", 64, "--n", 64, "--k", 64], capsys, str(h), "expands")


def test_deeply_nested_yaml(tmp_path, capsys):
    w = tmp_path / "w.yaml"
    w.write_text("name: deep\ndescription: " + "[\n" * 100_000 + "]\n" * 100_000)
    refused(["workload", "show", w], capsys, str(w), "nested deeper than 64")
    w.write_text("name: deep\ndescription: " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(["workload", "show", w], capsys, str(w), "line 2", "characters on one line")


def test_cluster_with_absurd_devices(tmp_path, capsys):
    c = tmp_path / "c.yaml"
    c.write_text(DGX.replace("devices: 8", "devices: 1000000000000", 1))
    refused(["train", "--workload", "resnet20", "--cluster", c], capsys, str(c),
            "dimensions[0].devices", "outside")


def test_cluster_with_absurd_quantities(tmp_path, capsys):
    c = tmp_path / "c.yaml"
    c.write_text(re.sub(r"grad_bytes:\s*\{value: 4", "grad_bytes: {value: 1000000000000000000", DGX))
    refused(["train", "--workload", "resnet20", "--cluster", c], capsys, str(c),
            "training.grad_bytes.value", "outside 1..8")
    c.write_text(DGX.replace("300 GB/s", "1e30 GB/s", 1))
    assert "1e30 GB/s" in c.read_text()
    refused(["train", "--workload", "resnet20", "--cluster", c], capsys, str(c), "bandwidth.value",
            "1 PB/s")


def test_grid_of_a_million_points(tmp_path, capsys):
    g = tmp_path / "grid.yaml"
    g.write_text("params:\n  sm_count: [" + ", ".join(str(100 + i) for i in range(100)) + "]\n"
                 "  clock: [" + ", ".join(f'"{1 + i / 100} GHz"' for i in range(100)) + "]\n"
                 "  hbm_bandwidth: [" + ", ".join(f'"{1000 + i} GB/s"' for i in range(100)) + "]\n")
    line = refused(["sweep", "--hw", "a100-sxm4-40gb", "--grid", g, "--workload", "resnet20",
                    "--method", "dense", "--db", tmp_path / "r.sqlite"], capsys, str(g), "params",
                   "1,000,000 points", "--yes-large")
    assert "10,000" in line
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "cache").exists()


def test_grid_budget_edges(tmp_path):
    from sim.errors import ConfigError
    from sim.results.sweep import load_grid
    g = tmp_path / "grid.yaml"
    g.write_text("params:\n  sm_count: [" + ", ".join(map(str, range(1, 101))) + "]\n"
                 "  max_pipeline_stages: [" + ", ".join(map(str, range(1, 101))) + "]\n")
    assert len(load_grid(g)) == 10_000
    g.write_text("params:\n  sm_count: [" + ", ".join(map(str, range(1, 102))) + "]\n"
                 "  max_pipeline_stages: [" + ", ".join(map(str, range(1, 101))) + "]\n")
    with pytest.raises(ConfigError, match="10,100 points"):
        load_grid(g)
    assert len(load_grid(g, yes_large=True)) == 10_100


@pytest.mark.parametrize("argv, needles", [
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--epochs", "10000000"],
     ["--epochs", "outside 1..10,000"]),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--batch", "1000000000"],
     ["--batch", "outside"]),
    (["gemm", "--hw", "a100-sxm4-40gb", "--m", "1e30", "--n", "64", "--k", "64"],
     ["--m", "expected an integer"]),
    (["gemm", "--hw", "a100-sxm4-40gb", "--m", "1" + "0" * 30, "--n", "64", "--k", "64"],
     ["--m", "outside"]),
    (["trace", "synth", "--workload", "cnn2", "--batch", "8", "--out", "t", "--iterations",
      "1000000"], ["--iterations", "outside"]),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--accuracy", "x",
      "--target", "1.5"], ["--target", "(0, 1]"]),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--accuracy", "x",
      "--target", "nan"], ["--target", "(0, 1]"]),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--accuracy", "x",
      "--target", "0"], ["--target", "(0, 1]"]),
    (["plot", "r.sqlite", "--kind", "tta", "--out", "p", "--target", "-1"], ["--target"]),
    (["replay", "t", "--seed", "-1"], ["--seed", "outside"]),
])
def test_option_ranges(argv, needles, capsys):
    refused(argv, capsys, *needles)


def test_absurd_hardware(tmp_path, capsys):
    h = tmp_path / "h.yaml"
    h.write_text(re.sub(r"sm_count:\s*\{value: 108", "sm_count: {value: 1000000000000000000000",
                        A100))
    assert "1000000000000000000000" in h.read_text()
    refused(["gemm", "--hw", h, "--m", 64, "--n", 64, "--k", 64], capsys, str(h),
            "params.sm_count", "outside")


def test_absurd_layers(tmp_path, capsys):
    w = tmp_path / "w.yaml"
    w.write_text("name: big\ninput: {channels: 3, height: 8, width: 8}\nlayers:\n"
                 "  - {name: c1, op: conv, in: x, out: y, c_out: 1000000000000, kernel: 3}\n")
    refused(["workload", "show", w], capsys, str(w), "layers[0] (c1).c_out", "outside")
    refused(["layer", "--hw", "a100-sxm4-40gb", "--workload", w], capsys, "c_out")
    # in range one by one, but the product is past exact FLOP counting
    w.write_text("name: big\ninput: {channels: 65536, height: 4096, width: 4096}\nlayers:\n"
                 "  - {name: c1, op: conv, in: x, out: y, c_out: 65536, kernel: 3, pad: 1}\n")
    refused(["workload", "show", w], capsys, str(w), "c_out", "multiply-adds")
    refused(["layer", "--hw", "a100-sxm4-40gb", "--conv", "1,4,4,4,4,3,3,1,100000"], capsys,
            "--conv", "pad")
    refused(["layer", "--hw", "a100-sxm4-40gb", "--conv", "1,4,4,4,4,3,3,1,3"], capsys,
            "--conv", "pad 3 is not smaller than the 3x3 kernel")


def test_huge_gemm_and_cpu_layer_refused_before_work(capsys):
    refused(["gemm", "--hw", "a100-sxm4-40gb", "--m", 2 ** 31, "--n", 2 ** 31, "--k", 64], capsys,
            "--m/--n/--k", "estimated", "MACs")
    refused(["layer", "--hw", "xeon-e5-2680v4", "--conv", "1000000,4096,4096,4096,4096,3,3,1,1"],
            capsys, "batch", "multiply-adds")
    line = refused(["layer", "--hw", "xeon-e5-2680v4", "--conv", "2,4096,4096,1024,1024,3,3,1,1",
                    "--method", "dbtd"], capsys, "--samples/--batch", "estimated 128 GiB")
    assert "--yes-large" in line


def test_trace_synth_too_large_leaves_nothing(tmp_path, capsys):
    line = refused(["trace", "synth", "--workload", "resnet50-imagenet", "--batch", "1000000",
                    "--out", tmp_path / "big"], capsys, str(tmp_path / "big"), "estimated 40.4 TiB")
    assert "--yes-large" in line
    assert not (tmp_path / "big").exists()


def test_sweep_yes_large_reaches_its_synthesis(tmp_path, monkeypatch, capsys):
    import dataclasses

    from sim import limits
    # a budget below cnn2 at batch 4 (about 60 kB), so the real check is reached cheaply
    monkeypatch.setitem(limits.BUDGETS, "synth_bytes",
                        dataclasses.replace(limits.BUDGETS["synth_bytes"], limit=1000))
    argv = ["sweep", "--hw", "a100-sxm4-40gb", "--workload", "cnn2", "--batch", "4",
            "--method", "dense", "--db", tmp_path / "r.sqlite", "--jobs", "1", "--json"]
    line = refused(argv, capsys, "--batch", "estimated", "exceeds the limit", "--yes-large")
    assert "cnn2 at batch 4" in line
    assert not list((tmp_path / "cache" / "traces").glob("cnn2-*"))
    rc, out, err = run(argv + ["--yes-large"], capsys)
    assert rc == 0, err
    assert json.loads(out)["stored"] == 1
    (entry,) = (tmp_path / "cache" / "traces").glob("cnn2-*")
    assert (entry / "manifest.json").is_file()


def test_failed_synthesis_removes_its_partial_trace(tmp_path, monkeypatch, capsys):
    import sim.traces.synth as synth
    real, calls = synth.generate_layer, []

    def failing(out, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(out, *a, **k)
    monkeypatch.setattr(synth, "generate_layer", failing)
    refused(["trace", "synth", "--workload", "cnn2", "--batch", "4", "--out", tmp_path / "t"],
            capsys, str(tmp_path / "t"), "No space left", "removed")
    assert not (tmp_path / "t").exists()
    refused(["trace", "check", tmp_path / "t"], capsys, "no such trace directory")
    # a trace that was there before is never removed by a refused or failed run
    shutil.copytree(SAMPLE, tmp_path / "keep")
    refused(["trace", "synth", "--workload", "cnn2", "--batch", "4", "--out", tmp_path / "keep"],
            capsys, "already exists")
    assert (tmp_path / "keep" / "manifest.json").is_file()


# ---- manifests ----------------------------------------------------------------------------------


def _trace_with(tmp_path, **fields) -> Path:
    d = tmp_path / "t"
    shutil.copytree(SAMPLE, d)
    m = json.loads((d / "manifest.json").read_text())
    m.update(fields)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


@pytest.mark.parametrize("fields, needles", [
    ({"batch": 10 ** 30}, ["batch", "outside"]),
    ({"batch": 1e30}, ["batch", "expected an integer"]),
    ({"schema_version": True}, ["schema_version"]),
    ({"iterations": None}, ["iterations", "expected a list"]),
    ({"iterations": [{"iteration": "0", "epoch": 0}]}, ["iterations[0].iteration"]),
])
def test_manifest_fields(tmp_path, fields, needles, capsys):
    d = _trace_with(tmp_path, **fields)
    refused(["trace", "check", d], capsys, str(d / "manifest.json"), *needles)


def test_manifest_nested_100000_deep(tmp_path, capsys):
    d = _trace_with(tmp_path)
    (d / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(["trace", "check", d], capsys, "manifest.json", "nested deeper than 64")
    m = {"a": 0}
    for _ in range(70):
        m = {"a": m}
    (d / "manifest.json").write_text(json.dumps(m))
    refused(["trace", "check", d], capsys, "manifest.json", "nested deeper than 64")


def test_all_zero_trace_prints_no_nan(tmp_path, capsys):
    import hashlib
    d = _trace_with(tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    for r in m["records"]:
        f = d / r["path"]
        np.save(f, np.zeros_like(np.load(f)))
        r["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (d / "manifest.json").write_text(json.dumps(m))
    rc, out, err = run(["trace", "info", d], capsys)
    assert rc == 0, err
    assert not re.search(r"\bnan\b", out, re.I)
    assert re.search(r"softmax_linear .* - ", out)  # kurtosis of a constant tensor: undefined
    rc, out, _ = run(["trace", "info", d, "--json"], capsys)
    assert rc == 0 and "NaN" not in out and '"kurtosis": null' in out


# ---- silent fallbacks --------------------------------------------------------------------------


def test_missing_device_hwconfig_is_an_error_unless_asked(tmp_path, capsys):
    c = tmp_path / "c.yaml"
    c.write_text(DGX.replace("hwconfig: a100-sxm4-40gb", "hwconfig: nosuch-gpu"))
    refused(["train", "--workload", "resnet20", "--cluster", c], capsys, str(c),
            "device.hwconfig", "nosuch-gpu", "--roofline")
    refused(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--hw", "nosuch"],
            capsys, "--hw", "nosuch")
    rc, out, err = run(["train", "--workload", "resnet20", "--cluster", c, "--roofline"], capsys)
    assert rc == 0, err
    # asked for, so labelled as the user's choice, never as a fallback nor as "forced by caller"
    line = next(x for x in out.splitlines() if x.startswith("per-layer times:"))
    assert "roofline model (asked for with --roofline" in line and "not the cycle-level" in line
    assert "FALLBACK" not in out and "forced" not in out
    rc, out, err = run(["train", "--workload", "resnet20", "--cluster", c, "--roofline", "--json"],
                       capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["timing_model"] == "roofline" and doc["timing_fallback"] is False
    for src in (doc["timing_source"], doc["method"]["timing_source"], doc["dense"]["timing_source"]):
        assert src.startswith("roofline model (asked for with --roofline")
    # the engine when it loads: labelled as the engine
    rc, out, err = run(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--json"],
                       capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["timing_model"] == "engine" and not doc["timing_fallback"]
    assert doc["timing_source"].startswith("engine:tensorcore")


def test_train_batch_must_fit_device_memory(capsys):
    refused(["train", "--workload", "resnet50-imagenet", "--cluster", "dgx-a100-hdr", "--batch",
             "65536"], capsys, "--batch", "memory model", "40 GB")


# ---- Numba cache -------------------------------------------------------------------------------


def test_numba_cache_dir_choice(tmp_path):
    from sim import numba_cache_dir
    writable = {str(tmp_path)}
    home = tmp_path / "home"
    d = numba_cache_dir(["/pkg/methods"], {}, writable=lambda p: not p.startswith("/pkg"),
                        home=str(home))
    assert d == str(home / ".cache" / "prunesim" / "numba") and Path(d).is_dir()
    assert numba_cache_dir(["/pkg"], {"NUMBA_CACHE_DIR": "/x"}, writable=lambda p: False) is None
    assert numba_cache_dir([str(tmp_path)], {}, writable=lambda p: p in writable) is None
    d = numba_cache_dir(["/pkg"], {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
                        writable=lambda p: not p.startswith("/pkg"))
    assert d == str(tmp_path / "xdg" / "prunesim" / "numba")


def test_read_only_package_sets_a_user_numba_cache(tmp_path):
    """A package folder the process cannot write (simulated: os.access says no, since root can
    write anywhere) makes `import sim` point Numba at the user cache before Numba loads."""
    code = ("import os, sys\n"
            f"pkg = {str(ROOT / 'sim')!r}\n"
            "real = os.access\n"
            "os.access = lambda p, m, **k: False if str(p).startswith(pkg) else real(p, m, **k)\n"
            "import sim\n"
            "print(os.environ.get('NUMBA_CACHE_DIR'), 'numba' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(tmp_path / "xdg" / "prunesim" / "numba"), "False"]


@pytest.mark.slow
def test_deep_fuzz_profile(tmp_path):
    """The deep profile: every property of tests/test_fuzz_inputs.py at up to 2,000 cases."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "fuzz-long", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "test_fuzz_inputs.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:]


def test_limits_table_matches_the_doc():
    from sim.limits import BUDGETS, RANGES, _fmt
    doc = (ROOT / "docs" / "reference" / "limits.md").read_text()
    for k, r in RANGES.items():
        assert f"| `{k}` | {_fmt(r.lo)} .. {_fmt(r.hi)} |" in doc, k
    for k in BUDGETS:
        assert f"| `{k}` |" in doc, k
