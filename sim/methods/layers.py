"""Which layers a method prunes: the `layers=` option of the n:m and weight-2:4 methods.

`all` (default): convs with more than 3 input channels (the SDGP authors' rule, so CNN results are
unchanged) and every transformer `linear`; `conv` convs only; `linear` every linear; `ffn` / `attn`
the linears of the MLP / attention blocks (linear_role). A CNN's `fc` classifier is never pruned
(docs/explanation/transformers.md, "Methods on linears").
"""
from __future__ import annotations

from sim.workload import Layer

LAYER_SETS = ("all", "conv", "linear", "ffn", "attn")

_ATTN_WORDS = {"attn", "attention", "self_attn", "qkv", "query", "key", "value", "q_proj",
               "k_proj", "v_proj", "out_proj", "c_attn"}
_FFN_WORDS = {"mlp", "ffn", "feed_forward", "feedforward", "intermediate", "fc1", "fc2", "c_fc",
              "w1", "w2", "w3", "up_proj", "down_proj", "gate_proj"}


def linear_role(layer: Layer) -> str:
    """"attn" (an attention projection), "ffn" (an MLP linear) or "other" (heads, poolers), from
    the dotted module name as PyTorch and the zoo write it. Attention words win, so BERT's
    `attention.output.dense` is attention and its `layer.N.output.dense` (after `intermediate`)
    is the MLP's second linear."""
    parts = set(layer.name.replace("-", "_").split("."))
    if parts & _ATTN_WORDS:
        return "attn"
    if parts & _FFN_WORDS or layer.name.endswith("output.dense"):
        return "ffn"
    return "other"


def layer_selected(layer: Layer, layers: str = "all") -> bool:
    """Whether a method with `layers=...` prunes this layer (LAYER_SETS); convs need more than 3
    input channels (the SDGP authors skip the stem), CNN `fc` layers are never selected."""
    if layer.op == "conv":
        return layers in ("all", "conv") and layer.c_in > 3
    if layer.op != "linear":
        return False
    if layers in ("all", "linear"):
        return True
    return layers == linear_role(layer)


def sdgp_prunes(layer: Layer, layers: str = "conv") -> bool:
    """The SDGP authors prune every conv with more than 3 input channels, never linear layers;
    `layers` (a LAYER_SETS value, the methods' option) opts transformer linears in."""
    return layer_selected(layer, layers)

