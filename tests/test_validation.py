"""`prunesim validate`: a quick subset of rows computes, with published values present and finite
errors; the report covers every VALIDATION.md section (and HARDWARE.md §3)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from analysis import validation as v
from sim.workload import with_classes

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO.parent / "shared" / "spec" / "VALIDATION.md"


@pytest.fixture(scope="module")
def fast_rows():
    # the tensor-core rows (D, HW3) take ~2 s; A, B and C are exercised by `prunesim validate`
    return v.compute(quick=True, groups=("hw3", "d", "d-accuracy"))


def test_rows_compute(fast_rows):
    computed = [r for r in fast_rows if r.status in ("ok", "outlier")]
    assert len(computed) >= 9
    for r in computed:
        assert r.published is not None and r.source, r.what
        assert isinstance(r.modeled, float) and math.isfinite(r.modeled), r.what
        assert r.rel_error is not None and math.isfinite(r.rel_error), r.what
    assert not [r for r in fast_rows if r.status == "failed"]
    # the model's numbers are its own: no modeled value equals its published target
    assert all(r.modeled != r.published for r in computed)


def test_failed_group_is_a_row_and_exit_status(monkeypatch, tmp_path, capsys):
    def boom(quick=False):
        raise RuntimeError("engine missing")
        yield  # pragma: no cover
    monkeypatch.setitem(v.GROUPS, "b", ("B", boom))
    rows = v.compute(groups=("b",))
    assert rows[0].status == "failed" and "engine missing" in rows[0].note
    args = SimpleNamespace(json=True, out=str(tmp_path / "v.md"), quick=True, only=["b"])
    assert v.cmd_validate(args) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["status"] == "failed"
    assert "could not be computed" in (tmp_path / "v.md").read_text()


def _failing_group(quick=False):
    """A row group that fails (module level, so a worker process can import it)."""
    raise RuntimeError("engine missing in a worker")
    yield  # pragma: no cover


def test_parallel_groups_return_the_serial_rows_in_order():
    # hw3 starts first in a parallel run (HEAVY_FIRST) but its rows stay where --only put them
    groups = ("d-accuracy", "t", "hw3")
    serial = v.compute(quick=True, groups=groups, jobs=1)
    parallel = v.compute(quick=True, groups=groups, jobs=2)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert [r.section for r in serial][0] == "D" and serial[-1].section == "HW3"


def test_failed_group_in_a_worker_is_one_failed_row(monkeypatch):
    monkeypatch.setitem(v.GROUPS, "t", ("T", _failing_group))
    logged = []
    rows = v.compute(groups=("d-accuracy", "t"), jobs=2, log=logged.append)
    failed = [r for r in rows if r.status == "failed"]
    assert len(failed) == 1 and failed[0].what == "group t" and failed[0].section == "T"
    assert "engine missing in a worker" in failed[0].note
    assert rows[-1] is failed[0] and all(r.section == "D" for r in rows[:-1])   # --only's order
    assert v.default_jobs(("t",)) == 1 and v.default_jobs() >= 1


def test_range_and_points_errors():
    r = v.Row("A", "x", "1.71-3.99 (range)", 2.2, "x", lo_hi=(1.71, 3.99))
    assert r.rel_error == 0.0
    assert v.Row("A", "x", "r", 1.0, "x", lo_hi=(2.0, 4.0)).rel_error == pytest.approx(-0.5)
    p = v.Row("B", "x", 7.1, 12.7, "%", points=True)
    assert p.rel_error is None and v._err(p) == "+5.6 pts"


def test_report_has_every_section(fast_rows):
    md = v.markdown(fast_rows, "prunesim validate --only hw3", 1.0, True)
    for title in v.SECTION_TITLES.values():
        assert f"## {title}" in md
    assert "## Where we miss and why" in md and "prunesim validate" in md


def test_report_counts_table1_flops_rows_within_15_percent():
    """The header line counts the Table 1 FLOPs rows of the model's own trajectory (not the
    error-budget rows) within 15 % and names the others; no Table 1 rows, no line."""
    label = v.PUB_C_TABLE1[0][0]
    rows = [v.Row("C", f"{label}: training FLOPs vs dense", 47.0, 49.0, "%"),
            v.Row("C", f"{label}: inference FLOPs vs dense", 34.0, 40.0, "%"),
            v.Row("C", f"{label}: training FLOPs vs dense, the epochs run in the engine's GEMM "
                  "FLOPs (not Table 1's accounting)", 47.0, 90.0, "%", status="input")]
    md = v.markdown(rows, "test", 1.0, True)
    assert ("PruneTrain Table 1: 1 of 2 FLOPs rows within 15 %" in md
            and f"outside, {label}: inference FLOPs vs dense +18 %" in md)
    none = v.markdown(rows[2:], "test", 1.0, True)
    assert "PruneTrain Table 1:" not in none and "PruneTrain dynamic mini-batch" not in none
    steps = [v.Row("C", f"x: dynamic mini-batch reaches {b} ({mode} capacity: y)", 10.0, got,
                   "epoch", status=st) for b, mode, got, st in
             ((96, "relative", "never", "outlier"), (96, "device", 5.0, "ok"),
              (128, "device", "never", "outlier"))]
    md = v.markdown(steps, "test", 1.0, True)
    assert ("interval of the published epochs: relative capacity 0 of 1, device capacity 1 of 2"
            in md)


def test_generated_report_current():
    """docs/validation.md was generated by the full command and covers A-D and HW3 with rows."""
    doc = (REPO / "docs" / "validation.md").read_text()
    assert "Generated by `prunesim validate`" in doc
    spec_sections = re.findall(r"^## ([A-D])\. ", SPEC.read_text(), re.M) if SPEC.is_file() \
        else ["A", "B", "C", "D"]
    for sec in spec_sections + ["HW3"]:
        title = v.SECTION_TITLES[sec]
        assert f"## {title}" in doc
        body = doc.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
        assert "(skipped in this run)" not in body and body.count("\n| ") >= 2, sec


def test_whole_step_rows_compute():
    """B's end-to-end rows and D's SDGP rows on the whole step (#13): they compute, carry their
    GEMM-only figure in the note, and say what the published figure includes that we do not model."""
    rows = v.compute(quick=True, groups=("b", "d-step"))
    assert not [r for r in rows if r.status == "failed"]
    e2e = [r for r in rows if "whole step" in r.what or "whole-step" in r.what]
    assert len(e2e) >= 9
    for r in e2e:
        assert isinstance(r.modeled, float) and math.isfinite(r.modeled), r.what
    cnn = [r for r in e2e if "2-layer CNN" in r.what]
    assert cnn and all("switching" in r.note for r in cnn)
    assert all("GEMMs alone" in r.note for r in e2e if r.section == "B")


def test_literature_group_computes():
    """Section T (Hu et al. 2024's released FFN timings) computes offline, quick subset included."""
    rows = v.compute(quick=True, groups=("t",))
    assert not [r for r in rows if r.status == "failed"]
    speed = [r for r in rows if r.status == "ok"]
    assert len(speed) == 2 and all(r.section == "T" for r in rows)
    for r in speed:
        assert r.unit == "x" and "github.com/thu-ml/2by4-pretrain-acc-examples" in r.source
        assert 1.0 < r.modeled < 2.0 and math.isfinite(r.rel_error), r.what
    assert "T" in v.SECTION_TITLES and "## T." in v.markdown(rows, "test", 1.0, True)


def test_validate_only_offers_every_row_group():
    from analysis.validation import GROUPS
    from sim.cli import VALIDATION_GROUPS
    assert set(VALIDATION_GROUPS) == set(GROUPS)
    assert set(v.HEAVY_FIRST) <= set(GROUPS)


def test_validate_jobs_option():
    from sim.cli import build_parser
    parse = build_parser().parse_args
    assert parse(["validate"]).jobs is None                   # default: report.default_jobs
    assert parse(["validate", "--jobs", "1"]).jobs == 1       # in this process, in order
    with pytest.raises(SystemExit):
        parse(["validate", "--jobs", "0"])


def test_authors_networks_load_and_feed_the_error_budget_rows():
    """The authors' own pruned networks (research/prunetrain/data/authors) load against their workloads, are
    pruned, and give section C's error-budget rows (engine and memory model fed real input; the
    model's final VGG networks against theirs, one row per network and a summary)."""
    import re

    from analysis.validation import AUTHORS_DIR, _authors_setting, _c_authors_rows
    from sim.system.prunetrain import apply_widths, load_trajectory
    files = sorted(AUTHORS_DIR.glob("*.yaml"))
    assert len(files) == 14
    vgg: dict = {}
    for f in files:
        m = re.fullmatch(r"(vgg\d+)-cifar(\d+)-rho([\d.]+)", f.stem)
        w = _authors_setting(f)[0]
        net = apply_widths(w, load_trajectory(f, w).widths_at(0))
        assert 0.15 < net.macs() / w.macs() < 0.9
        if m and m[2] == "10":
            vgg.setdefault(m[1], []).append((float(m[3]), net.macs() / w.macs()))
    # the authors' runs prune more at a larger rho (a check of the transcribed widths)
    for arch, pts in vgg.items():
        assert len(pts) == 4 and all(a[1] > b[1] for a, b in zip(pts, pts[1:])), arch
    rows = list(_c_authors_rows())
    mem = [r for r in rows if "peak training memory" in r.what]
    assert [r.status for r in rows if r not in mem] == ["input"] * 45
    # the two MobileNets: kept channels and inference FLOPs (and two classifier-floor rows)
    assert len([r for r in rows if "ImageNet MobileNet" in r.what]) == 4
    # one step of each authors' ImageNet network against the model's, per Table 1 GPU
    steps = [r for r in rows if "one step of the final network" in r.what]
    assert len(steps) == 4 and all(0.5 < r.published / 100 < 1 for r in steps)
    assert all(isinstance(r.modeled, float) for r in rows)
    # the memory model with the measured activation overhead against the bundled measurement
    assert len(mem) == 6 and all(r.status == "ok" and r.unit == "GiB" for r in mem)
    batch = {r.what: r.modeled for r in rows if "capacity batch" in r.what}
    assert all(b in (64.0, 96.0, 128.0) for b in batch.values()) and len(batch) == 4


def test_classifier_floor_rows_hold_the_authors_and_the_models_networks():
    """One row per authors' network: what they and the model keep at the classifier's input. On
    CIFAR the authors' networks sit near or above the floor (min(channels, classes)) and the
    model's never below it; on ImageNet all five of theirs end below 1000 and the model has no
    floor there (NOT_INTERPOLATED); the bundled runs that end below it are named."""
    from analysis.validation import _c_classifier_floor_rows
    rows = list(_c_classifier_floor_rows())
    nets = [r for r in rows if "classifier's input" in r.what]
    assert len(nets) == 14 and all(r.status == "input" for r in rows)
    for r in nets:
        if "imagenet" in r.what:
            assert r.published < 1000 and "floor there: 0 of" in r.note, r
            continue
        classes = 100 if "cifar100" in r.what else 10
        assert r.published >= 0.75 * classes and r.modeled >= classes, r
    c100 = next(r for r in nets if "cifar100" in r.what)
    c10 = next(r for r in nets if r.what.startswith("vgg11-cifar10-rho0.3"))
    assert c100.published > 3 * c10.published        # the authors' own task effect
    count = rows[-1]
    assert count.unit == "runs" and 0 <= count.modeled <= 5


def test_table4_rows_split_the_dynamic_batch_gain():
    """Table 4 (time reduction with the dynamic mini-batch): a row per capacity rule, and the
    error budget that feeds the engine the published FLOPs and batch steps: there the larger
    batches must save time over the same widths at the initial batch."""
    from sim.system.cluster import load_cluster
    one = {v.CIFAR_GPU: load_cluster(v.CIFAR_GPU).with_devices(1)}
    rows = list(v._c_table4_rows(True, one))      # quick: CIFAR-100 ResNet-50 only
    assert [r.what.split("(")[1].split(")")[0] for r in rows[:3]] == [
        f"{m} capacity" for m in ("relative", "device", "compute")]
    fed = rows[3]
    assert "batch steps" in fed.what and "128 -> 192 @20" in fed.source
    assert all(r.published == 43.0 and 0 < r.modeled < 100 for r in rows)
    added = float(fed.note.split("add ")[1].split(" points")[0])
    assert added > 0
    without = float(fed.note.split("without them ")[1].split(" %")[0])
    # both note values are rounded to 0.1: their sum is within 0.1 of the row's value
    assert fed.modeled == pytest.approx(without + added, abs=0.101)


def test_table1_times_are_the_authors_timing():
    """Table 1's time rows time PruneTrain as the authors' scripts did (timing=authors: the
    penalty's forward left out of each step); a pruned run so timed is shorter than its wall
    time, and the two differ by the penalty's forward kernels alone."""
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import lasso_trajectory, simulate_run
    from sim.workload import load_workload
    assert v._pt_method(0.2, 10).get("timing") == "authors"
    w = load_workload("resnet32")
    cl = load_cluster(v.CIFAR_GPU).with_devices(1)
    tr = lasso_trajectory(w, 0.2, 10, 20, 128)
    runs = {t: simulate_run(w, cl, v._pt_method(0.2, 10, t), epochs=20, batch=128, trajectory=tr)
            for t in ("authors", "wall")}
    a, wall = (runs[t].epochs[-1].iteration for t in ("authors", "wall"))
    assert a.seconds < wall.seconds and a.ops_seconds < wall.ops_seconds
    assert a.compute_seconds - a.ops_seconds == pytest.approx(wall.compute_seconds
                                                              - wall.ops_seconds)


def test_authors_shaped_trajectory_runs_from_dense_to_their_network():
    """The error budget's trajectory in the shape of the authors' ImageNet network: dense before
    the model's first cut, their network at the end, and a larger exponent s prunes later (more
    training FLOPs), which is what the rows bisect on."""
    from sim.system.prunetrain import apply_widths, lasso_trajectory, load_trajectory
    from sim.workload import load_workload
    w = load_workload("resnet50-imagenet")
    final = load_trajectory(v.AUTHORS_DIR / "resnet50-imagenet-02.yaml", w).widths_at(0)
    model = lasso_trajectory(w, 0.2, 5, 90, 256)
    early, late = (v._authors_shaped(w, final, model, 90, 5, s) for s in (0.5, 4.0))
    assert early.widths_at(0) == {x.name: (x.c_in, x.c_out) for x in w.layers}
    assert early.widths_at(89) == late.widths_at(89) == final
    assert v._train_flops_frac(w, early, 90, 5) < v._train_flops_frac(w, late, 90, 5)
    assert apply_widths(w, late.widths_at(10)).macs() > apply_widths(w, early.widths_at(10)).macs()


def test_time_course_rows_split_a_training_flops_miss_into_course_and_end_point():
    """Table 1's two FLOPs columns give the published time course c = (t - f) / (1 - f); the
    error-budget row puts the model's end point on it, and the two shares in the note add up to
    the model's training-FLOPs miss."""
    from analysis.validation import _c_course_rows
    course, fed = _c_course_rows("x", 0.70, 0.56, 0.65, 0.61, "src")
    assert course.published == pytest.approx(0.318, abs=1e-3)
    assert course.modeled == pytest.approx(0.04 / 0.39)
    assert fed.status == "input" and fed.modeled == pytest.approx(100 * (0.61 + 0.14 / 0.44 * 0.39))
    shares = [float(x) for x in re.findall(r"accounts for ([+-][\d.]+) and the final network for "
                                           r"([+-][\d.]+)", course.note)[0]]
    assert sum(shares) == pytest.approx(100 * (0.65 - 0.70), abs=0.11)
    assert shares[0] < 0 < shares[1]    # too fast a course, too wide an end point


def test_third_party_reruns_load_as_shrinking_trajectories_of_the_cifar100_vgg11():
    """research/prunetrain/data/reruns: the channels of two runs of the authors' code at Table 1's CIFAR-100
    VGG-11 setting, read from their logs. Each loads against the workload, starts dense, and no
    point widens a layer (PruneTrain only removes channels)."""
    from sim.system.prunetrain import load_trajectory
    from sim.workload import load_workload
    w = with_classes(load_workload("vgg11-cifar"), 100)
    files = sorted(v.RERUNS_DIR.glob("vgg11-cifar100-rho0.2-*steps.yaml"))
    assert len(files) == 2
    for f in files:
        tr = load_trajectory(f, w)
        epochs = [e for e, _ in tr.points]
        assert epochs[0] == 0 and all(a < b for a, b in zip(epochs, epochs[1:]))
        first = tr.widths_at(0)
        assert all(first[l.name] == (l.c_in, l.c_out) for l in w.layers), f
        for a, b in zip(epochs, epochs[1:]):
            wa, wb = tr.widths_at(a), tr.widths_at(b)
            assert all(wb[n][1] <= wa[n][1] for n in wa), (f, a, b)


def test_rerun_rows_feed_the_engine_each_runs_channels():
    """The rows' engine numbers are the run's own: training FLOPs between the final inference
    FLOPs and dense, c in (0, 1); the run at half the lr x steps an epoch (196) cut less than
    the one at Table 1's 391, as the clock of lr-weighted steps says it should."""
    from sim.system.cluster import load_cluster
    one = {v.CIFAR_GPU: load_cluster(v.CIFAR_GPU).with_devices(1)}
    rows = list(v._c_rerun_rows(one))
    assert len(rows) == 12 and all(r.status == "input" for r in rows)
    by = {(r.what.split(": ")[1].split(",")[0], "otf" if "epoch 150" in r.what else
           "391" if "Table 1's setting" in r.what else "196"): r.modeled for r in rows}
    for s in ("391", "196", "otf"):
        tr, inf = by[("training FLOPs vs dense", s)], by[("inference FLOPs vs dense", s)]
        assert inf < tr < 100 and 0 < by[("pruning time course c", s)] < 1
    assert by[("inference FLOPs vs dense", "196")] > by[("inference FLOPs vs dense", "391")]


def test_v100_times_are_whole_runs_that_agree_where_they_ran_the_same_network():
    """research/prunetrain/data/reruns/vgg11-cifar100-v100-times.yaml: 180 finite positive epoch times per run;
    each pruned run's trajectory file loads; and the runs that trained the same dense network at
    the same batch on the same GPU type (epochs 2-10, before any reconfiguration) time it within
    5 % of each other: a transcription error of an epoch's time would break it."""
    import math
    from sim.system.prunetrain import load_trajectory
    from sim.workload import load_workload
    w = with_classes(load_workload("vgg11-cifar"), 100)
    runs = v._v100_runs()
    assert {"standard", "otf", "dynamic", "tensor", "otf-tensor", "otf-tensor2",
            "dynamic-tensor"} <= set(runs)
    for name, run in runs.items():
        steps = v._run_step_seconds(run)
        assert len(steps) == 180 and all(math.isfinite(x) and x > 0 for x in steps), name
        if "trajectory" in run:
            assert load_trajectory(v.RERUNS_DIR / run["trajectory"], w).points[0][0] == 0
    for group in (("standard", "otf", "dynamic"), ("tensor", "otf-tensor", "otf-tensor2")):
        dense = [v._mean_at(v._run_step_seconds(runs[k]), range(1, 10)) for k in group]
        assert max(dense) / min(dense) < 1.05, (group, dense)


def test_settled_epochs_leave_out_each_intervals_first():
    """The first epoch of every 10 (0-based 0, 10, 20, ...) re-tunes cuDNN after a
    reconfiguration or restart and is left out of the step-time means."""
    assert v._settled(range(0, 21)) == [e for e in range(1, 20) if e != 10]
    assert v._mean_at([9.0] + [1.0] * 9 + [9.0] + [3.0] * 9, range(20)) == 2.0


def test_v100_rows_compare_the_engine_with_each_measured_run():
    """Engine vs the V100 logs: the dense step is one computed row; each fp32 pruned run gives a
    pruned/dense ratio below 1 on both sides; the 196-step runs are measured only (precision
    not logged); the slope row relates the two over the settled epochs."""
    rows = list(v._c_v100_measured_rows())
    assert len(rows) == 8
    r50 = rows.pop()
    assert r50.unit == "img/s" and r50.status == "ok" and r50.modeled > 0
    dense, otf, whole, dyn, slope = rows[:5]
    assert dense.unit == "ms" and dense.status == "ok" and dense.modeled > 0
    for r in (otf, whole, dyn):
        assert r.status == "ok" and 0 < r.published < 1 and 0 < r.modeled < 1, r.what
    assert "otf.txt" in otf.what and "dynamic.txt" in dyn.what
    assert slope.status == "qualitative" and 0 < slope.modeled < 2
    assert all(r.status == "not-modeled" and r.modeled is None and 0 < r.published < 1.1
               for r in rows[5:])


def test_lasso_coefficient_rows_compute_the_models_lambda_with_the_fits_ce0():
    """The stored-coefficient rows: one per PUB_C_LASSO_COEFF entry, the model's lambda (R0 at
    the He fan-out init, CE0 = ln(classes) + Fit.ce0_offset), and the ln(classes) value in the
    note; the first-CE row sets the fit's CE0 at 100 classes against the third-party records'
    logged ones."""
    from sim.system.prunetrain_model import (PAPER_INIT, bundled_fit, init_group_norms,
                                             lambda_per_norm)
    from sim.workload import load_workload
    rows = list(v._c_lasso_coeff_rows())
    offset = bundled_fit().ce0_offset
    assert len(rows) == len(v.PUB_C_LASSO_COEFF) == 3
    for r, (path, wl, classes, rho, lam) in zip(rows, v.PUB_C_LASSO_COEFF):
        w = with_classes(load_workload(wl), classes)
        r0, g = init_group_norms(w, PAPER_INIT)
        assert r.published == lam and r.status == "ok" and path in r.note
        assert r.modeled == pytest.approx(lambda_per_norm(w, rho, PAPER_INIT, offset) * r0 / g)
        assert f"{lambda_per_norm(w, rho, PAPER_INIT) * r0 / g:.3g}" in r.note
    (ce,) = list(v._c_first_ce_row())
    assert ce.status == "input" and ce.modeled == round(np.log(100) + offset, 3)
    assert np.log(100) < ce.published < 1.15 * np.log(100)


def test_first_ce_init_rows_set_the_model_against_each_measurement(tmp_path, monkeypatch):
    """One row per measurement in the record (research.prunetrain.first_ce): measured first CE against
    ln(classes) + the fit's offset; a record without a field is one error naming the file."""
    from sim.errors import ConfigError
    from sim.system.prunetrain_model import bundled_fit
    rows = list(v._c_first_ce_init_rows())
    doc = yaml.safe_load(v.FIRST_CE_FILE.read_text())
    assert len(rows) == len(doc["measurements"]) > 0
    for r, m in zip(rows, doc["measurements"]):
        assert r.published == m["first_ce"] and r.status == "input"
        assert r.modeled == pytest.approx(np.log(m["classes"]) + bundled_fit().ce0_offset)
        assert f"{m['workload']} at {m['classes']} classes" in r.what
    bad = tmp_path / "first-ce.yaml"
    bad.write_text("schema: 1\nmeasurements:\n  - {workload: resnet32, classes: 10}\n")
    monkeypatch.setattr(v.prunetrain, "FIRST_CE_FILE", bad)   # the module that reads it
    with pytest.raises(ConfigError, match="first_ce"):
        list(v._c_first_ce_init_rows())


def test_batch_rule_rows_put_the_authors_shape_against_the_published_last_step():
    """The rule's error budget: per data set and rule, the share of the dense per-sample
    activations (relative) or MACs (compute) that the published last step allows, a range
    b0 / (B + 32) .. b0 / B, against the published final inference FLOPs times each authors'
    network's ratio of that share to its inference share (the median shown)."""
    import statistics

    from sim.methods.prunetrain import authors_macs
    from sim.system.cluster import load_cluster
    from sim.system.memory import footprint
    from sim.system.prunetrain import apply_widths, load_trajectory
    from sim.workload import load_workload
    one = {c: load_cluster(c).with_devices(1) for c in (v.CIFAR_GPU, v.IMAGENET_GPU)}
    rows = list(v._c_batch_rule_rows(one))
    assert len(rows) == 2 * len(v.PUB_C_BATCH)
    w = load_workload("resnet50-imagenet")
    nets = [apply_widths(w, load_trajectory(f, w).widths_at(0))
            for f in sorted(v.AUTHORS_DIR.glob("resnet50-imagenet-*.yaml"))]
    inf = [n.macs() / w.macs() for n in nets]
    act = [footprint(n, 8, 4).activations / footprint(w, 8, 4).activations for n in nets]
    mac = [authors_macs(n, 8) / authors_macs(w, 8) for n in nets]
    for (label, wl, classes, rho, *_, b0, sched), pair in zip(v.PUB_C_BATCH,
                                                             zip(rows[::2], rows[1::2])):
        pinf = next(r[9] for r in v.PUB_C_TABLE1 if (r[1], r[2], r[3]) == (wl, classes, rho))
        b = sched[-1][1]
        for row, share, rule in zip(pair, (act, mac), ("relative", "compute")):
            assert row.what.startswith(label) and f"{rule} rule" in row.what
            assert row.lo_hi == pytest.approx((b0 / (b + 32), b0 / b))
            assert row.modeled == pytest.approx(
                statistics.median(pinf * s / i for s, i in zip(share, inf)))
            assert row.status == "input"
