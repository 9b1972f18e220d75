"""DBTD / top-k and FC layers in the in-training twin: dense by default, fc=prune as offline."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from sim.capture import methods as CM  # noqa: E402
from sim.capture.torchnet import build_model  # noqa: E402
from sim.methods import apply_method, parse_method, stream_key  # noqa: E402
from sim.workload import load_workload  # noqa: E402

pytestmark = pytest.mark.torch


def _fc_grads(method, layer_name="local3"):
    torch.manual_seed(0)
    wl = load_workload("cnn2")
    model = build_model(wl)
    lin = model.prunesim_layer_modules[layer_name]
    seen = {}

    def tap(key):
        def hook(mod, inp, out):
            out.register_hook(lambda g: seen.__setitem__(key, g.detach().clone()))
        return hook
    # forward hooks run in registration order, and so do the tensor hooks they register:
    # the first sees the dense gradient, the last the one the method produced
    lin.register_forward_hook(tap("dense"))
    run = CM.install_method(model, wl, method, seed=3, batch=4)
    lin.register_forward_hook(tap("post"))
    with run.iteration(0):
        F.cross_entropy(model(torch.randn(4, 3, 24, 24)).flatten(1),
                        torch.tensor([0, 1, 2, 3])).backward()
    layer = next(l for l in wl.layers if l.name == layer_name)
    return layer, seen["dense"].numpy(), seen["post"].numpy()


@pytest.mark.parametrize("method", ["dbtd:p=0.9", "topk:keep=0.1"])
def test_twin_leaves_fc_dense_by_default(method):
    _, dense, post = _fc_grads(method)
    np.testing.assert_array_equal(dense, post)


@pytest.mark.parametrize("method", ["dbtd:p=0.9,fc=prune", "topk:keep=0.1,fc=prune"])
@pytest.mark.parametrize("layer_name", ["local3", "softmax_linear"])
def test_twin_fc_prune_matches_offline_kernel(method, layer_name):
    layer, dense, post = _fc_grads(method, layer_name)
    assert np.count_nonzero(post) < np.count_nonzero(dense)
    off = apply_method(parse_method(method), layer, dense, key=stream_key(3, layer.index, 0),
                       batch=4)
    # tau may differ in its last bit (float64 sums in another order): compare, allow that
    mismatch = np.mean(off.pruned != post)
    assert mismatch <= 0.01
    np.testing.assert_allclose(np.count_nonzero(post) / post.size, off.density, atol=0.01)
