"""Real PruneTrain runs at the paper's own setting (32 x 32 CIFAR-10, GPU) as validation inputs."""
from pathlib import Path

import pytest

from research.prunetrain.fitting import HELD_OUT_DIR, RUNS_DIR, read_run
from sim.system.prunetrain import load_trajectory
from sim.workload import load_workload
from sim.yamlio import load_yaml_file
from sim.errors import ConfigError

C32 = sorted([*RUNS_DIR.glob("*-cifar10-32-*.yaml"), *HELD_OUT_DIR.glob("**/*-cifar10-32-*.yaml")])


def test_the_32x32_runs_are_bundled():
    names = {p.name.split("-rho")[0] + "-" + p.name.split("-rho")[1].split("-")[0] for p in C32}
    assert {"resnet32-cifar10-32-0.2", "vgg11-cifar-cifar10-32-0.2"} <= names


@pytest.mark.parametrize("path", [p for p in C32 if "-rho0.2-" in p.name][:2],
                         ids=lambda p: p.stem[:40])
def test_run_file_last_widths_are_its_log_at_the_last_reconfiguration(path: Path):
    """The trajectory points rebuilt from a run's log (--from-log) are the log's kept channels of
    the epoch before each reconfiguration: the validation feeds the engine exactly what ran."""
    doc = load_yaml_file(path, ConfigError)
    w = load_workload(doc["workload"])
    tr = load_trajectory(path, w)
    last = tr.points[-1][0]
    kept = doc["per_epoch"][last - 1]["kept"]
    widths = tr.widths_at(last)
    for layer, (_, c_out) in widths.items():
        if layer in kept:
            assert c_out == kept[layer], layer
    run = read_run(path)
    assert run.rho == doc["run"]["rho"] and len(run.keep_plain) == len(doc["per_epoch"])


def test_measured_rows_only_for_runs_past_their_last_lr_decay():
    from analysis.validation import _c_measured_rows
    rows = list(_c_measured_rows())
    assert rows and all(r.status == "input" for r in rows)
    whats = " ".join(r.what for r in rows)
    assert "CIFAR-10 VGG-11" in whats
    assert "ResNet-32" not in whats          # stopped at epoch 54, before the decay at 91
    flops = {r.what.split(":")[1].split(",")[0].strip(): r.modeled for r in rows
             if r.what.startswith("CIFAR-10 VGG-11")}
    # training FLOPs average over a network that only shrinks: above the final network's
    assert flops["inference FLOPs vs dense"] < flops["training FLOPs vs dense"] < 100


def test_held_out_rows_report_the_runs_own_last_epoch(monkeypatch):
    """Leave-32x32-out: the level is fitted without the five runs (the fit itself is stored,
    research.prunetrain.fitting.held_out_fit; here the bundled fit stands in) and the rows hold
    each run's own last epoch."""
    from analysis.validation import _c_measured_held_out_rows
    from research.prunetrain import fitting
    seen = []

    def fit_without(runs, spread=False):
        seen.extend(r.name for r in runs)
        return fitting.bundled_fit()

    monkeypatch.setattr(fitting, "held_out_fit", fit_without)
    rows = {r.what.rsplit("(", 1)[-1].rstrip(")"): r for r in _c_measured_held_out_rows()}
    assert set(rows) == {"plain spaces", "residual nodes"}
    runs = [read_run(p) for p in C32 if p.parent == RUNS_DIR]      # the bundled ones
    assert len(runs) == 5 and seen and not {r.name for r in runs} & set(seen)
    assert len(seen) == len(fitting.bundled_runs()) - 5
    assert rows["plain spaces"].published == pytest.approx(
        sum(r.keep_plain[-1] for r in runs) / len(runs))
    assert "vgg11-cifar rho 0.2 (142 ep.)" in rows["plain spaces"].note


def test_other_setting_rows_split_the_authors_resnet50_miss():
    """The authors' CIFAR ResNet-50 at 16 x 16 (held out): the model's kept fractions
    with the run's own inputs, then the engine fed the run at Table 1's rho. The rows' measured
    side is the run file itself, and runs stopped before their last decay give no rows."""
    from analysis.validation import _c_other_setting_rows, _past_last_decay
    from sim.system.prunetrain_model import bundled_fit
    paths = sorted([*RUNS_DIR.glob("resnet50-bt-cifar-cifar10-16-rho0.2-*.yaml"),
                    *HELD_OUT_DIR.glob("**/resnet50-bt-cifar-cifar10-16-rho0.2-*.yaml")])
    assert paths
    run = read_run(paths[0])
    rows = list(_c_other_setting_rows())
    assert rows and all(r.status == "input" for r in rows)
    kept = {r.what.split("fraction of the ")[1].split(",")[0]: r for r in rows
            if "rho 0.2 at another setting: last kept" in r.what}
    assert kept["plain spaces"].published == pytest.approx(run.keep_plain[-1], abs=1e-3)
    assert kept["residual nodes"].published == pytest.approx(run.keep_residual[-1], abs=1e-3)
    assert kept["plain spaces"].modeled == pytest.approx(
        float(bundled_fit().keep_run(run, False)[-1]))
    assert ("held out" in kept["plain spaces"].what) == (run.name not in bundled_fit().runs)
    fed = {r.what.split(":")[1].split(",")[0].strip(): r.modeled for r in rows
           if r.what.startswith("CIFAR-10 ResNet-50: ")}
    assert fed["inference FLOPs vs dense"] < fed["training FLOPs vs dense"] < 100
    assert 0 < fed["training time vs dense"] < 100
    doc = load_yaml_file(paths[0], ConfigError)
    assert _past_last_decay(doc, 182)
    doc["per_epoch"] = doc["per_epoch"][:100]
    assert not _past_last_decay(doc, 182)


def test_clock_rows_set_each_clock_run_against_its_twin_under_both_clocks():
    """The runs at a quarter and twice the lr x steps an epoch (--grid clock): one onset row and
    one row per kind each, from the held-out result handed in; the note gives the 196-step twin's
    first dead channel and where a clock of lr-weighted steps or of epochs puts this run's. The
    measured onsets are the lr-step clock's to within one epoch (56 / 7 against 14 x 4 / 14 / 2)."""
    from analysis.validation import _c_clock_rows
    from research.prunetrain.fitting import bundled_runs, epoch_clock, first_cut
    runs = [r for r in bundled_runs() if r.natural and round(epoch_clock(r)) in (98, 784)]
    assert len(runs) == 2
    held = {"names": [r.name for r in runs], "rms": 0.1,
            "onset_measured": [first_cut(r.keep_plain) for r in runs], "onset_predicted": [9, None],
            "final_measured": [0.2, 0.6], "final_predicted": [0.1, 0.9],
            "final_measured_residual": [0.5, 0.6], "final_predicted_residual": [0.5, 0.7]}
    rows = list(_c_clock_rows(held))
    assert len(rows) == 6 and all(r.status == "input" for r in rows)
    assert list(_c_clock_rows(None)) == []
    onsets = [r for r in rows if "first dead plain channel" in r.what]
    assert onsets[1].modeled == "never"
    for r, row in zip(runs, onsets):
        assert row.published == first_cut(r.keep_plain)
        assert "its 196-step twin's first dead plain channel: epoch 14" in row.note
        lr_steps = 14 * 392 / epoch_clock(r)
        assert f"puts this run's at {lr_steps:.0f}, one of epochs at 14" in row.note
        assert abs(row.published - lr_steps) <= 1
    plain = next(r for r in rows if "(plain spaces)" in r.what and r.published == 0.6)
    assert plain.modeled == 0.9 and "predicted by the fit without such runs" in plain.what


def test_weak_lasso_rows_name_each_weak_run_with_its_leave_one_rho_out_prediction():
    """The ResNet-20 runs at rho 0.03 / 0.05 (--grid cap-check, fitted): per weak
    run, a row of the first dead plain channel and one per kind of the last kept fraction, from
    the leave-one-rho-out result handed in; the kept-fraction notes name the first dead channel
    too. Both start pruning far later than any stronger basic-block run of their family (epoch
    24 at rho 0.1)."""
    from analysis.validation import _c_weak_lasso_rows
    from research.prunetrain.fitting import bundled_runs, first_cut
    weak = sorted((r for r in bundled_runs() if r.rho < 0.1 and r.expansion == 1.0),
                  key=lambda r: r.rho)
    assert [r.rho for r in weak] == [0.03, 0.05]
    by_rho = [{"rho": r.rho, "names": [r.name], "rms": 0.1, "onset_measured": [first_cut(
        r.keep_plain)], "onset_predicted": [7], "final_measured": [0.5], "final_predicted": [0.4],
        "final_measured_residual": [0.9], "final_predicted_residual": [0.8]} for r in weak]
    by_rho.append({**by_rho[0], "names": ["not-a-weak-run"]})
    rows = list(_c_weak_lasso_rows(by_rho))
    assert len(rows) == 6 and all(r.status == "input" for r in rows)
    onset = next(r for r in rows if "first dead plain channel" in r.what and "rho 0.03" in r.what)
    assert (onset.published, onset.modeled, onset.unit) == \
        (float(first_cut(weak[0].keep_plain)), 7.0, "epoch")
    plain = next(r for r in rows if "(plain spaces)" in r.what and "rho 0.03" in r.what)
    assert (plain.published, plain.modeled) == (0.5, 0.4)
    assert f"first dead plain channel at epoch {first_cut(weak[0].keep_plain)} (model 7)" \
        in plain.note
    assert all(first_cut(r.keep_plain) > 40 for r in weak)
