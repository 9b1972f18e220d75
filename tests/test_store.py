"""The result store: keys, INSERT OR IGNORE, atomic points, WAL, export, CLI errors."""
from __future__ import annotations

import csv
import json
import sqlite3
import sys

import pytest

from sim.cli import main
from sim.results import api
from sim.results.store import KEY_FIELDS, ResultStore, StoreError, point_key

SAMPLE = "traces/sample-cnn2-mnist5k"


def rec(**kw) -> dict:
    r = {"prunesim": "0.1.0", "hw": "a100", "hw_kind": "gpu", "hw_checksum": "c" * 64,
         "workload": "cnn2", "trace": "/t", "trace_checksum": "t" * 64, "batch": 64,
         "iterations": 5, "seed": 0, "method": "dense", "method_id": "dense", "method_params": "{}",
         "fwd_s": 0.1 + 0.2, "agbp_s": 1e-300, "wgc_s": 2.5e-05, "backprop_speedup": None}
    r.update(kw)
    return r


def test_put_records_roundtrip_exact_and_idempotent(tmp_path):
    db = tmp_path / "r.sqlite"
    r = rec()
    before = dict(r)
    with ResultStore(db) as st:
        assert st.put(r) is True
        assert st.put(r) is False            # same inputs: ignored, never duplicated
        assert st.put(rec(fwd_s=9.0)) is False  # same key, other numbers: the first row stays
        assert st.count() == 1
    assert r == before                        # put does not modify its argument
    (got,) = api.records(db)
    assert got["key"] == point_key(r) and list(got)[0] == "key"
    assert {k: v for k, v in got.items() if k != "key"} == r   # floats bit for bit, None kept
    with ResultStore(db) as st:
        assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("field", KEY_FIELDS)
def test_every_input_changes_the_key(field):
    base = rec()
    changed = rec(**{field: "other" if field != "batch" else 65})
    assert point_key(base) != point_key(changed)
    # outputs and labels are not inputs
    assert point_key(base) == point_key(rec(fwd_s=1.0, trace="/elsewhere", hw_kind="x"))


def test_bad_records_are_refused_and_nothing_half_written(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as st:
        with pytest.raises(StoreError, match="missing key inputs"):
            st.put({"hw": "a100"})
        with pytest.raises(StoreError, match="does not match"):
            st.put(rec(key="0" * 64))
        # a layer row that cannot be serialized fails the whole point: no network row either
        with pytest.raises(TypeError):
            st.put(rec(), [{"layer": "conv1", "fwd_s": object()}])
        assert st.count() == 0 and st.count("layer") == 0
        assert st.put(rec(fwd_s=float("nan")), [{"layer": "conv1", "fwd_s": float("inf")}])
        (r,) = st.records()
        (l,) = st.records("layer")
        assert r["fwd_s"] is None and l["fwd_s"] is None   # JSON has no NaN/inf
        assert l["point"] == r["key"] and l["key"] != r["key"]
        # a second put of the point adds no layer rows
        assert not st.put(rec(), [{"layer": "conv2"}])
        assert st.count("layer") == 1
        with pytest.raises(StoreError, match="unknown record kind"):
            st.records("nope")


def test_reader_sees_rows_while_writer_is_open(tmp_path):
    db = tmp_path / "r.sqlite"
    w = ResultStore(db)
    w.put(rec(seed=1))
    assert len(api.records(db)) == 1     # another connection reads committed rows (WAL)
    w.put(rec(seed=2))
    assert len(api.records(db)) == 2
    w.close()


def test_not_a_store_and_missing_store(tmp_path, capsys):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a prunesim result store"):
        ResultStore(junk)
    assert main(["export", str(junk), "--csv", str(tmp_path / "o.csv")]) == 2
    missing = tmp_path / "missing.sqlite"
    assert main(["export", str(missing), "--csv", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("prunesim: error: ") for e in err)
    assert "no such result store" in err[1] and str(missing) in err[1]
    assert not missing.exists() and not (tmp_path / "o.csv").exists()
    # a store of a future schema is refused
    db = tmp_path / "future.sqlite"
    ResultStore(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='99' WHERE name='schema'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="meta.schema"):
        ResultStore(db)


def test_export_csv_and_parquet(tmp_path, capsys, monkeypatch):
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as st:
        st.put(rec(seed=1, extra=[1, 2]))
        st.put(rec(seed=2, method="dbtd", method_id="dbtd"))
    out = tmp_path / "r.csv"
    assert main(["export", str(db), "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    recs = api.records(db)
    assert [r["key"] for r in rows] == [r["key"] for r in recs]
    assert list(rows[0])[0] == "key"
    assert float(rows[0]["fwd_s"]) == recs[0]["fwd_s"]          # exact through repr
    assert rows[0]["backprop_speedup"] == "" and json.loads(rows[0]["extra"]) == [1, 2]
    assert rows[1]["extra"] == ""                                # fields may differ per record
    # Parquet: a clear one-line error without pyarrow, before anything is written
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    capsys.readouterr()
    pq = tmp_path / "r.parquet"
    assert main(["export", str(db), "--parquet", str(pq), "--csv", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "needs pyarrow" in err and "Traceback" not in err
    assert not pq.exists() and not (tmp_path / "x.csv").exists()
    assert main(["export", str(db)]) == 2                        # nothing asked


def test_parquet_roundtrip(tmp_path):
    pa = pytest.importorskip("pyarrow.parquet")
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as st:
        st.put(rec())
    api.export(db, parquet=tmp_path / "r.parquet")
    t = pa.read_table(tmp_path / "r.parquet").to_pylist()
    assert t[0]["key"] == api.records(db)[0]["key"]


def test_replay_db_stores_and_resumes(tmp_path):
    db = tmp_path / "r.sqlite"
    args = ["replay", SAMPLE, "--hw", "a100-sxm4-40gb", "--method", "dbtd:p=0.99", "--db", str(db)]
    assert main(args) == 0
    assert main(args) == 0                      # rerun: no duplicates
    recs = api.records(db)
    assert len(recs) == 2 and {r["method_id"] for r in recs} == {"dense", "dbtd"}
    # the API computes the same points under the same keys, with the same numbers
    again = api.replay(SAMPLE, ["a100-sxm4-40gb"], ["dbtd:p=0.99"])
    assert [r["key"] for r in again] == [r["key"] for r in recs]
    assert [r["step_s"] for r in again] == [r["step_s"] for r in recs]


def test_cache_model_in_the_key_exact_keeps_the_key_of_records_without_it():
    # records stored before the field existed were all exact LRU: they keep their keys
    assert point_key(rec(hw_kind="cpu", cache_model="exact")) == point_key(rec(hw_kind="cpu"))
    assert point_key(rec(hw_kind="cpu", cache_model="profile")) != point_key(rec(hw_kind="cpu"))


def test_replay_db_keys_points_by_cache_model(tmp_path, cnn2_trace, capsys):
    db = tmp_path / "r.sqlite"
    args = ["replay", str(cnn2_trace), "--hw", "xeon-e5-2680v4", "--method", "dbtd:p=0.99",
            "--db", str(db)]
    assert main(args + ["--cache", "profile"]) == 0
    assert main(args + ["--cache", "profile"]) == 0      # same model: no new point
    assert main(args) == 0                                 # default exact: other points
    capsys.readouterr()
    recs = api.records(db)
    assert sorted(r["cache_model"] for r in recs) == ["exact", "exact", "profile", "profile"]
    assert len({r["key"] for r in recs}) == 4
