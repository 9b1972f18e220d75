"""The lasso-dose PruneTrain trajectory model: its inputs (rho, schedule), the bundled real runs it
is fitted to, and what `prunesim train` does with it."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from research.prunetrain.fitting import KAPPAS, bundled_runs, leave_one_out
from sim.system.prunetrain_model import (bundled_fit, default_schedule, dose_per_epoch,
                                         init_group_norms, model_trajectory)
from sim.system.prunetrain import apply_widths, lasso_trajectory
from sim.workload import load_workload


def _read_yaml(path):
    """A bundled run file as safe_load reads it, with libyaml's parser where PyYAML has it (the
    files are large: the pure-Python parser takes ~0.6 s per file, libyaml ~0.1 s; the same
    document either way). The code under test reads them with its own strict loader."""
    import yaml
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_analytic_group_norm_matches_the_measured_one():
    # R0 at the run's init (PyTorch's default or the authors'), computed from the workload alone,
    # vs the real runs' first R
    runs = {p.name: p for p in bundled_runs()}
    assert runs, "no bundled PruneTrain runs"
    from research.prunetrain.fitting import RUNS_DIR
    files = sorted(RUNS_DIR.glob("*.yaml"))
    for f in files[:3] + [f for f in files if "hefanout" not in f.name][:2]:
        doc = _read_yaml(f)
        r0, _ = init_group_norms(load_workload(doc["workload"]), doc["run"].get("init", "torch"))
        assert r0 == pytest.approx(doc["run"]["first_group_norm"], rel=0.02)


def test_dose_is_invariant_to_the_global_batch_under_linear_lr_scaling():
    w = load_workload("resnet20")
    a = dose_per_epoch(w, 0.2, default_schedule("cifar10", 182, 128, 50_000))
    b = dose_per_epoch(w, 0.2, default_schedule("cifar10", 182, 512, 50_000))
    assert a[-1] == pytest.approx(b[-1], rel=0.01)
    c = dose_per_epoch(w, 0.25, default_schedule("cifar10", 182, 128, 50_000))
    assert c[-1] > a[-1]                                   # more rho, more lambda, more dose


def test_the_predicted_lambda_takes_the_runs_first_ce_not_ln_classes():
    """Fit.ce0_offset is the median of the runs' logged first CE less ln(outputs) (runs that did
    not log it left out; none: 0), and a prediction's clock takes CE0 = ln(classes) + it: the
    dose scales with lambda, so an offset that makes CE0 1.21 times ln(classes) makes the dose
    1.21 times larger at beta 1 and 1.1 at beta 0.5."""
    from research.prunetrain.fitting import RunData, first_ce_offset
    z = np.zeros(2)
    run = lambda c: RunData("r", "resnet20", 0.2, 10, z, 1.0, z, z, 0.1, 128,  # noqa: E731
                            ce0_offset=c)
    assert first_ce_offset([run(0.1), run(float("nan")), run(0.2)]) == pytest.approx(0.15)
    assert first_ce_offset([run(float("nan"))]) == 0.0
    runs = bundled_runs()
    logged = [r.ce0_offset for r in runs if np.isfinite(r.ce0_offset)]
    assert len(logged) > len(runs) // 2 and min(logged) >= -0.01
    assert bundled_fit().ce0_offset == pytest.approx(float(np.median(logged)))
    w, s = load_workload("resnet20"), default_schedule("cifar10", 182, 128, 50_000)
    for beta in (1.0, 0.5):
        base = dose_per_epoch(w, 0.2, s, beta)
        np.testing.assert_allclose(dose_per_epoch(w, 0.2, s, beta,
                                                  ce0_offset=0.21 * np.log(10)),
                                   base * 1.21 ** beta)
    fit = bundled_fit()
    at = {c: model_trajectory(w, 0.2, 10, s, dataclasses.replace(fit, ce0_offset=c))
          for c in (0.0, 1.0)}
    assert at[0.0].points != at[1.0].points


def test_the_first_ce_is_an_offset_of_ln_classes_not_a_ratio():
    """lambda_per_norm's CE0 is ln(classes) + the offset at every class count: the same offset
    raises lambda by offset / ln(classes), less at 1000 classes than at 10 (a ratio would raise
    it alike)."""
    from sim.system.prunetrain_model import lambda_per_norm
    from sim.workload import with_classes
    w = load_workload("resnet50-imagenet")
    for classes in (10, 100, 1000):
        wc = with_classes(w, classes)
        wc = dataclasses.replace(wc, dataset=None)      # the head's outputs are the classes
        up = lambda_per_norm(wc, 0.2, ce0_offset=0.3) / lambda_per_norm(wc, 0.2)
        assert up == pytest.approx(1 + 0.3 / np.log(classes))


def test_runs_prune_and_more_rho_prunes_more():
    runs = bundled_runs()
    final = {}
    for r in runs:
        if r.workload == "resnet20" and r.lr == 0.1 and r.batch == 16 and r.interval == 5:
            final[r.rho] = r.keep_plain[-1] * 0.5 + r.keep_residual[-1] * 0.5
    assert len(final) >= 2
    rhos = sorted(final)
    assert final[rhos[-1]] < 1.0                            # the lasso did zero channels
    assert final[rhos[-1]] <= final[rhos[0]]


def test_model_rho_direction_and_io_kept():
    w = load_workload("resnet50-imagenet")
    t20 = lasso_trajectory(w, 0.2, 5, 90, 256)
    t25 = lasso_trajectory(w, 0.25, 5, 90, 256)
    m20 = apply_widths(w, t20.widths_at(89)).macs()
    m25 = apply_widths(w, t25.widths_at(89)).macs()
    assert m25 < m20 < w.macs()
    last = t25.widths_at(89)
    assert last[w.layers[0].name][0] == 3 and last[w.layers[-1].name][1] == 1000
    # widths change only at reconfiguration epochs
    assert all(e % 5 == 0 for e, _ in t25.points)


@pytest.mark.slow   # one fit per rho value, ~20 s each on 2 cores
def test_leave_one_rho_out_runs():
    rows = leave_one_out(by="rho")
    assert len(rows) >= 2
    for r in rows:
        assert 0 <= r["rms"] < 0.5 and len(r["final_measured"]) == r["runs"]


def test_train_rho_changes_flops_batch_and_comm(capsys):
    from sim.cli import main
    out = {}
    for rho in ("0.2", "0.25"):
        assert main(["train", "--workload", "resnet20", "--cluster", "prunetrain-v100-128",
                     "--gpus", "16", "--epochs", "40", "--method", f"prunetrain:rho={rho}",
                     "--json"]) == 0
        out[rho] = json.loads(capsys.readouterr().out)["method"]
    assert out["0.25"]["flops"] < out["0.2"]["flops"]
    assert out["0.25"]["comm_bytes"] < out["0.2"]["comm_bytes"]


def test_train_wd_is_the_decay_of_the_trajectory(capsys):
    """prunetrain:wd sets the SGD weight decay the lasso model reads (default: the data set's,
    5e-4 on CIFAR): a smaller decay prunes less, so training costs more FLOPs and bytes; the
    default equals giving the authors' decay, and the label leaves the default out."""
    from sim.cli import main
    out = {}
    for spec in ("prunetrain:rho=0.25", "prunetrain:rho=0.25,wd=5e-4",
                 "prunetrain:rho=0.25,wd=1e-4"):
        assert main(["train", "--workload", "resnet20", "--cluster", "prunetrain-v100-128",
                     "--gpus", "16", "--epochs", "40", "--method", spec, "--json"]) == 0
        out[spec] = json.loads(capsys.readouterr().out)["method"]
    default, same, small = out.values()
    assert default["flops"] == same["flops"] and default["comm_bytes"] == same["comm_bytes"]
    assert small["flops"] > default["flops"] and small["comm_bytes"] > default["comm_bytes"]
    assert "wd" not in default["method"] and "wd=0.0001" in small["method"]
    assert "1e-4 (given)" in small["trajectory"] or "0.0001 (given)" in small["trajectory"]


@pytest.mark.parametrize("wd", ["0", "-1e-4", "0.5", "nan", "abc"])
def test_train_refuses_a_bad_wd_in_one_line(wd, capsys):
    from sim.cli import main
    rc = main(["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb", "--epochs", "2",
               "--method", f"prunetrain:wd={wd}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "wd" in err[0], err


def test_trajectory_file_with_rho_is_refused(tmp_path, capsys):
    from sim.cli import main
    f = tmp_path / "t.yaml"
    f.write_text("schema: 1\nworkload: resnet20\npoints: {0: {}}\n")
    rc = main(["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb", "--epochs", "2",
               "--method", "prunetrain:rho=0.3", "--trajectory", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "rho" in err[0]
    rc = main(["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb", "--epochs", "2",
               "--method", "prunetrain:wd=1e-4", "--trajectory", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "wd" in err[0]


def test_bundled_run_files_load_as_trajectories():
    from research.prunetrain.fitting import RUNS_DIR
    from sim.system.prunetrain import load_trajectory
    wls = {}
    for f in sorted(RUNS_DIR.glob("*.yaml"))[:4]:
        doc = _read_yaml(f)
        wl = wls.setdefault(doc["workload"], load_workload(doc["workload"]))
        t = load_trajectory(f, wl)
        assert t.points and all(e % doc["run"]["interval"] == 0 for e, _ in t.points)


def test_combination_equals_the_two_in_sequence(capsys):
    """prunetrain+sdgp-mag in train = SDGP run on the network PruneTrain narrowed, epoch by epoch,
    with the group-lasso kernels PruneTrain trains with in every step."""
    import argparse
    from sim.methods import parse_method
    from sim.system.cli import build_runs
    from sim.system.prunetrain import simulate_run
    args = argparse.Namespace(workload="resnet20", cluster="prunetrain-v100-128", hw=None, gpus=4,
                              method="prunetrain:rho=0.3,interval=5+sdgp-mag:nm=2:4",
                              trajectory=None, epochs=40, batch=None)
    w, cl, spec, run, dense = build_runs(args)
    assert run.method == "prunetrain:interval=5,rho=0.3+sdgp-mag:nm=2:4"
    traj = lasso_trajectory(w, 0.3, 5, 40, 128 * 4)
    sdgp = parse_method("sdgp-mag:nm=2:4")
    last = run.epochs[-1]
    narrowed = apply_widths(w, traj.widths_at(last.epoch))
    assert narrowed.macs() < w.macs()
    pt = parse_method("prunetrain:rho=0.3,interval=5")
    seq = simulate_run(narrowed, cl, sdgp, epochs=1, batch=last.batch, plan=pt)
    assert seq.epochs[0].iteration.seconds == pytest.approx(last.iteration.seconds, rel=1e-9)
    assert seq.epochs[0].comm_bytes == last.comm_bytes
    # the penalty's kernels: SDGP alone on the same network is faster by them
    alone = simulate_run(narrowed, cl, sdgp, epochs=1, batch=last.batch)
    assert alone.epochs[0].iteration.seconds < last.iteration.seconds
    pt_only = simulate_run(w, cl, parse_method("prunetrain:rho=0.3,interval=5"), epochs=40,
                           batch=128, trajectory=traj, dynamic_batch="device")
    assert run.train_seconds != pt_only.train_seconds        # SDGP did act


@pytest.mark.parametrize("spec,cmd", [("dbtd+sdgp-mag", "train"), ("prunetrain+prunetrain", "train"),
                                      ("dense+prunetrain", "train"), ("sdgp-mag+dbtd", "replay")])
def test_pairs_that_do_not_compose_are_refused(spec, cmd, capsys):
    from sim.cli import main
    argv = (["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb", "--epochs", "1"]
            if cmd == "train" else ["replay", "traces/sample-resnet20-mnist5k", "--hw",
                                    "a100-sxm4-40gb"])
    rc = main(argv + ["--method", spec])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("prunesim: error:")


def test_fit_recovers_known_parameters():
    from research.prunetrain.fitting import RunData, fit_runs
    from sim.system.prunetrain_model import Fit, KindFit
    truth = Fit(KindFit(1.5, 3.0, 2.0, 1.0, 0.0, 1.0, 1.0),
                KindFit(0.4, 3.0, 2.0, 2.0, 0.3, 1.0, 1.0), (), 0.0)
    runs = []
    for rho in (0.1, 0.2, 0.3):
        u = np.linspace(0, 12 * rho / 0.3, 60)      # clock with beta = 1: lrsteps * lam_n
        high = np.arange(60) < 40                   # lr decay at epoch 40
        runs.append(RunData(f"syn{rho}", "resnet20", rho, 5, u / rho, rho,
                            truth.keep(rho, u, False, high),
                            truth.keep(rho, u, True, high), 0.1, 16, high=high))
    f = fit_runs(runs)
    assert f.rms < 5e-3 and f.plain.beta == 1.0
    assert f.plain.a == pytest.approx(1.5, rel=0.1) and f.residual.a == pytest.approx(0.4, rel=0.1)
    assert f.plain.u_on == pytest.approx(3.0, abs=0.3)
    assert f.residual.shape == 2.0 and f.residual.hover == pytest.approx(0.3)


def test_schedules_follow_the_authors_configs():
    """imagenet_resnet50.yaml: lr 0.1 at batch 256, x0.1 from 1-based epochs 41, 61, 81 of 90;
    cifar_*.yaml: lr 0.1 at batch 128, x0.1 from epochs 91 and 136 of 182 (0-based 90, 135)."""
    s = default_schedule("imagenet", 90, 256, 1_281_167)
    assert [s.lr_at(e) for e in (39, 40, 59, 60, 79, 80)] == pytest.approx(
        [0.1, 0.01, 0.01, 0.001, 0.001, 0.0001])
    c = default_schedule("cifar10", 182, 256, 50_000)
    assert [c.lr_at(e) for e in (89, 90, 134, 135)] == pytest.approx([0.2, 0.02, 0.02, 0.002])


@pytest.mark.slow   # refits the research model (tens of seconds)
def test_networks_without_residual_nodes_do_not_enter_the_residual_fit():
    """A VGG run has no residual nodes: its constant 'residual keep' of 1 must not pull the
    residual fit (it once did: residual RMS 0.145 with them, 0.101 without, over 36 runs)."""
    from research.prunetrain.fitting import fit_runs
    runs = bundled_runs()
    res = [r for r in runs if r.has_residual and "e182" in r.name][:2]
    vgg = [r for r in runs if not r.has_residual]
    assert res and vgg and all(r.keep_residual.min() == 1.0 for r in vgg)
    with_vgg, without = fit_runs(res + vgg[:1]), fit_runs(res)
    assert with_vgg.residual == without.residual
    assert with_vgg.plain != without.plain          # VGG's plain spaces do count


def test_depth_scales_the_pruned_fraction_and_is_checked():
    """depth (the validation's error budget): 1 is the model, 0 prunes nothing, more prunes more;
    a non-finite or negative depth is refused naming the field."""
    from sim.errors import ConfigError
    w = load_workload("resnet32")
    macs = {d: apply_widths(w, lasso_trajectory(w, 0.25, 10, 182, 128, depth=d).widths_at(181))
            .macs() for d in (0.0, 1.0, 2.0)}
    assert lasso_trajectory(w, 0.25, 10, 182, 128, depth=1.0) == lasso_trajectory(w, 0.25, 10,
                                                                                    182, 128)
    assert macs[0.0] == w.macs() and macs[2.0] < macs[1.0] < w.macs()
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="depth"):
            lasso_trajectory(w, 0.25, 10, 182, 128, depth=bad)


def test_stored_fit_belongs_to_the_bundled_runs():
    """sim/data/prunetrain-fit.json records the digest of exactly the fitted run files (the
    runtime loads it without reading them): a run file changed without `--write-fit` fails here,
    fast."""
    import json
    from research.prunetrain.fitting import RUNS_DIR, runs_digest
    from sim.system.prunetrain_model import FIT_PATH, WRITE_FIT, bundled_fit
    doc = json.loads(FIT_PATH.read_text())
    assert doc["runs_digest"] == runs_digest(RUNS_DIR), f"run files changed: run `{WRITE_FIT}`"
    assert list(bundled_fit().runs) == doc["fit"]["runs"]
    assert len(doc["fit"]["runs"]) == len(bundled_runs())


def test_stored_fit_reproduces_its_errors_on_the_bundled_runs():
    """The fast part of the check below (which refits every run, 1.5-5 min on 2 cores, so it
    runs with `-m slow`): the stored parameters, put through the current model (KindFit.keep,
    read_run, spread_keep) over exactly the runs each kind is fitted to, give the RMS errors
    fit.json records, the kinds' (plain, residual, overall) and the spread's (tilt_rms): a change
    to the model or to how run files are read, made without `--write-fit`, fails here. A change
    to the search alone (grids, refinement) that moves the optimum is the slow test's to catch."""
    import math
    from research.prunetrain.fitting import (PLAIN_FROM_BASIC, _spread_rows, kind_runs, spread_runs,
                                             spread_sse)
    runs = bundled_runs()
    fit = bundled_fit()
    assert list(fit.runs) == [r.name for r in runs]
    plain_runs, with_res = kind_runs(runs, False), kind_runs(runs, True)
    for resid, rs, attr in ((False, plain_runs, "keep_plain"), (True, with_res, "keep_residual")):
        kf = fit.kind(resid)
        err = np.concatenate([fit.keep_run(r, resid) - getattr(r, attr) for r in rs])
        assert math.sqrt(np.mean(err ** 2)) == pytest.approx(kf.rms, rel=1e-11), attr
    # fit_spread's objective at the stored spreads: every 5th epoch of every space, each run's
    # own channel-weighted mean spread over its spaces; a ResNet's plain spaces, a chain's (VGG)
    # and the residual nodes each with their own
    inner, chains = spread_runs(plain_runs)
    assert fit.chain is not None and chains and inner
    for kf, data, second in ((fit.plain, [r.plain_spaces for r in inner], "block"),
                             (fit.chain, [r.plain_spaces for r in chains], "last"),
                             (fit.residual, [r.residual_spaces for r in with_res], None)):
        sse, n = spread_sse(_spread_rows(data, second), kf.tilt,
                            kf.block if second == "block" else kf.last, kf.stem)
        assert n and math.sqrt(sse / n) == pytest.approx(kf.tilt_rms, rel=1e-11), second
    # the chain shares the plain kind's level; residual nodes have no stem term (stem_spaces)
    spread = ("tilt", "block", "last", "stem", "tilt_rms")
    assert {k: v for k, v in vars(fit.chain).items() if k not in spread} == \
        {k: v for k, v in vars(fit.plain).items() if k not in spread}
    assert fit.residual.stem == 0.0
    assert fit.rms == pytest.approx(math.sqrt((fit.plain.rms ** 2 + fit.residual.rms ** 2) / 2),
                                    rel=1e-12)
    # the terms no run above can inform are the fit's fixed values: no later-block exponent for
    # residual nodes (fit_spread(blocks=False)); no expansion terms for the plain kind (its runs
    # are basic-block and VGG runs, E = 1)
    assert fit.residual.block == 0.0
    assert not PLAIN_FROM_BASIC or fit.plain.xi == fit.plain.xi_clock == 0.0


@pytest.mark.slow   # refits every bundled run (1.5-5 min on 2 cores); the default run keeps the
#                     digest check and test_stored_fit_reproduces_its_errors_on_the_bundled_runs
def test_stored_fit_is_the_fit_of_the_bundled_runs():
    """sim/data/prunetrain-fit.json (what `prunesim train` loads) is exactly fit_runs over the
    fitted run files; a run file changed without `python -m research.prunetrain.grids
    --write-fit` fails."""
    import dataclasses
    import json
    from research.prunetrain.fitting import RUNS_DIR, fit_runs, runs_digest
    from sim.system.prunetrain_model import FIT_PATH
    doc = json.loads(FIT_PATH.read_text())
    assert doc["runs_digest"] == runs_digest(RUNS_DIR), "run files changed: rerun --write-fit"
    fresh = fit_runs(bundled_runs())
    assert doc["fit"]["runs"] == list(fresh.runs)
    for kind in ("plain", "residual", "chain"):
        want = dataclasses.asdict(getattr(fresh, kind))
        assert doc["fit"][kind] == pytest.approx(want, rel=1e-12), kind


def test_data_difficulty_is_measured_and_noise_raises_it():
    """Every run records D (training CE in the high-lr phase / ln classes); the pixel-noise runs
    have a larger D than the clean run of the same configuration (the dial works). D is reported,
    not a model input (docs/explanation/system.md says why)."""
    runs = {r.noise: r for r in bundled_runs() if r.workload == "resnet20" and r.rho == 0.25
            and r.interval == 10 and len(r.keep_plain) > 100}
    assert {0.0, 1.0, 2.0} <= set(runs)
    assert runs[0.0].difficulty < runs[1.0].difficulty < runs[2.0].difficulty


def test_spread_keeps_the_kind_mean_and_prunes_the_deep_spaces_hardest():
    """keep_s = K^(m e^(t z_s)): one m per K (log keep_s / e^(t z_s) is the same for every space),
    the channel-weighted mean is K, deeper spaces keep less; t = 0, K = 0 and K = 1 are uniform."""
    from sim.system.prunetrain_model import spread_keep
    rng = np.random.default_rng(3)
    c = rng.integers(8, 600, 9).astype(float)
    z = np.sort(rng.random(9))
    z[0], z[-1] = 0.0, 1.0
    k = np.array([1e-4, 0.05, 0.3, 0.5, 0.9, 0.999])
    for t in (0.5, 2.5, 6.0):
        out = spread_keep(k, c, t * z)
        assert (out * c).sum(axis=1) / c.sum() == pytest.approx(k, rel=1e-9)
        m = np.log(out[1:]) / np.exp(t * z)      # K = 1e-4 underflows the deepest spaces
        assert m == pytest.approx(np.repeat(m[:, :1], len(c), axis=1), rel=1e-9)
        assert (np.diff(out, axis=1) <= 1e-12).all() and (out[:, 0] > out[:, -1]).all()
    assert spread_keep(k, c, 0.0 * z) == pytest.approx(np.repeat(k[:, None], len(c), axis=1))
    assert spread_keep([0.0, 1.0], c, 2.5 * z) == pytest.approx(
        np.array([[0.0] * 9, [1.0] * 9]))


def test_classifier_floor_is_the_class_count_on_the_last_stage_main_path():
    """VGG: both 2 x 2 spaces; a ResNet: only its last residual node (the blocks' inner spaces
    can fade out behind the shortcut); never more than the space's channels."""
    from sim.workload import with_classes
    from sim.system.prunetrain_model import classifier_floor
    from sim.workload import load_workload
    assert classifier_floor(load_workload("vgg11-cifar"), 10) == {"features.22": 10,
                                                                  "features.25": 10}
    assert classifier_floor(with_classes(load_workload("vgg13-cifar"), 100), 100) == {
        "features.28": 100, "features.31": 100}
    assert classifier_floor(with_classes(load_workload("resnet32"), 100), 100) == {
        "layer3.4.conv2": 64}
    # no terminal phase on ImageNet's schedule: no floor (NOT_INTERPOLATED)
    assert classifier_floor(load_workload("resnet50-imagenet"), 1000) == {}
    assert classifier_floor(load_workload("mobilenet-imagenet"), 1000) == {}
    # token-wise spaces share one "map size": no stage to find, no floor
    assert classifier_floor(load_workload("gpt2-small"), 50257) == {}


def test_every_authors_imagenet_network_ends_below_the_class_count_at_the_classifier():
    """The data behind NOT_INTERPOLATED: each of the authors' final ImageNet networks (ResNet-50
    and MobileNet, research/prunetrain/data/authors) feeds its 1000-way classifier fewer than 1000
    channels, where their CIFAR-100 VGG-11 keeps more than its 100 classes."""
    from analysis.validation import AUTHORS_DIR, _authors_setting
    from sim.system.prunetrain import load_trajectory
    seen = {}
    for f in sorted(AUTHORS_DIR.glob("*.yaml")):
        w, classes, *_ = _authors_setting(f)
        seen[f.stem] = (load_trajectory(f, w).widths_at(0)[w.layers[-1].name][0], classes)
    imagenet = {k: c for k, (c, n) in seen.items() if n == 1000}
    assert len(imagenet) == 5 and all(c < 1000 for c in imagenet.values()), imagenet
    assert seen["vgg11-cifar100-rho0.3"][0] >= 100


def test_spread_floor_raises_only_the_floored_spaces():
    """The floor is added after the spread: the other spaces keep what they kept without it, a
    floored space keeps max(floor, its spread keep), K = 0 leaves the floors."""
    from sim.system.prunetrain_model import spread_keep
    c = np.array([64.0, 128.0, 256.0, 512.0, 512.0])
    z = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    fl = np.array([0.0, 0.0, 0.0, 0.0, 100 / 512])
    k = np.array([0.0, 0.1, 0.3, 0.6, 1.0])
    bare, floored = spread_keep(k, c, 0.5 * z), spread_keep(k, c, 0.5 * z, fl)
    assert floored[:, :4] == pytest.approx(bare[:, :4], rel=1e-12)
    assert floored[:, 4] == pytest.approx(np.maximum(bare[:, 4], 100 / 512), rel=1e-12)
    assert floored[0] == pytest.approx(fl) and (bare[1:4, 4] < 100 / 512).any()
    assert spread_keep(k, c, 0.0 * z, fl)[:, 4] == pytest.approx(np.maximum(k, 100 / 512))


def test_model_keeps_the_class_count_at_the_classifier_input():
    """CIFAR-100 VGG-11 at a rho that prunes hard keeps >= 100 channels on both 2 x 2 spaces and
    more channels there than without the floor; CIFAR-10 keeps >= 10 there."""
    from sim.workload import with_classes
    from sim.system import prunetrain_model as lm
    from sim.workload import load_workload
    sched = lm.default_schedule("cifar100", 182, 128, 50_000)
    for classes in (10, 100):
        w = with_classes(load_workload("vgg11-cifar"), classes)
        tr = lm.model_trajectory(w, 0.6, 10, sched)
        last = tr.widths_at(181)
        assert last["features.25"][1] >= classes and last["classifier"][0] >= classes
        assert last["features.22"][1] >= classes
    orig = lm.classifier_floor
    try:
        lm.classifier_floor = lambda w, c: {}
        bare = lm.model_trajectory(w, 0.6, 10, sched).widths_at(181)
    finally:
        lm.classifier_floor = orig
    assert bare["classifier"][0] < 100 <= last["classifier"][0]


def test_map_depth_runs_from_the_largest_to_the_smallest_maps():
    from sim.system.prunetrain_model import _kinds, map_depth
    # halvings of the map side: 32 / 16 / 8 and 56 / 28 / 14 / 7
    for name, want in (("resnet20", [0.0, 1.0, 2.0]), ("resnet50-imagenet", [0, 1, 2, 3])):
        w = load_workload(name)
        _, res = _kinds(w)
        assert sorted(set(np.round(map_depth(w, res), 9))) == pytest.approx(want)
    w = load_workload("resnet20")
    plain, res = _kinds(w)
    assert map_depth(w, res[:1]) == pytest.approx([0.0])


@pytest.mark.slow   # refits the research model (tens of seconds)
def test_one_tilt_per_halving_fits_vgg_and_resnet_runs_alike():
    """The depth measure is decided by the runs: with z in halvings of the map side, the bundled
    VGG runs (32 -> 2: 4 halvings) and ResNet runs (2 halvings) give the same tilt within one
    grid step; normalised to a share of the network (z / z.max()) they would not."""
    from research.prunetrain.fitting import TILTS, fit_spread
    runs = bundled_runs()
    vgg = [r.plain_spaces for r in runs if not r.has_residual]
    res = [r.plain_spaces for r in runs if r.has_residual]
    assert vgg and res
    step = TILTS[1] - TILTS[0]
    assert max(d.z.max() for d in vgg) == pytest.approx(4.0)
    assert abs(fit_spread(vgg, blocks=True)[0] - fit_spread(res, blocks=True)[0]) <= step + 1e-9
    share = lambda ds: [dataclasses.replace(d, z=d.z / d.z.max()) for d in ds]  # noqa: E731
    assert abs(fit_spread(share(vgg), blocks=True)[0]
               - fit_spread(share(res), blocks=True)[0]) > 2 * step


def test_fit_spread_recovers_a_known_tilt_and_block_exponent():
    from research.prunetrain.fitting import SpaceData, fit_spread
    from sim.system.prunetrain_model import spread_keep
    c = np.array([16.0, 16.0, 32.0, 32.0, 64.0, 64.0])
    z = np.array([0.0, 0.0, 0.5, 0.5, 1.0, 1.0])
    later = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    data = []
    for end in (0.2, 0.4, 0.7):
        k = np.linspace(1.0, end, 40)
        data.append(SpaceData(c, z, spread_keep(k, c, 3.0 * z + 1.25 * later), later))
    t, b, rms = fit_spread(data, blocks=True)
    assert (t, b) == pytest.approx((3.0, 1.25)) and rms < 1e-9
    t, b, rms = fit_spread(data, blocks=False)
    assert b == 0.0 and rms > 0.01


def test_later_blocks_mark_all_but_the_first_block_of_a_stage():
    from sim.system.prunetrain_model import _kinds, later_blocks
    w = load_workload("resnet20")
    plain, res = _kinds(w)
    flags = dict(zip(plain, later_blocks(w, plain, res)))
    assert flags["layer1.0.conv1"] == flags["layer2.0.conv1"] == flags["layer3.0.conv1"] == 0.0
    assert flags["layer1.1.conv1"] == flags["layer2.2.conv1"] == flags["layer3.1.conv1"] == 1.0
    w = load_workload("vgg11-cifar")
    plain, res = _kinds(w)
    assert not later_blocks(w, plain, res).any()


def test_bundled_runs_prune_their_deep_residual_nodes_hardest():
    """What the tilt is fitted to, checked on the data: given each run's own mean, spreading it
    by depth explains the residual nodes' kept fractions better than a uniform keep, and the
    model's trajectories keep more of the first stage's residual node than of the last's."""
    from research.prunetrain.fitting import fit_spread
    from sim.system.prunetrain_model import _kinds, spread_keep
    runs = [r for r in bundled_runs() if r.has_residual]
    data = [r.residual_spaces for r in runs]
    t, _, rms = fit_spread(data, blocks=False)
    uni = np.sqrt(np.mean(np.concatenate([
        (spread_keep((d.keep * d.c).sum(1) / d.c.sum(), d.c, 0.0 * d.z) - d.keep)[4::5].ravel()
        for d in data]) ** 2))
    assert t > 0 and rms < 0.6 * uni
    assert bundled_fit().residual.tilt == pytest.approx(t)
    w = load_workload("resnet32")
    _, res = _kinds(w)
    last = model_trajectory(w, 0.25, 10, default_schedule("cifar10", 182, 128, 50_000))
    widths = last.widths_at(181)
    first_node = {l.name: l for l in w.layers}
    keep = {}
    for l in w.layers:
        if l.residual_node and l.name in widths:
            keep[l.residual_node] = widths[l.name][1] / first_node[l.name].c_out
    assert keep[res[0]] > keep[res[-1]]


def test_a_larger_weight_decay_prunes_deeper_and_the_model_takes_the_decay():
    """The ResNet-20 CIFAR-10 run at the authors' CIFAR decay 5e-4 ends far below its 1e-4 twin;
    the fit turns that into a decay term for both kinds (omega on the level, omega_clock on the
    clock; the plain kind takes it in the clock alone), the model with the
    runs' own inputs orders the twins the same way, and a CIFAR prediction (default_schedule:
    the authors' 5e-4) keeps fewer channels than the same prediction at 1e-4."""
    import dataclasses
    from sim.system.prunetrain_model import REF_WEIGHT_DECAY
    runs = {r.name: r for r in bundled_runs()}
    twin = runs["resnet20-cifar10-16-rho0.25-i10-e182-b32-lr0.2-s196-fixedb-aug2-flip-hefanout"]
    wd = runs[twin.name + "-wd0.0005"]
    assert wd.decay == pytest.approx(5.0) and twin.decay == 1.0
    assert wd.keep_plain[-1] < 0.5 * twin.keep_plain[-1]
    assert wd.keep_residual[-1] < 0.5 * twin.keep_residual[-1]
    f = bundled_fit()
    assert f.residual.omega > 0 and wd.name in f.runs
    assert f.plain.omega > 0 or f.plain.omega_clock > 0
    for resid in (False, True):
        assert f.keep_run(wd, resid)[-1] < f.keep_run(twin, resid)[-1]
    w = load_workload("resnet32")
    sched = default_schedule("cifar10", 182, 128, 50_000)
    assert sched.weight_decay == 5e-4
    assert default_schedule("imagenet", 90, 256, 1_281_167).weight_decay == REF_WEIGHT_DECAY
    macs = [apply_widths(w, model_trajectory(w, 0.2, 10, s).widths_at(181)).macs()
            for s in (sched, dataclasses.replace(sched, weight_decay=REF_WEIGHT_DECAY))]
    assert macs[0] < macs[1]


def test_attention_workloads_are_refused_naming_the_layer():
    """PruneTrain's groups are conv and FC channels: a ViT's attention matmuls have none, so a
    trajectory for it is refused with the file and the layer (it once raised a KeyError)."""
    from sim.errors import ConfigError
    w = load_workload("vit-tiny")
    with pytest.raises(ConfigError, match=r"layer blocks\.0\.attn\.scores.*matmul"):
        model_trajectory(w, 0.25, 10, default_schedule("cifar10", 40, 128, 50_000))


def test_fewer_distinctions_prune_deeper_and_the_model_takes_the_label_count():
    """The coarse run (CIFAR-10's two super-classes, same images, same lambda) ends far below its
    ten-class twin; the fit turns that into kappa > 0, and the model keeps more of a network
    trained on more classes."""
    from sim.system.prunetrain_model import task_information
    runs = {r.name: r for r in bundled_runs()}
    twin = "resnet20-cifar10-16-rho0.25-i10-e182-b32-lr0.2-s196-fixedb-aug2-flip-hefanout"
    coarse = [r for r in runs.values() if r.coarse]
    assert coarse and coarse[0].classes == 2 and coarse[0].name in bundled_fit().runs
    assert coarse[0].keep_plain[-1] < 0.5 * runs[twin].keep_plain[-1]
    assert coarse[0].keep_residual[-1] < 0.5 * runs[twin].keep_residual[-1]
    assert task_information(10) == pytest.approx(1.0) and task_information(2) < 0.31
    fit = bundled_fit()
    assert fit.plain.kappa > 0 and fit.residual.kappa > 0
    sched = default_schedule("cifar10", 182, 128, 50_000)
    w10 = load_workload("resnet32")
    from sim.workload import with_classes
    w100 = with_classes(w10, 100)
    macs = [apply_widths(w, model_trajectory(w, 0.2, 10, sched).widths_at(181)).macs() / w.macs()
            for w in (w10, w100)]
    assert macs[1] > macs[0]


def test_twenty_classes_did_not_keep_more_than_their_folded_control():
    """Beyond ten classes the label count's direction reverses in our runs: the 20-class union
    run (CIFAR-10 + Fashion-MNIST) keeps fewer plain and residual channels than the same images
    with the labels folded to 10, and it fits its data relatively better (lower D, training CE
    over ln classes). Both runs are in the fit, which held kappa below the coarse pair's alone."""
    runs = {r.name: r for r in bundled_runs()}
    tail = "rho0.25-i10-e182-b32-lr0.2-s196-fixedb-aug2-flip"
    twenty = runs[f"resnet20-c20-cifar10fashion16-{tail}-hefanout"]
    folded = runs[f"resnet20-cifar10fashion16-{tail}-fold10-hefanout"]
    assert (twenty.classes, folded.classes) == (20, 10)
    assert twenty.keep_plain[-1] < folded.keep_plain[-1]
    assert twenty.keep_residual[-1] < folded.keep_residual[-1] - 0.05
    assert twenty.difficulty < folded.difficulty
    # the same run at seed 1 (held out, not fitted): the gap is not one run's noise
    from research.prunetrain.fitting import HELD_OUT_DIR, read_run
    again = read_run(HELD_OUT_DIR / f"resnet20-c20-cifar10fashion16-{tail}-hefanout-seed1.yaml")
    assert abs(again.keep_residual[-1] - twenty.keep_residual[-1]) < 0.05
    assert again.keep_residual[-1] < folded.keep_residual[-1] - 0.05
    assert again.keep_plain[-1] < folded.keep_plain[-1]
    # ... and the pair at rho 0.1 (held out, stopped after the lr decay)
    low = [read_run(HELD_OUT_DIR / f"resnet20-{n}-rho0.1-i10-e182-b32-lr0.2-s196-fixedb"
                    f"-aug2-flip{s}-hefanout.yaml")
           for n, s in (("c20-cifar10fashion16", ""), ("cifar10fashion16", "-fold10"))]
    assert low[0].keep_plain[-1] < low[1].keep_plain[-1] - 0.05
    assert low[0].keep_residual[-1] < low[1].keep_residual[-1]
    fit = bundled_fit()
    assert {twenty.name, folded.name} <= set(fit.runs)
    assert fit.residual.kappa < max(KAPPAS)


def test_predictions_are_at_the_papers_per_sample_lr():
    """eta only corrects runs made at another per-sample lr: a CIFAR prediction (default_schedule,
    the paper's lr per image) is the same for any eta, while the natural-image level nu moves
    it (more channels kept for a larger nu)."""
    import dataclasses
    f = bundled_fit()
    w = load_workload("resnet32")
    sched = default_schedule("cifar10", 182, 128, 50_000)

    def shifted(**d):
        kinds = {k: dataclasses.replace(getattr(f, k), **{n: getattr(getattr(f, k), n) + v
                                                          for n, v in d.items()})
                 for k in ("plain", "residual")}
        return dataclasses.replace(f, **kinds)

    def macs(fit):
        return apply_widths(w, model_trajectory(w, 0.2, 10, sched, fit).widths_at(181)).macs()
    assert macs(shifted(eta=1.0)) == macs(f)
    assert macs(shifted(nu=1.0)) > macs(f)


def test_the_paper_per_sample_lr_keeps_more_on_cifar_and_the_fit_says_so():
    """The same ResNet-20 CIFAR-10 run at the paper's per-sample lr (batch 512, lr 0.4) ends with
    more channels than at 8x it (batch 32, lr 0.2; both at the paper's lr x steps): the fit's
    temperature exponent is > 0 for both kinds, and the model with the run's own inputs orders
    the two runs the same way."""
    runs = {r.name: r for r in bundled_runs()}
    tail = "-fixedb-aug2-flip-hefanout"
    hot = runs["resnet20-cifar10-16-rho0.25-i10-e182-b32-lr0.2-s196" + tail]
    cool = runs["resnet20-cifar10-16-rho0.25-i10-e182-b512-lr0.4-s98" + tail]
    assert hot.temperature == pytest.approx(8.0) and cool.temperature == pytest.approx(1.0)
    assert cool.keep_plain[-1] > 1.5 * hot.keep_plain[-1]
    assert cool.keep_residual[-1] > hot.keep_residual[-1]
    f = bundled_fit()
    assert f.plain.eta > 0 and f.residual.eta > 0
    for resid in (False, True):
        assert f.keep_run(cool, resid)[-1] > f.keep_run(hot, resid)[-1]


@pytest.mark.slow   # one fit without the natural-image runs at the paper's per-sample lr
def test_the_paper_per_sample_lr_runs_held_out():
    """Fitted without the CIFAR-10 run(s) at the paper's per-sample lr, the model still keeps
    more of them than of their 8x twin at the same weight decay (the temperature term comes from
    the 4x / 8x runs alone)."""
    from research.prunetrain.fitting import leave_paper_psl_out
    row = leave_paper_psl_out()
    assert row and row["runs"] >= 1 and 0 <= row["rms"] < 0.5
    hot = [r for r in bundled_runs() if r.natural and r.temperature == 8.0 and not r.coarse
           and r.rho == 0.25 and r.init_scale > 1 and r.decay == 1.0]
    decay = {r.name: r.decay for r in bundled_runs()}
    cool = [p for n, p in zip(row["names"], row["final_predicted"]) if decay[n] == 1.0]
    assert hot and cool and min(cool) > hot[0].keep_plain[-1]


@pytest.mark.slow   # one fit without the CIFAR-10 run(s) at 1x and the authors' decay
def test_the_paper_decay_runs_held_out():
    """Fitted without the CIFAR-10 run(s) at the paper's per-sample lr and the authors' decay 5e-4
    (the decay terms then come from the 8x twins alone), the model keeps fewer of their channels
    than of their 1e-4 twin at the paper's setting, as the runs do."""
    from research.prunetrain.fitting import leave_paper_decay_out
    row = leave_paper_decay_out()
    assert row and row["runs"] >= 1 and 0 <= row["rms"] < 0.5
    runs = {r.name: r for r in bundled_runs()}
    twin = runs["resnet20-cifar10-16-rho0.25-i10-e182-b128-lr0.1-s391-fixedb-aug2-flip-hefanout"]
    for name, pred in zip(row["names"], row["final_predicted"]):
        n = len(runs[name].keep_plain)
        assert runs[name].keep_plain[-1] < twin.keep_plain[n - 1]
        assert pred < twin.keep_plain[n - 1]


def test_bottleneck_nodes_prune_deeper_and_their_blocks_less_than_basic_blocks():
    """The bottleneck ResNet-29 runs (residual nodes 4x the blocks' width, as in ResNet-50; the
    narrow form on CPU, the 4x-wide form with ResNet-50's inner widths on an H200) against their
    ResNet-20 twins (same data, schedule, init and rho), at the same epoch: the nodes keep fewer
    channels and the spaces inside the blocks more, at both widths, so the expansion E and not
    the narrow form's small inner convs is behind it. The residual kind's E terms take the runs'
    direction (more pressure on the nodes); the plain kind has none (docs/explanation/system.md)."""
    runs = {r.name: r for r in bundled_runs()}
    fit = bundled_fit()
    for rho in ("0.25", "0.1"):
        tail = f"cifar10-16-rho{rho}-i10-e182-b32-lr0.2-s196-fixedb-aug2-flip-hefanout"
        t = runs[f"resnet20-{tail}"]
        for net in ("resnet29-bottleneck", "resnet29-bottleneck-w4"):
            b = runs[f"{net}-{tail}"]
            assert (b.expansion, t.expansion) == (4.0, 1.0)
            e = len(b.keep_plain) - 1
            assert b.keep_residual[e] < t.keep_residual[e] - 0.1, (net, rho)
            assert b.keep_plain[e] > t.keep_plain[e] + 0.05, (net, rho)
            # a basic block's nodes keep 1.3-3x its plain spaces' share; a bottleneck's at most 1.2x
            assert b.keep_residual[e] < 1.2 * b.keep_plain[e] and \
                t.keep_residual[e] > 1.3 * t.keep_plain[e], (net, rho)
    # the residual kind carries E; the plain kind is fitted to basic-block and VGG runs only
    from research.prunetrain.fitting import PLAIN_FROM_BASIC
    assert fit.residual.xi > 0.0 and PLAIN_FROM_BASIC and fit.plain.xi == fit.plain.xi_clock == 0.0
    b = runs["resnet29-bottleneck-w4-cifar10-16-rho0.25-i10-e182-b32-lr0.2-s196-fixedb-aug2-flip-"
             "hefanout"]
    # the model's known miss: a bottleneck's inner spaces kept more than predicted (0.45 against
    # 0.41 with the threshold's drift; 0.34 with the pressure threshold alone; 0.17 without
    # either)
    assert b.keep_plain[-1] - 0.1 < fit.keep_run(b, False)[-1] < b.keep_plain[-1]


@pytest.mark.slow
def test_expansion_learnt_at_one_width_predicts_the_other():
    """Cross-width check of the residual kind's E terms (~15 min): a fit that has only the narrow
    bottleneck runs predicts the 4x-wide runs' residual nodes far better than a fit with no
    bottleneck run (no E); the other way round only a little better (residual RMS
    0.172 against 0.179; the wide runs alone want residual xi 1.0, the narrow 0.25)."""
    from research.prunetrain.fitting import fit_runs
    runs = bundled_runs()
    base = [r for r in runs if r.expansion == 1.0]
    narrow = [r for r in runs if r.workload == "resnet29-bottleneck"]
    wide = [r for r in runs if r.workload == "resnet29-bottleneck-w4"]
    assert len(narrow) == len(wide) == 2

    def rms(f, test):
        return float(np.sqrt(np.mean(np.concatenate(
            [f.keep_run(r, True) - r.keep_residual for r in test]) ** 2)))

    no_e = fit_runs(base, spread=False)
    for train, test, factor in ((narrow, wide, 0.8), (wide, narrow, 1.0)):
        assert rms(fit_runs(base + train, spread=False), test) < factor * rms(no_e, test)


def test_stages_count_a_resnets_feature_map_sizes():
    runs = bundled_runs()
    from research.prunetrain.fitting import stages
    by = {r.workload: stages(r) for r in runs}
    assert by["resnet20"] == by["resnet29-bottleneck-w4"] == 3
    assert by["resnet50-cifar-gap"] == 4
    assert by["vgg11-cifar"] == 0      # no residual nodes: no stages to count


def test_stage_spread_is_the_runs_own_keep_per_stage_and_the_spread_of_its_mean():
    """stage_spread's measured side is the run's channel-weighted keep per feature-map size (its
    mean over the stages is the kind's keep); with no tilt and no block or floor term the spread
    gives every stage the run's mean, and the fitted tilt gives the deeper stages less."""
    import dataclasses
    from research.prunetrain.fitting import stage_spread, stages
    r = next(r for r in bundled_runs() if stages(r) == 4 and r.rho == 0.25)
    fit = bundled_fit()
    got = stage_spread(r, fit)
    for kind, mean, d in (("plain", r.keep_plain[-1], r.plain_spaces),
                          ("residual", r.keep_residual[-1], r.residual_spaces)):
        zs, meas, pred = map(np.array, zip(*got[kind]))
        assert list(zs) == [0, 1, 2, 3]
        w = np.array([d.c[d.z == z].sum() for z in zs])
        assert (w * meas).sum() / w.sum() == pytest.approx(mean, abs=1e-9)
        assert np.all(np.diff(pred) < 0)     # the tilt: deeper stages keep less
    flat = dataclasses.replace(fit, plain=dataclasses.replace(fit.plain, tilt=0.0, block=0.0),
                               residual=dataclasses.replace(fit.residual, tilt=0.0))
    _, _, pred = zip(*stage_spread(r, flat)["plain"])
    assert np.allclose(pred, r.keep_plain[-1])


@pytest.mark.slow
def test_four_stage_runs_held_out():
    """The four-stage ResNet-50 runs: a fit without them (~70 s) predicts their residual nodes'
    level within 0.1 (E and the clock carry from three stages to four)."""
    from research.prunetrain.fitting import leave_four_stage_out
    row = leave_four_stage_out()
    assert row["runs"] == 3 and all("resnet50" in n for n in row["names"])
    assert np.allclose(row["final_measured_residual"], row["final_predicted_residual"], atol=0.1)


def test_four_stage_stage_rows():
    """The validation's per-stage rows hold each stage's measured keep of the four-stage run
    against the fitted spread, with the authors' ImageNet network's stage in the note."""
    from analysis.validation import _c_stage_spread_rows
    from research.prunetrain.fitting import stages
    rows = list(_c_stage_spread_rows())
    assert len(rows) == 8 and all(r.status == "input" and 0 <= r.modeled <= 1 for r in rows)
    r = next(r for r in bundled_runs() if stages(r) == 4 and r.rho == 0.25)
    assert rows[3].published == pytest.approx(r.residual_spaces.keep[-1][-1], abs=1e-3)
    assert all("resnet50_flat_02" in r.note for r in rows)


def test_stem_spaces_mark_the_plain_space_the_first_conv_writes():
    from sim.system.prunetrain_model import _kinds, stem_spaces
    for name, expect in (("vgg11-cifar", "features.0"), ("resnet29-bottleneck", "conv1"),
                         ("resnet20", None)):
        w = load_workload(name)
        plain, _ = _kinds(w)
        st = stem_spaces(w, plain)
        assert [s for s, x in zip(plain, st) if x] == ([expect] if expect else []), name


def test_fit_stem_recovers_a_known_stem_exponent_and_lowers_the_first_space():
    """Kept fractions made by spread_keep with a stem exponent of 1: fit_stem (the tilt given)
    finds 1, and the stem space keeps less than without the term at the same mean."""
    from research.prunetrain.fitting import SpaceData, fit_stem, STEM_TILTS
    from sim.system.prunetrain_model import KindFit, spread_keep, spread_score
    c = np.array([64, 128, 256, 256, 512], float)
    z = np.array([0, 1, 2, 2, 3], float)
    stem = np.array([1, 0, 0, 0, 0], float)
    kf = KindFit(a=1.0, u_on=0.0, u_scale=1.0, tilt=0.25, stem=1.0)
    means = np.linspace(0.95, 0.3, 30)
    keep = spread_keep(means, c, spread_score(kf, z, stem=stem))
    d = SpaceData(c, z, keep, stem=stem)
    u, rms = fit_stem([d, d], 0.25, 0.0, blocks=False)
    assert 1.0 in STEM_TILTS and u == pytest.approx(1.0) and rms < 1e-6
    flat = spread_keep(0.5, c, spread_score(KindFit(a=1.0, u_on=0.0, u_scale=1.0, tilt=0.25), z))
    assert spread_keep(0.5, c, spread_score(kf, z, stem=stem))[0, 0] < flat[0, 0]
    # no stem space among the runs: no term
    assert fit_stem([SpaceData(c, z, keep)], 0.25, 0.0, blocks=False)[0] == 0.0


def test_check_prints_a_run_against_the_fit_and_refuses_a_missing_file(capsys):
    """`python -m research.prunetrain.grids --check`: a fitted run is reported as in the fit, with
    its kept fractions, the per-depth spread and the dead-space expectation; a missing file is a
    one-line error (exit 2), not a traceback."""
    from pathlib import Path
    from research.prunetrain import grids as pr
    from research.prunetrain.fitting import RUNS_DIR
    root = Path(__file__).resolve().parents[1]
    run = sorted(RUNS_DIR.glob("resnet20-cifar10-16-rho0.2-*.yaml"))[0]
    assert pr.main(["--check", str(run)]) == 0
    out = capsys.readouterr().out
    assert "(in the fit)" in out and "residual nodes" in out and "dead inner spaces" in out
    assert pr.main(["--check", str(root / "no-such-run.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no-such-run.yaml" in err and "Traceback" not in err


def _bottleneck_tool():
    from research.prunetrain import bottleneck_plain_check
    return bottleneck_plain_check


def _authors_r50_runs():
    """The authors' CIFAR ResNet-50 runs (Table 1's network; held-out/cpu-authors-r50: held out
    of every fit)."""
    from research.prunetrain.fitting import HELD_OUT_DIR, read_run
    runs = [read_run(p) for p in sorted(HELD_OUT_DIR.glob("**/resnet50-bt-cifar-cifar10-16-*"))]
    assert runs and not {r.name for r in runs} & set(bundled_fit().runs)
    return runs


def test_an_expansion_term_learnt_elsewhere_does_not_carry_to_every_family():
    """Why the plain kind has no expansion term (PLAIN_FROM_BASIC): learnt from the other
    bottleneck families (research.prunetrain.bottleneck_plain_check), it helps some held-out
    families and badly misses another. With the capped clock the four-stage ResNet-50 runs are
    predicted within 0.03 without it and 4x worse with it (with an uncapped clock it was Table 1's
    own ResNet-50 that it missed)."""
    tool = _bottleneck_tool()
    fit = bundled_fit()
    bott = [r for r in bundled_runs() if r.expansion != 1.0] + _authors_r50_runs()
    worse = {}
    for fam in tool.FAMILIES:
        test = [r for r in bott if r.name.startswith(fam)]
        train = [r for r in bott if not r.name.startswith(fam)]
        xi, xc = tool._best(fit, train, tool.XIS)
        worse[fam] = tool._rms(tool._with(fit, xi, xc), test) - tool._rms(fit, test)
    assert max(worse.values()) > 0.05 and min(worse.values()) < 0.0, worse


def test_the_capped_clock_slows_the_weak_doses_and_keeps_the_strong_runs_clock():
    """The plain kind's clock below a lambda / n0 cap (fit_clock_cap, searched jointly with the
    level): every level run at or above the cap keeps its clock of lr-weighted steps, the weak
    ones below it are slowed, the bottleneck runs below it start later, and Table 1's own
    ResNet-50, held out of every fit, is predicted better than by the uncapped clock."""
    from research.prunetrain.fitting import course_rms, kind_runs
    from sim.system.prunetrain_model import clock_factor
    fit = bundled_fit()
    k = fit.plain
    assert k.cap > 0 and k.beta > 0
    level = kind_runs(bundled_runs(), False)
    assert all(np.array_equal(r.u(k.beta, k.cap), r.lrsteps) for r in level if r.lam_n >= k.cap)
    weak = [r for r in level if r.lam_n < k.cap]
    assert weak and all((r.u(k.beta, k.cap) < r.lrsteps)[1:].all() for r in weak)
    assert clock_factor(k.cap / 4, k.beta, k.cap) == pytest.approx(0.25 ** k.beta)
    assert clock_factor(2e-4, 0.5) == pytest.approx(2e-4 ** 0.5)       # no cap: (lambda/n0)^beta
    unc = dataclasses.replace(k, beta=0.0, cap=0.0)
    authors = _authors_r50_runs()

    def rms(kf):
        f = dataclasses.replace(fit, plain=kf)
        err = np.concatenate([f.keep_run(r, False) - r.keep_plain for r in authors])
        return float(np.sqrt(np.mean(err ** 2)))
    assert rms(k) < rms(unc) - 0.02
    assert course_rms(k, authors, k.cap, k.beta) < course_rms(unc, authors, 0.0, 0.0) - 0.03
    # the dose reaches the model's predictions: ResNet-50's inner spaces start later than -32's
    w50, w32 = load_workload("resnet50-bt-cifar"), load_workload("resnet32")
    s = default_schedule("cifar10", 182, 128, 50_000)
    assert (dose_per_epoch(w50, 0.2, s, k.beta, cap=k.cap)[-1]
            < 0.8 * dose_per_epoch(w32, 0.2, s, k.beta, cap=k.cap)[-1])


def test_the_pressure_threshold_keeps_every_channel_below_it_and_shifts_the_level_above():
    """k_inf = exp(-a max(0, P^gamma - p0) x factors) (thresholded): a lasso whose P^gamma is at
    or below p0 prunes nothing, above it -ln k_inf is the unthresholded one less a p0 (a shift,
    the truncated survival), and p0 = 0 is the model without a threshold. The stored fit has a
    threshold in both kinds (the weak-lasso runs at rho 0.03 / 0.05 chose it)."""
    from sim.system.prunetrain_model import lasso_pressure, thresholded
    fit = bundled_fit()
    assert fit.plain.p0 > 0 and fit.residual.p0 > 0
    k = dataclasses.replace(fit.plain, shape=1.0, hover=0.0)
    rho_at = lambda p: p / (1 + p)      # noqa: E731  the rho whose pressure is p
    below = rho_at((0.9 * k.p0) ** (1 / k.gamma))
    assert k.keep(below, 1e12) == pytest.approx(1.0)
    rho = 0.2
    pg = lasso_pressure(rho) ** k.gamma
    free = dataclasses.replace(k, p0=0.0)
    shift = np.log(free.keep(rho, 1e12)) - np.log(k.keep(rho, 1e12))
    assert shift == pytest.approx(-k.a * k.p0, rel=1e-6)
    assert thresholded(pg, 2.0, 0.0) == pytest.approx(2 * pg)
    assert thresholded(np.array([0.1, 0.5]), np.array([1.0, 3.0]), 0.2) == \
        pytest.approx([0.0, 0.9])


def test_the_threshold_drift_slows_the_clock_of_a_weak_lasso_and_stops_it_at_the_threshold():
    """KindFit.drift (drift_factor): the clock is multiplied by (1 - p0 / P^gamma)^z, so a lasso
    near its threshold cuts later, one at or below it never starts, a strong one runs nearly at
    its drift-free clock, and z = 0 (or no threshold) is the model without it. The factor is the
    same formula on numbers and on per-row arrays (the fit's)."""
    from sim.system.prunetrain_model import drift_factor, lasso_pressure, threshold_rho
    assert drift_factor(0.5, 0.0, 0.5) == 1.0 and drift_factor(0.5, 0.2, 0.0) == 1.0
    assert drift_factor(0.1, 0.2, 0.5) == 0.0
    assert drift_factor(0.5, 0.2, 0.5) == pytest.approx(0.6 ** 0.5)
    assert drift_factor(np.array([0.1, 0.5, 1.0]), 0.2, 1.0) == pytest.approx([0.0, 0.6, 0.8])
    assert (drift_factor(np.ones(3), 0.0, 1.0) == 1.0).all()
    k = dataclasses.replace(bundled_fit().plain, hover=0.0, lag=0.0, p0=0.16, drift=0.5)
    free = dataclasses.replace(k, drift=0.0)
    u = k.u_on * 1.5
    for rho in (0.05, 0.1, 0.25):
        f = drift_factor(lasso_pressure(rho) ** k.gamma, k.p0, k.drift)
        assert 0.0 < f < 1.0
        assert k.keep(rho, u) == pytest.approx(free.keep(rho, u * f))
        assert k.keep(rho, u) > free.keep(rho, u)
    slow = [drift_factor(lasso_pressure(r) ** k.gamma, k.p0, k.drift) for r in (0.05, 0.1, 0.25)]
    assert slow == sorted(slow)
    assert k.keep(threshold_rho(k), 1e12) == pytest.approx(1.0)


def test_after_the_first_lr_decay_the_count_runs_the_lag_ahead():
    """KindFit.lag: while the lr is at its maximum the lag changes nothing; from the first decay
    on the kept fraction at clock u is the lag-free one at u + lag u_on (the groups the lasso
    had nearly driven down fall below the 1e-4 count once the lr, and the SGD noise that holds
    them up, is 10x smaller), so never more is kept; lag 0 is the model without it. The stored
    plain kind has a lag (the run at a quarter of the lr x steps an epoch chose it: its cut was
    under way at the decay)."""
    fit = bundled_fit()
    assert fit.plain.lag > 0
    # the lag alone: the threshold's drift scales the clock, not the lag (both in the fit's
    # clock units), so it is off here
    k = dataclasses.replace(fit.plain, hover=0.0, lag=0.5, drift=0.0)
    free = dataclasses.replace(k, lag=0.0)
    u = np.array([0.5, 1.0, 1.2, 1.5, 3.0]) * k.u_on
    assert k.keep(0.25, u, True) == pytest.approx(free.keep(0.25, u, True))
    assert k.keep(0.25, u, False) == pytest.approx(free.keep(0.25, u + 0.5 * k.u_on, False))
    assert (k.keep(0.25, u, False) <= free.keep(0.25, u, False)).all()
    assert k.keep(0.25, u[2], False) < free.keep(0.25, u[2], False)


def test_the_first_dead_channel_follows_lr_x_steps_across_the_clock_runs():
    """The clock runs (`--grid clock`: ResNet-20 at rho 0.25 on 16 x 16 CIFAR-10 with 49, 196
    and 392 steps an epoch, same lr and batch): the first dead plain channel's epoch times the
    run's lr x steps an epoch (epoch_clock) is the same within 25 % (a clock of epochs would
    differ 8x between the end runs); the model's own onsets scale alike."""
    from research.prunetrain.fitting import epoch_clock, first_cut
    stem = "resnet20-cifar10-16-rho0.25-i10-e182-b32-lr0.2-s"
    fam = [r for r in bundled_runs()
           if r.name.startswith(stem) and r.name.endswith("-fixedb-aug2-flip-hefanout")]
    assert sorted(round(epoch_clock(r)) for r in fam) == [98, 392, 784]
    at = [first_cut(r.keep_plain) * epoch_clock(r) for r in fam]
    assert max(at) / min(at) < 1.25
    fit = bundled_fit()
    model = [first_cut(fit.keep_run(r, False)) * epoch_clock(r) for r in fam]
    assert max(model) / min(model) < 1.25


def test_the_held_out_rho_0_1_clock_check_starts_on_the_lr_step_clock_and_is_not_released():
    """The rho 0.1 run at 49 steps an epoch (`--grid clock-check`, held out): its first
    dead plain channel comes at its 196-step twin's epoch x 4 (96) within two epochs, just after
    the first lr decay; nothing was under way at the decay, so nothing was released and it keeps
    0.99 of the plain channels to the end (the fitted lag over-cuts it: docs/explanation/system.md).
    """
    from research.prunetrain.fitting import HELD_OUT_DIR, RUNS_DIR, epoch_clock, first_cut, read_run
    name = "resnet20-cifar10-16-rho0.1-i10-e182-b32-lr0.2-s{}-fixedb-aug2-flip-hefanout.yaml"
    r = read_run(HELD_OUT_DIR / "clock-check" / name.format(49))
    twin = read_run(RUNS_DIR / name.format(196))
    assert abs(first_cut(r.keep_plain) - first_cut(twin.keep_plain)
               * epoch_clock(twin) / epoch_clock(r)) <= 2
    assert r.keep_plain[-1] > 0.95 and r.keep_residual[-1] > 0.95


@pytest.mark.slow   # two fits, ~2 x 100 s on 2 cores
def test_the_rho_0_05_run_is_predicted_from_the_rho_0_03_run_better_with_the_threshold():
    """Leave the rho 0.05 run out, fit with the rho 0.03 run in: with the threshold (P0S) its
    last plain kept fraction (0.76 measured) is predicted within 0.1, and its kept fractions no
    worse than by the threshold-free fit of the same runs (which may choose its gamma to follow
    the weak run instead)."""
    import dataclasses
    import research.prunetrain.fitting as lm
    # copies: held_out_fit stores and keeps only the fits of the runs as bundled_runs() reads them
    runs = [dataclasses.replace(r) for r in bundled_runs()]
    test = [r for r in runs if r.rho == 0.05]
    train = [r for r in runs if r.rho != 0.05]
    with_p0 = lm.held_out(train, test)
    saved = lm.P0S
    try:
        lm.P0S = (0.0,)
        without = lm.held_out(train, test)
    finally:
        lm.P0S = saved
    m = with_p0["final_measured"][0]
    assert abs(with_p0["final_predicted"][0] - m) < 0.1
    assert with_p0["rms"] <= without["rms"] + 0.01


def test_a_rho_below_the_threshold_prunes_nothing_and_the_trajectory_says_so():
    """A rho at or below both kinds' threshold (threshold_rho) gives the dense network at every
    reconfiguration, and the trajectory's source names the threshold, so a user who sweeps rho
    there sees why two rho give one result; a rho above it prunes and says nothing of it."""
    from sim.system.prunetrain_model import threshold_rho
    fit = bundled_fit()
    lo = min(threshold_rho(fit.plain), threshold_rho(fit.residual))
    assert 0.0 < lo < 0.05
    w = load_workload("resnet32")
    tr = lasso_trajectory(w, 0.9 * lo, 10, 182, 128)
    assert apply_widths(w, tr.widths_at(181)).macs() == w.macs()
    assert "lasso threshold of the plain spaces" in tr.source and "residual nodes" in tr.source
    tr = lasso_trajectory(w, 0.2, 10, 182, 128)
    assert apply_widths(w, tr.widths_at(181)).macs() < w.macs() and "threshold" not in tr.source


def test_depthwise_convs_are_out_of_the_lasso_and_tied_in_trajectory_files(tmp_path):
    """The authors leave MobileNet's depthwise convs out of the group lasso: R0 and the group count
    are the pointwise convs' and the FC's alone. A trajectory file that gives a depthwise conv two
    widths is refused, naming the file and the layer."""
    from sim.errors import ConfigError
    from sim.system.prunetrain_model import init_group_norms
    from sim.system.prunetrain import load_trajectory
    from sim.workload import load_workload
    mb = load_workload("mobilenet-imagenet")
    pw = [l for l in mb.layers if not l.depthwise]
    g = sum(l.c_out + (l.c_in if l.name != "conv1" and l.op == "conv" else 0)
            for l in pw if l.op == "conv") + 1024
    assert init_group_norms(mb, "he_fan_out")[1] == g
    f = tmp_path / "t.yaml"
    f.write_text("schema: 1\nworkload: mobilenet-imagenet\npoints:\n  0:\n    conv4: [64, 60]\n")
    with pytest.raises(ConfigError, match=r"t\.yaml.*conv4.*depthwise"):
        load_trajectory(f, mb)


def test_prunetrain_runs_mobilenet_with_its_depthwise_convs_narrowed_with_their_space():
    """End to end on ImageNet MobileNet: the model's trajectory narrows every depthwise conv to the
    width of the space it reads and writes (groups = channels), and the run trains fewer FLOPs,
    in less time, than dense."""
    from sim.methods import parse_method
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import apply_widths, lasso_trajectory, simulate_run
    from sim.workload import load_workload
    w = load_workload("mobilenet-imagenet")
    tr = lasso_trajectory(w, 0.2, 5, 90, 256)
    net = apply_widths(w, tr.widths_at(89))
    dws = [l for l in net.layers if l.groups > 1]
    assert len(dws) == 13 and all(l.depthwise and l.groups == l.c_in < 1024 for l in dws[-1:])
    assert all(l.groups == l.c_in == l.c_out for l in dws)
    cl = load_cluster("gtx1080ti-11gb")
    d = simulate_run(w, cl, parse_method("dense"), epochs=90, batch=64)
    p = simulate_run(w, cl, parse_method("prunetrain:rho=0.2,interval=5"), epochs=90, batch=64,
                     trajectory=tr)
    assert sum(e.flops for e in p.epochs) < 0.8 * sum(e.flops for e in d.epochs)
    assert p.train_seconds < d.train_seconds


def test_the_fit_recovers_a_smaller_hover_on_natural_images():
    """KindFit.nat_hover: synthetic runs on digits and on CIFAR-10 whose residual nodes hover at
    0.3 and at 0.3 x 0.25: the fit finds the digits' share and a smaller one on natural images
    (NAT_HOVERS, searched last)."""
    from sim.system import prunetrain_model as lm
    from research.prunetrain.fitting import RunData, fit_runs
    from sim.system.prunetrain_model import Fit, KindFit
    truth = Fit(KindFit(1.5, 3.0, 2.0, 1.0, 0.0, 1.0, 1.0),
                KindFit(0.4, 3.0, 2.0, 2.0, 0.3, 1.0, 1.0, nat_hover=0.25), (), 0.0)
    runs = []
    for ds in ("digits", "cifar10"):
        for rho in (0.1, 0.2, 0.3):
            u = np.linspace(0, 12 * rho / 0.3, 60)
            high = np.arange(60) < 40
            nat = lm.natural_images(ds)
            runs.append(RunData(f"syn{ds}{rho}", "resnet20", rho, 5, u / rho, rho,
                                truth.plain.keep(rho, u, high, natural=nat),
                                truth.residual.keep(rho, u, high, natural=nat), 0.1, 16,
                                high=high, dataset=ds))
    f = fit_runs(runs, spread=False)
    # searched last, the scale finds the split; the natural-image level terms (nu, eta), searched
    # before it, take up part of the difference (here nat_hover 0.5 with nu 2.5), so the
    # shares are not recovered exactly, only their order and the fit
    assert f.rms < 0.01 and f.residual.hover == pytest.approx(0.3, abs=0.05)
    assert f.residual.nat_hover < 1.0
    assert f.residual.hover * f.residual.nat_hover < f.residual.hover - 0.1
    assert f.plain.nat_hover == 1.0     # no hover, nothing to scale


def test_natural_image_runs_release_few_residual_channels_at_the_first_lr_decay():
    """The residual nodes counted while the lr is at its maximum and let fall by the first decay
    (decay_release, 8 epochs on): about 0.17 of the channels in the digits, MNIST and
    Fashion-MNIST runs, about 0.05 in the natural-image runs (CIFAR-10 and the union). The
    stored fit's natural-image hover share (nat_hover < 1) brings the model's mean release on
    natural images nearer the runs' than one share for all would."""
    from research.prunetrain import fitting as lm
    fit = lm.bundled_fit()
    assert fit.residual.nat_hover < 1.0
    one = dataclasses.replace(fit.residual, nat_hover=1.0)
    rel = {False: [], True: []}
    for r in bundled_runs():
        if not r.has_residual or r.epochs is not None:
            continue
        m = lm.decay_release(r.keep_residual, r.high)
        if m is not None:
            rel[r.natural > 0].append((m, lm.decay_release(fit.keep_run(r, True), r.high),
                                       lm.decay_release(one.keep_run(r), r.high)))
    meas = {k: np.mean([x[0] for x in v]) for k, v in rel.items()}
    assert len(rel[True]) >= 15 and len(rel[False]) >= 15
    assert meas[True] < 0.5 * meas[False]
    stored, shared = (np.mean([x[i] for x in rel[True]]) for i in (1, 2))
    assert abs(stored - meas[True]) < abs(shared - meas[True])
