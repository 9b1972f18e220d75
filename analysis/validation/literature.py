"""Section T: 2:4 transformer training in the literature (Hu et al. 2024)."""
from __future__ import annotations

import statistics
from typing import Iterator

from .hardware import _mlp_seconds
from .report import Row

# ---------------------------------------------------------------------------------------------
# published figures (comparison targets only)

# T: Hu et al., "Accelerating Transformer Pre-training with 2:4 Sparsity" (ICML 2024, arXiv
# 2404.01847). The paper's tables were not retrievable; these are the authors' released timing logs
# that the replication repository names for its "Acceleration results" (README: "Follow
# accelerate/run_ffn.sh"): https://github.com/thu-ml/2by4-pretrain-acc-examples, files
# accelerate/dense-ffn/log.txt and accelerate/sparse-ffn/log.txt (commit 8bce8da5), the "iter 9"
# line of the run with the stated n_embd and batch_size. What is timed (accelerate/*-ffn/train.py):
# one nanoGPT MLP (d -> 4d, GELU, 4d -> d, no bias), fp16 autocast, forward + backward, 64
# micro-steps (config/train_gpt2.py: gradient_accumulation_steps = 8 * 8) per logged iteration,
# sequence (block_size) 2048; sparse = transposable 2:4 weights (FWD and the backward through W^T
# sparse). (label, d, batch, dense ms, sparse ms per logged iteration)
PUB_T_HU24_FFN = [
    ("d=768 b=16", 768, 16, 987.69, 693.91),
    ("d=1024 b=16", 1024, 16, 1646.44, 1171.33),
    ("d=2048 b=16", 2048, 16, 6146.84, 3900.84),
    ("d=2560 b=16", 2560, 16, 9457.68, 5962.66),
]
T_SEQ = 2048
T_MICRO_STEPS = 64
T_HW = "a100-sxm4-40gb"   # assumed: the logs do not name the GPU (see rows_t_literature's note)
T_SRC = ("https://github.com/thu-ml/2by4-pretrain-acc-examples accelerate/{dense,sparse}-ffn/log.txt "
         "(commit 8bce8da5), 'iter 9' line; paper: https://arxiv.org/abs/2404.01847")


# ---- T (2:4 transformer training, literature) ----------------------------------------------


def rows_t_literature(quick: bool = False) -> Iterator[Row]:
    """Hu et al. 2024's released FFN fwd+bwd timings vs the model's GEMMs + w24t passes."""
    errs = []
    for label, d, b, d_ms, s_ms in PUB_T_HU24_FFN[:2] if quick else PUB_T_HU24_FFN:
        tokens = b * T_SEQ
        dm, sm = _mlp_seconds(T_HW, tokens, d, 4 * d, "w24t")
        spd, mod = d_ms / s_ms, dm / sm
        errs.append(abs(mod - spd))
        pub_step = d_ms / T_MICRO_STEPS
        yield Row("T", f"2:4 FFN fwd+bwd speedup, GPT-2-style MLP {label} seq {T_SEQ} (Hu et al. 2024)",
                  spd, mod, "x", f"{T_HW} / MLP {tokens}x{d}x{4 * d} fp16 / w24t; {T_SRC}",
                  note=f"published {d_ms} -> {s_ms} ms per {T_MICRO_STEPS} micro-steps; modeled GEMMs "
                       f"+ w24t passes {dm * 1e3:.2f} -> {sm * 1e3:.2f} ms per micro-step (GELU, casts "
                       f"not counted). GPU not named in the logs: A100 assumed; the published dense "
                       f"micro-step ({pub_step:.2f} ms) is {pub_step / (dm * 1e3):.1f}x the modeled "
                       f"A100 one, so the logs may come from a slower GPU (e.g. an RTX 3090)")
    yield Row("T", "2:4 FFN speedup (Hu et al. 2024), median absolute error over the rows", None,
              statistics.median(errs), "x", status="qualitative",
              note="compare, never fit: no parameter was tuned to these logs")
