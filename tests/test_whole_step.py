"""The whole training step (#13) in replay, sweep, the API and the store: the columns add up,
the profile is part of a point, Amdahl holds, and a CPU is timed by the CPU engine."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.cli import main
from sim.results import api
from sim.results.store import ResultStore, point_key
from sim.results.tables import performance_table

ROOT = Path(__file__).resolve().parents[1]
RESNET20 = ROOT / "traces" / "sample-resnet20-mnist5k"
CNN2 = ROOT / "traces" / "sample-cnn2-mnist5k"
NEW = ("fwd_ops_s", "bwd_ops_s", "optimizer_s", "framework_s", "whole_step_s",
       "whole_step_speedup", "framework", "framework_checksum")
METHODS = ["dense", "zero:schedule=1", "approx:schedule=1", "dbtd:p=0.99", "sdgp-mag:nm=2:4"]


@pytest.fixture(scope="module")
def gpu_recs():
    return api.replay(RESNET20, hw=["a100-sxm4-40gb", "titan-xp"], methods=METHODS, iteration=0)


def _by(recs):
    return {(r["hw"], r["method"]): r for r in recs}


def test_whole_step_is_gemm_step_plus_the_new_phases(gpu_recs):
    for r in gpu_recs:
        assert all(k in r for k in NEW)
        assert r["framework"] == "pytorch-eager"
        parts = r["step_s"] + r["fwd_ops_s"] + r["bwd_ops_s"] + r["optimizer_s"] + r["framework_s"]
        assert math.isclose(r["whole_step_s"], parts, rel_tol=1e-12)


def test_dense_whole_step_exceeds_its_gemm_step(gpu_recs):
    for r in gpu_recs:
        if r["method"] == "dense":
            assert r["whole_step_s"] > r["step_s"]
            assert r["fwd_ops_s"] > 0 and r["bwd_ops_s"] > 0 and r["optimizer_s"] > 0
            assert math.isclose(r["whole_step_speedup"], 1.0, rel_tol=1e-12)


def test_amdahl_whole_step_speedup_is_smaller_than_conv_backprop(gpu_recs):
    # the methods touch the GEMM phases only: the step ops are the same for every method here,
    # so they dilute a back-prop gain (and a loss)
    for r in gpu_recs:
        bp, ws = r["backprop_speedup"], r["whole_step_speedup"]
        if r["status"] != "ok" or bp is None:
            continue
        if bp > 1:
            assert 1 < ws < bp, r["method"]
        elif bp < 1:
            assert bp < ws <= 1, r["method"]


def test_gemm_only_profile_gives_the_gemm_step(tmp_path, capsys):
    recs = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense", "zero:schedule=1"],
                      iteration=0, framework="gemm-only")
    for r in recs:
        assert r["framework"] == "gemm-only"
        assert r["whole_step_s"] == r["step_s"]
        assert r["fwd_ops_s"] == r["bwd_ops_s"] == r["optimizer_s"] == r["framework_s"] == 0
        assert r["whole_step_speedup"] == pytest.approx(r["step_speedup"], rel=1e-12)
    # through the CLI too, and the option moves the result
    rc = main(["replay", str(CNN2), "--hw", "a100-sxm4-40gb", "--iteration", "0", "--json",
               "--method", "dense", "--framework", "gemm-only"])
    gemm = json.loads(capsys.readouterr().out)["performance"][0]
    rc2 = main(["replay", str(CNN2), "--hw", "a100-sxm4-40gb", "--iteration", "0", "--json",
                "--method", "dense"])
    eager = json.loads(capsys.readouterr().out)["performance"][0]
    assert rc == rc2 == 0
    assert gemm["whole_step_s"] == gemm["step_s"] < eager["whole_step_s"]
    assert gemm["step_s"] == eager["step_s"]   # the GEMM phases do not depend on the profile


def test_framework_is_part_of_the_point_key(tmp_path):
    db = tmp_path / "r.sqlite"
    a = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense"], iteration=0, db=db)
    b = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense"], iteration=0, db=db,
                   framework="tensorflow-1")
    assert a[0]["key"] != b[0]["key"]
    assert a[0]["step_s"] == b[0]["step_s"] and a[0]["whole_step_s"] != b[0]["whole_step_s"]
    with ResultStore(db) as st:
        assert st.count() == 2
    # an edited profile file (same name, other content) is another point
    prof = (ROOT / "hwconfigs" / "frameworks" / "pytorch-eager.yaml").read_text()
    edited = tmp_path / "pytorch-eager.yaml"
    edited.write_text(prof.replace("value: 5 us", "value: 20 us"))
    c = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense"], iteration=0,
                   framework=edited)
    assert c[0]["framework"] == "pytorch-eager" and c[0]["key"] != a[0]["key"]
    assert c[0]["whole_step_s"] > a[0]["whole_step_s"]


def test_sweep_stores_the_replay_record_shape(tmp_path):
    db = tmp_path / "s.sqlite"
    rep = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense", "zero:schedule=1"],
                     framework="tensorflow-1")
    sw = api.sweep(["a100-sxm4-40gb"], traces=[str(CNN2)], methods=["dense", "zero:schedule=1"],
                   db=db, jobs=1, framework="tensorflow-1")
    assert _by(rep).keys() == _by(sw).keys()
    for k, r in _by(rep).items():
        s = _by(sw)[k]
        assert s["key"] == r["key"]
        for f in NEW:
            assert s[f] == r[f], f


def test_store_written_before_the_whole_step_still_opens(tmp_path):
    rec = api.replay(CNN2, hw=["a100-sxm4-40gb"], methods=["dense"], iteration=0)[0]
    old = {k: v for k, v in rec.items() if k not in NEW and k != "key"}
    db = tmp_path / "old.sqlite"
    with ResultStore(db) as st:
        assert st.put(old)
    # the key of an old record leaves the profile out, as it did
    legacy = {k: v for k, v in old.items()}
    assert point_key(legacy) != rec["key"]
    with ResultStore(db, create=False) as st:
        got = st.records()
    assert got[0]["key"] == point_key(legacy)
    table = performance_table(got)
    assert "whole step speedup" in table and "conv back-prop speedup" in table
    assert api.records(db)[0]["step_s"] == rec["step_s"]


def test_cpu_hwconfig_gets_the_cpu_engines_stream_timing():
    from sim.driver import engines_for, step_kernels
    from sim.frameworks import load_framework
    from sim.replay import framework_for
    from sim.traces.format import open_trace
    recs = _by(api.replay(CNN2, hw=["xeon-e5-2680v4"], methods=["dense"], iteration=0))
    r = recs[("xeon-e5-2680v4", "dense")]
    assert r["framework"] == "caffe"   # the CPU default
    tr = open_trace(CNN2)
    eng = engines_for(["xeon-e5-2680v4"])[0]
    ks = step_kernels(eng, tr.workload, tr.batch, load_framework("caffe"))
    assert all(k.engine == "cpu" for ph in ks.values() for k in ph)
    assert math.isclose(r["fwd_ops_s"], sum(k.seconds for k in ks["fwd-ops"]), rel_tol=1e-12)
    assert framework_for(None, "cpu").name == "caffe"
    assert framework_for(None, "gpu").name == "pytorch-eager"


def test_bad_framework_file_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\nname: bad\nparams:\n  warp_speed:\n    value: 3\n    source: x\n")
    for cmd in (["replay", str(CNN2), "--hw", "a100-sxm4-40gb"],
                ["sweep", "--trace", str(CNN2), "--hw", "a100-sxm4-40gb", "--db",
                 str(tmp_path / "x.sqlite")]):
        rc = main(cmd + ["--framework", str(bad)])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "Traceback" not in err
        assert len(err.splitlines()) == 1
        assert str(bad) in err and "params.warp_speed" in err


def test_replay_text_names_the_profile_and_both_speedups(capsys):
    rc = main(["replay", str(CNN2), "--hw", "a100-sxm4-40gb", "--iteration", "0", "--layers",
               "--method", "dense", "--method", "zero:schedule=1", "--framework", "tensorflow-1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "not timed here" not in out
    assert "framework profile tensorflow-1 (a100-sxm4-40gb)" in out
    assert "conv back-prop speedup" in out and "whole step speedup" in out
    assert "fwd-ops us" in out
    step_rows = [l.split() for l in out.splitlines() if l.split()[:2] == ["-", "step"]]
    assert len(step_rows) == 2 and all(r[-1] == "tensorflow-1" for r in step_rows)
    assert all(float(r[7]) > 0 and float(r[9]) > 0 for r in step_rows)   # loss; optimizer
