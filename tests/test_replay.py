"""The main job on the bundled real trace: shapes, statistics and method densities, streamed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "sample-resnet20-mnist5k"


def _replay(capsys, *extra):
    rc = main(["replay", str(SAMPLE), "--iteration", "300", "--json", *extra])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


def test_replay_json_on_bundled_trace(capsys):
    doc = _replay(capsys, "--method", "dense", "--method", "dbtd:p=0.7", "--method", "dbtd:p=0.99",
                  "--method", "sdgp-mag:nm=2:4")
    assert doc["workload"] == "resnet20"
    layers = doc["layers"]
    assert len(layers) == 22 and all(r["iteration"] == 300 for r in layers)
    mean = doc["mean_conv_density"]
    # Conv-BN-ReLU network: dO is dense; DBTD's density falls with p; 2:4 keeps half of each pruned conv
    assert mean["dense"] == 1.0
    assert mean["dbtd:p=0.7,sigma=paper"] > mean["dbtd:p=0.99,sigma=paper"] > 0.0
    stem, mid = layers[0], layers[1]
    assert stem["methods"]["sdgp-mag:nm=2:4"]["structure"] == "dense"
    assert mid["methods"]["sdgp-mag:nm=2:4"]["density"] == 0.5
    assert mid["agbp_mnk"] == [64 * 32 * 32, 16, 16 * 9]


def test_replay_is_deterministic(capsys):
    a = _replay(capsys, "--method", "dbtd:p=0.9", "--seed", "3")
    b = _replay(capsys, "--method", "dbtd:p=0.9", "--seed", "3")
    c = _replay(capsys, "--method", "dbtd:p=0.9", "--seed", "4")
    assert a == b
    assert a["mean_conv_density"] != c["mean_conv_density"]


@pytest.mark.parametrize("args", [["--method", "nope"], ["--method", "dbtd:p=3"],
                                  ["--method", "prunetrain"], ["--iteration", "7"]])
def test_replay_bad_arguments_fail_cleanly(capsys, args):
    rc = main(["replay", str(SAMPLE), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("prunesim: error:")


def test_replay_with_cluster_adds_the_training_estimate(capsys):
    rc = main(["replay", str(SAMPLE), "--iteration", "300", "--method", "sdgp-mag:nm=2:4",
               "--method", "zero:schedule=1", "--cluster", "dgx-a100-hdr", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)   # one JSON document, training included
    training = {r["method"]: r for r in doc["training"]}
    assert training["dense"]["time_vs_dense"] == 1.0
    # zero skips scheduled WGCs and their all-reduce: never slower, fewer bytes or equal
    assert training["zero:schedule=1"]["comm_bytes"] <= training["dense"]["comm_bytes"]
    assert all(r["train_s"] > 0 and r["devices"] > 1 for r in training.values())


def test_replay_bad_cluster_is_one_line(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: x\n")
    rc = main(["replay", str(SAMPLE), "--cluster", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(f) in err[0]
