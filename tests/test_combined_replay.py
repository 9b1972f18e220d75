"""PruneTrain in replay and sweep (#15 item 6): `prunetrain[:...][+METHOD]` replays the network at
each iteration's epoch narrowed to the trajectory's widths, the captured dO cut to the first kept
channels, and METHOD on that. The combination must equal the two applied in sequence (narrow the
trace, then replay METHOD on it); pairs that do not compose are one-line errors. No trajectory
numbers are pinned (the lasso-dose model's fit changes): only combination vs sequence, directions."""
from __future__ import annotations

import json

import pytest

from conftest import run_main
from sim.methods.prunetrain import space_channels
from sim.driver import engines_for, run_trace
from sim.replay import Totals, parse_column, parse_methods
from sim.results.api import replay
from sim.system.trajectory import apply_widths, layer_widths
from sim.traces.format import Trace, TraceWriter, open_trace

TRACE = "traces/sample-resnet20-mnist5k"
HW = ["a100-sxm4-40gb"]
LATE = 600          # iteration of epoch 9 in the trace
GEMM = ("density", "fwd_s", "agbp_s", "wgc_s", "overhead_s", "step_s", "energy_j")


def _half_widths(w) -> dict:
    """Every channel space at half its channels, but the network input and the classes: a
    consistent narrowing (residual-tied layers agree) that no fitted model decides."""
    chans = space_channels(w)
    fixed = {w.layers[0].in_space, w.layers[-1].out_space}
    width = {s: c if s in fixed else max(1, c // 2) for s, c in chans.items()}
    return {n: (a, b) for n, a, b in layer_widths(w, chans, width)}


@pytest.fixture(scope="module")
def narrowing(tmp_path_factory):
    """(trajectory file: half widths from epoch 5 on, the widths, the narrowed trace at LATE)."""
    tmp = tmp_path_factory.mktemp("combined")
    tr = open_trace(TRACE)
    ws = _half_widths(tr.workload)
    f = tmp / "half.yaml"
    f.write_text(f"workload: {tr.workload.name}\npoints:\n  5:\n"
                 + "".join(f"    {n}: [{a}, {b}]\n" for n, (a, b) in ws.items()))
    # the sequence's first step by hand: the narrowed workload, each dO cut to its first channels
    # (a trace's manifest names its workload by the zoo's graph, which has no narrowed widths: the
    # Trace is built on the narrowed Workload directly)
    nw = apply_widths(tr.workload, ws)
    out = tmp / "narrowed"
    with TraceWriter(out, nw, batch=tr.batch, provenance=tr.provenance,
                     batch_subsample=tr.manifest.get("batch_subsample")) as wr:
        for rec in tr.ordered_records("dO", LATE):
            g = tr.load(rec)
            cut = g[:, :nw.layer(rec.layer).c_out]
            wr.add(rec.iteration, rec.epoch, rec.layer, "dO", cut.copy())
        wr.end_iteration()
    manifest = json.loads((out / "manifest.json").read_text())
    return f, ws, Trace(out, manifest, nw, list(wr.records), [])


def _replay_trace(trace, methods, iteration) -> list[dict]:
    """replay's records of an opened Trace (the API opens traces by path)."""
    engines = engines_for(HW)
    specs = parse_methods(methods)
    tot = Totals(trace, specs, engines, 0)
    for step in run_trace(trace, specs, engines, iteration=iteration):
        tot.add(step)
    return tot.records()


def _label(spec: str) -> str:
    """The record label of a column (every PruneTrain parameter shown, as train's labels)."""
    return parse_column(spec).label


def _by_method(recs) -> dict:
    return {r["method"]: r for r in recs}


def _close(a: dict, b: dict, fields=GEMM) -> None:
    for k in fields:
        if b[k] is None:
            assert a[k] is None, k
        else:
            assert a[k] == pytest.approx(b[k], rel=1e-12, abs=0), k


def test_combination_equals_sequence(narrowing):
    f, ws, narrowed = narrowing
    assert any(ws[l.name] != (l.c_in, l.c_out) for l in open_trace(TRACE).workload.layers)
    comb = _by_method(replay(TRACE, HW, ["prunetrain+sdgp-mag:nm=2:4"], iteration=LATE,
                             trajectory=str(f)))
    seq = _by_method(_replay_trace(narrowed, ["sdgp-mag:nm=2:4"], LATE))
    c = comb[_label("prunetrain+sdgp-mag:nm=2:4")]
    _close(c, seq["sdgp-mag:nm=2:4"])
    # the record says where the widths came from and which channels were kept
    assert c["trajectory"].startswith("file ") and c["trajectory_epochs"] == [9]
    assert "first k" in c["channels_kept"]
    # prunetrain alone: dense on the narrowed network
    alone = _by_method(replay(TRACE, HW, ["prunetrain"], iteration=LATE, trajectory=str(f)))
    _close(alone[_label("prunetrain")], seq["dense"])


def test_prunetrain_narrows_only_where_the_trajectory_does(narrowing):
    f = str(narrowing[0])
    late = _by_method(replay(TRACE, HW, ["prunetrain"], iteration=LATE, trajectory=f))
    # half the channels: less GEMM time (small GEMMs on an A100 are latency-bound: not half)
    assert late[_label("prunetrain")]["step_s"] < late["dense"]["step_s"]
    early = _by_method(replay(TRACE, HW, ["prunetrain"], iteration=0, trajectory=f))
    _close(early[_label("prunetrain")], early["dense"])   # epoch 0: nothing narrowed yet


def test_rho_changes_the_late_network():
    # the model trajectory of 200k-sample epochs (--train-samples) narrows by epoch 9
    runs = [_by_method(replay(TRACE, HW, [f"prunetrain:rho={rho},interval=2"], iteration=LATE,
                              train_samples=200_000))[_label(f"prunetrain:rho={rho},interval=2")]
            for rho in (0.2, 0.9)]
    assert runs[1]["step_s"] < runs[0]["step_s"]
    assert runs[0]["method_params"] != runs[1]["method_params"]


@pytest.mark.parametrize("spec", ["sdgp-mag+dbtd", "dense+prunetrain", "prunetrain+prunetrain"])
@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_pairs_that_do_not_compose_are_one_line_errors(spec, command, capsys, tmp_path):
    argv = (["replay", TRACE, "--hw", HW[0], "--method", spec] if command == "replay" else
            ["sweep", "--hw", HW[0], "--trace", TRACE, "--method", spec, "--db",
             str(tmp_path / "r.sqlite"), "--jobs", "1"])
    rc, _, err = run_main(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("prunesim: error:"), err


def test_options_a_prunetrain_column_does_not_read_are_refused(narrowing, capsys):
    f = str(narrowing[0])
    for extra in (["--method", "sdgp-mag", "--trajectory", f],
                  ["--method", "prunetrain:rho=0.3", "--trajectory", f],
                  ["--method", "sdgp-mag", "--epochs", "5"],
                  ["--method", "prunetrain", "--trajectory", f, "--train-samples", "9000"]):
        rc, _, err = run_main(["replay", TRACE, "--hw", HW[0], *extra], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1, (extra, err)


def test_sweep_stores_the_combined_label(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    rc, _, err = run_main(["sweep", "--hw", HW[0], "--trace", "traces/sample-cnn2-mnist5k",
                           "--method", "prunetrain:rho=0.25+sdgp-mag:nm=2:4", "--db", str(db),
                           "--jobs", "1", "--json"], capsys)
    assert rc == 0, err
    from sim.results.store import ResultStore
    with ResultStore(db, create=False) as st:
        recs = _by_method(st.records("network"))
    label = _label("prunetrain:rho=0.25+sdgp-mag:nm=2:4")
    r = recs[label]
    assert r["method_id"] == "prunetrain+sdgp-mag" and r["status"] == "ok"
    assert json.loads(r["method_params"])["prunetrain.rho"] == 0.25
    assert "trajectory" in r and set(recs) == {"dense", label}
    # the same point replayed alone has the same numbers (sweep and replay agree)
    rep = _by_method(replay("traces/sample-cnn2-mnist5k", HW,
                            ["prunetrain:rho=0.25+sdgp-mag:nm=2:4"]))
    _close(r, rep[label])
