"""System level: collectives vs closed forms, cluster YAMLs, iteration timeline, memory, runs, TTA."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.methods import parse_method
from sim.system import collectives as co
from sim.system.cluster import bundled_clusters, cluster_from_dict, load_cluster
from sim.system.memory import footprint, max_batch
from sim.system.prunetrain import (apply_widths, authors_bn_words, authors_macs,
                                   authors_training_fraction, charged_epochs, load_trajectory,
                                   parametric_trajectory, simulate_run)
from sim.system.trajectory import Trajectory
from sim.system.timeline import LayerTimes, make_buckets, simulate_iteration
from sim.system.tta import Curve, load_curves, time_to_accuracy, tta_report
from sim.workload import load_workload

RNG = np.random.default_rng(7)


# ------------------------------------------------------------------------------- collectives

@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 13, 16])
def test_ring_simulation_equals_closed_form(p):
    for _ in range(5):
        n = float(RNG.uniform(1e3, 1e9))
        a, b = float(RNG.uniform(1e-7, 1e-4)), float(RNG.uniform(1e-12, 1e-8))
        g = float(RNG.choice([0.0, RNG.uniform(1e-13, 1e-10)]))
        lv = (co.Level(p, a, b, g),)
        assert co.simulate_allreduce(n, lv) == pytest.approx(co.ring_allreduce_time(n, p, a, b, g),
                                                             rel=1e-9)


@pytest.mark.parametrize("g,nodes", [(2, 2), (4, 3), (8, 4), (4, 16), (3, 5)])
def test_hierarchical_simulation_equals_hardware_formula(g, nodes):
    for _ in range(4):
        n = float(RNG.uniform(1e4, 5e8))
        ai, ao = float(RNG.uniform(1e-7, 1e-5)), float(RNG.uniform(1e-6, 1e-4))
        bi, bo = 1 / float(RNG.uniform(50e9, 450e9)), 1 / float(RNG.uniform(1e9, 50e9))
        lv = (co.Level(g, ai, bi), co.Level(nodes, ao, bo))
        ref = co.hierarchical_2d_time(n, g, nodes, ai, bi, ao, bo)
        assert co.allreduce_time(n, lv) == pytest.approx(ref, rel=1e-12)
        assert co.simulate_allreduce(n, lv) == pytest.approx(ref, rel=1e-9)


def test_three_levels_and_full_simulation_agree():
    lv = (co.Level(2, 1e-6, 1e-11), co.Level(3, 2e-6, 2e-11), co.Level(4, 5e-6, 1e-10))
    n = 3.3e7
    t = co.allreduce_time(n, lv)
    assert co.simulate_allreduce(n, lv) == pytest.approx(t, rel=1e-9)
    assert co.simulate_allreduce(n, lv, full=True) == pytest.approx(t, rel=1e-9)
    # single-member levels vanish; nothing to send costs nothing
    assert co.allreduce_time(n, (co.Level(1, 1, 1),) + lv) == pytest.approx(t, rel=1e-12)
    assert co.simulate_allreduce(0, lv) == 0.0
    assert co.allreduce_bytes_sent(n, lv[:1]) == pytest.approx(n)   # 2(p-1)/p n with p=2


# ---------------------------------------------------------------------------------- clusters

def _doc():
    return {"name": "t", "device": {
        "hwconfig": "x", "memory": {"value": "11 GB", "source": "s"},
        "peak_math": {"value": "10 TFLOPS", "source": "s"},
        "mem_bandwidth": {"value": "500 GB/s", "source": "s"},
        "reserved": {"value": "0.5 GB", "source": "s"}},
        "dimensions": [
            {"name": "node", "topology": "ring", "devices": 4, "link": "NVLink2", "collective": "ring",
             "bandwidth": {"value": "150 GB/s", "source": "s"}, "latency": {"value": "3.4 us",
                                                                            "source": "s"}},
            {"name": "net", "topology": "ring", "devices": 8, "link": "EDR", "collective": "ring",
             "bandwidth": {"value": "100 Gb/s", "source": "s"}, "latency": {"value": "9.6 us",
                                                                            "source": "s"}}]}


def test_bundled_clusters_load():
    names = bundled_clusters()
    assert {"prunetrain-v100-128", "dgx-a100-hdr", "dgx-h100-ndr", "gtx1080ti-11gb"} <= set(names)
    c = load_cluster("prunetrain-v100-128")
    assert c.devices == 128 and [d.devices for d in c.dimensions] == [4, 32]
    assert c.dimensions[1].bandwidth.value == pytest.approx(3.125e9)
    assert c.training.bucket.value == pytest.approx(25e6)


def test_cluster_units_and_cut():
    c = cluster_from_dict(_doc(), "t.yaml")
    assert c.dimensions[1].bandwidth.value == pytest.approx(12.5e9)   # 100 Gb/s
    assert c.dimensions[0].alpha == pytest.approx(3.4e-6)
    assert [d.devices for d in c.with_devices(16).dimensions] == [4, 4]
    assert [d.devices for d in c.with_devices(2).dimensions] == [2]
    assert [d.devices for d in c.with_devices(1).dimensions] == [1]
    assert [d.devices for d in c.with_devices(64).dimensions] == [4, 16]   # grows the outer dim
    for bad in (0, 3, 6, 18):
        with pytest.raises(ConfigError, match="gpus"):
            c.with_devices(bad)


def test_prunetrain_cluster_covers_16_to_256():
    c = load_cluster("prunetrain-v100-128")
    for n in (16, 32, 64, 128, 256):
        cut = c.with_devices(n)
        assert cut.devices == n and cut.dimensions[0].devices == 4


@pytest.mark.parametrize("gpus", ["0", "3", "130"])
def test_train_bad_gpus_one_line(gpus, capsys):
    from sim.cli import main
    try:
        rc = main(["train", "--workload", "resnet20", "--cluster", "prunetrain-v100-128",
                   "--gpus", gpus, "--epochs", "1"])
    except SystemExit as e:     # argparse refuses 0 itself
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    # 0 is outside the devices range (an argparse usage line), 3 and 130 do not fit the cluster
    assert len(err) == 1 and err[0].startswith(("prunesim: error:", "prunesim train: error:")) \
        and "gpus" in err[0]


@pytest.mark.parametrize("path,value,field", [
    (("dimensions", 0, "bandwidth", "value"), "150 GHz", "dimensions[0].bandwidth.value"),
    (("dimensions", 1, "latency", "source"), "", "dimensions[1].latency.source"),
    (("dimensions", 0, "collective"), "tree", "dimensions[0].collective"),
    (("dimensions", 0, "devices"), 0, "dimensions[0].devices"),
    (("device", "memory", "value"), "11", "device.memory.value"),
    (("dimensions", 1, "name"), "node", "dimensions[1].name"),
])
def test_cluster_errors_name_file_and_field(path, value, field):
    d = _doc()
    t = d
    for k in path[:-1]:
        t = t[k]
    t[path[-1]] = value
    with pytest.raises(ConfigError) as e:
        cluster_from_dict(d, "bad.yaml")
    assert e.value.file == "bad.yaml" and e.value.field == field


def test_cluster_unknown_key_and_missing_file(tmp_path):
    d = _doc()
    d["dimensions"][0]["speed"] = 1
    with pytest.raises(ConfigError, match="unknown key"):
        cluster_from_dict(d, "bad.yaml")
    with pytest.raises(ConfigError, match="no such cluster"):
        load_cluster(tmp_path / "nope.yaml")


# ---------------------------------------------------------------------------------- timeline

def _layers(k=4, t=1e-3, gb=10_000_000):
    return [LayerTimes(f"l{i}", t, t, t, gb, gb // 4) for i in range(k)]


def test_single_device_iteration_is_compute_plus_optimizer():
    ls = _layers()
    r = simulate_iteration(ls, (), 25e6, 2e-3)
    assert r.seconds == pytest.approx(12e-3 + 2e-3)
    assert r.comm_seconds == 0 and r.exposed_comm_seconds == 0


def test_buckets_overlap_backward():
    ls = _layers()                      # 4 layers x 10 MB: buckets of >= 25 MB: (l3,l2,l1), (l0)
    assert make_buckets(ls, 25e6) == [("l3", "l2", "l1"), ("l0",)]
    lv = (co.Level(4, 1e-6, 1e-10),)
    ar30, ar10 = co.allreduce_time(30e6, lv), co.allreduce_time(10e6, lv)
    r = simulate_iteration(ls, lv, 25e6, 0.0)
    # bucket 1 ready after FWD (4 ms) + 3 layers of backward (6 ms); bucket 2 at 12 ms
    b1_end = 10e-3 + ar30
    expect = max(b1_end, 12e-3) + ar10
    assert r.seconds == pytest.approx(expect, rel=1e-9)
    assert r.exposed_comm_seconds == pytest.approx(expect - 12e-3, rel=1e-9)
    assert r.comm_bytes == 40_000_000


def test_zero_skips_wgc_and_allreduce():
    ls = _layers()
    lv = (co.Level(4, 1e-6, 1e-10),)
    dense = simulate_iteration(ls, lv, 25e6, 0.0)
    z = simulate_iteration(ls, lv, 25e6, 0.0, frozenset({"l1"}))
    assert z.comm_bytes == dense.comm_bytes - 10_000_000
    assert z.skipped_bytes == 10_000_000 and z.compute_seconds == pytest.approx(11e-3)
    assert z.seconds < dense.seconds


# ------------------------------------------------------------------------------------ memory

def test_footprint_linear_and_max_batch_fits():
    w = load_workload("resnet50-imagenet")
    f1, f2 = footprint(w, 32, 4), footprint(w, 64, 4)
    per = f2.total - f1.total
    assert footprint(w, 96, 4).total - f2.total == per
    assert f1.weights == w.params() * 4
    b = max_batch(w, 11e9, 4, int(0.5e9))
    assert b % 32 == 0 and b > 0
    assert footprint(w, b, 4, int(0.5e9)).total <= 11e9 < footprint(w, b + 32, 4, int(0.5e9)).total


def test_pruned_model_needs_less_memory():
    w = load_workload("resnet32")
    tr = parametric_trajectory(w, 100, 10)
    small = apply_widths(w, tr.widths_at(99))
    assert footprint(small, 128, 4).total < footprint(w, 128, 4).total
    assert small.params() < w.params()


# ------------------------------------------------------------------------ trajectories, runs

def test_parametric_trajectory_shrinks_and_keeps_io():
    w = load_workload("resnet32")
    tr = parametric_trajectory(w, 100, 10)
    assert tr.widths_at(5) == {}                       # dense until the first reconfiguration
    prev = None
    for e in range(10, 100, 10):
        ws = tr.widths_at(e)
        assert ws[w.layers[0].name][0] == w.layers[0].c_in
        assert ws[w.layers[-1].name][1] == w.layers[-1].c_out
        tot = sum(a * b for a, b in ws.values())
        assert prev is None or tot <= prev
        prev = tot


def test_trajectory_files(tmp_path):
    w = load_workload("resnet32")
    l, nxt = w.layers[1], w.layers[2]          # a block's two convs and the space between them
    csvf = tmp_path / "t.csv"
    csvf.write_text(f"epoch,layer,c_in,c_out\n10,{l.name},{l.c_in},{l.c_out - 3}\n"
                    f"10,{nxt.name},{nxt.c_in - 3},{nxt.c_out}\n")
    tr = load_trajectory(csvf, w)
    assert tr.widths_at(12) == {l.name: (l.c_in, l.c_out - 3), nxt.name: (nxt.c_in - 3, nxt.c_out)}
    assert tr.widths_at(3) == {}
    y = tmp_path / "t.yaml"
    y.write_text(f"points:\n  10:\n    {l.name}: [{l.c_in}, {l.c_out + 1}]\n")
    with pytest.raises(ConfigError) as e:
        load_trajectory(y, w)
    assert e.value.field == f"points.10.{l.name}" and str(y) in str(e.value)
    y.write_text("points:\n  10:\n    nope: [1, 1]\n")
    with pytest.raises(ConfigError, match="no layer"):
        load_trajectory(y, w)


def test_authors_accounting_matches_gemms_for_a_same_padded_conv():
    w = load_workload("vgg11-cifar")
    conv = [l for l in w.convs if l.stride == 1 and l.pad == 1 and l.r == 3][1]
    # per conv: 2*CRSK*P^2 + (H+2)^2*CRSK MACs; the GEMMs count 3 * CRSK*P^2 MACs (x2 flops)
    crsk = conv.c_in * 9 * conv.c_out
    from dataclasses import replace
    sub = replace(w, layers=(conv,))
    assert authors_macs(sub, 2) == 2 * (2 * crsk * conv.p * conv.q + (conv.h + 2) ** 2 * crsk)


def _halving(w, at: int) -> Trajectory:
    """Every conv but the stem's input halved from epoch `at` on, the classifier's input too."""
    half = tuple((l.name, l.c_in if i == 0 else l.c_in // 2, l.c_out // 2 if l.op != "fc"
                  else l.c_out) for i, l in enumerate(w.layers))
    return Trajectory(((0, ()), (at, half)), "test")


@pytest.mark.parametrize("epochs,interval", [(90, 5), (182, 10), (7, 3)])
def test_authors_charging_counts_one_interval_per_reconfiguration_the_last_included(epochs,
                                                                                  interval):
    w = load_workload("vgg11-cifar")
    dense = Trajectory(((0, ()),), "dense")
    # a network that never prunes is charged interval * (epochs // interval + 1) epochs
    assert charged_epochs(epochs, interval) == interval * (epochs // interval + 1)
    assert authors_training_fraction(w, dense, epochs, interval) == pytest.approx(
        charged_epochs(epochs, interval) / epochs, rel=1e-12)
    assert charged_epochs(90, 5) == 95 and charged_epochs(182, 10) == 190


def test_authors_charging_against_a_hand_count_of_the_script():
    w = load_workload("vgg11-cifar")
    tr = _halving(w, 20)
    base, half = authors_macs(w, 1), authors_macs(apply_widths(w, tr.widths_at(20)), 1)
    assert half < 0.3 * base
    # calc_cost.py: base for the first interval, then the networks logged at epochs 10 .. 180
    # (the widths from 0-based epoch 10, 20, ... on): 10 at the base widths, 17 halved
    want = 10 * (base + base + 17 * half) / (182 * base)
    assert authors_training_fraction(w, tr, 182, 10) == pytest.approx(want, rel=1e-12)
    # the epochs run alone would give 20 epochs dense and 162 halved: the script charges 8 more
    run = (20 * base + 162 * half) / (182 * base)
    assert authors_training_fraction(w, tr, 182, 10) - run == pytest.approx(
        8 * half / (182 * base), rel=1e-9)
    with pytest.raises(ConfigError, match="interval"):
        authors_training_fraction(w, tr, 182, 0)
    # the batch-norm count: 8 N K P^2 words after every conv, charged the same way
    conv = w.convs[1]
    from dataclasses import replace
    assert authors_bn_words(replace(w, layers=(conv,)), 3) == 8 * 3 * conv.c_out * conv.p * conv.q
    bn0, bn1 = authors_bn_words(w, 1), authors_bn_words(apply_widths(w, tr.widths_at(20)), 1)
    assert authors_training_fraction(w, tr, 182, 10, authors_bn_words) == pytest.approx(
        10 * (2 * bn0 + 17 * bn1) / (182 * bn0), rel=1e-12)


def test_run_roofline_prunetrain_cheaper_and_zero_saves_comm():
    w = load_workload("resnet32")
    cl = load_cluster("prunetrain-v100-128").with_devices(16)
    tr = parametric_trajectory(w, 30, 10)
    dense = simulate_run(w, cl, parse_method("dense"), epochs=30, batch=128, engine="roofline")
    pt = simulate_run(w, cl, parse_method("prunetrain"), epochs=30, batch=128, trajectory=tr,
                      dynamic_batch="relative", engine="roofline")
    assert dense.timing_source.startswith("roofline")
    assert pt.train_seconds < dense.train_seconds and pt.comm_bytes < dense.comm_bytes
    assert pt.epochs[0].batch == 128 and pt.epochs[-1].batch >= 128
    assert all(e.batch % 32 == 0 for e in pt.epochs)
    z = simulate_run(w, cl, parse_method("zero"), epochs=1, batch=128, engine="roofline")
    assert z.comm_bytes < dense.epochs[0].comm_bytes
    assert sum(e.iterations for e in dense.epochs[:1]) == math.ceil(50_000 / (128 * 16))


def test_dynamic_batch_rules_stop_where_their_capacity_ends():
    """Each capacity rule grows the batch in steps of 32 to the last one within its capacity:
    "relative" the dense footprint at the initial batch, "compute" the dense iteration's MACs
    (PruneTrain's count), "device" the device memory; the three differ, and an unknown rule is
    refused rather than running without growth."""
    from sim.methods.prunetrain import authors_macs
    from sim.system.memory import footprint
    from sim.system.prunetrain import BATCH_RULES, apply_widths
    from sim.system.timeline import resolve_framework
    w = load_workload("resnet32")
    cl = load_cluster("prunetrain-v100-128").with_devices(4)
    tr = parametric_trajectory(w, 6, 2, keep=0.3, residual_keep=0.5)
    m = parse_method("prunetrain")
    runs = {r: simulate_run(w, cl, m, epochs=6, batch=64, trajectory=tr, engine="roofline",
                            dynamic_batch=r) for r in BATCH_RULES}
    last = apply_widths(w, tr.widths_at(5))
    b = runs["compute"].epochs[-1].batch
    assert authors_macs(last, b) <= authors_macs(w, 64) < authors_macs(last, b + 32)
    act, res = int(cl.training.activation_bytes.value), int(cl.device.reserved.value)
    over = resolve_framework(None).activation_overhead
    fp = lambda net, n: footprint(net, n, act, res, over).total  # noqa: E731
    b = runs["relative"].epochs[-1].batch
    assert fp(last, b) <= fp(w, 64) < fp(last, b + 32)
    assert len({r.epochs[-1].batch for r in runs.values()}) == 3
    assert all(e.batch % 32 == 0 and e.lr_scale == e.batch / 64 for r in runs.values()
               for e in r.epochs)
    with pytest.raises(ValueError, match="rule 'memory'"):
        simulate_run(w, cl, m, epochs=6, batch=64, trajectory=tr, engine="roofline",
                     dynamic_batch="memory")


def test_a_given_batch_schedule_is_followed_and_cuts_iterations():
    """simulate_run(batch_steps=...): a published schedule replayed on any widths; each epoch
    runs at the step's batch (fewer, larger iterations), the lr scales with it; a schedule with
    a dynamic mini-batch, or out of range, is refused."""
    w = load_workload("resnet32")
    cl = load_cluster("prunetrain-v100-128").with_devices(4)
    tr = parametric_trajectory(w, 6, 2)
    m = parse_method("prunetrain")
    fixed = simulate_run(w, cl, m, epochs=6, batch=64, trajectory=tr, engine="roofline")
    steps = simulate_run(w, cl, m, epochs=6, batch=64, trajectory=tr, engine="roofline",
                         batch_steps=((2, 96), (4, 128)))
    assert [e.batch for e in steps.epochs] == [64, 64, 96, 96, 128, 128]
    assert [e.lr_scale for e in steps.epochs][-1] == 2.0
    assert steps.epochs[4].iterations < steps.epochs[2].iterations < fixed.epochs[2].iterations
    assert steps.comm_bytes < fixed.comm_bytes
    assert [e.seconds for e in steps.epochs[:2]] == [e.seconds for e in fixed.epochs[:2]]
    with pytest.raises(ValueError, match="both set the batch"):
        simulate_run(w, cl, m, epochs=6, batch=64, trajectory=tr, engine="roofline",
                     batch_steps=((2, 96),), dynamic_batch="device")
    with pytest.raises(ValueError, match="epoch must be in 0..5"):
        simulate_run(w, cl, m, epochs=6, batch=64, engine="roofline", batch_steps=((6, 96),))


# ---------------------------------------------------------------------------------------- TTA

def test_tta_reached_not_reached_and_speedup(tmp_path):
    c = Curve(None, ((0, 0.5), (1, 0.8), (2, 0.9)))
    assert time_to_accuracy([1.0, 2.0, 3.0], c, 0.8) == (3.0, 1)
    assert time_to_accuracy([1.0, 2.0, 3.0], c, 0.95) == (None, None)
    f = tmp_path / "acc.csv"
    f.write_text("epoch,accuracy,method\n0,50,dense\n1,90,dense\n0,40,prunetrain\n1,85,prunetrain\n"
                 "2,91,prunetrain\n")
    curves = load_curves(f)
    rep = tta_report([1, 1, 1], [2, 2, 2], curves, "prunetrain:interval=10,rho=0.2", 90)
    assert rep["method"]["seconds"] == 3 and rep["dense"]["seconds"] == 4
    assert rep["speedup"] == pytest.approx(4 / 3)
    rep = tta_report([1, 1, 1], [2, 2, 2], curves, "prunetrain", 95)
    assert rep["method"]["status"] == "not reached" and rep["speedup"] is None
    (tmp_path / "bad.csv").write_text("ep,acc\n1,2\n")
    with pytest.raises(ConfigError, match="header"):
        load_curves(tmp_path / "bad.csv")


# ---------------------------------------------------------------------------------------- CLI

def test_cli_train_json_and_errors(capsys, tmp_path):
    from sim.cli import main
    acc = tmp_path / "a.csv"
    acc.write_text("epoch,accuracy\n0,0.3\n1,0.6\n")
    rc = main(["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb", "--gpus", "2",
               "--method", "prunetrain:interval=1", "--epochs", "2", "--accuracy", str(acc),
               "--target", "0.5", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("method", "dense"):
        assert {"train_seconds", "comm_bytes", "comm_seconds", "per_epoch"} <= set(out[k])
        assert len(out[k]["per_epoch"]) == 2
    assert out["tta"]["method"]["epoch"] == 1
    rc = main(["train", "--workload", "resnet20", "--cluster", "nope-cluster", "--method", "dense"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "nope-cluster" in err


def test_a_trajectory_whose_layers_disagree_on_a_shared_space_is_one_line(tmp_path, capsys):
    """A point where a conv writes 60 channels into a space its consumer reads at 64 (listed, or
    left out and so dense) describes no network: refused naming the file, the epoch and the
    layer, before any number is computed."""
    from sim.cli import main
    f = tmp_path / "t.yaml"
    f.write_text("workload: vgg11-cifar\npoints:\n  0:\n    features.0: [3, 60]\n")
    rc = main(["train", "--workload", "vgg11-cifar", "--cluster", "titan-xp-12gb", "--method",
               "prunetrain", "--trajectory", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "t.yaml" in err and "points.0.features.4 (not listed: dense)" in err
    assert "60" in err and "64" in err
    f.write_text("workload: vgg11-cifar\npoints:\n  0:\n    features.0: [3, 60]\n"
                 "    features.4: [60, 128]\n")
    assert main(["train", "--workload", "vgg11-cifar", "--cluster", "titan-xp-12gb", "--method",
                 "prunetrain", "--trajectory", str(f)]) == 0
