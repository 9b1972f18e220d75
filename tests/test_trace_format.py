"""Trace format v1: round trip, streaming, interrupted capture, every bad-trace case, layer_stats,
and the `prunesim trace info` / `trace check` commands."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim import __version__
from sim.cli import main
from sim.errors import TraceError
from sim.traces.format import (FORMAT, LOG, LOG_COLUMNS, MANIFEST, SCHEMA_VERSION, TraceWriter,
                               open_trace, verify_record)
from sim.traces.inspect import check_trace
from sim.traces.stats import layer_stats, quantile_key
from sim.workload import load_workload

from conftest import (CNN2_BATCH, CNN2_ITERATIONS, CNN2_LOG, CNN2_PROVENANCE, CNN2_SUBSAMPLE,
                      heavy_tailed)

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# helpers


def manifest(trace_dir: Path) -> dict:
    return json.loads((trace_dir / MANIFEST).read_text())


def edit_manifest(trace_dir: Path, fn) -> None:
    m = manifest(trace_dir)
    fn(m)
    (trace_dir / MANIFEST).write_text(json.dumps(m, indent=1))


def rec_index(trace_dir: Path, layer: str, kind: str = "dO", iteration: int = 0) -> int:
    for i, r in enumerate(manifest(trace_dir)["records"]):
        if (r["layer"], r["kind"], r["iteration"]) == (layer, kind, iteration):
            return i
    raise KeyError((layer, kind, iteration))


def tensor_file(trace_dir: Path, layer: str, kind: str = "dO", iteration: int = 0) -> Path:
    return trace_dir / manifest(trace_dir)["records"][rec_index(trace_dir, layer, kind, iteration)]["path"]


def cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_bad(capsys, trace_dir: Path, file: Path, field: str | None, match: str = "",
               argv: tuple = ("check",)) -> TraceError:
    """The API raises TraceError(file, field) and the CLI prints exactly one located line, exit 2."""
    with pytest.raises(TraceError) as ei:
        check_trace(trace_dir)
    e = ei.value
    assert Path(e.file) == Path(file), (e.file, file)
    assert e.field == field, e
    assert match in e.message, e
    for cmd in argv:
        rc, out, err = cli(capsys, "trace", cmd, trace_dir)
        assert rc == 2, (cmd, out, err)
        lines = err.strip("\n").split("\n")
        assert len(lines) == 1, err
        assert "Traceback" not in err
        where = f"{file}: {field}: " if field else f"{file}: "
        assert lines[0].startswith(f"prunesim: error: {where}"), (lines[0], where)
        assert "OK" not in out
    return e


def first(w, op="conv"):
    return next(l for l in w.layers if l.op == op)


@pytest.fixture(scope="module")
def cnn2():
    return load_workload("cnn2")


# ----------------------------------------------------------------------------------------------
# round trip


def test_round_trip_bit_exact(cnn2_trace, cnn2_trace_arrays, cnn2):
    t = open_trace(cnn2_trace)
    assert len(t.records) == len(cnn2_trace_arrays)
    dtypes = set()
    for (it, layer, kind), want in cnn2_trace_arrays.items():
        got = t.tensor(it, layer, kind)
        assert isinstance(got, np.memmap) and not got.flags.writeable
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bit-exact, -0.0 included
        rec = t.record(it, layer, kind)
        assert rec.shape == cnn2.layer(layer).tensor_shapes(CNN2_SUBSAMPLE)[kind]
        assert rec.nbytes == want.nbytes
        dtypes.add(want.dtype.name)
    assert dtypes == {"float16", "float32"}


def test_round_trip_open_tensor_memmap_fill(tmp_path, cnn2):
    l = first(cnn2)
    shape = l.tensor_shapes(3)["dO"]
    want = heavy_tailed(np.random.default_rng(5), shape, "float32")
    with TraceWriter(tmp_path / "t", cnn2, batch=3, provenance={}) as tw:
        with tw.open_tensor(7, 0, l.name, "dO", shape, "float32") as mm:
            assert isinstance(mm, np.memmap)
            for c in range(shape[1]):
                mm[:, c] = want[:, c]
    got = open_trace(tmp_path / "t").tensor(7, l.name)
    assert got.tobytes() == want.tobytes()
    assert not list((tmp_path / "t").rglob(".*tmp*"))


def test_manifest_fields(cnn2_trace, cnn2):
    m = manifest(cnn2_trace)
    assert m["format"] == FORMAT and m["schema_version"] == SCHEMA_VERSION == 1
    assert m["complete"] is True
    assert m["batch"] == CNN2_BATCH and m["batch_subsample"] == CNN2_SUBSAMPLE
    assert m["workload"] == cnn2.to_dict()
    prov = m["provenance"]
    assert {k: prov[k] for k in CNN2_PROVENANCE} == CNN2_PROVENANCE
    assert prov["software"]["prunesim"] == __version__ and prov["software"]["numpy"] == np.__version__
    assert m["iterations"] == [{"iteration": i, "epoch": e} for i, e in CNN2_ITERATIONS]
    assert [x["name"] for x in m["layers"]] == [l.name for l in cnn2.layers]
    assert m["layers"][0]["kinds"] == ["I", "dO"]
    assert m["log"]["path"] == LOG and len(m["log"]["sha256"]) == 64
    for r in m["records"]:
        assert set(r) == {"iteration", "epoch", "layer", "kind", "path", "shape", "dtype", "sha256"}
        assert r["path"] == f"tensors/it{r['iteration']:07d}/{r['layer']}.{r['kind']}.npy"
    t = open_trace(cnn2_trace)
    assert t.complete and t.batch == CNN2_BATCH and t.recorded_batch == CNN2_SUBSAMPLE
    assert t.iterations == [0, 50] and t.epoch_of(50) == 1
    assert t.workload.checksum == cnn2.checksum


def test_training_log(cnn2_trace):
    t = open_trace(cnn2_trace)
    assert t.log == CNN2_LOG
    header = (cnn2_trace / LOG).read_text().splitlines()[0]
    assert tuple(header.split(",")) == LOG_COLUMNS


def test_log_refuses_non_finite(tmp_path, cnn2):
    with TraceWriter(tmp_path / "t", cnn2, batch=1, provenance={}) as tw:
        with pytest.raises(ValueError, match="non-finite"):
            tw.log_epoch(0, float("nan"), None, 10, 1.0, "dense")
        tw.log_epoch(0, 1.0, None, 10, 1.0, "dense")
    assert open_trace(tmp_path / "t").log[0]["train_loss"] == 1.0


def test_writer_refuses_bad_input(tmp_path, cnn2):
    l = first(cnn2)
    with TraceWriter(tmp_path / "t", cnn2, batch=1, provenance={}) as tw:
        a = np.zeros(l.tensor_shapes(1)["dO"], np.float32)
        tw.add(0, 0, l.name, "dO", a)
        for args, msg in [((0, 0, l.name, "dO", a), "already recorded"),
                          ((0, 0, "nope", "dO", a), "not in workload"),
                          ((0, 0, l.name, "dX", a), "unknown tensor kind"),
                          ((0, 1, l.name, "I", a), "another epoch"),
                          ((1, 0, l.name, "dO", a.astype(np.int32)), "not supported")]:
            with pytest.raises(ValueError, match=msg):
                tw.add(*args)
    with pytest.raises(TraceError, match="already exists"):
        TraceWriter(tmp_path / "t", cnn2, batch=1, provenance={})
    assert len(open_trace(tmp_path / "t").records) == 1


# ----------------------------------------------------------------------------------------------
# streaming


def test_stream_order_is_network_order(trace_factory, cnn2):
    path, arrays = trace_factory(shuffle=True, iterations=((100, 2), (0, 0), (50, 1)))
    t = open_trace(path)
    got = [(r.iteration, r.layer) for r, _ in t.stream("dO")]
    assert got == [(i, l.name) for i in (0, 50, 100) for l in cnn2.layers]
    for r, a in t.stream("dO", iteration=50):
        assert r.iteration == 50 and a.tobytes() == arrays[(50, r.layer, "dO")].tobytes()
    assert [r.layer for r, _ in t.stream("I")] == [cnn2.layers[0].name]
    assert t.layer_names("W") == [cnn2.layers[-1].name]
    with pytest.raises(TraceError) as ei:
        list(t.stream("dO", iteration=7))
    assert ei.value.field == "iterations"


def test_stream_maps_one_tensor_at_a_time(cnn2_trace):
    t = open_trace(cnn2_trace)
    it = t.stream("dO", verify=False)
    r, a = next(it)
    assert isinstance(a, np.memmap) and a.shape == r.shape


# ----------------------------------------------------------------------------------------------
# interrupted capture


def test_interrupted_writer_leaves_readable_incomplete_trace(tmp_path, cnn2, capsys):
    out = tmp_path / "t"
    rng = np.random.default_rng(1)
    l0, l1 = cnn2.layers[0], cnn2.layers[1]
    kept = {}
    with pytest.raises(RuntimeError, match="boom"):
        with TraceWriter(out, cnn2, batch=2, provenance={"method": "dense"}) as tw:
            for l in cnn2.layers:
                kept[l.name] = heavy_tailed(rng, l.tensor_shapes(2)["dO"], "float32")
                tw.add(0, 0, l.name, "dO", kept[l.name])
            tw.end_iteration()
            tw.add(1, 0, l0.name, "dO", kept[l0.name])            # finished, not yet end_iteration
            with tw.open_tensor(1, 0, l1.name, "dO", l1.tensor_shapes(2)["dO"]) as mm:
                mm[0] = 1.0
                raise RuntimeError("boom")                         # mid-tensor
    t = open_trace(out)
    assert not t.complete
    assert sorted((r.iteration, r.layer) for r in t.records) == sorted(
        [(0, l.name) for l in cnn2.layers] + [(1, l0.name)])
    assert not (out / f"tensors/it0000001/{l1.name}.dO.npy").exists()
    assert not [p for p in out.rglob("*") if "tmp" in p.name]
    for r, a in t.stream("dO", iteration=0):
        assert a.tobytes() == kept[r.layer].tobytes()
    res = check_trace(out)
    assert res["tensors"] == len(cnn2.layers) + 1 and not res["complete"]
    rc, o, err = cli(capsys, "trace", "check", out)
    assert rc == 0 and o.startswith(f"OK: {len(cnn2.layers) + 1} tensors") and "interrupted" in o
    rc, o, err = cli(capsys, "trace", "info", out)
    assert rc == 0 and "INCOMPLETE" in o


# ----------------------------------------------------------------------------------------------
# every bad trace: located TraceError, one CLI line, exit 2


def test_missing_directory(tmp_path, capsys):
    d = tmp_path / "nope"
    assert_bad(capsys, d, d, None, "no such trace directory", argv=("check", "info"))


def test_missing_manifest(cnn2_trace, capsys):
    (cnn2_trace / MANIFEST).unlink()
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, None, "missing", argv=("check", "info"))


@pytest.mark.parametrize("text", ['{"format": "prunesim-trace", ', "[1, 2]", '{"a": NaN}', "\xff\xfe"])
def test_malformed_manifest(cnn2_trace, capsys, text):
    (cnn2_trace / MANIFEST).write_bytes(text.encode("latin-1"))
    e = assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, None, argv=("check", "info"))
    assert "JSON" in e.message


def test_unknown_schema_version(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m.update(schema_version=2))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "schema_version", "unknown schema version 2",
               argv=("check", "info"))


@pytest.mark.parametrize("tag", ["prunesim-trace-v0", None])
def test_wrong_format_tag(cnn2_trace, capsys, tag):
    edit_manifest(cnn2_trace, lambda m: m.update(format=tag))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "format", argv=("check", "info"))


def test_missing_or_bad_embedded_workload(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m.pop("workload"))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "workload", "missing")
    edit_manifest(cnn2_trace, lambda m: m.update(workload={"name": "x", "input": {}, "layers": []}))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "workload.input")


def test_missing_tensor_file(cnn2_trace, capsys, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[2].name)
    f.unlink()
    assert_bad(capsys, cnn2_trace, f, None, "missing tensor file")


@pytest.mark.parametrize("keep", [-7, 60])   # data area cut short / header cut short
def test_truncated_tensor_file(cnn2_trace, capsys, cnn2, keep):
    f = tensor_file(cnn2_trace, cnn2.layers[0].name)
    data = f.read_bytes()
    f.write_bytes(data[:keep])
    assert_bad(capsys, cnn2_trace, f, None, "truncated")


def test_checksum_mismatch(cnn2_trace, capsys, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[1].name)
    data = bytearray(f.read_bytes())
    data[-3] ^= 0x40  # a byte in the data area: header, shape and dtype stay valid
    f.write_bytes(bytes(data))
    assert np.isfinite(np.load(f)).all()
    assert_bad(capsys, cnn2_trace, f, "sha256", "checksum mismatch")


def test_wrong_dtype_in_manifest(cnn2_trace, capsys, cnn2):
    fc = first(cnn2, "fc")
    i = rec_index(cnn2_trace, fc.name)
    edit_manifest(cnn2_trace, lambda m: m["records"][i].update(dtype="float16"))
    e = assert_bad(capsys, cnn2_trace, tensor_file(cnn2_trace, fc.name), "dtype")
    assert "float32" in e.message and "float16" in e.message


def test_wrong_dtype_in_file(cnn2_trace, capsys, cnn2):
    fc = first(cnn2, "fc")
    f = tensor_file(cnn2_trace, fc.name)
    np.save(f, np.load(f).astype(np.float64), allow_pickle=False)
    assert_bad(capsys, cnn2_trace, f, "dtype", "file holds float64")


def test_unsupported_dtype_in_manifest(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m["records"][0].update(dtype="int8"))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "records[0].dtype", "unsupported dtype")


def test_manifest_shape_not_matching_workload(cnn2_trace, capsys, cnn2):
    l = cnn2.layers[1]
    i = rec_index(cnn2_trace, l.name)
    bad = list(l.tensor_shapes(CNN2_BATCH)["dO"])  # the full batch, not the recorded sub-sample
    edit_manifest(cnn2_trace, lambda m: m["records"][i].update(shape=bad))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, f"records[{i}].shape", "expects",
               argv=("check", "info"))
    edit_manifest(cnn2_trace, lambda m: m["records"][i].update(shape=[0, -1]))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, f"records[{i}].shape", "positive")


def test_file_shape_not_matching_manifest(cnn2_trace, capsys, cnn2):
    l = first(cnn2)
    f = tensor_file(cnn2_trace, l.name)
    a = np.load(f)
    np.save(f, a.reshape(a.shape[0], a.shape[1], -1), allow_pickle=False)  # same bytes, 3-D
    e = assert_bad(capsys, cnn2_trace, f, "shape", "manifest says")
    assert str(list(a.shape)) in e.message


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_non_finite_values(tmp_path, capsys, cnn2, bad, dtype):
    out = tmp_path / "t"
    l = cnn2.layers[-1]
    a = heavy_tailed(np.random.default_rng(2), l.tensor_shapes(4)["dO"], dtype)
    a[2, 3] = bad
    with TraceWriter(out, cnn2, batch=4, provenance={}) as tw:  # valid checksum: written normally
        tw.add(0, 0, l.name, "dO", a)
    f = out / f"tensors/it0000000/{l.name}.dO.npy"
    e = assert_bad(capsys, out, f, "values", "non-finite value")
    assert "[2, 3]" in e.message
    with pytest.raises(TraceError):
        list(open_trace(out).stream("dO"))  # a verified read refuses it too


@pytest.mark.parametrize("path", ["../x.npy", "tensors/../../x.npy", "/etc/hostname",
                                  "tensors\\it0000000\\a.npy", ""])
def test_manifest_path_escaping(cnn2_trace, capsys, path):
    (cnn2_trace.parent / "x.npy").write_bytes(b"")
    edit_manifest(cnn2_trace, lambda m: m["records"][3].update(path=path))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "records[3].path", argv=("check", "info"))


def test_log_path_escaping(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m["log"].update(path="../log.csv"))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "log.path", "escapes")


def test_tensor_file_replaced_by_symlink_inside(cnn2_trace, capsys, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[1].name)
    copy = cnn2_trace / "copy.npy"
    f.rename(copy)
    f.symlink_to(copy)  # same bytes, checksum would pass: refused because it is a link
    assert_bad(capsys, cnn2_trace, f, None, "symbolic link")


def test_tensor_file_replaced_by_symlink_outside(cnn2_trace, capsys, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[1].name)
    outside = cnn2_trace.parent / "outside.npy"
    f.rename(outside)
    f.symlink_to(outside)
    i = rec_index(cnn2_trace, cnn2.layers[1].name)
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, f"records[{i}].path", "escapes",
               argv=("check", "info"))


class _Trap:
    """Unpickling this creates a marker file: proof that a reader unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_npy_is_refused_not_unpickled(cnn2_trace, capsys, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[-1].name)
    marker = cnn2_trace.parent / "UNPICKLED"
    obj = np.empty(1, dtype=object)
    obj[0] = _Trap(marker)
    np.save(f, obj, allow_pickle=True)
    assert_bad(capsys, cnn2_trace, f, None, "unreadable", argv=("check", "info"))
    assert not marker.exists()


def test_unknown_layer(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m["records"][2].update(layer="conv99"))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "records[2].layer", "'conv99' is not in",
               argv=("check", "info"))


def test_unknown_kind(cnn2_trace, capsys):
    edit_manifest(cnn2_trace, lambda m: m["records"][2].update(kind="dW"))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, "records[2].kind", "unknown tensor kind",
               argv=("check", "info"))


def test_duplicate_record(cnn2_trace, capsys):
    n = len(manifest(cnn2_trace)["records"])
    edit_manifest(cnn2_trace, lambda m: m["records"].append(dict(m["records"][1])))
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, f"records[{n}]", "duplicate",
               argv=("check", "info"))
    # same (iteration, layer, kind) under another file name
    def dup_key(m):
        r = dict(m["records"][1], path="tensors/other.npy")
        m["records"][n] = r
    edit_manifest(cnn2_trace, dup_key)
    assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST, f"records[{n}]", "duplicate")


@pytest.mark.parametrize("field,value", [("iteration", -1), ("iteration", "0"), ("epoch", True),
                                         ("sha256", "ABC"), ("layer", None)])
def test_bad_record_fields(cnn2_trace, capsys, field, value):
    edit_manifest(cnn2_trace, lambda m: m["records"][0].update({field: value}))
    e = assert_bad(capsys, cnn2_trace, cnn2_trace / MANIFEST,
                   "records[0]" if value == -1 else f"records[0].{field}")
    assert e.message


def test_corrupted_training_log(cnn2_trace, capsys):
    f = cnn2_trace / LOG
    f.write_text(f.read_text().replace("1.7311", "0.7311"))
    assert_bad(capsys, cnn2_trace, f, "sha256", "training log", argv=("check", "info"))


def test_missing_training_log(cnn2_trace, capsys):
    (cnn2_trace / LOG).unlink()
    assert_bad(capsys, cnn2_trace, cnn2_trace / LOG, None, "missing")


def _variant_yaml(tmp_path: Path, cnn2, change) -> Path:
    d = cnn2.to_dict()
    change(d)
    f = tmp_path / f"{d['name']}.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


def test_check_against_different_workload(tmp_path, trace_factory, capsys, cnn2):
    conv2 = cnn2.convs[1]

    def widen(d):
        d["name"] = "cnn2-wide"
        op = next(o for o in d["layers"] if o["name"] == conv2.name)
        op["c_out"] = conv2.c_out * 2
    y = _variant_yaml(tmp_path, cnn2, widen)
    path, _ = trace_factory(workload=y, iterations=((0, 0),), extra_kinds=False, log=None)
    rc, out, err = cli(capsys, "trace", "check", path, "--workload", y)      # its own workload: OK
    assert rc == 0 and out.startswith(f"OK: {len(cnn2.layers)} tensors")
    with pytest.raises(TraceError) as ei:
        check_trace(path, "cnn2")
    field = f"workload.layers[{conv2.index}] ({conv2.name}).c_out"
    assert Path(ei.value.file) == path / MANIFEST and ei.value.field == field
    assert str(conv2.c_out * 2) in ei.value.message and str(conv2.c_out) in ei.value.message
    rc, out, err = cli(capsys, "trace", "check", path, "--workload", "cnn2")
    assert rc == 2 and out == "" and len(err.strip().split("\n")) == 1 and "Traceback" not in err
    assert err.startswith(f"prunesim: error: {path / MANIFEST}: {field}: ")


def test_check_against_workload_with_other_layers(tmp_path, cnn2_trace, capsys, cnn2):
    renamed = _variant_yaml(tmp_path, cnn2, lambda d: d["layers"][0].update(name="first"))
    with pytest.raises(TraceError) as ei:
        check_trace(cnn2_trace, renamed)
    assert ei.value.field == "workload.layers[0].name"

    def drop_last(d):
        d["name"] = "short"
        d["layers"].pop()
    short = _variant_yaml(tmp_path, cnn2, drop_last)
    with pytest.raises(TraceError) as ei:
        check_trace(cnn2_trace, short)
    assert ei.value.field == f"workload.layers[{len(cnn2.layers) - 1}]"
    rc, out, err = cli(capsys, "trace", "check", cnn2_trace, "--workload", "no-such-workload")
    assert rc == 2 and "unknown workload" in err and len(err.strip().split("\n")) == 1


def test_cli_subprocess_exit_status(cnn2_trace, cnn2):
    f = tensor_file(cnn2_trace, cnn2.layers[0].name)
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    p = subprocess.run([sys.executable, "-m", "sim", "trace", "check", str(cnn2_trace)],
                       capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"prunesim: error: {f}: sha256: ")


# ----------------------------------------------------------------------------------------------
# trace check / trace info on good traces


def test_check_ok(cnn2_trace, cnn2_trace_arrays, capsys):
    rc, out, err = cli(capsys, "trace", "check", cnn2_trace, "--workload", "cnn2")
    total = sum((cnn2_trace / r["path"]).stat().st_size for r in manifest(cnn2_trace)["records"])
    assert rc == 0 and err == ""
    assert out == f"OK: {len(cnn2_trace_arrays)} tensors, {total / 1e6:.1f} MB verified\n"


def test_check_notes_unreferenced_files(cnn2_trace, capsys):
    (cnn2_trace / "tensors/it0000000/.conv1.dO.npy.tmp123").write_bytes(b"junk")
    rc, out, err = cli(capsys, "trace", "check", cnn2_trace)
    assert rc == 0 and "1 file(s) under tensors/ are not in the manifest" in out


def test_verify_record_api(cnn2_trace):
    t = open_trace(cnn2_trace)
    for r in t.records:
        verify_record(t.path, r)


def test_info_text(cnn2_trace, capsys, cnn2):
    rc, out, err = cli(capsys, "trace", "info", cnn2_trace)
    assert rc == 0 and err == ""
    for s in ("cnn2", "status:     complete", "batch:      8, sub-sampled to 2",
              "model=cnn2", "dataset=synthetic-test", "method=dense", "seed=1234",
              f"prunesim {__version__}", "2 iteration(s) [0, 50]", "epoch(s) [0, 1]",
              "training log", "0.4125", "iteration 0 (epoch 0)", "iteration 50 (epoch 1)",
              "density", "kurtosis", "float16", "float32"):
        assert s in out, s
    l = cnn2.layers[0]
    assert "x".join(map(str, l.tensor_shapes(2)["dO"])) in out
    # table rows are in network order within an iteration
    body = out.split("iteration 50 (epoch 1)")[1]
    pos = [body.index("\n" + l.name + " ") for l in cnn2.layers]
    assert pos == sorted(pos)


def test_info_json_matches_layer_stats(cnn2_trace, cnn2_trace_arrays, capsys):
    rc, out, err = cli(capsys, "trace", "info", cnn2_trace, "--json", "--iteration", "50")
    assert rc == 0
    doc = json.loads(out)
    assert doc["complete"] is True and doc["workload"]["name"] == "cnn2"
    assert doc["batch"] == CNN2_BATCH and doc["recorded_batch"] == CNN2_SUBSAMPLE
    assert doc["provenance"]["seed"] == 1234 and doc["log"] == CNN2_LOG
    assert {r["iteration"] for r in doc["records"]} == {50}
    assert len(doc["records"]) == sum(1 for k in cnn2_trace_arrays if k[0] == 50)
    for r in doc["records"]:
        want = layer_stats(cnn2_trace_arrays[(50, r["layer"], r["kind"])])
        for k in ("elements", "density", "zero_fraction", "mean_abs", "std", "max_abs", "kurtosis"):
            assert r[k] == pytest.approx(want[k], rel=1e-12), k
        assert r["quantiles"] == pytest.approx(want["quantiles"])


def test_info_unknown_iteration(cnn2_trace, capsys):
    rc, out, err = cli(capsys, "trace", "info", cnn2_trace, "--iteration", "3")
    assert rc == 2 and out == "" and ": iterations: no tensors at iteration 3" in err


def test_info_json_all_zero_tensor_has_nulls(tmp_path, capsys, cnn2):
    l = cnn2.layers[-1]
    with TraceWriter(tmp_path / "t", cnn2, batch=1, provenance={}) as tw:
        tw.add(0, 0, l.name, "dO", np.zeros(l.tensor_shapes(1)["dO"], np.float16))
    rc, out, err = cli(capsys, "trace", "info", tmp_path / "t", "--json")
    r = json.loads(out)["records"][0]
    assert r["density"] == 0.0 and r["kurtosis"] is None and r["quantiles"]["p50"] is None
    rc, out, err = cli(capsys, "trace", "info", tmp_path / "t")
    assert rc == 0 and "status:     complete" in out


# ----------------------------------------------------------------------------------------------
# layer_stats


def direct_stats(a: np.ndarray) -> dict:
    x = np.asarray(a, dtype=np.float64).ravel()
    m = x.mean()
    d = x - m
    m2, m4 = (d ** 2).mean(), (d ** 4).mean()
    nz = np.abs(x[x != 0])
    return {"elements": x.size, "nonzeros": nz.size, "density": nz.size / x.size,
            "zero_fraction": (x == 0).mean(), "mean": m, "std": x.std(), "mean_abs": np.abs(x).mean(),
            "max_abs": np.abs(x).max(), "mean_abs_nonzero": nz.mean(), "kurtosis": m4 / m2 ** 2 - 3,
            "nz": nz}


def assert_moments(got: dict, want: dict, rel: float = 1e-10) -> None:
    for k in ("elements", "nonzeros"):
        assert got[k] == want[k], k
    for k in ("density", "zero_fraction", "mean_abs", "std", "max_abs", "mean_abs_nonzero",
              "kurtosis"):
        assert got[k] == pytest.approx(want[k], rel=rel), k
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-8, abs=1e-12 * want["std"])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_layer_stats_small_array(dtype):
    a = heavy_tailed(np.random.default_rng(3), (4, 8, 5, 5), dtype)
    a.flat[7] = -0.0
    before = a.copy()
    got = layer_stats(a, chunk_elems=97)  # several uneven chunks
    want = direct_stats(a)
    assert_moments(got, want)
    assert got["quantile_sample"] == want["nonzeros"]  # below the sample size: exact
    for q in (0.5, 0.9, 0.99, 0.999):
        assert got["quantiles"][quantile_key(q)] == pytest.approx(np.quantile(want["nz"], q), rel=1e-12)
    assert np.array_equal(a, before)  # input untouched (float64 input is not modified in place)
    one = layer_stats(a)                 # single chunk: same answer
    assert_moments(one, want)
    assert one["quantiles"] == got["quantiles"]


def test_layer_stats_memmap_larger_than_a_chunk(tmp_path):
    from sim.traces.stats import CHUNK_ELEMS, QUANTILE_SAMPLE
    n = CHUNK_ELEMS + CHUNK_ELEMS // 3
    mm = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float16, shape=(n,))
    mm[:] = heavy_tailed(np.random.default_rng(4), n, np.float16, density=0.3)
    mm[5] = 3.0   # a clear maximum
    mm.flush()
    del mm
    ro = np.load(tmp_path / "big.npy", mmap_mode="r", allow_pickle=False)
    got = layer_stats(ro)
    want = direct_stats(np.asarray(ro))
    assert_moments(got, want, rel=1e-9)
    assert got["max_abs"] == 3.0
    assert got["quantile_sample"] == QUANTILE_SAMPLE < want["nonzeros"]
    for q in (0.5, 0.9, 0.99):  # an estimate: within a small rank error of the exact quantile
        est = got["quantiles"][quantile_key(q)]
        rank = (want["nz"] <= est).mean()
        assert abs(rank - q) < 4 * math.sqrt(q * (1 - q) / QUANTILE_SAMPLE) + 2e-3, (q, rank)
    # reproducible, and independent of the chunking
    again = layer_stats(ro, chunk_elems=CHUNK_ELEMS // 7)
    assert again["quantiles"] == got["quantiles"]
    assert_moments(again, want, rel=1e-9)


def test_layer_stats_edge_cases():
    z = layer_stats(np.zeros((3, 4), np.float32))
    assert z["density"] == 0.0 and z["zero_fraction"] == 1.0 and z["std"] == 0.0
    assert math.isnan(z["kurtosis"]) and math.isnan(z["quantiles"]["p50"]) and z["max_abs"] == 0.0
    c = layer_stats(np.full(10, -2.0))
    assert c["mean"] == -2.0 and c["std"] == 0.0 and math.isnan(c["kurtosis"]) and c["max_abs"] == 2.0
    e = layer_stats(np.zeros(0, np.float32))
    assert e["elements"] == 0 and math.isnan(e["mean"])
    f = np.asfortranarray(heavy_tailed(np.random.default_rng(6), (30, 40), np.float32))
    assert_moments(layer_stats(f, chunk_elems=111), direct_stats(f))
    s = heavy_tailed(np.random.default_rng(7), (30, 40), np.float32)[:, ::3]  # non-contiguous
    assert_moments(layer_stats(s, chunk_elems=50), direct_stats(s))
    assert quantile_key(0.999) == "p99.9" and quantile_key(0.5) == "p50"
    with pytest.raises(ValueError):
        layer_stats(s, chunk_elems=0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_layer_stats_chunk_kernel_is_numpy_bit_for_bit(dtype):
    # lengths around numpy's pairwise blocks (8, 128) and halving points; zeros, a tiny mean
    from sim.traces.stats import _chunk_pass, _chunk_ref
    rng = np.random.default_rng(3)
    for n in (1, 7, 8, 9, 127, 128, 129, 136, 257, 1000, 8193, 100_003):
        x = (rng.standard_normal(n) * 1e-3 + 1e-5).astype(dtype)
        x[rng.random(n) < 0.4] = 0
        got = _chunk_pass(x if dtype != np.float16 else x.astype(np.float32))
        want = _chunk_ref(x)
        for g, w in zip(got, want):
            assert np.array_equal(np.asarray(g), np.asarray(w)), (n, g, w)
    x = np.array([1.0, np.nan, 0.0, -2.0] * 40, np.float32)
    assert all(np.isnan(v) for v in _chunk_pass(x)[:6])      # NaN propagates, as in numpy
