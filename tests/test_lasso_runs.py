"""The real PruneTrain runs (research.prunetrain.runs and .grids): the Fashion-MNIST loader, the
init option, the batched shift augmentation and rebuilding a run file from its per-epoch log."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from sim.capture.datasets import FASHION_FILE, load_dataset  # noqa: E402
from sim.errors import CaptureError  # noqa: E402
from research.prunetrain.runs import RunConfig, _he_fan_out, _shifted, run_one  # noqa: E402
from sim.system.prunetrain_model import KindFit, init_group_norms, init_scale  # noqa: E402
from sim.workload import load_workload  # noqa: E402



def _fake_fashion(directory: Path, n: int = 50) -> None:
    rng = np.random.default_rng(0)
    np.savez_compressed(directory / FASHION_FILE, x=rng.integers(0, 256, (n, 28, 28), np.uint8),
                        y=(np.arange(n) % 10).astype(np.uint8), source=np.str_("test"))


def test_fashion_dataset_reads_the_fetched_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PRUNESIM_DATA", str(tmp_path))
    with pytest.raises(CaptureError, match="fetch_fashion_mnist"):
        load_dataset("fashion", (3, 16, 16))
    _fake_fashion(tmp_path)
    d = load_dataset("fashion", (3, 16, 16))
    assert d.x_train.shape == (40, 3, 16, 16) and d.classes == 10
    assert "Fashion-MNIST" in d.info["source"]
    (tmp_path / FASHION_FILE).write_bytes(b"not a zip")
    with pytest.raises(CaptureError, match=FASHION_FILE):
        load_dataset("fashion", (1, 28, 28))
    np.savez_compressed(tmp_path / FASHION_FILE, x=np.zeros((4, 8, 8), np.uint8),
                        y=np.zeros(4, np.uint8), source=np.str_("t"))
    with pytest.raises(CaptureError, match="28 x 28"):
        load_dataset("fashion", (1, 28, 28))


def _shifted_reference(xb, shift, gen):
    """The per-offset loop the batched gather replaced (same random draws)."""
    h, w = xb.shape[-2:]
    pad = torch.nn.functional.pad(xb, (shift, shift, shift, shift))
    off = torch.randint(0, 2 * shift + 1, (2, xb.shape[0]), generator=gen)
    out = torch.empty_like(xb)
    for dy in range(2 * shift + 1):
        for dx in range(2 * shift + 1):
            sel = ((off[0] == dy) & (off[1] == dx)).nonzero(as_tuple=True)[0]
            if len(sel):
                out[sel] = pad[sel, :, dy:dy + h, dx:dx + w]
    return out


@pytest.mark.parametrize("shift", [1, 2, 4])
def test_shift_gather_equals_the_offset_loop(shift):
    x = torch.randn(33, 3, 9, 7)
    got = _shifted(x, shift, torch.Generator().manual_seed(5))
    want = _shifted_reference(x, shift, torch.Generator().manual_seed(5))
    assert torch.equal(got, want)


@pytest.mark.parametrize("workload", ["resnet32", "vgg11-cifar"])
def test_he_fan_out_group_norms_match_the_analytic_sum(workload):
    """The model's analytic R0 for the authors' init is what a sampled network has (and 2.2-2.3x
    PyTorch's default: lambda is that much smaller at the same rho)."""
    from sim.capture.methods import group_lasso_torch
    from sim.capture.torchnet import build_model
    wl = load_workload(workload)
    torch.manual_seed(0)
    m = build_model(wl)
    with torch.no_grad():
        r_torch = float(group_lasso_torch(m, wl))
        _he_fan_out(m)
        r_he = float(group_lasso_torch(m, wl))
    assert r_torch == pytest.approx(init_group_norms(wl)[0], rel=0.03)
    assert r_he == pytest.approx(init_group_norms(wl, "he_fan_out")[0], rel=0.03)
    assert 2.0 < init_scale(wl, "he_fan_out") < 2.5
    with pytest.raises(ValueError, match="init"):
        init_group_norms(wl, "xavier")


def test_init_scale_exponent_keeps_more_channels():
    k = KindFit(a=5.0, u_on=0.0, u_scale=1.0, delta=1.0)
    end = [float(k.keep(0.25, [1e9], scale=s)[0]) for s in (1.0, 2.3)]
    assert end[1] > end[0]
    assert end[0] == pytest.approx(math.exp(-5.0 / 3.0))
    assert float(KindFit(a=5.0, u_on=0.0, u_scale=1.0).keep(0.25, [1e9], scale=2.3)[0]) == end[0]


def test_run_records_its_init_and_the_log_rebuilds_the_run_file(tmp_path):
    """A tiny CPU run: the He fan-out init gives a smaller lambda than PyTorch's default at the
    same rho; the per-epoch log streamed during the run rebuilds its widths, lambda and R0."""
    from research.prunetrain import grids as pr
    torch.set_num_threads(1)
    base = dict(dataset="digits", size=8, epochs=4, batch=32, lr=0.1, epoch_steps=3)
    lam = {}
    for init in ("torch", "he_fan_out"):
        cfg = RunConfig("resnet20", 0.25, 2, init=init, **base)
        recs = []
        doc = run_one(cfg, log=recs.append)
        assert doc["run"]["init"] == init and ("hefanout" in cfg.name) == (init != "torch")
        lam[init] = doc["run"]["lambda"]
        assert recs[0]["header"]["lambda"] == lam[init]
        assert [r["epoch"] for r in recs[1:]] == [0, 1, 2, 3]
        log = tmp_path / f"{cfg.name}.jsonl"
        log.write_text("".join(json.dumps(r) + "\n" for r in recs))
        rebuilt = pr.doc_from_log(log, cfg, "test")
        assert rebuilt["points"] == doc["points"]
        assert rebuilt["run"]["lambda"] == pytest.approx(lam[init], rel=1e-9)
        assert rebuilt["run"]["first_group_norm"] == pytest.approx(
            doc["run"]["first_group_norm"], rel=1e-5)
        assert rebuilt["run"]["first_ce"] == pytest.approx(doc["run"]["first_ce"], rel=1e-5)
    assert 2.0 < lam["torch"] / lam["he_fan_out"] < 2.6


def _one_image_per_label(monkeypatch, name: str, classes: int) -> None:
    """load_dataset -> a dataset `name` with one blank 8 x 8 image per label, train and val alike."""
    import sim.capture.datasets as dsm
    labels = np.arange(classes, dtype=np.int64)
    fake = dsm.Dataset(name, np.zeros((classes, 3, 8, 8), np.float32), labels,
                       np.zeros((classes, 3, 8, 8), np.float32), labels.copy(), classes, {})
    monkeypatch.setattr(dsm, "load_dataset", lambda name, shape: fake)


def test_coarse_labels_are_cifar10s_two_super_classes(monkeypatch):
    """coarse=True: vehicles (airplane, automobile, ship, truck) -> 1, animals -> 0, in the
    training and the validation labels; only CIFAR-10 has that split."""
    from research.prunetrain.runs import RunConfig, _training_data
    from sim.workload import load_workload
    _one_image_per_label(monkeypatch, "cifar10", 10)
    cfg = RunConfig("resnet20", 0.25, 10, dataset="cifar10", size=8, coarse=True)
    ds, x, y = _training_data(cfg, load_workload("resnet20"))
    want = [1, 1, 0, 0, 0, 0, 0, 0, 1, 1]
    assert y.tolist() == want and ds.y_val.tolist() == want and x.shape[0] == 10
    assert cfg.name.endswith("-coarse2")
    with pytest.raises(ValueError, match="CIFAR-10"):
        _training_data(RunConfig("resnet20", 0.25, 10, dataset="digits", coarse=True),
                       load_workload("resnet20"))


def test_temperature_and_natural_image_terms_act_on_natural_images_only():
    """k_inf's pressure x e^(-nu X) (psl / PAPER_PSL)^(eta X): a natural-image run at 8x the
    paper's per-sample lr prunes deeper than at 1x; nu keeps natural images at 1x above the
    others; a run on other data (X = 0) sees neither term."""
    k = KindFit(a=2.0, u_on=0.0, u_scale=1.0, nu=0.5, eta=1.0)
    end = lambda **kw: float(k.keep(0.25, [1e9], **kw)[0])      # noqa: E731
    base = KindFit(a=2.0, u_on=0.0, u_scale=1.0)
    assert end(natural=1.0, temp=8.0) < end(natural=1.0, temp=1.0)
    assert end(natural=1.0, temp=1.0) > end()
    assert end(natural=0.0, temp=8.0) == end() == float(base.keep(0.25, [1e9])[0])
    assert end(natural=1.0, temp=1.0) == pytest.approx(math.exp(-2.0 / 3.0 * math.exp(-0.5)))


def test_cifar10_fashion_union_has_twenty_balanced_classes(tmp_path, monkeypatch):
    """cifar10fashion: CIFAR-10's images with labels 0-9, Fashion-MNIST's with 10-19 (grey made
    colour), CIFAR-10's official split kept and per-class counts capped alike; its validation
    images are none of its training images."""
    import sim.capture.datasets as dsm
    monkeypatch.setattr(dsm, "UNION_TRAIN", 3)
    monkeypatch.setattr(dsm, "UNION_VAL", 1)
    monkeypatch.setattr(dsm, "_cifar10", lambda: (
        np.zeros((40, 3, 32, 32), np.float32), np.arange(40) % 10,
        {"source": "c", "file": "c.npz", "official_train": 30}))
    xf = np.broadcast_to(np.arange(60, dtype=np.float32)[:, None, None], (60, 28, 28)).copy()
    monkeypatch.setattr(dsm, "_fashion", lambda: (xf, np.arange(60) % 10,
                                                  {"source": "f", "file": "f.npz"}))
    x, y, info = dsm._cifar10_fashion()
    assert x.shape == (30 + 30 + 10 + 10, 3, 32, 32) and info["official_train"] == 60
    assert np.bincount(y[:60]).tolist() == [3] * 10 + [3] * 10
    assert np.bincount(y[60:], minlength=20).tolist() == [1] * 20
    fashion_train, fashion_val = set(x[30:60, 0, 0, 0]), set(x[70:, 0, 0, 0])
    assert not fashion_train & fashion_val
    assert all(int(v) % 10 == lab - 10 for v, lab in zip(x[30:60, 0, 0, 0], y[30:60]))
    assert (x[30:60, 0] == x[30:60, 2]).all()


def test_folded_labels_are_the_unions_labels_mod_ten(monkeypatch):
    """fold=True: the 20-class union's labels folded to 10 for the 10-way workload (the 20-class
    run's control); the 20 labels refused by a 10-way workload; fold only on the union."""
    from research.prunetrain.runs import _training_data
    _one_image_per_label(monkeypatch, "cifar10fashion", 20)
    cfg = RunConfig("resnet20", 0.25, 10, dataset="cifar10fashion", size=8, fold=True)
    ds, x, y = _training_data(cfg, load_workload("resnet20"))
    assert y.tolist() == list(range(10)) * 2 and ds.y_val.tolist() == y.tolist()
    assert ds.classes == 10 and cfg.name.endswith("-fold10")
    with pytest.raises(ValueError, match="20 labels"):
        _training_data(RunConfig("resnet20", 0.25, 10, dataset="cifar10fashion", size=8),
                       load_workload("resnet20"))
    ds, x, y = _training_data(RunConfig("resnet20-c20", 0.25, 10, dataset="cifar10fashion",
                                        size=8), load_workload("resnet20-c20"))
    assert int(y.max()) == 19
    with pytest.raises(ValueError, match="mod 10"):
        _training_data(RunConfig("resnet20", 0.25, 10, dataset="cifar10", fold=True),
                       load_workload("resnet20"))


def test_turned_cifar10_labels_are_class_plus_ten_quarter_turns(monkeypatch):
    """cifar10rot: image i is CIFAR-10's image i turned by k_i quarter turns (a seeded draw,
    every k in 0-3 used), labelled class + 10 k_i: 40 labels; the official split is kept."""
    import sim.capture.datasets as dsm
    x0 = np.random.default_rng(0).random((60, 3, 4, 4)).astype(np.float32)
    y0 = np.arange(60) % 10
    monkeypatch.setattr(dsm, "_cifar10", lambda: (
        x0.copy(), y0.copy(), {"source": "c", "file": "c.npz", "official_train": 50}))
    x, y, info = dsm._cifar10_rot()
    k = y // 10
    assert (y % 10 == y0).all() and sorted(set(k.tolist())) == [0, 1, 2, 3]
    assert all(np.array_equal(np.rot90(x0[i], k[i], axes=(1, 2)), x[i]) for i in range(60))
    assert info["official_train"] == 50 and "quarter turns" in info["source"]
    again = dsm._cifar10_rot()
    assert np.array_equal(again[1], y)


def test_turned_cifar10_labels_fold_to_cifar10s_classes(monkeypatch):
    """fold=True on cifar10rot: its 40 labels mod 10 (the class alone, the turned images kept):
    the 40-label run's control; the 40-way workload takes the 40 labels."""
    from research.prunetrain.runs import _training_data
    _one_image_per_label(monkeypatch, "cifar10rot", 40)
    cfg = RunConfig("resnet20", 0.25, 10, dataset="cifar10rot", size=8, fold=True)
    ds, x, y = _training_data(cfg, load_workload("resnet20"))
    assert y.tolist() == list(range(10)) * 4 and ds.classes == 10
    ds, x, y = _training_data(RunConfig("resnet20-c40", 0.25, 10, dataset="cifar10rot", size=8),
                              load_workload("resnet20-c40"))
    assert int(y.max()) == 39
    with pytest.raises(ValueError, match="40 labels"):
        _training_data(RunConfig("resnet20-c20", 0.25, 10, dataset="cifar10rot", size=8),
                       load_workload("resnet20-c20"))


def test_a_union_counts_its_share_of_natural_images():
    from sim.system.prunetrain_model import natural_images
    assert natural_images("cifar10") == 1.0 and natural_images("fashion") == 0.0
    assert natural_images("cifar10fashion") == 0.5 and natural_images(None) == 0.0
    assert natural_images("cifar10rot") == 1.0


def test_expansion_is_node_width_over_block_width():
    """E (expansion): 1 for basic-block ResNets and for VGG (no residual nodes), 4 for the
    bottleneck networks, whose residual nodes are 4x the convs inside a block."""
    from sim.system.prunetrain_model import expansion
    assert expansion(load_workload("resnet20")) == pytest.approx(1.0)
    assert expansion(load_workload("resnet18-cifar")) == pytest.approx(1.0)
    assert expansion(load_workload("vgg11-cifar")) == 1.0
    for name in ("resnet29-bottleneck", "resnet50-cifar", "resnet50-imagenet", "resnet50-bt-cifar"):
        assert expansion(load_workload(name)) == pytest.approx(4.0)


def test_expansion_terms_scale_the_pressure_and_the_clock():
    """k_inf's pressure x E^xi: xi > 0 prunes a bottleneck network's kind deeper, xi < 0 keeps
    more, and E = 1 (basic blocks) is unchanged by any xi."""
    end = lambda xi, ex: float(KindFit(a=2.0, u_on=0.0, u_scale=1.0, xi=xi)   # noqa: E731
                               .keep(0.25, [1e9], expansion=ex)[0])
    assert end(1.0, 4.0) < end(0.0, 4.0) < end(-1.0, 4.0)
    assert end(1.0, 1.0) == end(0.0, 1.0) == end(-1.0, 1.0)
    assert end(0.5, 4.0) == pytest.approx(math.exp(-2.0 / 3.0 * 2.0))
    # the clock term: a bottleneck's kind reaches the same k_inf sooner (xi_clock > 0) or later
    mid = lambda xc, ex: float(KindFit(a=2.0, u_on=0.0, u_scale=1.0, xi_clock=xc)  # noqa: E731
                               .keep(0.25, [0.5], expansion=ex)[0])
    assert mid(1.0, 4.0) < mid(0.0, 4.0) < mid(-1.0, 4.0)
    assert mid(1.0, 1.0) == mid(0.0, 1.0)
