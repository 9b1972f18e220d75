"""What a new user hits with a custom workload (issue 21): `prunesim train` on a trace directory
with the defaults taken from its provenance, --train-samples, one speedup convention, per-device
payload and epoch count, ratios guarded against empty layers."""
from __future__ import annotations

import json
from pathlib import Path


from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces/sample-resnet20-mnist5k"
TINY = str(ROOT / "tests/data/mobilenet-tiny.yaml")


def _train(capsys, *args) -> tuple[int, str, str]:
    rc = main(["train", "--cluster", "dgx-a100-hdr", "--gpus", "8", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_train_on_a_trace_takes_dataset_epochs_and_batch_from_its_provenance(capsys):
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--json")
    assert rc == 0
    doc = json.loads(out)
    # the capture ran 10 epochs of 4000 MNIST samples at batch 64 (the trace's provenance)
    assert doc["epochs"] == 10 and len(doc["dense"]["per_epoch"]) == 10
    e0 = doc["dense"]["per_epoch"][0]
    assert e0["batch"] == 64 and e0["iterations"] == -(-4000 // (64 * 8))
    assert doc["speedup"] == 1.0          # dense vs dense
    # --train-samples changes the result
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--json", "--train-samples", "8000")
    assert json.loads(out)["dense"]["per_epoch"][0]["iterations"] == -(-8000 // (64 * 8))


def test_train_without_a_training_set_size_is_one_line(capsys):
    # a workload whose dataset has no defaults: each missing value is named
    rc, _, err = _train(capsys, "--workload", TINY)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "give --epochs" in lines[0]
    rc, _, err = _train(capsys, "--workload", TINY, "--epochs", "2", "--batch", "16")
    assert rc == 2 and "give --train-samples" in err
    rc, out, _ = _train(capsys, "--workload", TINY, "--epochs", "2", "--batch", "16",
                        "--train-samples", "1000")
    assert rc == 0
    # units and labels: payload per device, over how many epochs; one ratio convention
    assert "over 2 epochs, all-reduce payload" in out and "TB per device" in out
    assert "speedup (dense time / method time, > 1 faster) 1.000" in out


def test_train_dbtd_speedup_is_not_available_not_one(capsys):
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "dbtd:p=0.99")
    assert rc == 0 and "not available" in out and "speedup (dense time / method time" in out
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "dbtd:p=0.99", "--json")
    assert json.loads(out)["speedup"] is None


def test_train_notes_drop_the_roofline_clause_when_the_engine_timed(capsys):
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "sdgp-mag:nm=2:4")
    assert rc == 0 and "engine:tensorcore" in out and "roofline fallback" not in out


def test_prunetrain_on_a_depthwise_workload_does_not_divide_by_zero(capsys):
    # PruneTrain's width model narrows the depthwise conv below its group count (an empty GEMM);
    # this used to end in ZeroDivisionError inside the tensor-core engine's L2 model
    rc, out, err = _train(capsys, "--workload", TINY, "--epochs", "30", "--batch", "64",
                          "--train-samples", "50000", "--method", "prunetrain")
    assert rc == 0 and "Traceback" not in err and "speedup" in out


def test_validate_shows_progress_and_writes_out_not_docs(monkeypatch, capsys):
    from analysis import validation as v
    from sim.cli import build_parser
    args = build_parser().parse_args(["validate"])
    assert args.out == "out/validation.md"          # never the tracked docs/ copy by default
    makefile = (ROOT / "Makefile").read_text()
    assert "prunesim validate --out docs/validation.md" in makefile

    def rows(quick=False):
        yield v.Row("B", "first row", 1.0, 1.0, "x")
        yield v.Row("B", "second row", 2.0, 2.0, "x")
    monkeypatch.setitem(v.GROUPS, "b", ("B", rows))
    out = v.compute(groups=("b",), log=lambda m: None, progress=True)
    err = capsys.readouterr().err
    assert len(out) == 2
    assert "validate" in err and "1/1 groups" in err and "b: " in err
    # off a terminal (and with --json) nothing is drawn
    v.compute(groups=("b",), progress=None)
    assert capsys.readouterr().err == ""
