"""Transformer workloads: parameter counts against published ones, hand-derived GEMM shapes of
linears and attention, the seq parameter, one-line errors, and the step's non-GEMM ops."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.errors import WorkloadError
from sim.workload import load_workload, lower, workload_from_dict

# Published parameter counts: ViT-B/16 86M (Dosovitskiy et al. 2021, table 1; timm
# vit_base_patch16_224: 86,567,656), BERT-base 110M (Devlin et al. 2019, sec. 3; it includes the
# embeddings and the pooler: Hugging Face bert-base-uncased 109,482,240), GPT-2 small 124M with the
# LM head tied to the token embedding (Hugging Face gpt2: 124,439,808; the paper's table 2 said
# 117M before the count was corrected).
PUBLISHED = {"vit-b16": 86.6e6, "bert-base": 110e6, "gpt2-small": 124e6}
EXACT = {"vit-tiny": 5_717_416, "vit-s16": 22_050_664, "vit-b16": 86_567_656,
         "bert-base": 109_482_240 + 768 * 2 + 2, "gpt2-small": 124_439_808}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_params_within_one_percent_of_published(name):
    assert abs(load_workload(name).params() / PUBLISHED[name] - 1) < 0.01


@pytest.mark.parametrize("name", sorted(EXACT))
def test_params_equal_the_reference_implementations(name):
    assert load_workload(name).params() == EXACT[name]


def _mnk(g):
    return (g.m, g.n, g.k, g.groups)


def test_linear_gemms_hand_derived():
    # BERT intermediate.dense: 768 -> 3072 over batch 8 x seq 128 = 1024 token rows
    w = load_workload("bert-base")
    g = lower(w.layer("encoder.layer.0.intermediate.dense"), 8)
    assert _mnk(g["fwd"]) == (1024, 3072, 768, 1)          # O = I W^T
    assert _mnk(g["agbp"]) == (1024, 768, 3072, 1)         # dI = dO W: K runs over dO's features
    assert (g["agbp"].a_tensor, g["agbp"].b_tensor) == ("dO", "W")
    assert _mnk(g["wgc"]) == (3072, 768, 1024, 1)          # dW = dO^T I
    assert (g["wgc"].a_tensor, g["wgc"].b_tensor) == ("dO", "I")
    assert g["agbp"].a_elems == 8 * 128 * 3072 and g["agbp"].b_elems == 3072 * 768


def test_attention_gemms_hand_derived():
    # 12 heads of 64 over 128 tokens, batch 8: 96 GEMMs per phase
    w = load_workload("bert-base")
    qk = lower(w.layer("encoder.layer.3.attention.self.scores"), 8)
    assert _mnk(qk["fwd"]) == (128, 128, 64, 96)     # S = Q K^T
    assert _mnk(qk["agbp"]) == (128, 64, 128, 96)    # dQ = dS K
    assert _mnk(qk["wgc"]) == (128, 64, 128, 96)     # dK = dS^T Q
    av = lower(w.layer("encoder.layer.3.attention.self.context"), 8)
    assert _mnk(av["fwd"]) == (128, 64, 128, 96)     # O = P V
    assert _mnk(av["agbp"]) == (128, 128, 64, 96)    # dP = dO V^T
    assert _mnk(av["wgc"]) == (64, 128, 128, 96)     # dV^T = dO^T P
    for g in (*qk.values(), *av.values()):
        assert g.flops == 2 * 128 * 128 * 64 * 96
    for g in (qk["agbp"], qk["wgc"], av["agbp"], av["wgc"]):
        assert g.a_tensor == "dO"
    assert qk["fwd"].c_elems == 8 * 12 * 128 * 128 and av["fwd"].c_elems == 8 * 128 * 768


def test_vit_patch_embedding_and_tokens():
    w = load_workload("vit-b16")
    pe = w.layer("patch_embed.proj")
    assert (pe.c_in, pe.h, pe.c_out, pe.p, pe.r, pe.stride) == (3, 224, 768, 14, 16, 16)
    assert w.shape_of("tokens") == (768, 197, 1)     # 196 patches + the class token
    g = lower(w.layer("blocks.0.attn.qkv"), 2)
    assert _mnk(g["fwd"]) == (2 * 197, 2304, 768, 1)
    assert w.macs(1) == pytest.approx(17.56e9, rel=0.01)   # timm: 17.6 GMACs


def test_seq_parameter_and_override():
    a, b = load_workload("bert-base"), load_workload("bert-base:seq=512")
    assert a.name == "bert-base" and b.name == "bert-base:seq=512"
    assert dict(a.parameters) == {"seq": 128} and dict(b.parameters) == {"seq": 512}
    assert lower(b.layer("encoder.layer.0.output.dense"), 4)["fwd"].m == 4 * 512
    assert a.params() == b.params()                  # the position table is 512 rows either way
    again = workload_from_dict(b.to_dict(), "<roundtrip>")
    assert again.layers == b.layers and again.params() == b.params()
    assert lower(load_workload("gpt2-small").layer("h.0.attn.scores"), 1)["fwd"].m == 1024


@pytest.mark.parametrize("name, field", [
    ("bert-base:seq=1024", "positions"),             # longer than the position table
    ("bert-base:len=64", "params.len"),              # no such parameter
    ("bert-base:seq=x", "workload.seq"),
])
def test_bad_parameters_are_one_line_errors(name, field):
    with pytest.raises(WorkloadError) as e:
        load_workload(name)
    assert field in str(e.value) and "\n" not in str(e.value)


def _doc(*ops, inp=None):
    return {"name": "t", "input": inp or {"tokens": 8}, "layers": [
        {"name": "emb", "op": "embedding", "in": "x", "out": "emb", "vocab": 100, "dim": 32,
         "positions": 16}, *ops]}


@pytest.mark.parametrize("op, field", [
    ({"name": "l", "op": "linear", "in": "emb", "out": "l", "c_out": 8, "relu": True},
     "layers[1].relu"),
    ({"name": "m", "op": "matmul", "in": ["emb", "emb"], "out": "m", "kind": "qk", "heads": 5},
     "(m).heads"),
    ({"name": "m", "op": "matmul", "in": ["emb", "emb"], "out": "m", "kind": "av", "heads": 4},
     "(m).in"),
    ({"name": "m", "op": "matmul", "in": ["emb", "emb"], "out": "m", "kind": "kq", "heads": 4},
     "(m).kind"),
    ({"name": "d", "op": "dropout", "in": "emb", "out": "d", "p": 1.5}, "(d).p"),
    ({"name": "s", "op": "slice", "in": "emb", "out": "s", "parts": 3, "part": 0}, "(s).part"),
    ({"name": "l", "op": "linear", "in": "emb", "out": "l", "c_out": 100, "tied": "nope"},
     "(l).tied"),
    ({"name": "l", "op": "linear", "in": "emb", "out": "l", "c_out": 99, "tied": "emb"},
     "(l).tied"),
])
def test_malformed_ops_name_file_and_field(op, field):
    with pytest.raises(WorkloadError) as e:
        workload_from_dict(_doc(op), "net.yaml")
    msg = str(e.value)
    assert msg.startswith("net.yaml: ") and field in msg and "\n" not in msg


def test_a_small_transformer_block_infers_every_shape():
    ops = [{"name": "qkv", "op": "linear", "in": "emb", "out": "qkv", "c_out": 96},
           *({"name": n, "op": "slice", "in": "qkv", "out": n, "parts": 3, "part": i}
             for i, n in enumerate("qkv_"[:3])),
           {"name": "s", "op": "matmul", "in": ["q", "k"], "out": "s", "kind": "qk", "heads": 4},
           {"name": "p", "op": "softmax", "in": "s", "out": "p", "causal": True},
           {"name": "o", "op": "matmul", "in": ["p", "v"], "out": "o", "kind": "av", "heads": 4},
           {"name": "r", "op": "add", "in": ["o", "emb"], "out": "r"},
           {"name": "ln", "op": "layernorm", "in": "r", "out": "ln"},
           {"name": "head", "op": "linear", "in": "ln", "out": "head", "c_out": 100, "bias": False,
            "tied": "emb"}]
    w = workload_from_dict(_doc(*ops), "net.yaml")
    assert w.shape_of("s") == (4, 8, 8) and w.shape_of("o") == (32, 8, 1)
    assert w.layer("s").mm == (8, 8, 8) and w.layer("o").mm == (8, 8, 8)
    # embedding 100x32 + 16x32 positions, qkv 32x96 + 96, layer norm 64; the head is tied
    assert w.params() == 3200 + 512 + 3072 + 96 + 64


def test_step_ops_cover_the_transformer_ops():
    from sim.frameworks import load_framework
    from sim.stepops import param_tensors, step_ops
    prof = load_framework("pytorch-eager")
    gpt = load_workload("gpt2-small")
    ops = step_ops(gpt, 2, profile=prof)
    kernels = {o.kernel for o in ops}
    for k in ("layernorm-fwd", "layernorm-bwd", "gelu-fwd", "gelu-bwd", "softmax-fwd",
              "softmax-bwd", "causal-mask", "dropout-fwd", "dropout-bwd", "embedding-token",
              "embedding-token-bwd", "embedding-positions", "head-layout-copy", "slice-cat-bwd",
              "bias-grad", "grad-fan-in-add"):
        assert k in kernels, k
    assert sum(param_tensors(gpt)) == gpt.params()   # the optimizer updates every parameter once
    # the LM loss has one label per token: nll reads batch*seq int64 labels
    nll = next(o for o in ops if o.kernel == "nll-fwd")
    assert nll.read_bytes == 2 * 1024 * (8 + 2)
    # the three slices of a fused qkv are one concatenation, not two gradient sums
    sums = [o for o in ops if o.kernel == "grad-fan-in-add" and o.layer == "h.0.attn.c_attn"]
    assert not sums
    vit = load_workload("vit-tiny")
    vk = {o.kernel for o in step_ops(vit, 2, profile=prof)}
    assert {"cls-cat", "pos-embed-add", "pos-embed-grad", "tokens-bwd", "select-bwd"} <= vk
    assert "dropout-fwd" not in vk                    # timm's default rates are 0: no dropout ops


@pytest.mark.parametrize("hw", ["a100-sxm4-40gb", "xeon-e5-2680v4"])
def test_driver_runs_transformer_layers_and_step(hw):
    from sim.driver import engines_for, phase_kernels, step_kernels
    from sim.frameworks import load_framework
    eng = engines_for([hw])[0]
    w = load_workload("vit-tiny")
    for name in ("blocks.0.attn.qkv", "blocks.0.attn.scores", "blocks.0.attn.context"):
        ks = phase_kernels(eng, w.layer(name), 4, None)
        assert set(ks) == {"fwd", "agbp", "wgc"}
        assert all(sum(k.seconds for k in kl) > 0 for kl in ks.values())
    step = step_kernels(eng, w, 4, load_framework("pytorch-eager"))
    assert {k.kernel for k in step["fwd-ops"]} >= {"layernorm-fwd", "softmax-fwd", "gelu-fwd"}
    assert sum(k.seconds for k in step["bwd-ops"]) > 0


def test_workload_show_json_has_phase_flops():
    out = subprocess.run([sys.executable, "-m", "sim", "workload", "show", "gpt2-small:seq=256",
                          "--batch", "2", "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["workload_params"] == {"seq": 256} and d["params"] == EXACT["gpt2-small"]
    assert set(d["flops"]) == {"fwd", "agbp", "wgc"} and d["flops"]["fwd"] > 0


def test_memory_model_sizes_transformer_tensors():
    """sim.system.memory walks the same shapes as the step ops (sim.workload.tensor_chw): a token
    tensor is C x T, and the MLP's hidden tensor is 4x the width."""
    from sim.system.memory import tensor_elems
    from sim.workload import tensor_chw
    w = load_workload("vit-tiny")
    chw, el = tensor_chw(w), tensor_elems(w)
    assert set(chw) == set(el) and all(el[t] == c * h * x for t, (c, h, x) in chw.items())
    fc1 = next(l for l in w.layers if l.op == "linear" and l.c_out == 4 * l.c_in)
    assert el[fc1.out_tensor] == 4 * el[fc1.in_tensor]
