"""Two tiny transformers trained on offline data and captured: a ViT on MNIST / digits images and a
character-level GPT on text shipped inside scikit-learn.

- ``vit-tiny-mnist``: `TinyViT` (patch conv, class token, learned positions, pre-LN blocks with
  ``nn.MultiheadAttention``, GELU MLP, head on the class token) on ``mnist5k`` (28x28, patch 7: 16
  patches + class token) or ``digits`` (8x8, patch 2).
- ``chargpt-sklearn``: `CharGPT` (token + position ``nn.Embedding``, pre-LN blocks with a hand-written
  causal attention: fused qkv ``nn.Linear``, split, ``q @ k^T``, masked_fill, softmax, dropout,
  ``@ v``), trained on next-character prediction over scikit-learn's dataset descriptions
  (``sklearn/datasets/descr/*.rst``, about 43,000 characters of English, part of scikit-learn and under its
  BSD-3-Clause licence, ``scikit_learn-*.dist-info/licenses/COPYING``).

`capture_transformer(model, out_dir, ...)` trains for a few steps with AdamW on the CPU and records
dO of every linear and matmul (`sim.capture.transformer.TransformerCapture`).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from sim.errors import CaptureError

from .torchnet import _torch

MODELS = ("vit-tiny-mnist", "chargpt-sklearn")


def _modules():
    torch, nn = _torch()
    F = torch.nn.functional

    class ViTBlock(nn.Module):
        def __init__(self, dim, heads, mlp, p):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, heads, dropout=p, batch_first=True)
            self.norm2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, mlp)
            self.fc2 = nn.Linear(mlp, dim)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm2(x)))))

    class TinyViT(nn.Module):
        """ViT: patch conv, class token, learned positions, pre-LN MHA blocks, head on the class token."""

        def __init__(self, image=28, patch=7, channels=1, dim=32, depth=2, heads=4, mlp=64,
                     classes=10, p=0.1):
            super().__init__()
            n = (image // patch) ** 2
            self.patch_embed = nn.Conv2d(channels, dim, patch, stride=patch)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
            self.blocks = nn.ModuleList(ViTBlock(dim, heads, mlp, p) for _ in range(depth))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x)[:, 0])

    class GPTAttention(nn.Module):
        def __init__(self, dim, heads, block, p):
            super().__init__()
            self.heads = heads
            self.c_attn = nn.Linear(dim, 3 * dim)
            self.c_proj = nn.Linear(dim, dim)
            self.attn_drop = nn.Dropout(p)
            self.register_buffer("mask", torch.ones(block, block, dtype=torch.bool).triu(1),
                                 persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
            s = s.masked_fill(self.mask[:T, :T], float("-inf"))
            a = self.attn_drop(F.softmax(s, dim=-1))
            y = (a @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class GPTBlock(nn.Module):
        def __init__(self, dim, heads, block, p):
            super().__init__()
            self.ln_1 = nn.LayerNorm(dim)
            self.attn = GPTAttention(dim, heads, block, p)
            self.ln_2 = nn.LayerNorm(dim)
            self.c_fc = nn.Linear(dim, 4 * dim)
            self.c_proj = nn.Linear(4 * dim, dim)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.drop(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)))))

    class CharGPT(nn.Module):
        """A character-level GPT: token and position embeddings, causal pre-LN blocks, LM head."""

        def __init__(self, vocab, block=32, dim=32, depth=2, heads=4, p=0.1):
            super().__init__()
            self.wte = nn.Embedding(vocab, dim)
            self.wpe = nn.Embedding(block, dim)
            self.h = nn.ModuleList(GPTBlock(dim, heads, block, p) for _ in range(depth))
            self.ln_f = nn.LayerNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            return self.lm_head(self.ln_f(x))

    return TinyViT, CharGPT


def text_corpus() -> tuple[str, dict]:
    """scikit-learn's dataset descriptions, concatenated in name order, and where they come from."""
    try:
        import sklearn
    except ImportError:
        raise CaptureError(None, "dataset", "the character GPT's text ships with scikit-learn: "
                           "pip install prunesim[capture]") from None
    d = Path(sklearn.__file__).parent / "datasets" / "descr"
    files = sorted(d.glob("*.rst"))
    if not files:
        raise CaptureError(None, "dataset", f"no .rst files under {d}")
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    info = {"name": "sklearn-descr", "source": "scikit-learn sklearn/datasets/descr/*.rst "
            f"({len(files)} files, {len(text)} characters)", "version": sklearn.__version__,
            "licence": "BSD-3-Clause (scikit-learn, dist-info licenses/COPYING)"}
    return text, info


def build(name: str, *, seed: int = 0, dataset: str = "mnist5k"):
    """(model, data, info) of a zoo transformer: data is (x, y) int/float tensors for training."""
    torch, _ = _torch()
    TinyViT, CharGPT = _modules()
    torch.manual_seed(seed)
    if name == "vit-tiny-mnist":
        from .datasets import load_dataset
        size, patch = (28, 7) if dataset == "mnist5k" else (8, 2)
        ds = load_dataset(dataset, (1, size, size), classes_available=10)
        model = TinyViT(image=size, patch=patch)
        return model, (torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)), dict(ds.info)
    if name == "chargpt-sklearn":
        text, info = text_corpus()
        chars = sorted(set(text))
        ids = torch.tensor([chars.index(c) for c in text], dtype=torch.int64)
        model = CharGPT(len(chars))
        return model, (ids, None), dict(info, vocab=len(chars))
    raise CaptureError(None, "model", f"unknown zoo transformer {name!r} (known: {', '.join(MODELS)})")


def _batches(name: str, data, batch: int, rng):
    torch, _ = _torch()
    x, y = data
    if name == "chargpt-sklearn":
        block = 32
        while True:
            starts = rng.integers(0, len(x) - block - 1, size=batch)
            idx = torch.from_numpy(starts[:, None] + np.arange(block)[None])
            yield x[idx], x[idx + 1]
    else:
        while True:
            sel = torch.from_numpy(rng.choice(len(y), size=batch, replace=False))
            yield x[sel], y[sel]


def capture_transformer(name: str, out_dir, *, steps: int = 20, batch: int = 16, every: int = 10,
                        lr: float = 3e-3, seed: int = 0, dataset: str = "mnist5k",
                        overwrite: bool = False) -> dict:
    """Train zoo transformer `name` for `steps` AdamW steps and record dO every `every` steps.

    Returns {"workload", "trace", "losses"}. Deterministic for a seed on one machine.
    """
    torch, _ = _torch()
    from .transformer import TransformerCapture, transformer_workload_from_model
    if steps < 1 or batch < 1 or every < 1:
        raise CaptureError(None, "steps", "steps, batch and every must be >= 1")
    model, data, info = build(name, seed=seed, dataset=dataset)
    rng = np.random.default_rng(seed)
    gen = _batches(name, data, batch, rng)
    x0, _ = next(gen)
    wl = transformer_workload_from_model(model, x0, name, dataset=info["name"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    F = torch.nn.functional
    losses = []
    prov = {"dataset": info, "command": f"sim.capture.transformer_zoo.capture_transformer({name!r})",
            "optimizer": {"name": "AdamW", "lr": lr, "weight_decay": 0.01}, "seed": seed}
    t0 = time.time()
    with TransformerCapture(model, out_dir, workload=wl, batch=batch, every=every,
                            provenance=prov, overwrite=overwrite) as cap:
        model.train()
        for it in range(steps):
            x, y = next(gen)
            with cap.iteration(0):
                out = model(x)
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
                opt.zero_grad()
                loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        cap.log_epoch(0, float(np.mean(losses[-max(1, steps // 4):])), None, steps * batch,
                      time.time() - t0)
    return {"workload": wl, "trace": str(out_dir), "losses": losses}
