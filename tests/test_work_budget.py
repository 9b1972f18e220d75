"""Work budgets of `train` and `sweep` (sim/limits.py: train_steps, synth_layer_samples,
sweep_layer_evaluations), estimated from counts before any work; and the collective model's
uniform-ring evaluation, which keeps the cost of a large cluster from growing with its size and
gives the event simulation's float bit for bit."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random

import pytest

from sim import limits
from conftest import run_main as run
from sim.system import collectives as co


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRUNESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")


def refused(argv, capsys, *needles) -> str:
    rc, out, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, (rc, err[-500:])
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _budget(monkeypatch, name, limit):
    monkeypatch.setitem(limits.BUDGETS, name, dataclasses.replace(limits.BUDGETS[name],
                                                                   limit=limit))


# ---- the uniform ring: the event simulation's clock, evaluated without events ------------------


def _naive(t, deltas, rounds):
    deltas = tuple(d for d in deltas if d != 0.0)
    for _ in range(rounds):
        for d in deltas:
            t = t + d
    return t


def test_repeat_add_is_repeated_float_addition():
    rng = random.Random(7)
    for _ in range(3000):
        t = rng.choice([0.0, 1.0, rng.random() * 10 ** rng.uniform(-12, 2),
                        rng.randint(1, 2 ** 53) * 2.0 ** -52, 2.0 ** rng.randint(-60, 10)])
        deltas = tuple(rng.choice([0.0, rng.random() * 10 ** rng.uniform(-10, 0),
                                   2.0 ** rng.randint(-80, 3), 3 * 2.0 ** rng.randint(-80, 0),
                                   rng.randint(1, 2 ** 20) * 2.0 ** rng.randint(-70, -20)])
                       for _ in range(rng.randint(1, 2)))
        k = rng.randint(0, 600)
        assert co._repeat_add(t, deltas, k) == _naive(t, deltas, k), (t, deltas, k)


def test_ties_and_huge_deltas():
    u = math.ulp(1.0)
    for d in (u / 2, 1.5 * u, 2.5 * u, 3.0, 1e300, 0.0):
        for k in (0, 1, 2, 3, 100):
            assert co._repeat_add(1.0, (d,), k) == _naive(1.0, (d,), k)
            assert co._repeat_add(1.0, (d, u / 2), k) == _naive(1.0, (d, u / 2), k)


def test_uniform_evaluation_equals_the_event_simulation():
    rng = random.Random(3)
    for _ in range(60):
        levels = tuple(co.Level(rng.randint(2, 24), rng.choice([0.0, 3.4e-6, rng.random() * 1e-5]),
                                rng.choice([1 / 300e9, 1 / 25e9, rng.random() * 1e-9]),
                                rng.choice([0.0, 0.0, rng.random() * 1e-11]))
                       for _ in range(rng.randint(1, 3)))
        n = rng.choice([1e6, 25e6, rng.random() * 1e9, 1234567.0])
        fast = co.simulate_allreduce(n, levels)
        assert fast == co.simulate_allreduce(n, levels, engine="simpy")
        if math.prod(l.p for l in levels) <= 48:      # every ring instance: p^2 events each
            assert fast == co.simulate_allreduce(n, levels, engine="simpy", full=True)
    with pytest.raises(ValueError):
        co.simulate_allreduce(1e6, (co.Level(4, 1e-6, 1e-9),), engine="other")


def test_a_million_devices_is_evaluated_not_simulated():
    """2^20 devices: the closed form's time (the event simulation would take p^2 steps)."""
    lv = (co.Level(8, 3.4e-6, 1 / 300e9), co.Level(131072, 9.6e-6, 1 / 25e9))
    assert co.simulate_allreduce(25e6, lv) == pytest.approx(co.allreduce_time(25e6, lv), rel=1e-9)
    assert co.allreduce_evaluation_steps(lv) < 200
    assert co.allreduce_evaluation_steps((co.Level(3, 1, 1),)) == 4   # p - 1 rounds per phase


@pytest.mark.parametrize("gpus", ["8192", "1048576"])
def test_train_on_a_large_cluster_runs(gpus, capsys):
    rc, out, err = run(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr",
                        "--method", "sdgp-mag:nm=2:4", "--gpus", gpus, "--epochs", "2",
                        "--json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["devices"] == int(gpus) and doc["method"]["train_seconds"] > 0


# ---- train -------------------------------------------------------------------------------------


def _deep_workload(path, layers: int) -> str:
    ops = [f"  - {{name: c{i}, op: conv, in: {'x' if i == 0 else f'c{i - 1}'}, out: c{i}, "
           "c_out: 8, kernel: 3, pad: 1, relu: true}" for i in range(layers - 1)]
    ops.append(f"  - {{name: fc, op: fc, in: c{layers - 2}, out: fc, c_out: 10}}")
    path.write_text("schema: 1\nname: deep\ndescription: a deep chain\ndataset: cifar10\n"
                    "input: {channels: 3, height: 8, width: 8}\nlayers:\n" + "\n".join(ops) + "\n")
    return str(path)


def test_train_refuses_a_deep_workload_before_work(tmp_path, monkeypatch, capsys):
    wl = _deep_workload(tmp_path / "deep.yaml", 300)
    _budget(monkeypatch, "train_steps", 1000)
    called = []
    import sim.system.prunetrain as pt
    monkeypatch.setattr(pt, "simulate_run", lambda *a, **k: called.append(1))
    line = refused(["train", "--workload", wl, "--cluster", "dgx-a100-hdr"], capsys,
                   "--workload", "300 layers", "estimated", "exceeds the limit", "--yes-large")
    assert "collective steps" in line and not called


def test_train_estimate_counts_configurations_layers_and_collective_steps(tmp_path):
    from sim.system.cli import check_work
    from sim.system.cluster import load_cluster
    from sim.workload import load_workload
    w = load_workload("resnet20")
    args = argparse.Namespace(yes_large=False)
    cl = load_cluster("dgx-a100-hdr")
    base = check_work(args, w, cl, 10, 128, 50_000)
    assert check_work(args, w, cl, 10, 128, 50_000, widths=5) > base      # a trajectory
    assert check_work(args, w, cl, 10, 128, 50_000, widths=5, method_runs=3) > \
        check_work(args, w, cl, 10, 128, 50_000, widths=5)                 # the split's runs
    # the devices enter through the collective's steps, logarithmically
    big = check_work(args, w, cl.with_devices(2 ** 20), 10, 128, 50_000)
    assert base < big < 2 * base
    deep = load_workload(_deep_workload(tmp_path / "d.yaml", 2000))
    with pytest.raises(limits.LimitError, match="exceeds the limit"):
        check_work(args, deep, cl, 10, 128, 50_000, widths=10)
    check_work(argparse.Namespace(yes_large=True), deep, cl, 10, 128, 50_000, widths=10)


def test_train_yes_large_lifts_the_work_budget(monkeypatch, capsys):
    _budget(monkeypatch, "train_steps", 10)
    argv = ["train", "--workload", "cnn2", "--cluster", "dgx-a100-hdr", "--gpus", "8",
            "--epochs", "1", "--json"]
    refused(argv, capsys, "exceeds the limit of 10 steps")
    rc, out, err = run(argv + ["--yes-large"], capsys)
    assert rc == 0, err


def test_prunetrain_estimate_uses_the_trajectory(monkeypatch, capsys):
    """The trajectory's reconfigurations multiply the method's configurations: a budget that the
    dense estimate fits is exceeded once they are counted, still before any run."""
    from sim.system import cli as scli
    seen = []
    real = scli.check_work

    def spy(*a, **k):
        seen.append(k.get("widths", 1))
        return real(*a, **k)
    monkeypatch.setattr(scli, "check_work", spy)
    _budget(monkeypatch, "train_steps", 200)
    refused(["train", "--workload", "cnn2", "--cluster", "dgx-a100-hdr", "--gpus", "8",
             "--method", "prunetrain:interval=1", "--epochs", "40", "--batch-rule", "device"],
            capsys, "exceeds the limit")
    assert seen[0] == 1 and seen[-1] > 1


# ---- sweep -------------------------------------------------------------------------------------


def test_sweep_refuses_a_deep_workload_before_synthesis(tmp_path, monkeypatch, capsys):
    wl = _deep_workload(tmp_path / "deep.yaml", 400)
    argv = ["sweep", "--hw", "a100-sxm4-40gb", "--workload", wl, "--method", "dense",
            "--db", tmp_path / "r.sqlite", "--jobs", "1", "--json"]
    _budget(monkeypatch, "synth_layer_samples", 10_000)
    refused(argv, capsys, "400 layers x batch 64", "layer-samples", "--yes-large")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "r.sqlite").exists()


def test_sweep_refuses_replay_work_above_its_budget(tmp_path, monkeypatch, capsys):
    from pathlib import Path
    sample = Path(__file__).resolve().parents[1] / "traces" / "sample-cnn2-mnist5k"
    _budget(monkeypatch, "sweep_layer_evaluations", 5)
    refused(["sweep", "--hw", "a100-sxm4-40gb", "--trace", sample, "--method", "dense",
             "--db", tmp_path / "r.sqlite", "--jobs", "1"], capsys, "iterations x",
            "layer evaluations", "--yes-large")


def test_trace_synth_refuses_layer_samples_above_its_budget(tmp_path, monkeypatch, capsys):
    _budget(monkeypatch, "synth_layer_samples", 1_000)
    out = tmp_path / "t"
    refused(["trace", "synth", "--workload", "cnn2", "--batch", "300", "--iterations", "2",
             "--out", out], capsys, "layers x batch 300 x 2 iteration(s)", "layer-samples",
            "--yes-large")
    assert not out.exists()
