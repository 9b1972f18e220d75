"""Predictions written down before a run (research.prunetrain.runs.planned_run, `python -m
research.prunetrain.grids --predict`): a configuration not yet run has the model inputs its run
file will have, and the tool prints what the stored fit predicts for it."""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from research.prunetrain import fitting as lm
from research.prunetrain import grids as pr
from research.prunetrain.runs import planned_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("cfg", [pr.LABELS20_GRID[0], pr.LABELS20_GRID[1], pr.COARSE_GRID[0],
                                 pr.WD_GRID[0], pr.CLOCK_GRID[0], pr.TABLE1_GRID[1]],
                         ids=lambda c: c.name.split("-rho")[0] + ("-wd" if "wd" in c.name else ""))
def test_a_planned_run_has_the_inputs_of_the_run_file_it_became(cfg):
    """Each bundled run's configuration, planned as if not run: the same clock, lr phases,
    classes, init scale, decay, per-sample lr, natural share and expansion as the run read from
    its file (over the epochs it ran: the GPU VGG-11 run was stopped at epoch 142); lambda / n0
    at its expected value within 8 % of the logged one (CE0 at the runs' median ratio to
    ln(outputs); a run's own first CE is drawn, and R0 too)."""
    done = lm.read_run(lm.RUNS_DIR / f"{cfg.name}.yaml")
    plan = planned_run(cfg)
    n = len(done.lrsteps)
    assert plan.name == done.name and plan.workload == done.workload and len(plan.lrsteps) >= n
    np.testing.assert_allclose(plan.lrsteps[:n], done.lrsteps, rtol=1e-12)
    assert (plan.high[:n] == done.high).all()
    for attr in ("classes", "decay", "temperature", "natural", "expansion", "has_residual",
                 "rho", "interval"):
        assert getattr(plan, attr) == getattr(done, attr), attr
    assert plan.init_scale == pytest.approx(done.init_scale, rel=1e-9)
    assert plan.lam_n == pytest.approx(done.lam_n, rel=0.08)


def test_a_planned_runs_lambda_is_unbiased_against_the_logged_ones():
    """Over every bundled run with a planned configuration, the planned lambda / n0 is the logged
    one within 8 %, with a median within 2 %: CE0 at init is ln(outputs) + Fit.ce0_offset (the
    runs log ln(outputs) + 0.00-0.33), not ln(outputs), which was 7 % low on the median."""
    grids = [g for n, g in vars(pr).items() if n.endswith("_GRID") and isinstance(g, list)]
    ratio = {}
    for cfg in (c for g in grids for c in g):
        f = lm.RUNS_DIR / f"{cfg.name}.yaml"
        if f.exists() and not (cfg.dynamic_batch or cfg.epoch_steps is None):
            ratio[cfg.name] = planned_run(cfg).lam_n / lm.read_run(f).lam_n
    r = np.array(list(ratio.values()))
    assert len(r) >= 20
    assert abs(np.median(r) - 1) < 0.02 and np.abs(r - 1).max() < 0.08, sorted(ratio.items())
    assert 0.0 < lm.bundled_fit().ce0_offset < 0.35


def test_a_planned_runs_prediction_moves_with_its_inputs():
    """The stored fit's prediction of a planned run is the model's, not a constant: the authors'
    decay 5e-4 starts the ResNet-20 cut sooner and ends it deeper than 1e-4 does (omega_clock),
    as the bundled decay twins did (first plain cut at epochs 6 / 14)."""
    fit = lm.bundled_fit()
    base = pr.LABELS20_GRID[1]
    at = {wd: fit.keep_run(planned_run(dataclasses.replace(base, weight_decay=wd)), False)
          for wd in (1e-4, 5e-4)}
    assert lm.first_cut(at[5e-4]) < lm.first_cut(at[1e-4])
    assert at[5e-4][-1] < at[1e-4][-1]


def test_runs_whose_clock_depends_on_the_run_are_not_predicted(capsys):
    """A dynamic batch (the batch grows with the cut) or one pass over the data an epoch has no
    clock before the run: planned_run refuses it, and --predict says so in one line per run and
    predicts the others."""
    dyn = pr.GRID[0]
    assert dyn.dynamic_batch
    with pytest.raises(ValueError, match="only fixed-batch virtual epochs"):
        planned_run(dyn)
    assert pr.predict([dyn, pr.LABELS20_WD_GRID[0]], lm.RUNS_DIR) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{dyn.name}: not predicted") for line in out)
    assert sum("first cut at epoch" in line for line in out) == 2   # plain and residual nodes
    assert any(line.startswith(pr.LABELS20_WD_GRID[0].name) and "weight decay 0.0005" in line
               for line in out)


def test_predict_needs_no_torch_and_prints_every_grid_run():
    """`--predict --grid vgg-wd` (the device grid waiting for a GPU) runs in a process where torch
    cannot be imported: a prediction is written down on any machine."""
    import subprocess
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['x', '--predict', '--grid', "
            "'vgg-wd']; from research.prunetrain import grids as pr; "
            "raise SystemExit(pr.main())")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert sum(line.startswith("vgg11-cifar-cifar10-32-") for line in p.stdout.splitlines()) == 2
    assert p.stdout.count("plain: first cut at epoch") == 2


@pytest.mark.parametrize("args, err", [
    (["--predict", "--grid", "vgg-wd", "--jobs", "2"], "--jobs changes nothing for --predict"),
    (["--predict", "--check", "x.yaml"], "--check and --predict are different jobs"),
    (["--list", "--device", "cuda"], "--device changes nothing for --list"),
    (["--report", "--grid", "gpu"], "--grid changes nothing for --report"),
    (["--grid", "labels20-wd", "--note", "x"], "--note changes nothing for a training run"),
])
def test_the_tool_refuses_an_option_its_job_would_ignore(args, err, capsys):
    """Each call is one job (train, --list, --predict, --check, --report, --write-fit,
    --third-party, --from-log), and an option that job does not read is a one-line usage error,
    not silently dropped."""
    with pytest.raises(SystemExit) as e:
        pr.main(args)
    assert e.value.code == 2 and err in capsys.readouterr().err
