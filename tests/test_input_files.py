"""Input files: every option that reads a file refuses, in one line and before opening it, a path
that is a device, a FIFO, a socket or a directory where a file is expected (sim.limits.
check_cli_inputs, INPUT_OPTIONS); files read whole are read through sim.limits.read_input_bytes
(regular, size-capped, non-blocking open); YAML lines, integers and node counts are bounded."""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
from pathlib import Path

import pytest

from sim.cli import build_parser, main
from sim.errors import ConfigError, PrunesimError
from sim import limits
from sim.limits import INPUT_OPTIONS, POSITIONAL_INPUTS, read_input_bytes
from sim.yamlio import load_yaml_file, load_yaml_text

ROOT = Path(__file__).resolve().parents[1]
A100 = ROOT / "hwconfigs" / "a100-sxm4-40gb.yaml"
SAMPLE = ROOT / "traces" / "sample-cnn2-mnist5k"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRUNESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")


def refused(argv, capsys, *needles) -> str:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out[-300:], err[-300:])
    assert len(lines) == 1 and lines[0].startswith("prunesim: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def specials(tmp_path) -> dict[str, Path]:
    """A FIFO, a directory named like a file, a socket, and a character device."""
    fifo = tmp_path / "in.yaml"
    os.mkfifo(fifo)
    d = tmp_path / "dir.yaml"
    d.mkdir()
    out = {"fifo": fifo, "dir": d}
    sock = tmp_path / "s.yaml"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock))
        out["socket"] = sock
    except OSError:
        pass
    if Path("/dev/zero").exists():
        out["device"] = Path("/dev/zero")
    return out


WHAT = {"fifo": "a FIFO", "dir": "is a directory", "socket": "a socket",
        "device": "a character device"}

# one command line per input option that takes a file; {} is the path under test
FILE_OPTIONS = [
    (["workload", "show", "{}"], None),
    (["workload", "export", "{}", "--format", "scalesim", "--out", "o"], None),
    (["trace", "check", str(SAMPLE), "--workload", "{}"], "--workload"),
    (["trace", "synth", "--workload", "{}", "--batch", "2", "--out", "o"], "--workload"),
    (["trace", "synth", "--workload", "cnn2", "--stats", "{}", "--batch", "2", "--out", "o"],
     "--stats"),
    (["capture", "--workload", "{}", "--dataset", "digits", "--epochs", "1", "--out", "o"],
     "--workload"),
    (["prune", "{}", "o.npy", "--method", "dense"], None),
    (["gemm", "--hw", "{}", "--m", "8", "--n", "8", "--k", "8"], "--hw"),
    (["layer", "--hw", "{}", "--workload", "cnn2"], "--hw"),
    (["layer", "--hw", "a100-sxm4-40gb", "--workload", "{}"], "--workload"),
    (["calibrate", "--check", "--hw", "{}"], "--hw"),
    (["calibrate", "--gpu", "--from-measurements", "{}", "--out", "o.yaml"],
     "--from-measurements"),
    (["train", "--workload", "{}", "--cluster", "dgx-a100-hdr"], "--workload"),
    (["train", "--workload", "resnet20", "--cluster", "{}"], "--cluster"),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--hw", "{}"], "--hw"),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--method", "prunetrain",
      "--trajectory", "{}"], "--trajectory"),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--accuracy", "{}",
      "--target", "0.9"], "--accuracy"),
    (["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--framework", "{}"],
     "--framework"),
    (["replay", str(SAMPLE), "--hw", "{}"], "--hw"),
    (["replay", str(SAMPLE), "--hw", "a100-sxm4-40gb", "--cluster", "{}"], "--cluster"),
    (["replay", str(SAMPLE), "--hw", "a100-sxm4-40gb", "--framework", "{}"], "--framework"),
    (["replay", str(SAMPLE), "--hw", "a100-sxm4-40gb", "--db", "{}"], "--db"),
    (["sweep", "--hw", "{}", "--workload", "cnn2", "--db", "r.sqlite"], "--hw"),
    (["sweep", "--hw", "a100-sxm4-40gb", "--workload", "{}", "--db", "r.sqlite"], "--workload"),
    (["sweep", "--hw", "a100-sxm4-40gb", "--workload", "cnn2", "--grid", "{}", "--db",
      "r.sqlite"], "--grid"),
    (["sweep", "--hw", "a100-sxm4-40gb", "--workload", "cnn2", "--db", "{}"], "--db"),
    (["sweep", "--hw", "a100-sxm4-40gb", "--workload", "cnn2", "--stats", "{}", "--db",
      "r.sqlite"], "--stats"),
    (["export", "{}", "--csv", "o.csv"], None),
    (["plot", "{}", "--kind", "speedup", "--out", "o"], None),
    (["plot", "r.sqlite", "--kind", "tta", "--accuracy", "{}", "--out", "o"], "--accuracy"),
]


@pytest.mark.parametrize("argv, option", FILE_OPTIONS, ids=lambda v: " ".join(v[:3])
                         if isinstance(v, list) else str(v))
def test_every_file_option_refuses_what_is_not_a_regular_file(argv, option, specials, capsys):
    for kind, path in specials.items():
        if kind == "dir" and (option == "--accuracy" or argv[:2] == ["train", "--workload"]):
            continue    # a trace directory is an input there (its log.csv, its manifest)
        line = refused([a.replace("{}", str(path)) for a in argv], capsys, str(path), WHAT[kind])
        if option:
            assert f": {option}: " in line, line


@pytest.mark.parametrize("argv", [
    ["trace", "info", "{}"], ["trace", "check", "{}"], ["trace", "fit", "{}"],
    ["replay", "{}", "--hw", "a100-sxm4-40gb"],
    ["layer", "--hw", "xeon-e5-2680v4", "--workload", "cnn2", "--trace", "{}"],
    ["sweep", "--hw", "a100-sxm4-40gb", "--trace", "{}", "--db", "r.sqlite"],
])
def test_trace_options_refuse_files_fifos_and_devices(argv, specials, tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.write_text("x")
    for path, what in ((specials["fifo"], "a FIFO"), (plain, "not a trace directory")) + \
            (((specials["device"], "a character device"),) if "device" in specials else ()):
        refused([a.replace("{}", str(path)) for a in argv], capsys, str(path), what)


def test_a_trace_directory_whose_manifest_is_a_fifo(tmp_path, capsys):
    tr = tmp_path / "tr"
    tr.mkdir()
    os.mkfifo(tr / "manifest.json")
    refused(["trace", "info", tr], capsys, "manifest.json", "a FIFO")
    refused(["train", "--workload", tr, "--cluster", "dgx-a100-hdr"], capsys, "a FIFO")
    acc = tmp_path / "acc"
    acc.mkdir()
    os.mkfifo(acc / "log.csv")
    refused(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--accuracy", acc,
             "--target", "0.9"], capsys, "log.csv", "a FIFO")


def test_names_and_model_values_are_not_paths(tmp_path, capsys):
    """A bundled name, a glob and --trajectory model pass the check even where the working
    directory holds something of that name (the loaders never read it as a path)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "a100-sxm4-40gb").mkdir()
    ns = argparse.Namespace(command="train", workload="resnet20", cluster="dgx-a100-hdr",
                            hw="a100-sxm4-40gb", trajectory="model", accuracy=None,
                            framework=None)
    limits.check_cli_inputs(ns)
    ns = argparse.Namespace(command="sweep", hw=["hwconfigs/*.yaml"], workload=["cnn2"],
                            trace=None, grid=None, db="r.sqlite", cache=None, stats=None,
                            framework=None)
    limits.check_cli_inputs(ns)


_OUTPUTS = {"out", "measurements_out", "csv", "parquet", "output"}
_PATHY = re.compile(r"\b(YAML|yaml|file|FILE|CSV|csv|directory|dir|trace|store|\.npy|SQLite|"
                    r"hwconfig|cluster|workload|profile|statistics)\b")


def _commands(parser, prefix=()):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _commands(sub, prefix + (name,))
    if prefix:
        yield " ".join(prefix), parser


def test_input_options_table_covers_the_parser():
    """Every option whose help speaks of a file, a directory or a config that is not an output
    is in INPUT_OPTIONS (a new file option must be added there to be checked)."""
    missing = []
    for cmd, p in _commands(build_parser()):
        for a in p._actions:
            if a.dest in _OUTPUTS or a.dest == "help" or isinstance(
                    a, (argparse._StoreTrueAction, argparse._SubParsersAction)):
                continue
            if a.choices is not None or a.type not in (None, str):
                continue
            if _PATHY.search(a.help or "") and a.dest not in INPUT_OPTIONS.get(cmd, {}):
                missing.append(f"{cmd} {a.dest}")
    known_not_files = {"plot methods", "sweep scheduler", "trace synth out", "capture dataset",
                       "capture tensors", "layer conv", "train batch_steps", "train method",
                       "layer method", "replay method", "sweep method", "capture method",
                       "prune method"}
    assert sorted(set(missing) - known_not_files) == []
    for cmd, dest in POSITIONAL_INPUTS:
        assert dest in INPUT_OPTIONS[cmd]


# ---- readers ------------------------------------------------------------------------------------


def test_yaml_reader_refuses_special_files_without_opening(specials):
    for kind, path in specials.items():
        with pytest.raises(ConfigError, match="not a regular file"):
            load_yaml_file(path, ConfigError)


def test_nested_reference_to_a_fifo(tmp_path, specials, capsys):
    """A cluster whose device hwconfig, and a hwconfig whose base, is a FIFO: refused, not read."""
    cl = (ROOT / "hwconfigs" / "clusters" / "dgx-a100-hdr.yaml").read_text()
    (tmp_path / "c.yaml").write_text(cl.replace("hwconfig: a100-sxm4-40gb",
                                                f"hwconfig: {specials['fifo']}"))
    refused(["train", "--workload", "resnet20", "--cluster", tmp_path / "c.yaml"], capsys)
    (tmp_path / "h.yaml").write_text(f"name: h\nkind: gpu\nbase: {specials['fifo']}\nparams: {{}}\n")
    refused(["gemm", "--hw", tmp_path / "h.yaml", "--m", "8", "--n", "8", "--k", "8"], capsys,
            "base")


def test_read_input_bytes_caps_the_size(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_input_bytes(f, max_bytes=100) == b"x" * 100
    with pytest.raises(PrunesimError, match="larger than"):
        read_input_bytes(f, "--opt", max_bytes=99)
    with pytest.raises(PrunesimError, match="no such"):
        read_input_bytes(tmp_path / "none", max_bytes=99)


def _budget(monkeypatch, name, limit):
    monkeypatch.setitem(limits.BUDGETS, name, dataclasses.replace(limits.BUDGETS[name],
                                                                   limit=limit))


@pytest.mark.parametrize("make, needle", [
    (lambda base: "# " + "x" * 70_000 + "\n" + base, "line 1: 70,002 characters"),
    (lambda base: base.replace("description: NVIDIA", "description: " + "y" * 70_000 + " NV"),
     "characters on one line"),
    (lambda base: base + "junk: [" + ",".join(["1"] * 40_000) + "]\n", "characters on one line"),
    (lambda base: "a" * 200_000, "line 1: 200,000 characters"),
    (lambda base: base.replace("{value: 108,", "{value: " + "1" * 5000 + ","),
     "an integer of 5,000 characters"),
    (lambda base: base.replace("{value: 108,", "{value: " + "1" * 1001 + ","),
     "1,000-digit limit"),
])
def test_long_lines_and_long_integers_in_a_hwconfig(tmp_path, make, needle, capsys):
    f = tmp_path / "long.yaml"
    f.write_text(make(A100.read_text()))
    refused(["gemm", "--hw", f, "--m", "8", "--n", "8", "--k", "8"], capsys, str(f), needle)


def test_a_line_at_the_limit_loads():
    limit = int(limits.BUDGETS["yaml_line_chars"].limit)
    text = "a: " + "b" * (limit - 3) + "\nc: 1\n"
    assert load_yaml_text(text, "t", ConfigError)["c"] == 1
    with pytest.raises(ConfigError, match="line 1"):
        load_yaml_text("a: " + "b" * (limit - 2) + "\n", "t", ConfigError)


@pytest.mark.parametrize("fast", [True, False])
def test_node_budget_stops_before_composing_everything(monkeypatch, fast):
    _budget(monkeypatch, "yaml_nodes", 1000)
    many = "x:\n" + "- 1\n" * 2000
    with pytest.raises(ConfigError, match="more than 1,000 nodes"):
        load_yaml_text(many, "t", ConfigError, fast=fast)
    assert len(load_yaml_text("x:\n" + "- 1\n" * 900, "t", ConfigError, fast=fast)["x"]) == 900


@pytest.mark.parametrize("reader", ["accuracy", "trajectory", "measurements", "tensor"])
def test_the_python_readers_refuse_a_fifo_without_blocking(tmp_path, reader):
    # the same rule through the API as through the command line: a FIFO with no writer would
    # block an open() forever; each reader refuses it in one error naming the file
    from sim.engines.gpu.calibrate import load_measurements
    from sim.methods.tensor_cli import _read_tensor
    from sim.system.prunetrain import load_trajectory
    from sim.system.tta import load_curves
    from sim.workload import load_workload
    fifo = tmp_path / ("x.csv" if reader in ("accuracy", "trajectory") else "x.json"
                       if reader == "measurements" else "x.npy")
    os.mkfifo(fifo)
    call = {"accuracy": lambda: load_curves(fifo),
            "trajectory": lambda: load_trajectory(fifo, load_workload("cnn2")),
            "measurements": lambda: load_measurements(fifo),
            "tensor": lambda: _read_tensor(str(fifo))}[reader]
    with pytest.raises(PrunesimError) as e:
        call()
    assert str(fifo) in str(e.value) and "FIFO" in str(e.value)
