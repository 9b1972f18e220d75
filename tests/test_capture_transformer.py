"""Transformer capture (sim.capture.transformer): derived workloads, dO per linear and matmul, the
one-line warning for what prunesim cannot express, and replay of a captured trace."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sim.capture.transformer import (TransformerCapture,  # noqa: E402
                                     transformer_workload_from_model)
from sim.capture.transformer_zoo import _batches, build, capture_transformer, text_corpus  # noqa: E402
from sim.traces.format import open_trace  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]


def _derive(model, x, name="m"):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        wl = transformer_workload_from_model(model, x, name)
    return wl, [str(m.message) for m in w]


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_vit_workload_matches_model():
    model, data, _ = build("vit-tiny-mnist", dataset="digits")
    x = data[0][:4]
    wl, warns = _derive(model, x)
    assert warns == []
    assert wl.params() == _params(model)
    kinds = [op["op"] for op in wl.ops]
    assert kinds[:3] == ["conv", "tokens", "layernorm"]
    assert kinds.count("matmul") == 4 and kinds.count("softmax") == 2 and kinds[-2:] == ["select", "linear"]
    tok = wl.ops[1]
    assert tok["cls"] is True and tok["positions"] is True
    layers = {l.name: l for l in wl.layers}
    # digits 8x8, patch 2: 16 patches + the class token; dim 32, 4 heads of 8
    assert (layers["blocks.0.attn.in_proj"].c_in, layers["blocks.0.attn.in_proj"].c_out,
            layers["blocks.0.attn.in_proj"].h) == (32, 96, 17)
    assert layers["blocks.0.attn.scores"].kind == "qk" and layers["blocks.0.attn.scores"].mm == (17, 17, 8)
    assert layers["blocks.0.attn.context"].kind == "av" and layers["blocks.0.attn.context"].mm == (17, 8, 17)
    assert layers["blocks.0.attn.scores"].groups == 4
    sm = next(op for op in wl.ops if op["op"] == "softmax")
    assert sm["causal"] is False


def test_gpt_workload_matches_model():
    model, data, info = build("chargpt-sklearn")
    assert "BSD-3-Clause" in info["licence"] and len(text_corpus()[0]) > 40_000
    x, _ = next(_batches("chargpt-sklearn", data, 4, __import__("numpy").random.default_rng(0)))
    wl, warns = _derive(model, x)
    assert warns == []
    assert wl.params() == _params(model)
    emb = wl.ops[0]
    assert emb["op"] == "embedding" and emb["vocab"] == info["vocab"] and emb["positions"] == 32
    assert all(op["causal"] for op in wl.ops if op["op"] == "softmax")
    assert [op["name"] for op in wl.ops if op["op"] == "slice"][:3] == \
        ["h.0.attn.c_attn.q", "h.0.attn.c_attn.k", "h.0.attn.c_attn.v"]
    assert wl.layers[-1].name == "lm_head" and wl.layers[-1].c_out == info["vocab"]


class _SdpaNet(nn.Module):
    def __init__(self, d=16, h=2, vocab=11):
        super().__init__()
        self.h = h
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


def test_sdpa_becomes_matmuls_and_causal_softmax():
    wl, warns = _derive(_SdpaNet(), torch.randint(0, 11, (3, 6)))
    assert warns == []
    mm = [l for l in wl.layers if l.op == "matmul"]
    assert [(l.kind, l.mm, l.groups) for l in mm] == [("qk", (6, 6, 8), 2), ("av", (6, 8, 6), 2)]
    assert next(op for op in wl.ops if op["op"] == "softmax")["causal"] is True


class _Odd(nn.Module):
    """A token model with a layer prunesim does not know (RNN) and an unknown activation (SiLU)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 8)
        self.fc1 = nn.Linear(8, 8)
        self.rnn = nn.GRU(8, 8, batch_first=True)
        self.fc2 = nn.Linear(8, 7)

    def forward(self, idx):
        x = F.silu(self.fc1(self.emb(idx)))
        x, _ = self.rnn(x)
        return self.fc2(x)


def test_unsupported_layers_named_in_one_warning():
    wl, warns = _derive(_Odd(), torch.randint(0, 7, (2, 5)))
    assert len(warns) == 1
    assert "silu" in warns[0] and "rnn (GRU)" in warns[0]
    # the layers prunesim knows are kept: fc2 reads the GRU's output as a declared tensor
    assert [l.name for l in wl.layers] == ["fc1", "fc2"]
    assert wl.layers[1].h == 5


def test_mha_seq_first_records_batch_first_dO(tmp_path):
    class SeqFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(4, 16)
            self.attn = nn.MultiheadAttention(16, 4)   # [T, N, E] layout

        def forward(self, x):                           # x: N x T x 4 (as a 1 x T x 4 image)
            h = self.inp(x[:, 0]).transpose(0, 1)
            return self.attn(h, h, h)[0].transpose(0, 1)

    model = SeqFirst()
    x = torch.randn(3, 1, 5, 4)
    wl, _ = _derive(model, x)
    with TransformerCapture(model, tmp_path / "t", workload=wl, batch=3) as cap:
        with cap.iteration(0):
            model(x).square().mean().backward()
    tr = open_trace(tmp_path / "t")
    shapes = {r.layer: r.shape for r in tr.ordered_records("dO", 0)}
    assert shapes["attn.in_proj"] == (3, 5, 48) and shapes["attn.out_proj"] == (3, 5, 16)
    assert shapes["attn.scores"] == (3, 4, 5, 5) and shapes["attn.context"] == (3, 4, 5, 4)


def test_capture_and_replay(tmp_path):
    out = tmp_path / "gpt"
    r = capture_transformer("chargpt-sklearn", out, steps=2, batch=4, every=1)
    wl = r["workload"]
    tr = open_trace(out)
    assert tr.iterations == [0, 1]
    recs = {rec.layer: rec.shape for rec in tr.ordered_records("dO", 0)}
    for l in wl.layers:   # every linear and matmul, in the trace format's layout
        assert recs[l.name] == l.tensor_shapes(4)["dO"]
    assert recs["h.0.attn.c_attn"] == (4, 32, 96) and recs["h.0.attn.scores"] == (4, 4, 32, 32)
    assert tr.load(tr.record(0, "lm_head")).any()
    p = subprocess.run([sys.executable, "-m", "sim", "replay", str(out), "--hw", "a100-sxm4-40gb"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "h.0.attn.scores" in p.stdout and "whole step" in p.stdout


@pytest.mark.slow
def test_vit_capture_mnist_replays(tmp_path):
    out = tmp_path / "vit"
    r = capture_transformer("vit-tiny-mnist", out, steps=10, batch=8, every=5)
    assert r["losses"][-1] < r["losses"][0]
    p = subprocess.run([sys.executable, "-m", "sim", "replay", str(out), "--hw", "a100-sxm4-40gb"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
