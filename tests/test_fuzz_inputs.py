"""Property-based fuzzing of the input readers: whatever the bytes, a PrunesimError or a valid result.

Never a traceback from inside prunesim, never numbers from bad data. The number of cases tried per
property is set by the `fuzz` hypothesis profile below (kept small by default; HYPOTHESIS_PROFILE=
fuzz-long for a deeper run).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim.errors import PrunesimError, TraceError, WorkloadError
from sim.traces.format import open_trace
from sim.workload import load_workload, workload_from_dict

# database=None: no .hypothesis directory in the checkout (tests write only under their tmp dir)
settings.register_profile("fuzz", max_examples=60, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.register_profile("fuzz-long", max_examples=2000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fuzz"))

ZOO_TEXT = (Path(__file__).resolve().parents[1] / "workloads" / "resnet20.yaml").read_text()
SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "sample-cnn2-mnist5k"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                   st.dictionaries(st.text(max_size=6), c, max_size=4)),
                      max_leaves=12)


@given(st.binary(max_size=400))
@example(b"1:")                      # an int key: the error names it as text
@example(b"1: 2\nfoo: 3\n")          # int and str keys together
def test_workload_loader_on_random_bytes(tmp_path_factory, data):
    f = tmp_path_factory.mktemp("wl") / "w.yaml"
    f.write_bytes(data)
    try:
        load_workload(f)
    except WorkloadError as e:
        assert e.file and str(f) in str(e)


@given(st.integers(0, len(ZOO_TEXT) - 1), st.integers(1, 40), st.text(max_size=20))
def test_workload_loader_on_mutated_zoo_file(tmp_path_factory, at, cut, insert):
    """Splice garbage into a real workload file: it loads (still valid) or fails with the file named."""
    f = tmp_path_factory.mktemp("wl") / "w.yaml"
    f.write_text(ZOO_TEXT[:at] + insert + ZOO_TEXT[at + cut:])
    try:
        w = load_workload(f)
    except WorkloadError as e:
        assert str(f) in str(e)
    else:
        assert w.params() > 0 and all(l.p >= 1 and l.q >= 1 for l in w.layers)


@given(values)
def test_workload_from_any_document(doc):
    try:
        workload_from_dict(doc, origin="doc.yaml")
    except WorkloadError as e:
        assert e.file == "doc.yaml"


@given(st.sampled_from(["python/object/apply:os.system", "python/name:os.system",
                        "python/object:sim.workload.Workload"]))
def test_yaml_tags_never_build_objects(tmp_path_factory, tag):
    f = tmp_path_factory.mktemp("wl") / "w.yaml"
    f.write_text(f"name: !!{tag} ['echo hi']\ninput: {{channels: 3, height: 8, width: 8}}\nlayers: []\n")
    with pytest.raises(WorkloadError):
        load_workload(f)


# ---- traces -----------------------------------------------------------------------------------


def _copy_sample(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tr") / "t"
    shutil.copytree(SAMPLE, d)
    return d


def _read_all(d: Path) -> None:
    tr = open_trace(d)
    for _, arr in tr.stream("dO"):
        assert np.isfinite(np.asarray(arr)).all()


@given(st.integers(0, 10**9), st.binary(min_size=1, max_size=16))
def test_trace_with_corrupted_manifest(tmp_path_factory, pos, junk):
    d = _copy_sample(tmp_path_factory)
    m = d / "manifest.json"
    text = m.read_bytes()
    at = pos % len(text)
    m.write_bytes(text[:at] + junk + text[at + len(junk):])
    try:
        _read_all(d)
    except TraceError as e:
        assert str(d) in str(e)


@given(st.sampled_from(["records", "batch", "workload", "schema_version", "log", "format",
                        "batch_subsample", "iterations"]), values)
def test_trace_with_replaced_manifest_field(tmp_path_factory, key, value):
    d = _copy_sample(tmp_path_factory)
    m = d / "manifest.json"
    doc = json.loads(m.read_text())
    doc[key] = value
    m.write_text(json.dumps(doc, allow_nan=True))
    try:
        _read_all(d)
    except TraceError as e:
        assert str(d) in str(e)


@given(st.integers(0, 10**9), st.integers(0, 255), st.booleans())
def test_trace_with_corrupted_or_truncated_tensor(tmp_path_factory, pos, byte, truncate):
    d = _copy_sample(tmp_path_factory)
    files = sorted((d / "tensors").rglob("*.npy"))
    f = files[pos % len(files)]
    data = bytearray(f.read_bytes())
    at = (pos // len(files)) % len(data)
    if truncate:
        data = data[:at]
    else:
        if data[at] == byte:
            return
        data[at] = byte
    f.write_bytes(bytes(data))
    with pytest.raises(TraceError) as ei:
        _read_all(d)
    assert f.name in str(ei.value)


def test_any_prunesim_error_is_one_line(tmp_path, capsys):
    """The CLI contract behind all of the above: one line, exit 2."""
    from sim.cli import main
    f = tmp_path / "bad.yaml"
    f.write_text("name: [unclosed\n")
    assert main(["workload", "show", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0] and isinstance(PrunesimError("a", "b", "c"), Exception)


# ---- hardware and cluster configs -------------------------------------------------------------

from sim.errors import ConfigError  # noqa: E402
from sim.hwconfig import load_hwconfig  # noqa: E402
from sim.system.cluster import cluster_from_dict, load_cluster  # noqa: E402

HW_DIR = Path(__file__).resolve().parents[1] / "hwconfigs"
HW_TEXTS = {p.name: p.read_text() for p in sorted(HW_DIR.glob("*.yaml")) if p.name != "host.yaml"}
CLUSTER_TEXTS = {p.name: p.read_text() for p in sorted((HW_DIR / "clusters").glob("*.yaml"))}


@given(st.sampled_from(sorted(HW_TEXTS)), st.integers(0, 10**6), st.integers(1, 30),
       st.text(max_size=12))
def test_hwconfig_loader_on_mutated_files(tmp_path_factory, name, at, cut, insert):
    text = HW_TEXTS[name]
    at %= len(text)
    f = tmp_path_factory.mktemp("hw") / name
    f.write_text(text[:at] + insert + text[at + cut:])
    try:
        hw = load_hwconfig(f)
    except ConfigError as e:
        assert e.file  # names the file (or the base it pulled in)
    else:
        assert all(q.source.strip() for q in hw.params.values())


@given(st.sampled_from(sorted(HW_TEXTS)), st.sampled_from(["1555", "1555 GB", "GB/s", "1.41 GHz/s",
                                                           "-3 GB/s", "nan GB/s", "1e400 GB/s"]))
def test_hwconfig_rejects_bad_units(tmp_path_factory, name, bad):
    """Replace the first dimensional value with a malformed quantity: rejected, naming the field."""
    import re
    text = HW_TEXTS[name]
    m = re.search(r"value: (\d[\d.]*) (GB/s|MHz|GHz|MB|KiB|MiB|cycles|us)\b", text)
    if not m:
        return
    f = tmp_path_factory.mktemp("hw") / name
    f.write_text(text[:m.start(1)] + bad + text[m.end(2):])
    with pytest.raises(ConfigError) as ei:
        load_hwconfig(f)
    assert ei.value.field and ei.value.field.startswith("params.")


@given(st.sampled_from(sorted(CLUSTER_TEXTS)), st.integers(0, 10**6), st.integers(1, 30),
       st.text(max_size=12))
def test_cluster_loader_on_mutated_files(tmp_path_factory, name, at, cut, insert):
    text = CLUSTER_TEXTS[name]
    at %= len(text)
    f = tmp_path_factory.mktemp("cl") / name
    f.write_text(text[:at] + insert + text[at + cut:])
    try:
        load_cluster(f)
    except ConfigError as e:
        assert e.file


@given(values)
def test_cluster_from_any_document(doc):
    try:
        cluster_from_dict(doc, file="c.yaml")
    except ConfigError as e:
        assert e.file == "c.yaml"


# ---- budgets, ranges, outputs ---------------------------------------------------------------

from sim.limits import BUDGETS, RANGES  # noqa: E402
from sim.yamlio import load_yaml_text  # noqa: E402


def _expanded(width: int, levels: int) -> int:
    """Nodes of the alias chain below once expanded: a list of `width` copies, `levels` deep."""
    n = 1 + width   # the innermost list of scalars
    for _ in range(levels):
        n = 1 + width * n
    return n


@given(st.integers(1, 12), st.integers(0, 14))
def test_yaml_alias_budget(width, levels):
    """Aliases of aliases: accepted exactly when the expanded document is within the node budget."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    text = "\n".join(lines)
    total = 1 + sum(1 + _expanded(width, i) for i in range(levels + 1))
    try:
        doc = load_yaml_text(text, "a.yaml", ConfigError)
    except ConfigError as e:
        assert e.file == "a.yaml" and "expands to more than" in e.message
        assert total > BUDGETS["yaml_nodes"].limit
    else:
        assert total <= BUDGETS["yaml_nodes"].limit and len(doc) == levels + 1


@given(st.integers(1, 300), st.sampled_from(["[", "{a: "]), st.booleans())
def test_yaml_depth_budget(depth, opener, recursive):
    closer = "]" if opener == "[" else "}"
    text = "k: " + opener * depth + "1" + closer * depth
    if recursive:
        text += "\nr: &r [1, *r]"
    try:
        load_yaml_text(text, "d.yaml", WorkloadError)
    except WorkloadError as e:
        assert e.file == "d.yaml"
        # levels: the top mapping, `depth` collections, and the scalar at the bottom
        assert ("nested deeper" in e.message and depth + 2 > BUDGETS["yaml_depth"].limit) or \
            (recursive and "recursive alias" in e.message)
    else:
        assert depth + 2 <= BUDGETS["yaml_depth"].limit and not recursive


@given(st.integers(1, 5000), st.sampled_from(["[", '{"a": ']))
def test_manifest_depth_budget(tmp_path_factory, depth, opener):
    from sim.traces.format import _load_manifest_json
    closer = "]" if opener == "[" else "}"
    f = tmp_path_factory.mktemp("m") / "manifest.json"
    f.write_text(opener * depth + "1" + closer * depth)
    try:
        _load_manifest_json(f)
    except TraceError as e:
        assert e.file == str(f) and "nested deeper" in e.message
        assert depth > BUDGETS["json_depth"].limit
    else:
        assert depth <= BUDGETS["json_depth"].limit


_RANGED_OPTIONS = [  # (argv before the value, option, range)
    (["gemm", "--hw", "a100-sxm4-40gb", "--n", "1", "--k", "1", "--m"], "--m", "gemm_dim"),
    (["train", "--workload", "w", "--cluster", "c", "--epochs"], "--epochs", "epochs"),
    (["train", "--workload", "w", "--cluster", "c", "--batch"], "--batch", "batch"),
    (["train", "--workload", "w", "--cluster", "c", "--gpus"], "--gpus", "devices"),
    (["trace", "synth", "--workload", "w", "--out", "o", "--batch", "1", "--iterations"],
     "--iterations", "iterations"),
    (["layer", "--hw", "h", "--samples"], "--samples", "samples"),
    (["replay", "t", "--seed"], "--seed", "seed"),
]


@given(st.sampled_from(_RANGED_OPTIONS),
       st.one_of(st.integers(-10, 10), st.integers(-2 ** 70, 2 ** 70),
                 st.sampled_from(["1e30", "nan", "0x10", "", "  7", "1_000"])))
def test_ranged_options(capsys, case, value):
    """Every ranged option: parsed within its range, or one line naming it and exit 2."""
    from sim.cli import build_parser
    argv, opt, rng = case
    r = RANGES[rng]
    try:
        ns = build_parser().parse_args(argv + [str(value)])
    except SystemExit as e:
        err = capsys.readouterr().err.strip().splitlines()
        assert e.code == 2 and len(err) == 1 and f"argument {opt}" in err[0]
        try:
            v = int(str(value))
        except ValueError:
            return
        assert not r.lo <= v <= r.hi
    else:
        v = getattr(ns, opt.lstrip("-"))
        assert r.lo <= v <= r.hi and v == int(str(value))


@given(st.sampled_from(["new", "regular", "fifo", "dir", "input", "hardlink", "symlink-to-input",
                        "symlink-to-other", "dangling"]), st.booleans(), st.booleans())
def test_output_paths(tmp_path_factory, kind, force, ours):
    """check_output: a new path always; an existing regular file that is not an input only with
    --force or when prunesim wrote it (`ours`); never a link, whatever it points to; nothing else,
    ever. What is refused is left as it was."""
    from sim.outputs import OutputError, check_output
    d = tmp_path_factory.mktemp("out")
    src = d / "in.npy"
    src.write_bytes(b"input")
    other = d / "other.npy"
    other.write_bytes(b"other")
    out = d / "out.npy"
    if kind == "regular":
        out.write_bytes(b"old")
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "dir":
        out.mkdir()
    elif kind == "input":
        out = src
    elif kind == "hardlink":
        os.link(src, out)
    elif kind == "symlink-to-input":
        out.symlink_to(src)
    elif kind == "symlink-to-other":
        out.symlink_to(other)
    elif kind == "dangling":
        out.symlink_to(d / "nowhere")
    ok = kind == "new" or (kind == "regular" and (force or ours))
    try:
        check_output(out, inputs=[src], force=force, ours=lambda p: ours)
    except OutputError as e:
        assert not ok and e.file == str(out)
    else:
        assert ok
    assert src.read_bytes() == b"input" and other.read_bytes() == b"other"


@given(st.lists(st.sampled_from(["records", "meta", "accounts", "x"]), unique=True, max_size=3),
       st.sampled_from([0, 1, 0x5053494D, -5]), st.booleans())
def test_result_store_opens_only_its_own_files(tmp_path_factory, tables, app, schema_row):
    import sqlite3

    from sim.results.store import APPLICATION_ID, ResultStore, StoreError
    f = tmp_path_factory.mktemp("db") / "r.sqlite"
    db = sqlite3.connect(f)
    for t in tables:
        db.execute(f"CREATE TABLE {t} (name TEXT, value TEXT)")
    if schema_row and "meta" in tables:
        db.execute("INSERT INTO meta VALUES ('schema', '1')")
    db.execute(f"PRAGMA application_id={app}")
    db.commit()
    db.close()
    before = f.read_bytes()
    # a legacy store needs prunesim's columns: these tables (name, value) never qualify
    ours = app == APPLICATION_ID or (app == 0 and not tables)
    try:
        ResultStore(f).close()
    except StoreError as e:
        assert e.file == str(f)
        if app == APPLICATION_ID:
            assert "records" in tables  # marked as ours, but with a damaged table
        else:
            assert not ours and f.read_bytes() == before
    else:
        assert ours


_CONV = ["c_out", "kernel", "stride", "pad", "groups"]


@given(st.dictionaries(st.sampled_from(_CONV + ["channels", "height", "width"]),
                       st.one_of(st.integers(-3, 70_000), st.integers(0, 2 ** 64)), max_size=4))
def test_workload_ranges(fields):
    """Any size fields: a WorkloadError naming the field, or a workload whose every GEMM counts
    exactly (within the MAC budget) and whose output maps are non-empty."""
    inp = {k: fields.get(k, d) for k, d in (("channels", 3), ("height", 16), ("width", 16))}
    conv = {"name": "c1", "op": "conv", "in": "x", "out": "y", "c_out": 8, "kernel": 3,
            **{k: v for k, v in fields.items() if k in _CONV}}
    try:
        w = workload_from_dict({"name": "w", "input": inp, "layers": [conv]}, origin="w.yaml")
    except WorkloadError as e:
        assert e.file == "w.yaml" and e.field
    else:
        l = w.layers[0]
        assert l.p >= 1 and l.q >= 1 and l.pad < max(l.r, l.s)
        assert l.macs(1) <= BUDGETS["layer_macs"].limit


# ---- the libyaml path of the strict loader against its pure-Python reference ------------------

_YAML_EDGES = ["a: 1\na: 2\n", "a: &x [*x]\n", "a: [1, 2\n", "\tkey: 1\n", "a: b: c\n",
               "- a\nb: 1\n", "a: *nope\n", "", "---\n...\n", "a: !!python/object:os.system x\n",
               "a: 'unterminated\n", "? [1,2]\n: 3\n", "{a: 1, a: 1}\n", "a: 1\n---\nb: 2\n",
               "a: !!binary aGk=\n", "a: 2026-11-27\n", "<<: {a: 1}\nb: 2\n", "a: .inf\nb: 0x1f\n"]


def _both(text):
    out = []
    for fast in (False, True):
        try:
            out.append(("ok", load_yaml_text(text, "y.yaml", ConfigError, fast=fast)))
        except ConfigError as e:
            out.append(("error", e.file, e.field, e.message))
    return out


@pytest.mark.parametrize("text", _YAML_EDGES)
def test_fast_yaml_loader_matches_the_pure_one_on_edge_cases(text):
    pure, fast = _both(text)
    assert fast == pure


@given(st.integers(1, 80), st.sampled_from(["[", "{a: ", "block"]), st.booleans())
def test_fast_yaml_loader_bounds_depth_as_the_pure_one(depth, opener, empty):
    """The libyaml path counts the depth on the event stream, the pure composer as it recurses:
    the same documents refused, at the same line, empty innermost collections included."""
    if opener == "block":
        text = "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + \
            ("[]" if empty else "v") + "\n"
    else:
        closer = "]" if opener == "[" else "}"
        text = "k: " + opener * depth + ("[]" if empty else "1") + closer * depth
    pure, fast = _both(text)
    assert fast == pure


def test_fast_yaml_loader_reads_the_bundled_files_as_the_pure_one():
    """Every workload, hwconfig and cluster file, and a few run files, read alike both ways."""
    from sim.yamlio import _FAST
    if not _FAST:
        pytest.skip("PyYAML without libyaml: only the pure loader runs")
    root = Path(__file__).resolve().parents[1]
    files = (sorted((root / "workloads").glob("*.yaml")) + sorted((root / "hwconfigs").rglob("*.yaml"))
             + sorted((root / "research" / "prunetrain" / "data" / "fitted").glob("resnet20-digits8-rho0.2*.yaml")))
    assert len(files) > 40
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert load_yaml_text(text, f, ConfigError, fast=True) == \
            load_yaml_text(text, f, ConfigError, fast=False), f
