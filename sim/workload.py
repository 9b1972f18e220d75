"""Workloads: networks as data (YAML op graphs), shape inference, and lowering to FWD/AGBP/WGC GEMMs.

A workload file lists ops in execution order. Every op reads named tensors and writes one new tensor;
shapes are inferred, never repeated, so a file states each fact once. Ops:

- ``conv``: in, out, c_out, kernel, [stride=1, pad=0, groups=1, bias, bn=false, relu=false,
  transposed=false]. ``kernel`` and ``pad`` take one number for both axes or [height, width].
  ``transposed: true`` is a ConvTranspose2d (a deconv): its output is (H-1)*stride - 2*pad + kernel
  per axis, and its three GEMMs are those of the conv from its output back to its input, with FWD
  and AGBP swapped (see `lower`).
- ``fc``:   in, out, c_out, [bias=true, relu=false]   (flattens its input)
- ``pool``: in, out, kind (max|avg), and either global: true or kernel, [stride=kernel, pad=0]
- ``add``:  in: [a, b], out, [relu=false]              (residual sum)

Transformer ops (docs/explanation/transformers.md). A token tensor is (C, T, 1): C features of T tokens; any
(C, H, W) map is H*W tokens to a ``linear``.

- ``linear``: in, out, c_out, [bias=true, tied]   (over the features of every token: M = batch*T)
- ``matmul``: in: [a, b], out, kind (qk|av), heads  (attention's batched GEMMs, no weights)
- ``layernorm``, ``gelu``: in, out;  ``dropout``: in, out, [p=0.1];  ``softmax``: in, out,
  [causal=false] (over the last axis: the keys)
- ``embedding``: in (token ids), out, vocab, dim, [positions, types]  (token + position tables)
- ``tokens``: in, out, [cls=false, positions=false]  (a C x H x W map as H*W tokens, ViT style)
- ``select``: in, out, [index=0]  (one token, e.g. [CLS]);  ``slice``: in, out, parts, part

Integer fields may name a workload parameter declared under ``params: {seq: 128}`` (sequence
length); ``load_workload("bert-base:seq=512")`` overrides it.

The input tensor is named ``x``. A tensor that is not produced by an earlier op may be declared in
``tensors: {name: [C, H, W]}`` (capture uses this for models whose wiring it cannot see).
The batch size is never part of a workload: it is a parameter of lowering and of traces.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from sim.errors import WorkloadError
from sim.limits import BUDGETS, check_range
from sim.yamlio import load_yaml_file

SCHEMA_VERSION = 1
PHASES = ("fwd", "agbp", "wgc")

_OP_KEYS = {
    "conv": ({"name", "op", "in", "out", "c_out", "kernel"},
             {"stride", "pad", "groups", "bias", "bn", "relu", "transposed"}),
    "fc": ({"name", "op", "in", "out", "c_out"}, {"bias", "relu"}),
    "pool": ({"name", "op", "in", "out", "kind"}, {"kernel", "stride", "pad", "global"}),
    "add": ({"name", "op", "in", "out"}, {"relu"}),
    "linear": ({"name", "op", "in", "out", "c_out"}, {"bias", "tied"}),
    "matmul": ({"name", "op", "in", "out", "kind", "heads"}, set()),
    "layernorm": ({"name", "op", "in", "out"}, set()),
    "gelu": ({"name", "op", "in", "out"}, set()),
    "softmax": ({"name", "op", "in", "out"}, {"causal"}),
    "dropout": ({"name", "op", "in", "out"}, {"p"}),
    "embedding": ({"name", "op", "in", "out", "vocab", "dim"}, {"positions", "types"}),
    "tokens": ({"name", "op", "in", "out"}, {"cls", "positions"}),
    "select": ({"name", "op", "in", "out"}, {"index"}),
    "slice": ({"name", "op", "in", "out", "parts", "part"}, set()),
}
# ops that become Layers (GEMMs the engines time); every other op is non-GEMM work (sim/stepops.py)
GEMM_OPS = ("conv", "fc", "linear", "matmul")
# integer op fields that may name a workload parameter (params: {seq: 128})
_PARAM_FIELDS = {"c_out", "kernel", "stride", "pad", "groups", "heads", "vocab", "dim",
                 "positions", "types", "index", "parts", "part"}
_TOP_KEYS_REQUIRED = {"name", "input", "layers"}
_TOP_KEYS_OPTIONAL = {"schema", "description", "source", "dataset", "classes", "tensors", "notes",
                      "params"}


def is_depthwise(groups: int, c_in: int, c_out: int) -> bool:
    """A depthwise conv (groups = input = output channels): output channel c reads input channel c
    alone, so both sides are one channel space."""
    return 1 < groups == c_in == c_out


@dataclass(frozen=True)
class Layer:
    """A conv or FC layer with its inferred geometry. FC is a 1x1 conv on a 1x1 map.

    A ``linear`` is a 1x1 conv over its input's H x W tokens (a token tensor: H = T, W = 1), so its
    GEMMs have M = batch*T. A ``matmul`` (attention) has no weights: `mm` = (M, N, K) of one head's
    GEMM, `groups` = heads, c_in x h x w its first operand's and c_out x p x q its output's shape.
    """

    index: int
    name: str
    op: str            # "conv" | "fc"
    c_in: int
    c_out: int
    h: int             # input height (1 for fc)
    w: int
    p: int             # output height
    q: int
    r: int             # kernel height
    s: int
    stride: int
    pad: int | tuple[int, int]   # an int when both axes have it (every square pad); else (h, w)
    groups: int
    bias: bool
    bn: bool
    relu: bool
    in_tensor: str
    out_tensor: str
    in_space: str      # channel space: tensors tied by residual adds and pools share one
    out_space: str
    residual_node: str | None  # out_space when it is a residual sum node, else None
    transposed: bool = False   # a ConvTranspose2d: h, w its input; p, q its (larger) output
    tied: str | None = None    # linear: the embedding op whose table is this weight (counted there)
    mm: tuple = ()             # matmul: (M, N, K) of one head's forward GEMM
    kind: str = ""             # matmul: "qk" (S = Q K^T) or "av" (O = A V)
    in2_tensor: str | None = None   # matmul: its second operand (K or V)

    @property
    def pad_h(self) -> int:
        return self.pad if isinstance(self.pad, int) else self.pad[0]

    @property
    def pad_w(self) -> int:
        return self.pad if isinstance(self.pad, int) else self.pad[1]

    @property
    def block(self) -> str:
        """Block kind: conv-bn-relu, conv-bn, conv-relu or conv (fc-relu / fc for FC layers)."""
        if self.op == "matmul":
            return f"matmul-{self.kind}"
        parts = [self.op] + (["bn"] if self.bn else []) + (["relu"] if self.relu else [])
        return "-".join(parts)

    @property
    def dbtd_target(self) -> str:
        """Which gradient DBTD prunes (METHODS.md 1): dI for Conv-ReLU without BN, else dO."""
        return "dI" if (self.relu and not self.bn) else "dO"

    @property
    def needs_agbp(self) -> bool:
        """False for a layer reading the network input: nothing needs the input image's gradient."""
        return self.in_tensor != "x"

    @property
    def depthwise(self) -> bool:
        return self.op == "conv" and is_depthwise(self.groups, self.c_in, self.c_out)

    @property
    def weight_count(self) -> int:
        if self.op == "matmul":
            return 0     # activation x activation
        return self.c_out * (self.c_in // self.groups) * self.r * self.s

    @property
    def param_count(self) -> int:
        """Learnable parameters: weights, bias, and BN's scale and shift."""
        w = 0 if self.tied else self.weight_count   # a tied weight is its embedding table
        return w + (self.c_out if self.bias else 0) + (2 * self.c_out if self.bn else 0)

    def macs(self, batch: int = 1) -> int:
        """Forward multiply-accumulates (a deconv does its kernel once per input pixel)."""
        if self.transposed:
            return batch * self.h * self.w * self.weight_count
        if self.op == "matmul":
            return batch * self.groups * self.mm[0] * self.mm[1] * self.mm[2]
        return batch * self.p * self.q * self.weight_count

    def tensor_shapes(self, batch: int) -> dict[str, tuple[int, ...]]:
        """NCHW shapes of this layer's tensors (I, W, O and their gradients dI, dW, dO)."""
        i = (batch, self.c_in, self.h, self.w)
        o = (batch, self.c_out, self.p, self.q)
        wt = (self.c_out, self.c_in // self.groups, self.r, self.s)
        if self.transposed:   # PyTorch stores a ConvTranspose2d's weight as C_in x C_out/g x R x S
            wt = (self.c_in, self.c_out // self.groups, self.r, self.s)
        if self.op == "fc":
            i, o, wt = (batch, self.c_in), (batch, self.c_out), (self.c_out, self.c_in)
        if self.op == "linear":   # PyTorch's layout: tokens before features
            t = self.h * self.w
            i, o, wt = (batch, t, self.c_in), (batch, t, self.c_out), (self.c_out, self.c_in)
        if self.op == "matmul":   # per head: A [M, K], B [K, N] (K^T or V), O [M, N]
            m, n, k = self.mm
            g = self.groups
            return {"I": (batch, g, m, k), "dI": (batch, g, m, k), "I2": (batch, g, k, n),
                    "dI2": (batch, g, k, n), "O": (batch, g, m, n), "dO": (batch, g, m, n),
                    "W": (0,), "dW": (0,)}
        return {"I": i, "dI": i, "O": o, "dO": o, "W": wt, "dW": wt}


@dataclass(frozen=True)
class Gemm:
    """One lowered GEMM C[M,N] = A[M,K] @ B[K,N], repeated `groups` times (grouped conv).

    The a/b/c_tensor fields name the tensor each operand is built from; *_elems count that tensor's
    elements (compulsory traffic, not the im2col-expanded size).
    """

    layer: str
    phase: str
    m: int
    n: int
    k: int
    groups: int
    a_tensor: str
    b_tensor: str
    c_tensor: str
    a_elems: int
    b_elems: int
    c_elems: int
    form: str = "implicit"   # "scatter": GEMM into im2col space, then col2im (strided AGBP)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.groups

    def bytes(self, dtype_bytes: int = 2) -> int:
        """Compulsory operand traffic: read A and B once, write C once."""
        return (self.a_elems + self.b_elems + self.c_elems) * dtype_bytes


def lower(layer: Layer, batch: int) -> dict[str, Gemm]:
    """FWD, AGBP and WGC GEMMs of one layer (METHODS.md notation), per group.

    AGBP of a stride-1 conv is the implicit GEMM M = N*H*W, N = C_in, K = C_out*R*S. A strided conv
    would waste s*s of that on the zeros inserted into dO, which no real kernel computes: strided
    dgrad (and Caffe's W^T * dO + col2im) is the scatter form M = N*P*Q, N = C_in*R*S, K = C_out,
    followed by a col2im (form "scatter"). In both forms dO is the A operand and K runs over C_out,
    so N:M groups along dO's channels stay along the reduction.

    A transposed conv (deconv) computes exactly the data gradient of the conv E that maps its output
    back to its input (E: C_out x P x Q -> C_in x H x W, same kernel, stride and pad). So its FWD is
    E's AGBP (implicit M = N*P*Q, N = C_out, K = C_in*R*S at stride 1; scatter plus col2im when
    strided, as PyTorch runs it), its AGBP is E's FWD (M = N*H*W, N = C_in, K = C_out*R*S, dO the A
    operand) and its WGC is E's WGC (M = C_in, N = C_out*R*S, K = N*H*W, with dO the im2col'd B).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    # every GEMM of every command passes here: the one place a batch can push a count past exact
    _check_macs(layer.__dict__, batch, None, "batch")
    if layer.op == "matmul":
        return _lower_matmul(layer, batch)
    g = layer.groups
    cin_g, cout_g = layer.c_in // g, layer.c_out // g
    n_i = batch * layer.c_in * layer.h * layer.w
    n_o = batch * layer.c_out * layer.p * layer.q
    n_w = layer.weight_count
    rs = layer.r * layer.s
    npq = batch * layer.p * layer.q
    mk = lambda ph, m, n, k, a, b, c, ae, be, ce, form="implicit": Gemm(
        layer.name, ph, m, n, k, g, a, b, c, ae, be, ce, form)
    if layer.transposed:
        nhw = batch * layer.h * layer.w
        if layer.stride == 1:
            fwd = mk("fwd", npq, cout_g, cin_g * rs, "I", "W", "O", n_i, n_w, n_o)
        else:
            fwd = mk("fwd", nhw, cout_g * rs, cin_g, "I", "W", "O", n_i, n_w, n_o, "scatter")
        return {
            "fwd": fwd,
            "agbp": mk("agbp", nhw, cin_g, cout_g * rs, "dO", "W", "dI", n_o, n_w, n_i),
            "wgc": mk("wgc", cin_g, cout_g * rs, nhw, "I", "dO", "dW", n_i, n_o, n_w),
        }
    if layer.stride == 1:
        agbp = mk("agbp", batch * layer.h * layer.w, cin_g, cout_g * rs, "dO", "W", "dI", n_o, n_w, n_i)
    else:
        agbp = mk("agbp", npq, cin_g * rs, cout_g, "dO", "W", "dI", n_o, n_w, n_i, "scatter")
    return {
        "fwd": mk("fwd", npq, cout_g, cin_g * rs, "I", "W", "O", n_i, n_w, n_o),
        "agbp": agbp,
        "wgc": mk("wgc", cout_g, cin_g * rs, npq, "dO", "I", "dW", n_o, n_i, n_w),
    }


def _lower_matmul(layer: Layer, batch: int) -> dict[str, Gemm]:
    """Attention's batched GEMMs, one per (sample, head): groups = batch * heads.

    Forward C[M,N] = A[M,K] B[K,N] (Q K^T: A = Q, B = K^T; A V: A = the attention P, B = V). The
    backward has one GEMM per operand, in the same roles as a layer's: "agbp" is the gradient of
    the first operand, dA = dO B^T (M, K, N), and "wgc" that of the second, dB^T = dO^T A
    (N, K, M). So Q K^T's backward is dQ = dS K and dK = dS^T Q, A V's is dP = dO V^T and
    dV^T = dO^T P; in all four dO is the A operand (tensors "dO", "I", "I2" -> "dI", "dI2").
    """
    m, n, k = layer.mm
    g = batch * layer.groups
    n_a, n_b, n_o = g * m * k, g * k * n, g * m * n
    mk = lambda ph, mm, nn, kk, a, b, c, ae, be, ce: Gemm(layer.name, ph, mm, nn, kk, g, a, b, c,
                                                          ae, be, ce)
    return {"fwd": mk("fwd", m, n, k, "I", "I2", "O", n_a, n_b, n_o),
            "agbp": mk("agbp", m, k, n, "dO", "I2", "dI", n_o, n_b, n_a),
            "wgc": mk("wgc", n, k, m, "dO", "I", "dI2", n_o, n_a, n_b)}


@dataclass(frozen=True)
class Workload:
    """A validated network: its op list as written, and the conv/FC layers with inferred geometry."""

    name: str
    description: str
    source: str
    dataset: str | None
    input_shape: tuple[int, int, int]
    ops: tuple[dict, ...]
    layers: tuple[Layer, ...]
    origin: str  # file the workload came from (for error messages and provenance)
    notes: str = ""
    classes: int | None = None
    # workload parameters with their values in effect (e.g. (("seq", 128),)); not params() below
    parameters: tuple = ()
    # (C, H, W) of every tensor, as inferred (the non-GEMM ops' shapes for sim/stepops.py)
    shapes: tuple = ()
    # learnable parameters of non-GEMM ops: (op name, element count of one tensor), in op order
    extra_params: tuple = ()
    input_doc: dict | None = None   # `input` as written when it is not {channels, height, width}

    @property
    def convs(self) -> tuple[Layer, ...]:
        return tuple(l for l in self.layers if l.op == "conv")

    def layer(self, name: str) -> Layer:
        for l in self.layers:
            if l.name == name:
                return l
        raise KeyError(name)

    def params(self) -> int:
        """Learnable parameters: the layers' and the non-GEMM ops' (layer norms, embeddings)."""
        return sum(l.param_count for l in self.layers) + sum(n for _, n in self.extra_params)

    def shape_of(self, tensor: str) -> tuple[int, int, int]:
        return dict(self.shapes)[tensor]

    def macs(self, batch: int = 1) -> int:
        return sum(l.macs(batch) for l in self.layers)

    def gemms(self, batch: int) -> Iterable[Gemm]:
        for l in self.layers:
            yield from lower(l, batch).values()

    def to_dict(self) -> dict:
        """The workload as written (round-trips through from_dict); traces embed it."""
        d: dict[str, Any] = {"schema": SCHEMA_VERSION, "name": self.name}
        if self.description:
            d["description"] = self.description
        if self.source:
            d["source"] = self.source
        if self.dataset:
            d["dataset"] = self.dataset
        if self.classes is not None:
            d["classes"] = self.classes
        if self.notes:
            d["notes"] = self.notes
        if self.parameters:
            d["params"] = dict(self.parameters)
        c, h, w = self.input_shape
        d["input"] = (dict(self.input_doc) if self.input_doc is not None
                      else {"channels": c, "height": h, "width": w})
        declared = _declared_tensors(self.ops, self.layers)
        if declared:
            d["tensors"] = declared
        d["layers"] = [dict(op) for op in self.ops]
        return d

    @cached_property
    def checksum(self) -> str:
        import hashlib
        import json
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def _declared_tensors(ops, layers) -> dict[str, list[int]]:
    produced = {"x"} | {op["out"] for op in ops}
    out: dict[str, list[int]] = {}
    by_name = {l.name: l for l in layers}
    for op in ops:
        ins = op["in"] if isinstance(op["in"], list) else [op["in"]]
        for t in ins:
            if t not in produced and t not in out and op["name"] in by_name:
                l = by_name[op["name"]]
                out[t] = [l.c_in, l.h, l.w] if l.op in ("conv", "linear") else [l.c_in, 1, 1]
    return out


# ----------------------------------------------------------------------------------------------
# Loading and validation


def _int(v: Any, file: str, field: str, minimum: int = 1, rng: str | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise WorkloadError(file, field, f"expected an integer, got {v!r}")
    if v < minimum:
        raise WorkloadError(file, field, f"must be >= {minimum}, got {v}")
    if rng is not None:
        check_range(rng, v, file, field, WorkloadError)
    return v


def _check_macs(layer: dict, batch: int, file: str, field: str) -> None:
    """Refuse a layer whose GEMMs at this batch hold more MACs than float64 counts exactly."""
    pix = layer["h"] * layer["w"] if layer.get("transposed") else layer["p"] * layer["q"]
    per_sample = layer["c_out"] * pix * (layer["c_in"] // layer["groups"]) * layer["r"] * layer["s"]
    if layer.get("mm"):
        per_sample = layer["groups"] * layer["mm"][0] * layer["mm"][1] * layer["mm"][2]
    if per_sample * batch > BUDGETS["layer_macs"].limit:
        raise WorkloadError(file, field, f"layer {layer['name']}: {per_sample * batch:.3g} "
                            f"multiply-adds per GEMM at batch "
                            f"{batch}: above {BUDGETS['layer_macs'].limit:.3g}, where FLOP counts "
                            "stop being exact (sim/limits.py)")


def _bool(v: Any, file: str, field: str) -> bool:
    if not isinstance(v, bool):
        raise WorkloadError(file, field, f"expected true or false, got {v!r}")
    return v


def _str(v: Any, file: str, field: str) -> str:
    if not isinstance(v, str) or not v:
        raise WorkloadError(file, field, f"expected a non-empty string, got {v!r}")
    return v


def _pair(v: Any, file: str, field: str, minimum: int = 1, rng: str = "kernel") -> tuple[int, int]:
    if isinstance(v, list) and len(v) == 2:
        return (_int(v[0], file, field + "[0]", minimum, rng=rng),
                _int(v[1], file, field + "[1]", minimum, rng=rng))
    if isinstance(v, list):
        raise WorkloadError(file, field, f"expected a number or [height, width], got {v!r}")
    k = _int(v, file, field, minimum, rng=rng)
    return k, k


class _Spaces:
    """Union-find over tensor names: residual adds and pools keep one channel space."""

    def __init__(self):
        self.parent: dict[str, str] = {}
        self.size: dict[str, int] = {}

    def find(self, t: str) -> str:
        self.parent.setdefault(t, t)
        self.size.setdefault(t, 1)
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the first argument's space keeps its name (for an add: its first operand's)
            self.parent[rb] = ra
            self.size[ra] += self.size[rb]


def _check_top(doc: Any, file: str) -> tuple[str, dict[str, tuple[int, int, int]], list]:
    """The document's top level: (name, declared tensor shapes with the input "x", ops)."""
    if not isinstance(doc, dict):
        raise WorkloadError(file, "(top level)", "expected a mapping with name, input and layers")
    unknown = set(doc) - _TOP_KEYS_REQUIRED - _TOP_KEYS_OPTIONAL
    if unknown:
        raise WorkloadError(file, sorted(map(str, unknown))[0], "unknown key (allowed: "
                            + ", ".join(sorted(_TOP_KEYS_REQUIRED | _TOP_KEYS_OPTIONAL)) + ")")
    for k in sorted(_TOP_KEYS_REQUIRED):
        if k not in doc:
            raise WorkloadError(file, k, "missing")
    if "schema" in doc and doc["schema"] != SCHEMA_VERSION:
        raise WorkloadError(file, "schema", f"unsupported workload schema {doc['schema']!r} "
                            f"(this prunesim reads {SCHEMA_VERSION})")
    name = _str(doc["name"], file, "name")
    inp = doc["input"]
    if isinstance(inp, dict) and set(inp) == {"tokens"}:
        # token ids, one per position: a (1, T, 1) tensor that only an embedding reads
        shapes: dict[str, tuple[int, int, int]] = {
            "x": (1, _int(inp["tokens"], file, "input.tokens", rng="spatial"), 1)}
    elif not isinstance(inp, dict) or set(inp) != {"channels", "height", "width"}:
        raise WorkloadError(file, "input", "expected {channels: C, height: H, width: W} or "
                            "{tokens: T}")
    else:
        shapes = {
            "x": (_int(inp["channels"], file, "input.channels", rng="channels"),
                  _int(inp["height"], file, "input.height", rng="spatial"),
                  _int(inp["width"], file, "input.width", rng="spatial"))}
    declared = doc.get("tensors") or {}
    if not isinstance(declared, dict):
        raise WorkloadError(file, "tensors", "expected a mapping of tensor name to [C, H, W]")
    for t, shp in declared.items():
        f = f"tensors.{t}"
        if not (isinstance(shp, list) and len(shp) == 3):
            raise WorkloadError(file, f, f"expected [C, H, W], got {shp!r}")
        shapes[str(t)] = tuple(_int(v, file, f"{f}[{i}]", rng="channels" if i == 0 else "spatial")
                               for i, v in enumerate(shp))  # type: ignore
    return name, shapes, _check_ops(doc, file)


def _check_ops(doc: dict, file: str) -> list:
    ops = doc["layers"]
    if not isinstance(ops, list) or not ops:
        raise WorkloadError(file, "layers", "expected a non-empty list of ops")
    check_range("layers", len(ops), file, "layers", WorkloadError)
    for k in ("description", "source", "dataset", "notes"):
        if k in doc and doc[k] is not None and not isinstance(doc[k], str):
            raise WorkloadError(file, k, f"expected text, got a {type(doc[k]).__name__}")
    return ops


def _resolve_params(doc: Any, file: str, overrides: dict | None) -> tuple[Any, dict]:
    """The document with every integer field that names a workload parameter replaced by its
    value (declared under `params`, overridden by `overrides`), and the values in effect."""
    if not isinstance(doc, dict) or ("params" not in doc and not overrides):
        return doc, {}
    declared = doc.get("params") or {}
    if not isinstance(declared, dict):
        raise WorkloadError(file, "params", "expected a mapping of parameter name to integer")
    values = {}
    for k, v in declared.items():
        values[str(k)] = _int(v, file, f"params.{k}", rng="spatial")
    for k, v in (overrides or {}).items():
        if k not in values:
            raise WorkloadError(file, f"params.{k}", "unknown workload parameter (declared: "
                                + (", ".join(sorted(values)) or "none") + ")")
        values[k] = _int(v, file, f"params.{k}", rng="spatial")

    def sub(d: Any, keys) -> Any:
        if not isinstance(d, dict):
            return d
        return {k: (values[v] if k in keys and isinstance(v, str) and v in values else v)
                for k, v in d.items()}
    doc = dict(doc, params=values)
    if isinstance(doc.get("input"), dict):
        doc["input"] = sub(doc["input"], {"tokens", "channels", "height", "width"})
    if isinstance(doc.get("layers"), list):
        doc["layers"] = [sub(op, _PARAM_FIELDS) for op in doc["layers"]]
    return doc, values


def _op_header(op: Any, i: int, file: str, names: set[str], shapes: dict) -> tuple:
    """An op's kind, keys, name and tensors checked: (kind, name, field, out, ins)."""
    fld = f"layers[{i}]"
    if not isinstance(op, dict):
        raise WorkloadError(file, fld, f"expected a mapping, got {op!r}")
    kind = op.get("op")
    if kind not in _OP_KEYS:
        raise WorkloadError(file, fld + ".op", f"unknown op {kind!r} (known: {', '.join(_OP_KEYS)})")
    req, opt = _OP_KEYS[kind]
    for k in op:
        if k not in req and k not in opt:
            raise WorkloadError(file, f"{fld}.{k}", f"unknown key for op {kind} "
                                f"(allowed: {', '.join(sorted(req | opt))})")
    for k in sorted(req):
        if k not in op:
            raise WorkloadError(file, f"{fld}.{k}", f"missing (required for op {kind})")
    lname = _str(op["name"], file, fld + ".name")
    fld = f"layers[{i}] ({lname})"
    if lname in names:
        raise WorkloadError(file, fld + ".name", "duplicate layer name")
    names.add(lname)
    out = _str(op["out"], file, fld + ".out")
    if out in shapes:
        raise WorkloadError(file, fld + ".out", f"tensor {out!r} is already defined; every op "
                            "writes a new tensor")
    two = kind in ("add", "matmul")
    ins = op["in"] if two else [op["in"]]
    if two and (not isinstance(op["in"], list) or len(op["in"]) != 2):
        raise WorkloadError(file, fld + ".in", f"{kind} takes a list of two tensors")
    for t in ins:
        _str(t, file, fld + ".in")
        if t not in shapes:
            raise WorkloadError(file, fld + ".in", f"tensor {t!r} is not produced by an earlier "
                                "op nor declared under tensors")
    return kind, lname, fld, out, ins


def _conv_layer(op: dict, file: str, fld: str, chw: tuple[int, int, int], **ids) -> dict:
    """A conv op's geometry (ids: index, name, in_tensor, out_tensor), as Layer fields."""
    c, h, w = chw
    r, s = _pair(op["kernel"], file, fld + ".kernel")
    stride = _int(op.get("stride", 1), file, fld + ".stride", rng="stride")
    ph, pw = _pair(op.get("pad", 0), file, fld + ".pad", minimum=0, rng="pad")
    # a square pad stays an int, so `pad: p` and `pad: [p, p]` give the same layer
    pad: int | tuple[int, int] = ph if ph == pw else (ph, pw)
    groups = _int(op.get("groups", 1), file, fld + ".groups", rng="channels")
    c_out = _int(op["c_out"], file, fld + ".c_out", rng="channels")
    transposed = _bool(op.get("transposed", False), file, fld + ".transposed")
    if max(ph, pw) >= max(r, s):
        raise WorkloadError(file, fld + ".pad", f"pad {op.get('pad')} is not smaller than "
                            f"the {r}x{s} kernel: outputs past it would convolve only "
                            "padding")
    bn = _bool(op.get("bn", False), file, fld + ".bn")
    relu = _bool(op.get("relu", False), file, fld + ".relu")
    bias = _bool(op.get("bias", not bn), file, fld + ".bias")
    if c % groups or c_out % groups:
        raise WorkloadError(file, fld + ".groups", f"groups={groups} must divide c_in={c} "
                            f"and c_out={c_out}")
    if transposed:   # PyTorch's ConvTranspose2d size (output_padding 0, dilation 1)
        p, q = (h - 1) * stride - 2 * ph + r, (w - 1) * stride - 2 * pw + s
    else:
        p, q = (h + 2 * ph - r) // stride + 1, (w + 2 * pw - s) // stride + 1
    if p < 1 or q < 1:
        raise WorkloadError(file, fld + ".kernel", f"kernel {r}x{s} with pad "
                            f"{op.get('pad', 0)} does not fit the {h}x{w} input")
    if transposed:
        check_range("spatial", max(p, q), file, fld + ".stride", WorkloadError)
    d = dict(index=ids["index"], name=ids["name"], op="conv", c_in=c, c_out=c_out,
             h=h, w=w, p=p, q=q, r=r, s=s, stride=stride, pad=pad, groups=groups,
             bias=bias, bn=bn, relu=relu, in_tensor=ids["in_tensor"], out_tensor=ids["out_tensor"],
             transposed=transposed)
    _check_macs(d, 1, file, fld + ".c_out")
    return d


def _fc_layer(op: dict, file: str, fld: str, chw: tuple[int, int, int], **ids) -> dict:
    """An fc op (over the flattened input), as Layer fields."""
    c, h, w = chw
    c_out = _int(op["c_out"], file, fld + ".c_out", rng="channels")
    relu = _bool(op.get("relu", False), file, fld + ".relu")
    bias = _bool(op.get("bias", True), file, fld + ".bias")
    d = dict(index=ids["index"], name=ids["name"], op="fc", c_in=c * h * w,
             c_out=c_out, h=1, w=1, p=1, q=1, r=1, s=1, stride=1, pad=0,
             groups=1, bias=bias, bn=False, relu=relu, in_tensor=ids["in_tensor"],
             out_tensor=ids["out_tensor"])
    _check_macs(d, 1, file, fld + ".c_out")
    return d


def _pool_shape(op: dict, file: str, fld: str, chw: tuple[int, int, int]) -> tuple[int, int, int]:
    c, h, w = chw
    if op["kind"] not in ("max", "avg"):
        raise WorkloadError(file, fld + ".kind", f"expected max or avg, got {op['kind']!r}")
    if _bool(op.get("global", False), file, fld + ".global"):
        if "kernel" in op or "stride" in op or "pad" in op:
            raise WorkloadError(file, fld + ".global", "a global pool takes no kernel, "
                                "stride or pad")
        return (c, 1, 1)
    if "kernel" not in op:
        raise WorkloadError(file, fld + ".kernel", "missing (or set global: true)")
    k = _int(op["kernel"], file, fld + ".kernel", rng="kernel")
    stride = _int(op.get("stride", k), file, fld + ".stride", rng="stride")
    pad = _int(op.get("pad", 0), file, fld + ".pad", minimum=0, rng="pad")
    if 2 * pad > k:
        raise WorkloadError(file, fld + ".pad", f"pad {pad} is more than half the pool "
                            f"kernel {k} (PyTorch's rule): a window would hold only "
                            "padding")
    p, q = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if p < 1 or q < 1:
        raise WorkloadError(file, fld + ".kernel", f"pool {k} does not fit {h}x{w}")
    return (c, p, q)


def _linear_layer(op: dict, file: str, fld: str, chw: tuple[int, int, int], **ids) -> dict:
    """A linear op: a 1x1 conv over the H x W tokens of its input (M = batch*H*W)."""
    c, h, w = chw
    c_out = _int(op["c_out"], file, fld + ".c_out", rng="channels")
    bias = _bool(op.get("bias", True), file, fld + ".bias")
    tied = _str(op["tied"], file, fld + ".tied") if "tied" in op else None
    d = dict(index=ids["index"], name=ids["name"], op="linear", c_in=c, c_out=c_out, h=h, w=w,
             p=h, q=w, r=1, s=1, stride=1, pad=0, groups=1, bias=bias, bn=False, relu=False,
             in_tensor=ids["in_tensor"], out_tensor=ids["out_tensor"], tied=tied)
    _check_macs(d, 1, file, fld + ".c_out")
    return d


def _matmul_layer(op: dict, file: str, fld: str, a: tuple, b: tuple, **ids) -> dict:
    """Attention's Q K^T (a, b: token tensors (D, T, 1) -> scores (heads, T, T_b)) or A V
    (a: scores (heads, T, T_b), b: values (D, T_b, 1) -> (D, T, 1)), per head: D = heads * d_h."""
    heads = _int(op["heads"], file, fld + ".heads", rng="channels")
    kind = op["kind"]
    if kind == "qk":
        if a[2] != 1 or b[2] != 1 or a[0] != b[0]:
            raise WorkloadError(file, fld + ".in", f"qk needs two token tensors (D, T, 1) of one "
                                f"width D, got {a} and {b}")
        m, n, k, out = a[1], b[1], a[0] // heads, (heads, a[1], b[1])
    elif kind == "av":
        if a[0] != heads or b[2] != 1 or a[2] != b[1]:
            raise WorkloadError(file, fld + ".in", f"av needs scores (heads={heads}, T, T_b) and "
                                f"values (D, T_b, 1), got {a} and {b}")
        m, n, k, out = a[1], b[0] // heads, a[2], (b[0], a[1], 1)
    else:
        raise WorkloadError(file, fld + ".kind", f"expected qk or av, got {kind!r}")
    d_feat = a[0] if kind == "qk" else b[0]
    if d_feat % heads:
        raise WorkloadError(file, fld + ".heads", f"heads={heads} does not divide the width "
                            f"{d_feat}")
    d = dict(index=ids["index"], name=ids["name"], op="matmul", c_in=a[0], c_out=out[0], h=a[1],
             w=a[2], p=out[1], q=out[2], r=1, s=1, stride=1, pad=0, groups=heads, bias=False,
             bn=False, relu=False, in_tensor=ids["in_tensor"], out_tensor=ids["out_tensor"],
             mm=(m, n, k), kind=kind, in2_tensor=ids["in2"])
    _check_macs(d, 1, file, fld + ".heads")
    return d


def _token_op(kind: str, op: dict, file: str, fld: str, chw: tuple, opname: str,
              ops_by_name: dict) -> tuple[tuple, list]:
    """A transformer op without GEMMs: (its output shape, [(op name, learnable elements), ...])."""
    c, h, w = chw
    if kind in ("layernorm", "gelu", "softmax", "dropout"):
        if kind == "dropout":
            pr = op.get("p", 0.1)
            if isinstance(pr, bool) or not isinstance(pr, (int, float)) or not 0 <= pr < 1:
                raise WorkloadError(file, fld + ".p", f"expected a probability in [0, 1), got {pr!r}")
        if kind == "softmax":
            _bool(op.get("causal", False), file, fld + ".causal")
            if op.get("causal") and h != w:
                raise WorkloadError(file, fld + ".causal", f"a causal mask needs as many keys as "
                                    f"queries, got {h} x {w}")
        # layernorm: a scale and a shift per feature
        return chw, ([(opname, c), (opname, c)] if kind == "layernorm" else [])
    if kind == "embedding":
        if c != 1 or w != 1:
            raise WorkloadError(file, fld + ".in", f"embedding reads token ids (1, T, 1), got {chw}")
        vocab = _int(op["vocab"], file, fld + ".vocab", rng="channels")
        dim = _int(op["dim"], file, fld + ".dim", rng="channels")
        pos = _int(op.get("positions", 0), file, fld + ".positions", minimum=0)
        types = _int(op.get("types", 0), file, fld + ".types", minimum=0)
        if pos and h > pos:
            raise WorkloadError(file, fld + ".positions", f"{h} tokens but a position table of "
                                f"{pos}: the sequence length exceeds the model's")
        return (dim, h, 1), [(opname, n * dim) for n in (vocab, pos, types) if n]
    if kind == "tokens":
        cls = _bool(op.get("cls", False), file, fld + ".cls")
        pos = _bool(op.get("positions", False), file, fld + ".positions")
        t = h * w + int(cls)
        return (c, t, 1), [(opname, n) for n, on in ((c, cls), (c * t, pos)) if on]
    if kind == "select":
        i = _int(op.get("index", 0), file, fld + ".index", minimum=0)
        if w != 1 or i >= h:
            raise WorkloadError(file, fld + ".index", f"token {i} of a {chw} tensor")
        return (c, 1, 1), []
    # slice: one of `parts` equal parts of the features (a fused QKV projection's q, k or v)
    parts = _int(op["parts"], file, fld + ".parts", rng="channels")
    part = _int(op["part"], file, fld + ".part", minimum=0)
    if c % parts or part >= parts:
        raise WorkloadError(file, fld + ".part", f"part {part} of {parts} equal parts of {c} "
                            "features")
    return (c // parts, h, w), []


def workload_from_dict(doc: Any, origin: str = "<workload>",
                       params: dict | None = None) -> Workload:
    """Validate a parsed workload document and infer every layer's geometry; `params` overrides
    the document's workload parameters (e.g. {"seq": 512})."""
    file = origin
    doc, values = _resolve_params(doc, file, params)
    name, shapes, ops = _check_top(doc, file)
    spaces = _Spaces()
    for t in shapes:
        spaces.find(t)
    names: set[str] = set()
    raw_layers: list[dict] = []
    clean_ops: list[dict] = []
    residual_spaces: set[str] = set()
    extra: list[tuple[str, int]] = []
    for i, op in enumerate(ops):
        kind, lname, fld, out, ins = _op_header(op, i, file, names, shapes)
        chw = shapes[ins[0]]
        ids = dict(index=len(raw_layers), name=lname, in_tensor=ins[0], out_tensor=out)
        if kind in ("conv", "fc", "linear", "matmul"):
            if kind == "matmul":
                raw_layers.append(_matmul_layer(op, file, fld, chw, shapes[ins[1]], in2=ins[1],
                                                **ids))
            else:
                make = {"conv": _conv_layer, "fc": _fc_layer, "linear": _linear_layer}[kind]
                raw_layers.append(make(op, file, fld, chw, **ids))
            d = raw_layers[-1]
            shapes[out] = (d["c_out"], d["p"], d["q"])
            if kind == "conv" and is_depthwise(d["groups"], d["c_in"], d["c_out"]):
                # one space (the PruneTrain authors' MobileNet keeps the union of the adjacent
                # pointwise convs' channels through it and leaves it out of the lasso)
                spaces.union(ins[0], out)
            else:
                spaces.find(out)
        elif kind not in ("pool", "add"):
            shapes[out], ps = _token_op(kind, op, file, fld, chw, lname, {})
            extra += ps
            if kind in ("layernorm", "gelu", "dropout"):
                spaces.union(ins[0], out)   # elementwise: the same features
            else:
                spaces.find(out)
        elif kind == "pool":
            shapes[out] = _pool_shape(op, file, fld, chw)
            spaces.union(ins[0], out)
        else:  # add
            if shapes[ins[1]] != shapes[ins[0]]:
                raise WorkloadError(file, fld + ".in", f"add of mismatched shapes {shapes[ins[0]]} "
                                    f"({ins[0]}) and {shapes[ins[1]]} ({ins[1]})")
            _bool(op.get("relu", False), file, fld + ".relu")
            shapes[out] = shapes[ins[0]]
            spaces.union(ins[0], ins[1])
            spaces.union(ins[0], out)
            residual_spaces.add(out)
        clean_ops.append(dict(op))

    if not raw_layers:
        raise WorkloadError(file, "layers", "no conv, fc or linear layer")
    embeddings = {op["name"] for op in clean_ops if op.get("op") == "embedding"}
    for d in raw_layers:
        t = d.get("tied")
        if t is None:
            continue
        if t not in embeddings:
            raise WorkloadError(file, f"layers ({d['name']}).tied", f"{t!r} is not an "
                                "embedding op of this workload")
        e = next(op for op in clean_ops if op["name"] == t)
        if (d["c_out"], d["c_in"]) != (e["vocab"], e["dim"]):
            raise WorkloadError(file, f"layers ({d['name']}).tied", f"weight {d['c_out']}x"
                                f"{d['c_in']} is not {t}'s {e['vocab']}x{e['dim']} table")
    residual_roots = {spaces.find(t) for t in residual_spaces}
    layers = []
    for d in raw_layers:
        ins, outs = spaces.find(d["in_tensor"]), spaces.find(d["out_tensor"])
        layers.append(Layer(**d, in_space=ins, out_space=outs,
                            residual_node=outs if outs in residual_roots else None))
    dataset = doc.get("dataset")
    return Workload(name=name, description=str(doc.get("description", "")),
                    source=str(doc.get("source", "")),
                    dataset=str(dataset) if dataset is not None else None,
                    input_shape=shapes["x"], ops=tuple(clean_ops), layers=tuple(layers),
                    origin=origin, notes=str(doc.get("notes", "")),
                    classes=(_int(doc["classes"], file, "classes", rng="channels")
                             if "classes" in doc else None),
                    parameters=tuple(sorted(values.items())), shapes=tuple(shapes.items()),
                    extra_params=tuple(extra),
                    input_doc=(dict(doc["input"]) if set(doc["input"]) == {"tokens"} else None))


def _zoo_dirs() -> list[Path]:
    dirs = [Path(d) for d in os.environ.get("PRUNESIM_WORKLOADS", "").split(os.pathsep) if d]
    import workloads  # the package that ships the zoo's YAML files
    dirs.append(Path(workloads.__file__).parent)
    return dirs


def zoo_names() -> list[str]:
    """Names of every workload on the search path ($PRUNESIM_WORKLOADS, then the bundled zoo)."""
    seen: dict[str, None] = {}
    for d in _zoo_dirs():
        for f in sorted(d.glob("*.yaml")):
            seen.setdefault(f.stem, None)
    return list(seen)


def find_workload_file(name_or_path: str | os.PathLike) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or os.sep in str(name_or_path):
        if not p.is_file():
            raise WorkloadError(p, None, "no such workload file")
        return p
    for d in _zoo_dirs():
        f = d / f"{name_or_path}.yaml"
        if f.is_file():
            return f
    raise WorkloadError(None, "workload", f"unknown workload {str(name_or_path)!r} "
                        f"(known: {', '.join(zoo_names())})")


def split_workload_params(name_or_path: str | os.PathLike) -> tuple[str | os.PathLike, dict]:
    """`bert-base:seq=512` -> ("bert-base", {"seq": 512}); anything else unchanged with {}."""
    text = str(name_or_path)
    if ":" not in text or Path(text).exists():
        return name_or_path, {}
    base, _, opts = text.rpartition(":") if "=" in text.rpartition(":")[2] else (text, "", "")
    if not opts:
        return name_or_path, {}
    out: dict[str, int] = {}
    for item in opts.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise WorkloadError(None, "workload", f"{text!r}: expected NAME:key=value[,key=value]")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            raise WorkloadError(None, f"workload.{k.strip()}", f"expected an integer, got "
                                f"{v!r}") from None
    return base, out


# the transformer ops that change a token tensor's layout (their shapes are inferred on load)
TOKEN_OPS = ("layernorm", "gelu", "softmax", "dropout", "embedding", "tokens", "select", "slice")


def tensor_chw(wl: Workload) -> dict[str, tuple[int, int, int]]:
    """(C, H, W) per sample of every tensor, walked from the layers' current widths.

    `Workload.shapes` holds the shapes as the file was inferred; a workload narrowed by
    sim.system.trajectory.apply_widths (PruneTrain) keeps those, so everything that sizes tensors
    (sim.stepops, sim.system.memory) walks the ops here instead. Token ops (transformers, never
    narrowed) take the inferred shape."""
    shapes: dict[str, tuple[int, int, int]] = {"x": tuple(wl.input_shape)}  # type: ignore
    layers = {l.name: l for l in wl.layers}
    inferred = dict(wl.shapes)
    for op in wl.ops:
        ins = op["in"] if isinstance(op["in"], list) else [op["in"]]
        l = layers.get(op["name"])
        if l is not None:
            shapes.setdefault(ins[0], (l.c_in, l.h, l.w) if l.op in ("conv", "linear", "matmul")
                              else (l.c_in, 1, 1))
            shapes[op["out"]] = (l.c_out, l.p, l.q)
            continue
        if op.get("op") in TOKEN_OPS and op["out"] in inferred:
            shapes[op["out"]] = inferred[op["out"]]   # as sim/workload.py inferred it
            continue
        if ins[0] not in shapes:
            raise WorkloadError(wl.origin, f"{op['name']}.in", f"tensor {ins[0]!r} has no shape")
        c, h, w = shapes[ins[0]]
        if op.get("op") == "pool":
            if op.get("global"):
                shapes[op["out"]] = (c, 1, 1)
            else:
                k = op["kernel"]
                s, p = op.get("stride", k), op.get("pad", 0)
                shapes[op["out"]] = (c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
        else:
            shapes[op["out"]] = (c, h, w)
    return shapes


def load_workload(name_or_path: str | os.PathLike) -> Workload:
    """Load a zoo workload by name, or any workload YAML by path, fully validated.

    `NAME:seq=512` (or `path.yaml:seq=512`) overrides a workload parameter; the workload's name
    then carries the override (`bert-base:seq=512`), so stored results of the two differ."""
    base, overrides = split_workload_params(name_or_path)
    f = find_workload_file(base)
    wl = workload_from_dict(load_yaml_file(f, WorkloadError), origin=str(f), params=overrides)
    if overrides:
        import dataclasses
        tag = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
        wl = dataclasses.replace(wl, name=f"{wl.name}:{tag}")
    return wl


def with_classes(w: Workload, classes: int) -> Workload:
    """The workload with a `classes`-way classifier (its last FC layer's outputs): CIFAR-100's
    network from the CIFAR-10 form. The same workload when it already has that many."""
    if classes == w.layers[-1].c_out:
        return w
    doc = w.to_dict()
    doc["layers"] = [dict(op) for op in doc["layers"]]
    last = next(op for op in reversed(doc["layers"]) if op.get("op") == "fc")
    last["c_out"] = classes
    doc["name"] = f"{w.name}-cifar{classes}"
    doc["dataset"] = f"cifar{classes}"
    return workload_from_dict(doc, origin=w.origin)
