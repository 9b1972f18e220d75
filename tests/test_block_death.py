"""Dead residual blocks: the workload rewrite that removes a block's path (PruneTrain's
rm_layers.py), the death model fitted to the real runs, and what they do to time and memory."""
from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ConfigError
from research.prunetrain.fitting import fit_death
from sim.system.prunetrain_model import block_death, block_groups, choose_dead, death_probability
from sim.system.trajectory import apply_widths, residual_paths, without_paths
from sim.workload import load_workload


# ------------------------------------------------------------------ the workload rewrite

def test_residual_paths_are_the_authors_removal_groups():
    # rm_layers.py: ResNet-20 has 9 removable pairs (every block, the downsampling ones too),
    # ResNet-32 15, their CIFAR ResNet-50 24 triples; the projection shortcut is in none
    for name, blocks, per in (("resnet20", 9, 2), ("resnet32", 15, 2), ("resnet50-bt-cifar", 24, 3)):
        paths = residual_paths(load_workload(name))
        by_add = {p.add: p for p in paths.values()}
        assert len(by_add) == blocks
        assert {len(p.layers) for p in by_add.values()} == {per}
        assert not any("shortcut" in n for n in paths)
    assert residual_paths(load_workload("vgg11-cifar")) == {}
    r20 = residual_paths(load_workload("resnet20"))
    assert r20["layer1.0.conv1"].other == "conv1"                 # identity from the stem
    assert r20["layer2.0.conv2"].other == "layer2.0.shortcut.0"   # projection


def test_without_paths_removes_the_block_and_rewires_its_readers():
    w = load_workload("resnet20")
    dead = frozenset({"layer2.0.conv1", "layer2.1.conv2", "layer2.2.conv1"})  # all of stage 2
    v = without_paths(w, dead)
    gone = {f"layer2.{b}.conv{i}" for b in range(3) for i in (1, 2)}
    assert {l.name for l in v.layers} == {l.name for l in w.layers} - gone
    assert not any(op["name"].startswith("layer2.") and op["op"] == "add" for op in v.ops)
    ops = {op["name"]: op for op in v.ops}
    # three dead blocks in a row: stage 3 reads the projection, which takes the add's ReLU
    assert ops["layer3.0.conv1"]["in"] == "layer2.0.shortcut.0"
    assert ops["layer3.0.shortcut.0"]["in"] == "layer2.0.shortcut.0"
    assert ops["layer2.0.shortcut.0"]["relu"] is True
    assert v.macs() == w.macs() - sum(w.layer(n).macs() for n in gone)
    # an identity block: its reader reads the block's input
    u = without_paths(w, frozenset({"layer1.1.conv2"}))
    assert {op["name"]: op for op in u.ops}["layer1.2.conv1"]["in"] == "layer1.0.add"


def test_width_zero_removes_the_path_and_is_refused_off_one():
    w = load_workload("resnet20")
    widths = {"layer1.1.conv1": (16, 0), "layer1.1.conv2": (0, 16)}
    assert len(apply_widths(w, widths).layers) == len(w.layers) - 2
    for layer, wid in (("layer2.0.shortcut.0", (16, 0)), ("conv1", (3, 0)), ("linear", (0, 10))):
        with pytest.raises(ConfigError, match=layer.replace(".", r"\.")):
            apply_widths(w, {layer: wid})
    with pytest.raises(ConfigError, match="features.0|residual"):
        v = load_workload("vgg11-cifar")
        apply_widths(v, {v.layers[1].name: (0, v.layers[1].c_out)})


def test_trajectory_files_take_zero_on_a_path_only(tmp_path):
    from sim.system.prunetrain import load_trajectory
    f = tmp_path / "t.yaml"
    f.write_text("workload: resnet20\npoints:\n  10:\n    layer1.1.conv1: [16, 0]\n"
                 "    layer1.1.conv2: [0, 16]\n")
    w = load_workload("resnet20")
    tr = load_trajectory(f, w)
    assert len(apply_widths(w, tr.widths_at(10)).layers) == len(w.layers) - 2
    f.write_text("workload: resnet20\npoints:\n  10:\n    linear: [0, 10]\n")
    with pytest.raises(ConfigError, match=r"points\.10\.linear.*residual block"):
        load_trajectory(f, w)


def test_a_removed_block_costs_less_than_a_one_channel_one():
    """The engine side: time and memory of a dead block removed (PruneTrain) against the same
    block kept at one channel (what the runs' models hold), on the GTX 1080 Ti."""
    from sim.methods import parse_method
    from sim.system.cluster import load_cluster
    from sim.system.memory import footprint
    from sim.system.timeline import layer_times
    w = load_workload("resnet32")
    blocks = [f"layer{s}.{b}" for s in (1, 2, 3) for b in (2, 3, 4)]
    one = {f"{b}.conv1": (w.layer(f"{b}.conv1").c_in, 1) for b in blocks}
    one |= {f"{b}.conv2": (1, w.layer(f"{b}.conv2").c_out) for b in blocks}
    zero = {n: (a, 0) if n.endswith("conv1") else (0, b) for n, (a, b) in one.items()}
    cl = load_cluster("gtx1080ti-11gb")
    dense = parse_method("dense")

    def step(widths):
        t = layer_times(apply_widths(w, widths), 128, cl.device, cl.training, "auto", dense)
        return sum(x.fwd + x.agbp + x.wgc for x in t.layers) + t.optimizer + t.step_overhead

    assert step(zero) < 0.9 * step(one)
    assert (footprint(apply_widths(w, zero), 128, 2).activations
            < 0.85 * footprint(apply_widths(w, one), 128, 2).activations)


# ------------------------------------------------------------------------ the death model

def test_fit_death_recovers_known_coefficients_and_solves_the_likelihood():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 40, 20000)
    e = np.where(rng.random(len(x)) < 0.3, 4.0, 1.0)
    y = rng.random(len(x)) < death_probability((3.0, -2.0, -1.5), x, e)
    a, b, c = fit_death(x, y, e)
    assert a == pytest.approx(3.0, abs=0.2) and b == pytest.approx(-2.0, abs=0.1)
    assert c == pytest.approx(-1.5, abs=0.2)
    # stationarity of the ridge-penalised log-likelihood (ridge 1e-3), computed here independently
    p = death_probability((a, b, c), x, e)
    for col, w in ((np.ones_like(x), a), (np.log1p(x), b), (np.log(e), c)):
        assert float(((y - p) * col).sum()) == pytest.approx(1e-3 * w, abs=1e-6)
    # one kind of network only: no E term
    assert fit_death(x, y)[2] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        fit_death(x, np.ones(len(x), bool))


def test_block_death_and_choose_dead():
    p = death_probability((3.0, -2.0), np.array([1.0, 20.0, 3.0, 3.0]))
    groups = [[0], [1], [2, 3]]
    pb = block_death(p, groups)
    assert pb[2] == pytest.approx(1 - (1 - p[2]) * (1 - p[3]))
    n = int(np.floor(pb.sum() + 0.5))
    dead = choose_dead(pb)
    assert len(dead) == n and 1 not in dead
    assert choose_dead(np.zeros(3), frozenset({1})) == {1}          # never revived
    assert block_groups(load_workload("vgg11-cifar"), ["features.0"]) == []
    w = load_workload("resnet50-bt-cifar")
    from sim.system.prunetrain_model import _kinds
    plain, _ = _kinds(w)
    g = block_groups(w, plain)
    assert len(g) == 24 and {len(x) for x in g} == {2}


def test_the_stored_fit_has_a_death_model_that_falls_with_channels():
    from sim.system.prunetrain_model import bundled_fit
    fit = bundled_fit()
    assert fit.death is not None
    p = death_probability(fit.death, [1, 4, 16, 64])
    assert np.all(np.diff(p) < 0) and p[0] > 0.5 and p[-1] < 0.05
    # the bottleneck runs: fewer inner spaces die at the same width
    assert np.all(death_probability(fit.death, [1, 4, 16], 4.0) < p[:3])


def test_model_trajectory_kills_blocks_more_at_larger_rho_and_never_revives():
    from sim.system.prunetrain import lasso_trajectory
    w = load_workload("resnet20")
    removed = {}
    for rho in (0.1, 0.4):
        tr = lasso_trajectory(w, rho, 10, 182, 128)
        gone_by_point = [{n for n, a, b in ws if a == 0 or b == 0} for _, ws in tr.points]
        for before, after in zip(gone_by_point, gone_by_point[1:]):
            assert before <= after
        removed[rho] = len(gone_by_point[-1])
    assert removed[0.4] > removed[0.1]
    # without block death no layer reaches 0 and the level is the same lasso's
    from sim.system.prunetrain_model import default_schedule, model_trajectory
    sched = default_schedule("cifar10", 182, 128, 50000)
    plain = model_trajectory(w, 0.4, 10, sched, blocks=False)
    assert not any(a == 0 or b == 0 for _, ws in plain.points for _, a, b in ws)


def test_dead_blocks_take_no_channels_from_the_level():
    """with_dead_blocks: the live spaces take the kind's mean less one channel per dead space."""
    from sim.system.prunetrain_model import with_dead_blocks
    c = np.array([16.0, 16, 32, 32, 64, 64])
    score = np.array([0.0, 0.3, 0.0, 0.3, 0.0, 0.3])
    groups = [[i] for i in range(6)]
    ks, dead = with_dead_blocks(0.2, c, score, np.zeros(6), groups, (3.7, -2.4, 0.0))
    assert dead
    live = np.array([i not in dead for i in range(6)])
    assert np.all(ks[~live] == 0)
    assert float((ks * c).sum()) == pytest.approx(0.2 * c.sum() - (~live).sum(), rel=1e-6)
    ks0, none = with_dead_blocks(0.2, c, score, np.zeros(6), groups, (-50.0, 0.0))
    assert not none and float((ks0 * c).sum()) == pytest.approx(0.2 * c.sum(), rel=1e-6)


def test_channel_plan_names_the_dead_spaces():
    from sim.methods.prunetrain import channel_plan
    w = load_workload("resnet20")
    rng = np.random.default_rng(0)
    weights = {l.name: rng.normal(size=(l.c_out, l.c_in, l.r, l.s)) if l.op == "conv"
               else rng.normal(size=(l.c_out, l.c_in)) for l in w.layers}
    weights["layer1.1.conv1"][:] = 0.0
    weights["layer1.1.conv2"][:] = 0.0
    plan = channel_plan(w, weights)
    assert plan.dead == {"layer1.1.conv1"}
    assert plan.layer_c_out["layer1.1.conv1"] == 1      # the model keeps one zero channel


def test_without_paths_keeps_the_widths_of_a_narrowed_workload():
    w = load_workload("resnet20")
    narrow = apply_widths(w, {"layer3.2.conv1": (64, 5), "layer3.2.conv2": (5, 64)})
    v = without_paths(narrow, frozenset({"layer1.1.conv1"}))
    assert v.layer("layer3.2.conv1").c_out == 5 and v.layer("layer3.2.conv2").c_in == 5
    assert without_paths(w, frozenset({"layer1.1.conv1"})).layer("layer3.2.conv1").c_out == 64


def test_death_rows_leave_out_the_high_lr_epochs():
    from research.prunetrain.fitting import bundled_runs, death_rows
    from sim.system.prunetrain_model import _hi, bundled_fit
    runs = [r for r in bundled_runs() if r.has_residual][:3]
    x, y, e = death_rows(runs, bundled_fit())
    assert set(e) == {r.expansion for r in runs}
    n = sum(len(r.plain_spaces.c) * sum(1 for e in range(4, len(r.lrsteps), 5) if not _hi(r)[e])
            for r in runs)
    assert len(x) == len(y) == n > 0


def test_replay_charges_nothing_for_a_removed_block(tmp_path):
    """A PruneTrain replay column whose trajectory removes a block runs less forward and backward
    GEMM time than the same trajectory at one channel (the removed layers have no row)."""
    from sim.results.api import replay
    rec = {}
    for name, (a, b) in (("zero", (0, 0)), ("one", (1, 1))):
        f = tmp_path / f"{name}.yaml"
        f.write_text("workload: resnet20\npoints:\n  0:\n"
                     f"    layer3.2.conv1: [64, {a}]\n    layer3.2.conv2: [{b}, 64]\n")
        out = replay("traces/sample-resnet20-mnist5k", ["a100-sxm4-40gb"], ["prunetrain"],
                     trajectory=str(f), iteration=0)
        rec[name] = next(r for r in out if r["method"] != "dense")
    for key in ("fwd_s", "agbp_s", "wgc_s", "fwd_ops_s", "bwd_ops_s"):
        assert rec["zero"][key] < rec["one"][key], key


def test_old_run_files_read_a_one_channel_block_as_removed_after_the_first_decay(tmp_path):
    """A run file without `dead` records: a residual path's inner space at one channel is a dead
    block from the first lr decay on (kept before it, when a last channel can still be live); a
    file with the records, or a plain trajectory file, is read as written."""
    from sim.system.prunetrain import load_trajectory
    w = load_workload("resnet20")
    pts = ("points:\n  50:\n    layer1.1.conv1: [16, 1]\n    layer1.1.conv2: [1, 16]\n"
           "  100:\n    layer1.1.conv1: [16, 1]\n    layer1.1.conv2: [1, 16]\n"
           "    layer2.1.conv1: [32, 2]\n    layer2.1.conv2: [2, 32]\n")
    run = "run: {epochs: 182, batch: 32, lr_decay_at: [0.5, 0.75]}\n"
    # the logged lr leaves its maximum at epoch 91, as the schedule says
    per = "per_epoch:\n" + "".join(f"- {{epoch: {e}, lr: {0.2 if e < 91 else 0.02}, batch: 32}}\n"
                                   for e in range(182))
    f = tmp_path / "old.yaml"
    f.write_text("workload: resnet20\n" + pts + run + per)
    tr = load_trajectory(f, w)
    assert len(apply_widths(w, tr.widths_at(50)).layers) == len(w.layers)
    after = apply_widths(w, tr.widths_at(100))
    assert len(after.layers) == len(w.layers) - 2
    assert "layer1.1.conv1" not in {l.name for l in after.layers}
    assert {l.name: l.c_out for l in after.layers}["layer2.1.conv1"] == 2
    assert "1 block(s) at one inner channel" in tr.source
    f.write_text("workload: resnet20\n" + pts + run + per.replace("batch: 32}", "batch: 32, dead: []}"))
    for g in (f, tmp_path / "plain.yaml"):
        if g.name == "plain.yaml":
            g.write_text("workload: resnet20\n" + pts)
        kept = load_trajectory(g, w)
        assert len(apply_widths(w, kept.widths_at(100)).layers) == len(w.layers)
        assert "read as removed" not in kept.source
