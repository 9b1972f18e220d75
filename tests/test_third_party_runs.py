"""Third-party runs of the authors' code as run records of the trajectory fit: widths at every
reconfiguration only, the other epochs clock only (research.prunetrain.runs.third_party_record)."""

import numpy as np
import pytest
import yaml

from sim.errors import ConfigError
from research.prunetrain import fitting as lm
from research.prunetrain.runs import THIRD_PARTY, third_party_record
from sim.system.prunetrain import load_trajectory
from sim.workload import load_workload, with_classes

RERUNS = lm.DATA_DIR / "reruns"
TIMES = RERUNS / "vgg11-cifar100-v100-times.yaml"
RECORDS = sorted((lm.HELD_OUT_DIR / "third-party").glob("*-thirdparty-*.yaml"))


def test_every_third_party_trajectory_has_its_record_outside_the_fit():
    """Fitted to nothing (docs/explanation/system.md): the records sit in the held-out folder, which the
    fit's glob and digest do not see."""
    assert len(RECORDS) == len(THIRD_PARTY) == 3
    fit = lm.bundled_fit()
    assert not {p.stem for p in RECORDS} & set(fit.runs)
    assert not list(lm.RUNS_DIR.glob("*-thirdparty-*.yaml"))


@pytest.mark.parametrize("traj", sorted(THIRD_PARTY))
def test_record_is_what_the_tool_writes_from_the_log_facts(traj):
    """The bundled record equals third_party_record's output now (a hand edit of either the
    record or the trajectory fails here), and its rows are the trajectory's widths: the plan at
    the end of epoch E - 1 is what reconfiguration E builds."""
    doc = third_party_record(RERUNS / traj, TIMES, THIRD_PARTY[traj])
    path = next(p for p in RECORDS if p.stem.endswith("-thirdparty-" + THIRD_PARTY[traj]))
    assert yaml.safe_load(path.read_text()) == yaml.safe_load(yaml.safe_dump(doc))
    w = with_classes(load_workload("vgg11-cifar"), 100)
    tr = load_trajectory(RERUNS / traj, w)
    per = doc["per_epoch"]
    assert len(per) == 180 and [p["epoch"] for p in per if "kept" in p] == list(range(9, 179, 10))
    for p in per:
        if "kept" in p:
            for name, (_, c_out) in tr.widths_at(p["epoch"] + 1).items():
                space = next(l.out_space for l in w.layers if l.name == name)
                assert p["kept"][space] == c_out, (p["epoch"], name)


def test_record_takes_steps_and_schedule_from_the_times_file():
    facts = yaml.safe_load(TIMES.read_text())["runs"]
    for traj, key in THIRD_PARTY.items():
        run = third_party_record(RERUNS / traj, TIMES, key)["run"]
        steps = facts[key]["steps"]
        assert run["epoch_steps"] == steps
        # the images a step: 128 at 391 steps, 256 at 196 (50,000 images an epoch)
        assert run["batch"] == {391: 128, 196: 256}[steps]
        decays = [int(e) - 1 for e in facts[key]["lr_from_epoch"] if int(e) > 1]
        assert run["lr_decay_at_epochs"] == decays
        assert run["classifier"] == run["classes"] == 100 and run["weight_decay"] == 5e-4
        # lambda from the log's first loss (CE0 / (1 - rho) by the tuning), R0 analytic
        ce0 = (1 - run["rho"]) * facts[key]["first_loss"]
        assert run["first_ce"] == pytest.approx(ce0)
        assert run["lambda"] * (1 - run["rho"]) * run["first_group_norm"] / run["rho"] \
            == pytest.approx(ce0)
        assert lm.read_run(next(p for p in RECORDS if p.stem.endswith("-" + key))).ce0_offset \
            == pytest.approx(ce0 - np.log(100))


def test_sampled_run_has_rows_at_its_widths_and_the_clock_of_every_epoch():
    path = next(p for p in RECORDS if p.stem.endswith("-thirdparty-otf"))
    r = lm.read_run(path)
    assert list(lm.run_epochs(r)) == list(range(9, 179, 10))
    # lr 0.1 x 391 steps / (1 - 0.9) an epoch until the decay at 150 (0-based 149)
    assert lm.epoch_clock(r) == pytest.approx(391.0)
    assert r.lrsteps[0] == pytest.approx(10 * 391.0)
    assert r.lrsteps[-1] == pytest.approx(149 * 391.0 + 21 * 39.1)   # epochs 149-169 at 0.01
    assert r.high.sum() == len([e for e in range(9, 179, 10) if e < 149])
    # every 5th epoch (4, 9, 14, ...) picks every row of a run sampled at 9, 19, ...
    assert list(r.plain_spaces.rows_every_5th()) == list(range(len(r.lrsteps)))
    # the classifier is CIFAR-100's: its input space carries the 100-class floor
    assert r.classes == 100 and r.plain_spaces.floor.max() > 0


def test_every_5th_epoch_of_a_full_run_is_the_old_slice():
    assert list(lm.every_5th(None, 12)) == [4, 9]
    assert list(lm.every_5th(np.array([0, 1, 2]), 3)) == [0, 1, 2]   # none at 4, 9, ...: all


def test_a_record_with_widths_at_fewer_than_two_epochs_is_one_line(tmp_path):
    doc = third_party_record(RERUNS / "vgg11-cifar100-rho0.2-otf.yaml", TIMES, "otf")
    for p in doc["per_epoch"][19:]:
        p.pop("kept", None)
    f = tmp_path / "one-row.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        lm.read_run(f)
    assert "fewer than two" in str(e.value) and "one-row.yaml" in str(e.value)


@pytest.mark.parametrize("bad", [0, -4.8, "nan", float("inf")])
def test_a_record_whose_first_ce_is_not_a_positive_number_is_one_line(tmp_path, bad):
    doc = third_party_record(RERUNS / "vgg11-cifar100-rho0.2-otf.yaml", TIMES, "otf")
    doc["run"]["first_ce"] = bad
    f = tmp_path / "bad-ce.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        lm.read_run(f)
    assert "first_ce must be a finite number > 0" in str(e.value) and "bad-ce.yaml" in str(e.value)


def test_rows_set_each_third_party_run_against_the_stored_fit():
    from analysis.validation.prunetrain import _c_third_party_rows
    rows = list(_c_third_party_rows())
    assert {r.what.split("(")[1].split(",")[0] for r in rows} == set(THIRD_PARTY.values())
    fit = lm.bundled_fit()
    for r, path in zip(rows, RECORDS):
        run = lm.read_run(path)
        assert r.status == "input" and r.published == pytest.approx(run.keep_plain[-1], abs=1e-3)
        assert r.modeled == pytest.approx(fit.keep_run(run, False)[-1], abs=1e-3)
        assert "17 reconfiguration epochs" in r.note
