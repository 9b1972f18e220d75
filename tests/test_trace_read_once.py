"""One validation path for `trace check` and `replay`, and a single read of every trace tensor."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim.cli import main
from sim.errors import TraceError
from sim.driver import engines_for, run_trace
from sim.replay import parse_methods
from sim.traces import format as tf
from sim.traces.stats import layer_stats


def _edit(trace_dir, fn):
    m = json.loads((trace_dir / tf.MANIFEST).read_text())
    fn(m)
    (trace_dir / tf.MANIFEST).write_text(json.dumps(m))


def _both(capsys, trace_dir) -> list[tuple[int, str]]:
    out = []
    for argv in (["trace", "check", str(trace_dir)], ["replay", str(trace_dir), "--method", "dense"]):
        capsys.readouterr()
        rc = main(argv)
        out.append((rc, capsys.readouterr().err))
    return out


@pytest.mark.parametrize("edit,field", [
    (lambda m: m.update(records=[]), "records"),
    (lambda m: m.update(batch=10 ** 30), "batch"),
    (lambda m: m.update(records=[r for r in m["records"] if r["kind"] != "dO"]), "records"),
])
def test_check_and_replay_refuse_the_same_traces(cnn2_trace, capsys, edit, field):
    _edit(cnn2_trace, edit)
    for rc, err in _both(capsys, cnn2_trace):
        assert rc == 2 and f": {field}: " in err and len(err.strip().splitlines()) == 1


def test_read_tensor_once_matches_memmap_stats(cnn2_trace):
    tr = tf.open_checked_trace(cnn2_trace)
    rec = next(r for r in tr.records if r.kind == "dO")
    arr, st = tf.read_tensor(tr.path, rec, stats=True)
    ref = tr.load(rec)
    np.testing.assert_array_equal(arr, ref)
    assert st == layer_stats(ref)


@pytest.mark.parametrize("damage,field", [("append", "sha256"), ("truncate", None),
                                          ("nan", "values"), ("flip", "sha256")])
def test_read_tensor_rejects_damage(cnn2_trace, damage, field):
    tr = tf.open_checked_trace(cnn2_trace)
    rec = next(r for r in tr.records if r.kind == "dO")
    f = tr.path / rec.path
    data = bytearray(f.read_bytes())
    if damage == "append":
        data += b"\0" * 8
    elif damage == "truncate":
        data = data[:-5]
    elif damage == "flip":
        data[-1] ^= 0x40
    else:
        arr = np.load(f)
        arr.reshape(-1)[3] = np.nan
        np.save(f, arr)
        import hashlib
        rec = tf.TensorRecord(rec.iteration, rec.epoch, rec.layer, rec.kind, rec.path, rec.shape,
                              rec.dtype, hashlib.sha256(f.read_bytes()).hexdigest())
        data = None
    if data is not None:
        f.write_bytes(bytes(data))
    with pytest.raises(TraceError) as e:
        tf.read_tensor(tr.path, rec, stats=True)
    assert e.value.field == field


def test_replay_reads_each_tensor_once(cnn2_trace, monkeypatch):
    calls: dict[str, int] = {}
    real = tf.read_tensor

    def counting(trace_dir, rec, **kw):
        calls[rec.path] = calls.get(rec.path, 0) + 1
        return real(trace_dir, rec, **kw)

    monkeypatch.setattr(tf, "read_tensor", counting)
    monkeypatch.setattr(tf.Trace, "load", lambda *a, **k: pytest.fail("second read"))
    tr = tf.open_checked_trace(cnn2_trace)
    rows = list(run_trace(tr, parse_methods(["dense", "dbtd:p=0.9"]),
                          engines_for(["a100-sxm4-40gb"])))
    n_do = sum(r.kind == "dO" for r in tr.records)
    assert len(rows) == n_do and len(calls) == n_do and set(calls.values()) == {1}
