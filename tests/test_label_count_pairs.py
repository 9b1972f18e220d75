"""The held-out label-count pair at 40 labels (research/prunetrain/data/held-out/labels40,
`python -m research.prunetrain.grids --grid labels40`): ResNet-20 on 16 x 16 CIFAR-10 with
quarter-turn labels (cifar10rot) and its control on the same turned images with the class alone;
what they measured and their validation rows (analysis.validation.prunetrain._c_labels40_rows)."""
import math

import pytest

from analysis.validation.prunetrain import _c_labels40_rows, labels40_run_files
from research.prunetrain import fitting as lm

TAIL = "rho0.25-i10-e182-b32-lr0.2-s196-fixedb-aug2"
FORTY = f"resnet20-c40-cifar10rot16-{TAIL}-hefanout"
CONTROL = f"resnet20-cifar10rot16-{TAIL}-fold10-hefanout"


def _held_out(name: str, folder: str = "labels40") -> lm.RunData:
    return lm.read_run(lm.HELD_OUT_DIR / folder / f"{name}.yaml")


def test_forty_turn_labels_keep_more_than_their_folded_control():
    """On the same turned images, 40 labels (class and turn) end with more residual-node channels
    than the class alone (0.357 against 0.196; at seed 1 0.286 against 0.214) and more plain
    channels (0.104 against 0.062; 0.074 against 0.054), the sign of the model's task term; the
    20-label union pair (bundled) measured the other sign."""
    for seed in ("", "-seed1"):
        forty, control = _held_out(FORTY + seed), _held_out(CONTROL + seed)
        assert (forty.classes, control.classes, forty.head, control.head) == (40, 10, 40, 10)
        assert forty.keep_residual[-1] > control.keep_residual[-1] + 0.05
        assert forty.keep_plain[-1] > control.keep_plain[-1] + 0.01
    union = lm.read_run(lm.RUNS_DIR / f"resnet20-c20-cifar10fashion16-{TAIL}-flip-hefanout.yaml")
    folded = lm.read_run(lm.RUNS_DIR
                         / f"resnet20-cifar10fashion16-{TAIL}-flip-fold10-hefanout.yaml")
    assert union.keep_residual[-1] < folded.keep_residual[-1]
    assert union.keep_plain[-1] < folded.keep_plain[-1]


def test_the_model_predicts_the_pairs_difference_but_not_its_level():
    """The stored fit (not fitted to either run) gives the pair's node difference within 0.05
    (+0.146 against +0.161 measured) and the plain one's sign; both runs end far below it
    (nodes 0.62 / 0.48 modeled against 0.36 / 0.20): the turned images without flips prune deeper
    than anything the model has an input for."""
    fit = lm.bundled_fit()
    forty, control = _held_out(FORTY), _held_out(CONTROL)
    for res in (False, True):
        measured = (forty.keep_residual if res else forty.keep_plain)[-1] - (
            control.keep_residual if res else control.keep_plain)[-1]
        modeled = fit.keep_run(forty, res)[-1] - fit.keep_run(control, res)[-1]
        assert modeled > 0 and measured > 0
        if res:
            assert modeled == pytest.approx(measured, abs=0.05)
    for r in (forty, control):
        assert fit.keep_run(r, True)[-1] > r.keep_residual[-1] + 0.2


def test_no_flips_and_turned_images_each_cut_the_nodes_deeper():
    """CIFAR-10 itself on the pair's setting without flips (`--grid labels40-noflip`) keeps fewer
    residual-node channels than its bundled twin with flips (0.42 against 0.60), and the turned
    images with the class alone fewer again (0.20): the turned pair's level below the model is
    about half the flips' absence, half the turns."""
    noflip = _held_out(f"resnet20-cifar10-16-{TAIL}-hefanout")
    flips = lm.read_run(lm.RUNS_DIR / f"resnet20-cifar10-16-{TAIL}-flip-hefanout.yaml")
    control = _held_out(CONTROL)
    assert noflip.dataset == "cifar10" and noflip.classes == 10
    assert flips.keep_residual[-1] > noflip.keep_residual[-1] + 0.1
    assert noflip.keep_residual[-1] > control.keep_residual[-1] + 0.1
    assert flips.keep_plain[-1] > noflip.keep_plain[-1] > control.keep_plain[-1] + 0.05


def test_learned_nats_are_the_labels_information_less_the_high_lr_ce():
    """RunData.learned = ln(labels) - D ln(head): the 40-label run learns more nats of its labels
    than its control, the coarse run (2 labels on a 10-way head) less than a nat."""
    forty, control = _held_out(FORTY), _held_out(CONTROL)
    assert forty.learned == pytest.approx(math.log(40) - forty.difficulty * math.log(40))
    assert forty.learned > control.learned > 0
    coarse = lm.read_run(lm.RUNS_DIR / f"resnet20-cifar10-16-{TAIL}-flip-coarse2-hefanout.yaml")
    assert coarse.head == 10 and 0 < coarse.learned == pytest.approx(
        math.log(2) - coarse.difficulty * math.log(10))


def test_labels40_rows_are_the_runs_against_the_stored_fit():
    """Three rows per run (first plain cut, last kept per kind) and two per seed with both runs
    of the pair (its differences); the measured values are the runs' own, the modeled ones the
    stored fit's."""
    rows = list(_c_labels40_rows())
    runs = labels40_run_files()
    pairs = sum(1 for p in runs if "fold10" in p.name
                and p.with_name(p.name.replace("resnet20-", "resnet20-c40-")
                                .replace("-fold10", "")).exists())
    assert len(runs) >= 2 and pairs >= 1 and len(rows) == 3 * len(runs) + 2 * pairs
    assert all(r.status == "input" for r in rows)
    fit = lm.bundled_fit()
    forty = _held_out(FORTY)
    node = next(r for r in rows
                if "40 quarter-turn labels, rho 0.25" in r.what and "residual nodes" in r.what)
    assert node.published == round(float(forty.keep_residual[-1]), 3)
    assert node.modeled == round(float(fit.keep_run(forty, True)[-1]), 3)
    diff = next(r for r in rows if "labels at rho 0.25: last kept" in r.what and "nodes" in r.what)
    assert diff.published == pytest.approx(0.161, abs=0.001)


def test_a_weak_lasso_at_forty_labels_prunes_like_its_control_not_below_a_risen_threshold():
    """The pair at rho 0.05 (held-out/labels40-weak): with 40 labels the plain spaces end
    below their folded control (0.696 against 0.726) and start no later (first cut at epoch 31
    against 34), so the lasso threshold does not rise with the labels (a threshold x T^0.6,
    which would put ImageNet's at rho 0.1, keeps ~0.88 of the 40-label run's plain channels);
    the nodes keep more with more labels (1.00 against 0.92), as at rho 0.25. The stored fit,
    whose threshold is on P alone, predicted both plain ends within 0.01 and both onsets within
    5 epochs."""
    forty = _held_out(FORTY.replace("rho0.25", "rho0.05"), "labels40-weak")
    control = _held_out(CONTROL.replace("rho0.25", "rho0.05"), "labels40-weak")
    assert forty.rho == control.rho == 0.05 and (forty.classes, control.classes) == (40, 10)
    assert forty.keep_plain[-1] < control.keep_plain[-1]
    assert lm.first_cut(forty.keep_plain) <= lm.first_cut(control.keep_plain)
    assert forty.keep_residual[-1] > control.keep_residual[-1] + 0.05
    fit = lm.bundled_fit()
    for r in (forty, control):
        assert fit.keep_run(r, False)[-1] == pytest.approx(r.keep_plain[-1], abs=0.02)
        assert abs(lm.first_cut(fit.keep_run(r, False)) - lm.first_cut(r.keep_plain)) <= 5
