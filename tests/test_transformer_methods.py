"""Methods on transformer linears: SDGP on a linear's dO, the layers option,
the weight-side 2:4 methods w24 / w24t and their mask-search cost."""
from __future__ import annotations

import numpy as np
import pytest

from sim.driver import engines_for, run_workload
from sim.methods import apply_method, layer_selected, linear_role, parse_method
from sim.methods.weight24 import (mask_24_rows, mask_24t_exhaustive, mask_24t_greedy, mask_work,
                                  weight_matrix_shape)
from sim.workload import load_workload

HW = "a100-sxm4-40gb"


@pytest.fixture(scope="module")
def vit():
    return load_workload("vit-tiny")


def test_sdgp_on_a_linear_prunes_groups_along_c_out(vit):
    layer = vit.layer("blocks.0.mlp.fc1")
    g = np.random.default_rng(0).standard_normal((2, 5, layer.c_out)).astype(np.float32)
    r = apply_method(parse_method("sdgp-mag"), layer, g, key=1, batch=2)
    assert r.structure == "nm" and r.phases == ("agbp",)
    p = r.pruned
    assert p.shape == g.shape
    # every group of 4 consecutive C_out features of one token keeps exactly its 2 largest |g|
    grp = p.reshape(2, 5, -1, 4)
    assert ((grp != 0).sum(-1) == 2).all()
    ref = np.sort(np.abs(g.reshape(2, 5, -1, 4)), -1)[..., 2:]
    assert np.allclose(np.sort(np.abs(grp), -1)[..., 2:], ref)


def test_linear_roles_and_layer_sets():
    bert = load_workload("bert-base")
    role = {l.name: linear_role(l) for l in bert.layers if l.op == "linear"}
    assert role["encoder.layer.0.attention.self.query"] == "attn"
    assert role["encoder.layer.0.attention.output.dense"] == "attn"
    assert role["encoder.layer.0.intermediate.dense"] == "ffn"
    assert role["encoder.layer.0.output.dense"] == "ffn"
    gpt = load_workload("gpt2-small")
    assert linear_role(gpt.layer("h.0.attn.c_attn")) == "attn"
    assert linear_role(gpt.layer("h.0.mlp.c_proj")) == "ffn"
    ffn = [n for n, r in role.items() if r == "ffn"]
    attn = [n for n, r in role.items() if r == "attn"]
    assert len(ffn) == 24 and len(attn) == 48
    lin = [l for l in bert.layers if l.op == "linear"]
    for sel, want in (("ffn", set(ffn)), ("attn", set(attn)), ("linear", set(role)),
                      ("all", set(role)), ("conv", set())):
        assert {l.name for l in lin if layer_selected(l, sel)} == want, sel


def test_cnn_layers_unchanged_by_default():
    w = load_workload("resnet20")
    for l in w.layers:
        assert layer_selected(l, "all") == (l.op == "conv" and l.c_in > 3)
        assert not layer_selected(l, "ffn")


def _phases(workload, layers, spec, batch=8):
    eng = engines_for([HW])
    out = {}
    for run in run_workload(workload, batch, [None if spec is None else parse_method(spec)], eng,
                            layers=layers):
        out[run.layer] = {p.phase: p for p in run.phases}
    return out


def test_layers_option_selects_linears(vit):
    ls = [vit.layer("blocks.0.mlp.fc1"), vit.layer("blocks.0.attn.qkv")]
    dense = _phases(vit, ls, None)
    ffn = _phases(vit, ls, "sdgp-mag:layers=ffn")
    attn = _phases(vit, ls, "sdgp-mag:layers=attn")
    fc1, qkv = "blocks.0.mlp.fc1", "blocks.0.attn.qkv"
    assert ffn[fc1]["agbp"].seconds != dense[fc1]["agbp"].seconds
    assert ffn[qkv]["agbp"].seconds == dense[qkv]["agbp"].seconds
    assert attn[qkv]["agbp"].seconds != dense[qkv]["agbp"].seconds
    assert attn[fc1]["agbp"].seconds == dense[fc1]["agbp"].seconds


def _sparse(p):
    return [k.details.get("sparse") for k in p.kernels if k.category == "math"]


def test_w24_makes_only_fwd_sparse_and_w24t_fwd_and_agbp(vit):
    ls = [vit.layer("blocks.0.mlp.fc1")]
    name = ls[0].name
    w24 = _phases(vit, ls, "w24")[name]
    w24t = _phases(vit, ls, "w24t")[name]
    assert _sparse(w24["fwd"]) == ["2:4"] and _sparse(w24["agbp"]) == [None]
    assert _sparse(w24["wgc"]) == [None]
    assert _sparse(w24t["fwd"]) == ["2:4"] and _sparse(w24t["agbp"]) == ["2:4"]
    assert _sparse(w24t["wgc"]) == [None]
    # the sparse operand is the weight, run transposed: M and N swap
    k = next(k for k in w24["fwd"].kernels if k.category == "math")
    assert (k.details["m"], k.details["n"], k.details["k"]) == (768, 8 * 197, 192)


def test_mask_search_charged_once(vit):
    ls = [vit.layer("blocks.0.mlp.fc1")]
    for spec in ("w24", "w24t", "w24t:search=exhaustive"):
        ph = _phases(vit, ls, spec)[ls[0].name]
        charged = [p for p, row in ph.items() if row.overhead_s > 0]
        assert charged == ["fwd"], spec
    c_out, k = weight_matrix_shape(ls[0])
    g, e = mask_work(c_out, k, True, "greedy"), mask_work(c_out, k, True, "exhaustive")
    assert g.compares == c_out * k // 16 * 96 and e.flops > 0 and e.flops > g.compares
    assert mask_work(c_out, k, False).elems_written == c_out * k // 2
    assert g.elems_written == c_out * k     # two compressed copies: W and W^T


def test_weight_methods_ignore_do_and_skip_unselected(vit):
    l = vit.layer("blocks.0.attn.qkv")
    a = apply_method(parse_method("w24"), l, np.zeros((1, 1, 1), np.float32), key=0, batch=8)
    b = apply_method(parse_method("w24"), l, np.ones((3, 4, 5), np.float32), key=7, batch=8)
    assert a.structure == b.structure == "nm-w" and a.work == b.work and a.density == 0.5
    r = apply_method(parse_method("w24:layers=ffn"), l, np.ones(1, np.float32), key=0, batch=8)
    assert r.structure == "dense"


def test_masks_are_2_4_and_transposable():
    w = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32)
    m = mask_24_rows(w)
    assert (m.reshape(16, -1, 4).sum(-1) == 2).all()
    for fn in (mask_24t_greedy, mask_24t_exhaustive):
        t = fn(w)
        assert (t.reshape(16, -1, 4).sum(-1) <= 2).all()
        assert (t.T.reshape(32, -1, 4).sum(-1) <= 2).all()
    ex, gr = mask_24t_exhaustive(w), mask_24t_greedy(w)
    assert (ex.reshape(16, -1, 4).sum(-1) == 2).all()
    # exhaustive is optimal per block; greedy a 2-approximation of it
    a = np.abs(w)
    assert (a * ex).sum() >= (a * gr).sum() >= 0.5 * (a * ex).sum()


def test_labels_and_defaults():
    assert parse_method("sdgp-mag").label == "sdgp-mag:nm=2:4"
    assert parse_method("sdgp-mag:layers=all") == parse_method("sdgp-mag")
    assert "layers" not in dict(parse_method("sdgp-mag").params)
    assert parse_method("w24t").label == "w24t:search=greedy"
    with pytest.raises(ValueError, match="layers"):
        parse_method("w24:layers=mlp")


def test_capture_refuses_methods_without_a_torch_twin():
    """w24/w24t change time, not the recorded values: capture would train dense under their name."""
    from sim.capture.methods import as_spec
    from sim.errors import CaptureError
    for m in ("w24", "w24t:search=exhaustive"):
        with pytest.raises(CaptureError, match="no PyTorch twin"):
            as_spec(m)
    assert as_spec("sdgp-mag:nm=2:4").id == "sdgp-mag"
