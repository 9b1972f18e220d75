"""Unsupported (layer, method, hardware) combinations: "not run" records with a reason, stored and
exported, while the rest of a sweep or replay finishes; sparse fallbacks as a `fallback` field with
one summary line; ratios guarded against empty GEMMs.

The trace is synthetic (conftest.write_trace, no torch): tests/data/mobilenet-tiny.yaml, a
MobileNet-style network with a depthwise conv, a pointwise conv, a groups=4 conv, a residual add
and two FC layers.
"""
from __future__ import annotations

import csv
import glob
import json
import warnings
from pathlib import Path

import pytest

from conftest import write_trace
from sim.cli import main
from sim.engines.base import KernelResult, PhaseJob, Unsupported, engine_for, fallback_of
from sim.engines.gpu.gemm import simulate_gemm
from sim.hwconfig import load_hwconfig
from sim.methods import METHOD_IDS
from sim.results import sweep as sw
from sim.results.store import ResultStore
from sim.workload import load_workload

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests/data/mobilenet-tiny.yaml")
ALL_METHODS = [m for m in METHOD_IDS if m != "prunetrain"]   # prunetrain needs `prunesim train`


@pytest.fixture(scope="module")
def dw_trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dw") / "mobilenet-tiny-trace"
    write_trace(out, TINY, iterations=((0, 0),), extra_kinds=False,
                provenance={"model": "mobilenet-tiny", "dataset": "synthetic-test", "seed": 1})
    return out


def test_sweep_over_every_hwconfig_and_method_finishes_with_not_run_records(dw_trace, tmp_path,
                                                                           capsys):
    hw_files = sorted(glob.glob(str(ROOT / "hwconfigs/*.yaml")))
    db = tmp_path / "r.sqlite"
    args = ["sweep", "--trace", str(dw_trace), "--db", str(db), "--jobs", "1"]
    for h in hw_files:
        args += ["--hw", h]
    for m in ALL_METHODS:
        args += ["--method", m]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(args) == 0
    out, err = capsys.readouterr()
    # the engines' fallback warnings are a field and one summary line, not one warning per layer
    assert not [w for w in caught if "dense" in str(w.message)]
    assert "RuntimeWarning" not in err
    notes = [l for l in err.splitlines() if l.startswith("prunesim: note:")]
    assert len(notes) == 2 and "not run" in notes[1] and "`fallback`" in notes[0]
    recs = ResultStore(db).records()
    assert len(recs) == len(hw_files) * len(ALL_METHODS)      # every point stored
    kinds = {load_hwconfig(h).name: load_hwconfig(h).kind for h in hw_files}
    not_run = {(r["hw"], r["method_id"]): r for r in recs if r["status"] == "not run"}
    # the CPU sparse path has no grouped convs; Wang's approx WGC kernels are for ungrouped convs
    want = {(h, m) for h, k in kinds.items()
            for m in (("dbtd", "topk") if k == "cpu" else ("approx", "approx-topk"))}
    assert set(not_run) == want
    for r in not_run.values():
        assert "b1.dw" in r["reason"] and "ungrouped" in r["reason"]
        assert r["step_s"] is None and r["step_speedup"] is None
    ok = [r for r in recs if r["status"] == "ok"]
    assert all(r["step_s"] > 0 and r["reason"] is None for r in ok)
    assert all(r["step_speedup"] is not None for r in ok)
    # the table on stdout has every point, "not run" ones marked
    table = out[out.index("hardware"):]
    assert table.count("not run") == len(want) and "> 1 is faster" in out
    # rerunning finds every point stored, "not run" ones included: nothing to redo
    assert main(args) == 0
    assert "0 new point(s)" in capsys.readouterr().out
    # exported with their reason
    csv_path = tmp_path / "r.csv"
    assert main(["export", str(db), "--csv", str(csv_path)]) == 0
    rows = list(csv.DictReader(open(csv_path)))
    assert {"status", "reason", "fallback"} <= set(rows[0])
    assert sum(r["status"] == "not run" for r in rows) == len(want)
    assert all(r["reason"] for r in rows if r["status"] == "not run")


def test_fallback_field_in_records_layers_and_csv(dw_trace, tmp_path):
    db = tmp_path / "f.sqlite"
    sw.sweep(["v100-sxm2", "a100-sxm4-40gb"], traces=[str(dw_trace)], methods=["sdgp-mag:nm=2:4"],
             db=db, jobs=1, progress=False)
    st = ResultStore(db)
    recs = {(r["hw"], r["method_id"]): r for r in st.records()}
    # V100 has no sparse tensor cores: SDGP's pruned convs (c_in > 3) run dense there
    fb = recs[("v100-sxm2", "sdgp-mag")]["fallback"]
    assert fb.startswith("3 layer(s) dense") and "no fp16 sparse tensor cores for 2:4" in fb
    # A100 has them, but the grouped convs' AGBP (depthwise b1.dw, 4-channel groups g4) reduces
    # over too few channels a group for them: the dense direct kernel is faster, and said so
    fa = recs[("a100-sxm4-40gb", "sdgp-mag")]["fallback"]
    assert fa.startswith("2 layer(s) dense") and "direct kernel is faster" in fa
    assert recs[("v100-sxm2", "dense")]["fallback"] is None
    layers = [r for r in st.records("layer") if r["hw"] == "v100-sxm2" and r["method_id"] == "sdgp-mag"]
    assert {r["layer"] for r in layers if r["fallback"]} == {"b1.dw", "b1.pw", "g4"}
    assert all(r["fallback"] is None for r in layers if r["layer"] in ("stem", "fc1", "fc2"))
    out = tmp_path / "l.csv"
    assert main(["export", str(db), "--csv", str(out), "--kind", "layer"]) == 0
    assert "fallback" in next(csv.reader(open(out)))


def test_cpu_replay_of_a_depthwise_conv_is_a_not_run_line(dw_trace, capsys):
    rc = main(["replay", str(dw_trace), "--hw", "xeon-e5-2680v4", "--method", "dbtd:p=0.99"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err
    row = next(l for l in out.splitlines() if l.startswith("xeon-e5-2680v4") and "dbtd" in l)
    assert row.rstrip().endswith("not run")
    assert "not run" in err and "xeon-e5-2680v4 x dbtd" in err
    # dense on the same CPU did run
    dense = next(l for l in out.splitlines() if l.startswith("xeon-e5-2680v4  dense"))
    assert "1.000" in dense


def test_replay_layers_table_marks_not_run_and_fallback(dw_trace, capsys):
    rc = main(["replay", str(dw_trace), "--hw", "xeon-e5-2680v4", "--hw", "v100-sxm2",
               "--method", "dbtd:p=0.99", "--method", "sdgp-mag:nm=2:4", "--layers"])
    out = capsys.readouterr().out
    assert rc == 0
    table = out[out.index("FWD us"):]
    rows = [l.split() for l in table.splitlines() if l.split()[:1] == ["0"]]
    cpu_dbtd = {r[1]: r for r in rows if r[2] == "xeon-e5-2680v4" and r[3].startswith("dbtd")}
    assert cpu_dbtd["b1.dw"][4:] == ["-"] * 6 + ["not", "run"]   # GEMM and step-op columns
    assert float(cpu_dbtd["stem"][6]) > 0 and cpu_dbtd["stem"][-1] != "run"
    v100_sdgp = {r[1]: r for r in rows if r[2] == "v100-sxm2" and r[3].startswith("sdgp")}
    assert v100_sdgp["b1.pw"][-1] == "(fallback)" and v100_sdgp["stem"][-1] != "(fallback)"


def supports(hw, layer, method_result, phase: str) -> str | None:
    """The engine's answer for one layer phase, before any work (no lowered GEMM needed)."""
    return engine_for(hw).supports(PhaseJob(layer, phase, None, 1, method_result))


def test_supports_names_the_limit():
    w = load_workload(TINY)
    dw, pw = w.layer("b1.dw"), w.layer("b1.pw")
    cpu = load_hwconfig("xeon-e5-2680v4")

    class CSR:
        method, structure, phases = "dbtd", "csr", ("agbp", "wgc")
    assert "groups=16" in supports(cpu, dw, CSR, "wgc")
    assert supports(cpu, pw, CSR, "wgc") is None          # ungrouped: modeled
    assert supports(cpu, dw, None, "wgc") is None         # dense: modeled
    assert supports(load_hwconfig("a100-sxm4-40gb"), dw, CSR, "wgc") is None
    assert issubclass(Unsupported, Exception)


def test_fallback_of_reads_the_engines_details():
    def kr(details):
        return KernelResult("tensorcore", "x", "l", "agbp", "gemm", 1.0, 1.0, 0, {}, {}, details)
    assert fallback_of([kr({})]) is None
    assert fallback_of({"agbp": [kr({"sparse_fallback": "no 2:4"})]}) == "no 2:4"
    assert fallback_of([kr({"note": "structure 'nm' has no CPU kernel here: modeled dense"})])
    assert fallback_of([kr({"note": "zero: the weight-gradient kernel does not run"})]) is None


@pytest.mark.parametrize("m, n, k", [(0, 64, 64), (64, 0, 64), (64, 64, 0)])
def test_empty_gemm_has_no_division_by_zero(m, n, k):
    hw = load_hwconfig("a100-sxm4-40gb")
    r = simulate_gemm(hw, m, n, k)
    assert r.flops == 0 and r.seconds >= 0
    if k == 0 and m * n:
        # C is still zeroed: one streaming pass writing M x N fp16 values
        assert r.bytes["dram"] == m * n * 2 and r.seconds > 0
    else:
        assert r.seconds == 0


def test_cpu_layer_command_on_a_grouped_conv_is_one_line(capsys):
    # the CPU engine itself refuses its CSR path on a grouped conv (it used to raise a bare
    # ValueError, a traceback through `prunesim layer`, which bypasses replay's pre-check)
    from sim.cli import main
    rc = main(["layer", "--hw", "xeon-e5-2680v4", "--workload", TINY, "--method", "dbtd:p=0.99",
               "--batch", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "groups=16" in err[0] and "b1.dw" in err[0]
