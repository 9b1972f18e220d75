"""In-training (PyTorch) methods: agreement with the offline kernels, and training properties."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from sim.capture import methods as CM  # noqa: E402
from sim.capture.torchnet import build_model  # noqa: E402
from sim.errors import CaptureError  # noqa: E402
from sim.methods import approx as A  # noqa: E402
from sim.methods import dbtd as D  # noqa: E402
from sim.methods import nm as NM  # noqa: E402
from sim.methods import torch_ops as T  # noqa: E402
from sim.methods.prunetrain import group_lasso_norm  # noqa: E402
from sim.methods.rng import stream_key, uniform_np, uniform_torch  # noqa: E402
from sim.traces.format import open_trace  # noqa: E402
from sim.workload import load_workload, workload_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces" / "sample-resnet20-mnist5k"


def heavy(shape, seed=0, density=0.6, ties=False):
    """Student-t(3) values, ReLU-like zeros; `ties` rounds to few levels so |x| ties are common."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=shape) * 1e-3
    x *= rng.random(shape) < density
    if ties:
        x = np.round(x * 2e3) / 2e3
    return x.astype(np.float32)


def real_tensors(max_n=None):
    """(layer, iteration, float32 dO) of the bundled real trace, conv layers only."""
    t = open_trace(SAMPLE)
    out = []
    for rec, arr in t.stream("dO"):
        if arr.ndim == 4:
            out.append((rec.layer, rec.iteration, np.array(arr, dtype=np.float32)))
    return out[:max_n]


def synthetic():
    return [heavy((2, 16, 8, 8), s) for s in range(6)] + [heavy((3, 10, 5, 7), 9),
                                                           heavy((2, 36, 4, 4), 11, ties=True)]


# ---- agreement: offline kernel vs torch twin ----------------------------------------------------


def test_uniform_stream_matches():
    for key in (0, 1, 0xDEADBEEF, stream_key(7, 3, 11)):
        want = uniform_np(key, np.arange(5000))
        assert np.array_equal(T.uniform_flat(key, 5000).numpy(), want)
        assert np.array_equal(uniform_torch(key, torch.arange(5000)).numpy(), want)


def test_dbtd_agreement_synthetic_and_real():
    cases = [(f"syn{i}", 0, g) for i, g in enumerate(synthetic())] + real_tensors()
    tau_differs = 0
    for i, (name, it, g) in enumerate(cases):
        for p in (0.9, 0.99):
            key = stream_key(0, i, it)
            off = D.dbtd(g, p, key, build_csr=False)
            tau_off = np.float32(off.extra["tau"])
            # given the same tau the pruned tensors are bit-identical
            got = T.stochastic_prune_torch(torch.from_numpy(g), torch.tensor(tau_off), key).numpy()
            assert np.array_equal(got.view(np.uint32), off.pruned.view(np.uint32)), name
            pruned, tau = T.dbtd_torch(torch.from_numpy(g), p, key)
            if tau.item() != tau_off:
                tau_differs += 1
                assert abs(tau.item() - tau_off) <= np.spacing(tau_off)
            else:
                assert np.array_equal(pruned.numpy(), off.pruned), name
    # float64 sums in another order: tau moves only on a float32 rounding boundary; on these
    # 2 x (8 synthetic + 63 real) tensors it never did (docs/reference/methods.md)
    assert tau_differs == 0


def test_topk_agreement():
    for g in synthetic()[-2:] + [real_tensors(3)[2][2]]:
        for keep in (0.01, 0.1, 0.5):
            off = D.topk(g, keep, build_csr=False).pruned
            assert np.array_equal(T.topk_torch(torch.from_numpy(g), keep).numpy(), off)


@pytest.mark.parametrize("mode", ["random", "mag"])
def test_sdgp_random_mag_bit_exact(mode):
    cases = synthetic() + [g for _, _, g in real_tensors()[1::4]]
    for i, g in enumerate(cases):
        for nm in ("2:4", "1:4", "4:32", "3:8"):
            key = stream_key(3, i, 5)
            off = NM.sdgp(g, nm, mode, key).pruned
            got = T.nm_prune_torch(torch.from_numpy(g), nm, mode, key).numpy()
            assert np.array_equal(got.view(np.uint32), off.view(np.uint32)), (i, nm)


@pytest.mark.parametrize("rescale", ["sample-channel", "channel"])
def test_sdgp_resmag_within_tolerance(rescale):
    cases = synthetic() + [g for _, _, g in real_tensors()[1::4]]
    exact = total = 0
    for i, g in enumerate(cases):
        for nm in ("2:4", "4:32"):
            off = NM.sdgp(g, nm, "resmag", 0, rescale=rescale).pruned
            got = T.nm_prune_torch(torch.from_numpy(g), nm, "resmag", 0, rescale).numpy()
            # same mask; the scale is a float64 ratio of sums taken in another order, cast to
            # float32: at most 1 ulp of the scale, so 2 ulp of the product
            assert np.array_equal(got != 0, off != 0)
            np.testing.assert_array_max_ulp(got, off, maxulp=2)
            exact += int(np.array_equal(got, off))
            total += 1
    assert exact >= 0.8 * total  # in practice all of them (docs/reference/methods.md)


def test_approx_picks_agreement():
    cases = synthetic() + [g for _, _, g in real_tensors()[::3]]
    for g in cases:
        for k in (1, 3):
            off = A.approx(g, k).pick
            idx, val = T.channel_picks_torch(torch.from_numpy(g), k)
            assert np.array_equal(idx.numpy(), off.index)
            np.testing.assert_array_max_ulp(val.numpy(), off.value, maxulp=1)
        dense = T.approx_dO_torch(torch.from_numpy(g), 1).numpy()
        ref = A.picks_to_dense(A.approx(g, 1).pick, g.shape)
        np.testing.assert_array_max_ulp(dense, ref, maxulp=1)


def test_random_dw_agreement():
    exact = total = 0
    for key in (1, 2, stream_key(0, 5, 9)):
        off = A.random_dw((16, 8, 3, 3), 64, key).pruned
        got = T.random_dw_torch((16, 8, 3, 3), 64, key).numpy()
        np.testing.assert_array_max_ulp(got, off, maxulp=2)
        exact += int((got == off).sum())
        total += got.size
    # both sides compute in float64 and round once to float32: in practice bit-exact
    assert exact / total > 0.99


# ---- module level: what each backward computes ---------------------------------------------------


def _step(key=5, scheduled=True, batch=4, stats=None):
    def stat(kind, t, nnz=None, numel=None):
        if stats is not None:
            stats.append((kind, t))
    return lambda: CM.Step(key, 0, 0, batch, scheduled, "c", stat)


def _conv_pair(method, step):
    torch.manual_seed(0)
    ref = nn.Conv2d(8, 12, 3, padding=1, bias=True)
    mod = nn.Conv2d(8, 12, 3, padding=1, bias=True)
    mod.load_state_dict(ref.state_dict())
    T.MethodConv2d.adopt(mod, method, step)
    x = torch.randn(4, 8, 6, 6)
    dO = torch.randn(4, 12, 6, 6)
    out = []
    for m in (ref, mod):
        xi = x.clone().requires_grad_(True)
        m(xi).backward(dO)
        out.append((xi.grad, m.weight.grad, m.bias.grad))
    return x, dO, out, mod


def test_sdgp_wgc_uses_dense_dO_agbp_pruned():
    x, dO, ((dI0, dW0, db0), (dI1, dW1, db1)), mod = _conv_pair(T.SdgpMethod("2:4", "mag"), _step())
    args = (1, 1, 1, 1)
    assert torch.equal(dW1, torch.nn.grad.conv2d_weight(x, dW0.shape, dO, *args))
    torch.testing.assert_close(dW1, dW0)  # the dense dW (another conv algorithm: last bits)
    torch.testing.assert_close(db1, db0)
    pruned = T.nm_prune_torch(dO, "2:4", "mag")
    assert torch.equal(dI1, torch.nn.grad.conv2d_input(x.shape, mod.weight, pruned, *args))
    assert (dI1 - dI0).abs().max() > 1e-3


def test_wang_only_scheduled_pairs_change_dW():
    for kind in ("zero", "random", "approx"):
        for sched in (True, False):
            x, dO, ((dI0, dW0, _), (dI1, dW1, _)), mod = _conv_pair(T.WangMethod(kind),
                                                                  _step(7, sched, 4))
            torch.testing.assert_close(dI1, dI0)  # AGBP exact
            if not sched:
                assert torch.equal(dW1, dW0)       # native backward, untouched
            elif kind == "zero":
                assert not dW1.any()
            elif kind == "random":
                want = A.random_dw(tuple(dW0.shape), 4, 7).pruned
                np.testing.assert_array_max_ulp(dW1.numpy(), want, maxulp=2)
            else:
                g = T.approx_dO_torch(dO)
                assert torch.equal(dW1, torch.nn.grad.conv2d_weight(x, dW0.shape, g, 1, 1, 1, 1))


def test_dbtd_straight_through_prunes_dO_for_both_phases():
    stats = []
    x, dO, ((dI0, dW0, _), (dI1, dW1, _)), mod = _conv_pair(T.DbtdMethod(0.9), _step(9, stats=stats))
    pruned, _ = T.dbtd_torch(dO, 0.9, 9)
    ref = nn.Conv2d(8, 12, 3, padding=1)
    ref.weight.data, ref.bias.data = mod.weight.data, mod.bias.data
    xi = x.clone().requires_grad_(True)
    ref(xi).backward(pruned)
    assert torch.equal(dW1, ref.weight.grad) and torch.equal(dI1, xi.grad)
    assert {k for k, _ in stats} == {"agbp", "wgc"}


# ---- installed in a network ----------------------------------------------------------------------


TINY_RELU = {"schema": 1, "name": "tiny-relu", "input": {"channels": 1, "height": 8, "width": 8},
             "layers": [
                 {"name": "c1", "op": "conv", "in": "x", "out": "c1", "c_out": 8, "kernel": 3,
                  "pad": 1, "relu": True},
                 {"name": "c2", "op": "conv", "in": "c1", "out": "c2", "c_out": 8, "kernel": 3,
                  "pad": 1, "relu": True},
                 {"name": "c3", "op": "conv", "in": "c2", "out": "c3", "c_out": 8, "kernel": 3,
                  "pad": 1, "bn": True, "relu": True},
                 {"name": "gp", "op": "pool", "in": "c3", "out": "gp", "kind": "avg", "global": True},
                 {"name": "fc", "op": "fc", "in": "gp", "out": "fc", "c_out": 10}]}


def _spy(monkeypatch, name):
    calls = []
    orig = getattr(T, name)

    def spy(g, *a, **k):
        out = orig(g, *a, **k)
        calls.append((g.detach().clone(), a, k, (out[0] if isinstance(out, tuple) else out).clone()))
        return out
    monkeypatch.setattr(T, name, spy)
    return calls


def test_in_training_sdgp_matches_offline_kernel_with_stream_keys(monkeypatch):
    wl = load_workload("resnet14")
    torch.manual_seed(0)
    model = build_model(wl)
    calls = _spy(monkeypatch, "nm_prune_torch")
    run = CM.install_method(model, wl, "sdgp-random:nm=2:4", seed=11, batch=2)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    for it in range(2):
        with run.iteration(0):
            F.cross_entropy(model(x), y).backward()
    pruned_layers = [l for l in wl.layers if l.op == "conv" and l.c_in > 3]
    assert len(calls) == 2 * len(pruned_layers)
    # backward runs in reverse network order; keys are stream_key(seed, layer.index, iteration)
    want_keys = [stream_key(11, l.index, it) for it in range(2) for l in reversed(pruned_layers)]
    assert [c[1][2] for c in calls] == want_keys
    for g, a, _, out in calls[:6]:
        off = NM.sdgp(g.numpy(), "2:4", "random", a[2]).pruned
        assert np.array_equal(out.numpy(), off)
    dens = run.end_epoch()
    # every conv's dO counts, the unpruned stem (c_in = 3) too: a little above 2:4's 0.5
    assert 0.5 < dens["agbp"] < 0.6 and dens["wgc"] > 0.9


def test_dbtd_targets_dI_for_conv_relu_layers(monkeypatch):
    wl = workload_from_dict(TINY_RELU)
    model = build_model(wl)
    calls = _spy(monkeypatch, "dbtd_torch")
    run = CM.install_method(model, wl, "dbtd:p=0.9", batch=4)
    with run.iteration(0):
        F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3])).backward()
    # c3 (Conv-BN-ReLU) prunes its dO, c2 (Conv-ReLU) its dI (c2's input gradient, 8 channels of
    # c1's output); c1's dI does not exist (it reads the data)
    shapes = [tuple(c[0].shape) for c in calls]
    assert shapes == [(4, 8, 8, 8), (4, 8, 8, 8)]
    assert set(run.end_epoch()) == {"agbp", "wgc", "dI"}


def test_schedule1_zero_in_network():
    wl = load_workload("resnet14")
    model = build_model(wl)
    run = CM.install_method(model, wl, "zero:schedule=1", batch=2)
    with run.iteration(0):
        F.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([0, 1])).backward()
    convs = [l for l in wl.layers if l.op == "conv"]
    for i, l in enumerate(convs):
        g = model.prunesim_layer_modules[l.name].weight.grad
        assert (not g.any()) == (i % 4 == 1), l.name
    assert run.table.mean() == 0.25 or len(convs) % 4


def test_evaluation_outside_iterations_is_plain():
    wl = load_workload("resnet14")
    model = build_model(wl)
    x = torch.randn(2, 3, 32, 32)
    model.eval()
    ref = model(x)
    run = CM.install_method(model, wl, "sdgp-mag", batch=2)
    assert torch.equal(model(x), ref)
    run.uninstall()
    assert all(type(m) is nn.Conv2d for n, m in model.prunesim_layer_modules.items() if n != "linear")


def test_bad_method_spec_is_one_line_capture_error():
    with pytest.raises(CaptureError, match=r"^--method: method dbtd parameter p="):
        CM.as_spec("dbtd:p=2")
    with pytest.raises(CaptureError, match="unknown method"):
        CM.as_spec("nope")


# ---- PruneTrain ----------------------------------------------------------------------------------


def test_prunetrain_lambda_from_penalty_ratio_and_group_norm():
    wl = load_workload("resnet14")
    torch.manual_seed(0)
    model = build_model(wl)
    weights = {l.name: model.prunesim_layer_modules[l.name].weight.detach().numpy()
               for l in wl.layers}
    r = CM.group_lasso_torch(model, wl)
    assert float(r.detach()) == pytest.approx(group_lasso_norm(wl, weights), rel=1e-6)
    pt = CM.PruneTrain(wl, rho=0.2, interval=1, batch=2)
    ce = F.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([0, 1]))
    pt.loss(ce, model)
    pen = pt.lam * pt.first_norm
    assert pen / (pt.first_ce + pen) == pytest.approx(0.2, rel=1e-12)


def _zero_space_channels(model, wl, space, chans):
    mods = model.prunesim_layer_modules
    with torch.no_grad():
        for l in wl.layers:
            if l.out_space == space:
                mods[l.name].weight[chans] = 0
            if l.in_space == space:
                if l.op == "fc":
                    per = l.c_in // {s.out_space: s.c_out for s in wl.layers}[space]
                    cols = [c * per + j for c in chans for j in range(per)]
                    mods[l.name].weight[:, cols] = 0
                else:
                    mods[l.name].weight[:, chans] = 0


def _one_sgd_step(wl, seed: int, side: int):
    """(model, its SGD optimizer with momentum after one step on 4 random images, the images)."""
    torch.manual_seed(seed)
    model = build_model(wl)
    x, y = torch.randn(4, 3, side, side), torch.tensor([0, 1, 2, 3])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return model, opt, x


@pytest.mark.parametrize("name", ["resnet14", "vgg11-cifar"])
def test_prunetrain_reconfiguration_keeps_function(name):
    wl = load_workload(name)
    model, opt, x = _one_sgd_step(wl, seed=1, side=32)
    convs = [l for l in wl.layers if l.op == "conv"]
    # a plain space (inside a block) and, for ResNets, a residual space shared by a whole stage
    _zero_space_channels(model, wl, convs[1].out_space, [0, 3, 5])
    _zero_space_channels(model, wl, convs[-1].out_space, [1, 2])
    pt = CM.PruneTrain(wl, interval=1, batch=4)
    pt.zero_small(model, opt)
    for mode in ("eval", "train"):
        model.train(mode == "train")
        ref = model(x)
        new, new_opt = CM.rebuild(model, wl, CM.shrink_workload(wl, pt.plan(model).layer_c_out),
                                  pt.plan(model), opt)
        torch.testing.assert_close(new(x), ref, rtol=1e-5, atol=1e-5)
    assert sum(p.numel() for p in new.parameters()) < sum(p.numel() for p in model.parameters())
    # momentum buffers are the kept slices of the old ones
    old_w = model.prunesim_layer_modules[convs[1].name].weight
    new_w = new.prunesim_layer_modules[convs[1].name].weight
    keep = [c for c in range(old_w.shape[0]) if c not in (0, 3, 5)]
    assert torch.equal(new_opt.state[new_w]["momentum_buffer"],
                       opt.state[old_w]["momentum_buffer"][keep])


def test_prunetrain_batch_growth_and_lr_scaling():
    wl = load_workload("resnet14")
    pt = CM.PruneTrain(wl, batch=64)
    half = CM.shrink_workload(wl, {l.name: max(1, l.c_out // 2) if l.name != "linear" else l.c_out
                                   for l in wl.layers})
    pt.workload = half
    b = pt.grow_batch(n_train=4000)
    assert b > 64 and (b - 64) % 32 == 0 and pt.lr_scale == b / 64
    assert CM.training_bytes(half, b) <= pt.mem_budget < CM.training_bytes(half, b + 32)


def test_trainer_with_methods_logs_label_and_prunetrain_trajectory(tmp_path):
    pytest.importorskip("sklearn")
    from sim.capture.trainer import train_and_capture
    f = tmp_path / "tiny.yaml"
    f.write_text(json.dumps(TINY_RELU))
    s = train_and_capture(str(f), "digits", 1, tmp_path / "d", batch=16, every=1, max_iterations=2,
                          method="dbtd:p=0.9", progress=None)
    t = open_trace(tmp_path / "d")
    assert t.provenance["method"]["label"] == "dbtd:p=0.9,sigma=paper"
    assert t.log[-1]["method"] == "dbtd:p=0.9,sigma=paper"
    assert 0 < s["epochs"][0]["agbp_density"] < 1
    s = train_and_capture(str(f), "digits", 3, tmp_path / "p", batch=16, every=1, max_iterations=3,
                          method="prunetrain:rho=0.5,interval=1", progress=None)
    t = open_trace(tmp_path / "p")
    assert t.iterations == [0, 1, 2]  # only before the first reconfiguration
    ep = t.provenance["method"]["epochs"]
    assert len(ep) == 3 and all(r["authors_macs"] > 0 and r["lambda"] > 0 for r in ep)
    # the capture counts with the one copy of the authors' formula, over the samples it trained
    from sim.methods.prunetrain import authors_macs
    from sim.workload import load_workload
    first = ep[0]
    assert first["authors_macs"] == (authors_macs(load_workload(str(f)), 1)
                                     * first["batch"] * first["iterations"])


def test_cli_capture_method_flag(tmp_path, capsys):
    from sim.cli import main
    rc = main(["capture", "--workload", "resnet20", "--dataset", "digits", "--epochs", "1",
               "--out", str(tmp_path / "x"), "--method", "sdgp-mag:nm=5:4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "--method" in err[0] and "n:m" in err[0]


def _mobilenet_block_workload():
    """A stem, two depthwise-separable blocks (the second strided) and a classifier."""
    return workload_from_dict({"schema": 1, "name": "dw-net", "input": {"channels": 3,
                               "height": 16, "width": 16}, "layers": [
        {"name": "conv1", "op": "conv", "in": "x", "out": "conv1", "c_out": 8, "kernel": 3,
         "pad": 1, "bn": True, "relu": True},
        {"name": "conv2", "op": "conv", "in": "conv1", "out": "conv2", "c_out": 8, "kernel": 3,
         "pad": 1, "groups": 8, "bn": True, "relu": True},
        {"name": "conv3", "op": "conv", "in": "conv2", "out": "conv3", "c_out": 16, "kernel": 1,
         "bn": True, "relu": True},
        {"name": "conv4", "op": "conv", "in": "conv3", "out": "conv4", "c_out": 16, "kernel": 3,
         "stride": 2, "pad": 1, "groups": 16, "bn": True, "relu": True},
        {"name": "conv5", "op": "conv", "in": "conv4", "out": "conv5", "c_out": 16, "kernel": 1,
         "bn": True, "relu": True},
        {"name": "pool", "op": "pool", "in": "conv5", "out": "pool", "kind": "avg",
         "global": True},
        {"name": "fc", "op": "fc", "in": "pool", "out": "fc", "c_out": 10}]})


def test_prunetrain_reconfigures_depthwise_convs_with_the_space_they_share():
    """A channel the pointwise convs on both sides of a depthwise conv leave unused is removed
    from all three, the depthwise conv keeping one group per channel, and the network computes
    what it did; the depthwise weights neither join the lasso nor keep a channel alive (they are
    not regularised, as in the authors' MobileNet). A grouped conv that mixes channels is refused
    before training."""
    wl = _mobilenet_block_workload()
    model, opt, x = _one_sgd_step(wl, seed=2, side=16)
    mods = model.prunesim_layer_modules
    drop = [1, 4, 6]
    with torch.no_grad():           # space conv3 (conv3 writes it, conv4 is on it, conv5 reads)
        mods["conv3"].weight[drop] = 0
        mods["conv5"].weight[:, drop] = 0
    pt = CM.PruneTrain(wl, interval=1, batch=4)
    weights = {l.name: mods[l.name].weight.detach().numpy() for l in wl.layers}
    r = CM.group_lasso_torch(model, wl)
    assert float(r.detach()) == pytest.approx(group_lasso_norm(wl, weights), rel=1e-6)
    plan = pt.plan(model)
    assert plan.layer_c_out == {"conv1": 8, "conv2": 8, "conv3": 13, "conv4": 13, "conv5": 16,
                                "fc": 10}
    model.eval()
    ref = model(x)
    new_wl = CM.shrink_workload(wl, plan.layer_c_out)
    dw = new_wl.layer("conv4")
    assert (dw.c_in, dw.c_out, dw.groups) == (13, 13, 13) and dw.depthwise
    new, _ = CM.rebuild(model, wl, new_wl, plan, opt)
    new.eval()
    torch.testing.assert_close(new(x), ref, rtol=1e-5, atol=1e-5)
    assert new.prunesim_layer_modules["conv4"].groups == 13
    assert plan.density(wl) < 1
    g4 = load_workload(str(Path(__file__).parent / "data" / "mobilenet-tiny.yaml"))
    with pytest.raises(CaptureError, match="g4.*grouped convs that mix channels"):
        CM.PruneTrain(g4, interval=1, batch=4)
