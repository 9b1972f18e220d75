"""Transformers from PyTorch: derive a workload (linear, matmul, layernorm, gelu, softmax, dropout,
embedding, tokens, select, slice, add) from any ``nn.Module`` and record dO while it trains.

How: a ``torch.overrides.TorchFunctionMode`` (`_Tracer`) sees every torch function call of one
forward pass and follows tensors by identity. ``F.linear`` (``nn.Linear`` and the projections of
``nn.MultiheadAttention``) is a ``linear`` layer named after its weight parameter
(``blocks.0.attn.in_proj``); ``torch.matmul`` / ``@`` / ``bmm`` between tensors derived from token
tensors is a ``matmul`` (``qk`` unless its first operand is attention probabilities: ``av``; heads =
width / head size). Views (view, reshape, transpose, permute, contiguous, scaling by a number,
masked_fill: which marks the scores causal) keep the tensor's workload name.
``nn.MultiheadAttention`` (``F.multi_head_attention_forward``) and ``F.scaled_dot_product_attention``
run as an equivalent decomposition (in-projection, Q K^T, softmax, dropout, P V, out-projection),
so their matmuls are workload layers with their own dO. Any other call that reads a known tensor
is named in ONE warning line (its output keeps the name when the shape is unchanged: the wiring
goes on, the op is left out); modules with parameters that no op used are named there too.

`TransformerCapture` records, per recorded iteration, dO of every linear layer (``[N, T, C_out]``,
batch first whatever the model's layout) and of every matmul (``[N, heads, M, N]``: dS for Q K^T,
the per-head context gradient for P V). Only dO is recorded (I, W, dI: not yet).
"""
from __future__ import annotations

import inspect
import math
import warnings
from contextlib import contextmanager
from typing import Callable

from sim.errors import CaptureError, PrunesimError
from sim.workload import Workload, workload_from_dict

from .hooks import Capture, _IterState
from .torchnet import _torch

VIEWS = {"view", "reshape", "transpose", "permute", "contiguous", "unflatten", "unsqueeze",
         "squeeze", "t", "to", "float", "half", "type_as", "clone", "expand", "detach",
         "view_as", "reshape_as", "mT"}
SCALE = {"mul", "div", "truediv", "rmul", "imul", "itruediv"}
MASK = {"masked_fill", "masked_fill_", "where"}
ADD = {"add", "iadd", "radd"}
IGNORE = {"size", "dim", "shape", "get", "numel", "device", "dtype", "requires_grad", "is_floating_point",
          "__get__", "stride", "is_contiguous", "data_ptr", "__len__", "len", "item", "ndim",
          "setitem", "is_nested", "__bool__", "bool", "any", "all", "isnan", "isinf", "isfinite",
          "copy_", "new_zeros", "new_ones", "new_empty", "new_full", "zeros_like", "ones_like"}


def _fname(func) -> str:
    n = getattr(func, "__name__", None) or str(func)
    return n.strip("_")


def _flat(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out += _flat(a)
        else:
            out.append(a)
    return out


class _Tracer:
    """Follows one forward pass call by call: the workload ops (derivation) or dO hooks (capture)."""

    def __init__(self, model, batch: int, on_layer: Callable | None = None):
        torch, nn = _torch()
        self.torch, self.F = torch, torch.nn.functional
        self.batch = batch
        self.on_layer = on_layer
        self.pnames = {id(p): n for n, p in model.named_parameters()}
        self.model = model
        self.stack: list[str] = []
        self.reset(None)

    def reset(self, x) -> None:
        self.ops: list[dict] = []
        self.names: dict[int, str] = {} if x is None else {id(x): "x"}
        self.keep: list = [x]             # every tensor seen stays alive: ids stay unique
        self.feat: dict[str, int] = {}    # token tensor name -> features C
        self.scores: dict[str, int] = {}  # attention score/probability tensor -> heads
        self.masked: set[str] = set()
        self.producer: dict[str, dict] = {}
        self.pos_tables: dict[int, int] = {}   # id(output of an embedding of non-input ids) -> rows
        self.declared: dict[str, list[int]] = {}
        self.unsupported: list[str] = []
        self.used_params: set[int] = set()
        self.counts: dict[str, int] = {}
        self.input = x

    # -- naming ----------------------------------------------------------------------------------
    def scope(self) -> str:
        return self.stack[-1] if self.stack else ""

    def opname(self, kind: str, weight=None) -> str:
        if weight is not None and id(weight) in self.pnames:
            n = self.pnames[id(weight)]
            for suf in (".weight", "_weight"):
                if n.endswith(suf):
                    n = n[: -len(suf)]
            base = n
        else:
            base = f"{self.scope()}.{kind}" if self.scope() else kind
        i = self.counts.get(base, 0)
        self.counts[base] = i + 1
        return base if i == 0 else f"{base}.{i}"

    def src(self, t) -> str:
        """The workload name of an op input; an unknown tensor is declared with its token shape."""
        n = self.names.get(id(t))
        if n is None:
            n = f"in{len(self.declared)}"
            c = int(t.shape[-1])
            self.declared[n] = [c, max(1, t.numel() // (self.batch * c)), 1]
            self.feat[n] = c
            self.alias(t, n)
        return n

    def alias(self, t, name: str) -> None:
        self.keep.append(t)
        self.names[id(t)] = name

    def emit(self, op: dict, out, weight=None) -> str:
        name = op.pop("_name", None) or self.opname(op["op"], weight)
        op = {"name": name, **op, "out": name}
        self.ops.append(op)
        self.producer[name] = op
        self.alias(out, name)
        return name

    # -- the function-mode entry -------------------------------------------------------------
    def call(self, func, args, kwargs):
        F = self.F
        if func is F.multi_head_attention_forward:
            return self._mha(args, kwargs)
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        out = func(*args, **kwargs)
        try:
            self.after(func, args, kwargs, out)
        except CaptureError:
            raise
        return out

    def after(self, func, args, kwargs, out) -> None:
        torch, F = self.torch, self.F
        name = _fname(func)
        tens = [a for a in _flat(list(args) + list(kwargs.values())) if torch.is_tensor(a)]
        known = [a for a in tens if id(a) in self.names]
        if func is F.embedding:
            self._embedding(args, kwargs, out)
            return
        if (not known and func is not F.linear) or name in IGNORE:
            return   # a linear is a layer whatever it reads (an unknown input gets declared)
        if func is F.linear:
            x, w = args[0], args[1]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            self._linear(x, w, b, out)
        elif func is F.conv2d:
            self._conv(args, kwargs, out)
        elif name in ("matmul", "bmm", "rmatmul"):
            self._matmul(args[0], args[1], out)
        elif name == "softmax" or func is F.softmax:
            self._unary(args[0], out, "softmax")
        elif func is F.dropout or name == "dropout":
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            self._unary(args[0], out, "dropout", p=float(p))
        elif func is F.layer_norm:
            w = args[2] if len(args) > 2 else kwargs.get("weight")
            b = args[3] if len(args) > 3 else kwargs.get("bias")
            self.used_params.update({id(w), id(b)})
            self._unary(args[0], out, "layernorm", _weight=w)
        elif func is F.gelu:
            self._unary(args[0], out, "gelu")
        elif name in ADD and torch.is_tensor(out):
            self._add(args, out)
        elif name == "cat":
            self._cat(args[0], out)
        elif name == "flatten" and known[0].dim() == 4 and torch.is_tensor(out):
            src = self.src(known[0])
            self.emit({"op": "tokens", "in": src}, out)
            self.feat[self.names[id(out)]] = int(known[0].shape[1])
        elif name in ("chunk", "split", "unbind") and isinstance(out, (tuple, list)):
            self._split(known[0], out)
        elif name == "getitem" and torch.is_tensor(out):
            self._getitem(known[0], out)
        elif name in VIEWS or (name in SCALE and len(known) == 1 and known[0] is args[0]
                               and not any(torch.is_tensor(a) and a.numel() > 1 for a in args[1:])):
            if torch.is_tensor(out):
                self._carry(known[0], out)
        elif name in MASK and torch.is_tensor(out):
            self._carry(known[0], out)
            self.masked.add(self.names[id(known[0])])
        else:
            self.unsupported.append(f"{name} ({self.scope() or 'model'})")
            if torch.is_tensor(out) and tuple(out.shape) == tuple(known[0].shape):
                self._carry(known[0], out)

    # -- op handlers ------------------------------------------------------------------------------
    def _carry(self, src, out) -> None:
        n = self.names[id(src)]
        self.alias(out, n)

    def _linear(self, x, w, b, out, name: str | None = None):
        self.used_params.update({id(w), id(b)})
        src = self.src(x)
        op = {"op": "linear", "in": src, "c_out": int(w.shape[0]), "bias": b is not None}
        if name:
            op["_name"] = name
        n = self.emit(op, out, weight=w)
        self.feat[n] = int(w.shape[0])
        self.layer_out(n, "linear", out)
        return out

    def _conv(self, args, kwargs, out) -> None:
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        stride = args[3] if len(args) > 3 else kwargs.get("stride", 1)
        pad = args[4] if len(args) > 4 else kwargs.get("padding", 0)
        groups = args[6] if len(args) > 6 else kwargs.get("groups", 1)
        one = lambda v: v if isinstance(v, int) else (v[0] if len(set(v)) == 1 else list(v))  # noqa: E731
        r, s = int(w.shape[2]), int(w.shape[3])
        self.emit({"op": "conv", "in": self.src(x), "c_out": int(w.shape[0]),
                   "kernel": r if r == s else [r, s], "stride": one(stride), "pad": one(pad),
                   "groups": int(groups), "bias": b is not None}, out, weight=w)
        self.used_params.update({id(w), id(b)})
        self.layer_out(self.names[id(out)], "conv", out)

    def _matmul(self, a, b, out, name: str | None = None):
        sa, sb = self.src(a), self.src(b)
        if sa in self.scores:
            heads = self.scores[sa]
            op = {"op": "matmul", "kind": "av", "in": [sa, sb], "heads": heads}
        else:
            d = self.feat.get(sa, int(a.shape[-1]))
            heads = max(1, d // int(a.shape[-1]))
            op = {"op": "matmul", "kind": "qk", "in": [sa, sb], "heads": heads}
        op["_name"] = name or self.opname("scores" if op["kind"] == "qk" else "context")
        n = self.emit(op, out)
        if op["kind"] == "qk":
            self.scores[n] = heads
        else:
            self.feat[n] = self.feat.get(sb, heads * int(out.shape[-1]))
        self.layer_out(n, "matmul", out)
        return out

    def _unary(self, x, out, kind: str, _weight=None, **fields):
        src = self.src(x)
        if kind == "dropout" and fields.get("p", 0) == 0:
            self.alias(out, src)
            return out
        op = {"op": kind, "in": src, **fields}
        if kind == "softmax":
            if src not in self.scores:
                self.unsupported.append(f"softmax over a non-attention tensor ({self.scope() or 'model'})")
                self.alias(out, src)
                return out
            op["causal"] = src in self.masked
        n = self.emit(op, out, weight=_weight)
        if src in self.scores:
            self.scores[n] = self.scores[src]
        if src in self.feat:
            self.feat[n] = self.feat[src]
        return out

    def _add(self, args, out) -> None:
        torch = self.torch
        a, b = args[0], args[1]
        ka = id(a) in self.names
        kb = torch.is_tensor(b) and id(b) in self.names
        if ka and kb:
            sa, sb = self.names[id(a)], self.names[id(b)]
            n = self.emit({"op": "add", "in": [sa, sb]}, out)
            self.feat[n] = self.feat.get(sa, int(out.shape[-1]))
            return
        k, other = (a, b) if ka else (b, a)
        prod = self.producer.get(self.names[id(k)], {})
        if torch.is_tensor(other) and id(other) in self.pos_tables and prod.get("op") == "embedding":
            prod["positions"] = self.pos_tables[id(other)]
        elif torch.is_tensor(other) and isinstance(other, torch.nn.Parameter) and \
                prod.get("op") == "tokens":
            prod["positions"] = True
            self.used_params.add(id(other))
        elif torch.is_tensor(other) and other.numel() > 1:
            self.unsupported.append(f"add of a tensor that is not a workload tensor "
                                    f"({self.scope() or 'model'})")
        self._carry(k, out)

    def _cat(self, parts, out) -> None:
        known = [t for t in parts if id(t) in self.names]
        prod = self.producer.get(self.names[id(known[0])], {})
        if len(known) == 1 and prod.get("op") == "tokens" and len(parts) == 2:
            prod["cls"] = True
            # the class token reaches cat as an expanded view of its parameter
            other = next(t for t in parts if t is not known[0])
            base = getattr(other, "_base", None)
            self.used_params.update({id(other), id(base)})
            self._carry(known[0], out)
        else:
            self.unsupported.append(f"cat ({self.scope() or 'model'})")

    def _split(self, x, outs) -> None:
        src = self.names[id(x)]
        if len({tuple(o.shape) for o in outs}) != 1 or outs[0].shape[-1] * len(outs) != x.shape[-1]:
            self.unsupported.append(f"split ({self.scope() or 'model'})")
            return
        for i, o in enumerate(outs):
            n = self.emit({"op": "slice", "in": src, "parts": len(outs), "part": i,
                           "_name": f"{src}.{'qkv'[i] if len(outs) == 3 else i}"}, o)
            self.feat[n] = int(o.shape[-1])

    def _getitem(self, x, out) -> None:
        src = self.names[id(x)]
        if out.dim() == x.dim() - 1 and out.shape[-1] == x.shape[-1] and src in self.feat:
            self.emit({"op": "select", "in": src, "index": 0}, out)   # x[:, 0]: the class token
            self.feat[self.names[id(out)]] = int(out.shape[-1])
        elif tuple(out.shape) == tuple(x.shape):
            self._carry(x, out)
        else:
            self.unsupported.append(f"getitem ({self.scope() or 'model'})")

    def _embedding(self, args, kwargs, out) -> None:
        ids, w = args[0], args[1]
        self.used_params.add(id(w))
        if self.input is not None and ids is self.input:
            n = self.emit({"op": "embedding", "in": "x", "vocab": int(w.shape[0]),
                           "dim": int(w.shape[1])}, out, weight=w)
            self.feat[n] = int(w.shape[1])
        else:   # a position table (ids = arange(T)): its rows go to the token embedding it is added to
            self.keep.append(out)
            self.pos_tables[id(out)] = int(w.shape[0])

    def layer_out(self, name: str, kind: str, out) -> None:
        if self.on_layer is not None and out.requires_grad:
            self.on_layer(name, kind, out)

    # -- attention decompositions -------------------------------------------------------------
    def _attend(self, q, k, v, mask, causal: bool, p: float, scale):
        """softmax(q k^T * scale + mask) v for q, k, v [B, H, T, d] through the traced handlers."""
        torch, F = self.torch, self.F
        d = q.shape[-1]
        kt = k.transpose(-2, -1)
        self._carry(k, kt)
        s = self._matmul(q, kt, torch.matmul(q, kt))
        s2 = s * (scale if scale is not None else 1.0 / math.sqrt(d))
        self._carry(s, s2)
        if causal:
            T, S = s.shape[-2], s.shape[-1]
            m = torch.ones(T, S, dtype=torch.bool, device=s.device).triu(1)
            s3 = s2.masked_fill(m, float("-inf"))
        elif mask is not None:
            s3 = s2.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else s2 + mask
        else:
            s3 = s2
        self._carry(s2, s3)
        if causal or mask is not None:
            self.masked.add(self.names[id(s)])
        pr = self._unary(s3, F.softmax(s3, dim=-1), "softmax")
        if p > 0:
            pr = self._unary(pr, F.dropout(pr, p, True), "dropout", p=float(p))
        return self._matmul(pr, v, torch.matmul(pr, v)), pr

    def _sdpa(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if kw.get("enable_gqa"):
            raise CaptureError(None, "scaled_dot_product_attention", "enable_gqa is not supported")
        for t in (q, k, v):
            if id(t) not in self.names:
                return self.F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p,
                                                           is_causal, scale=scale)
        out, _ = self._attend(q, k, v, attn_mask, is_causal, dropout_p, scale)
        return out

    def _mha(self, args, kwargs):
        torch, F = self.torch, self.F
        a = inspect.signature(F.multi_head_attention_forward).bind(*args, **kwargs)
        a.apply_defaults()
        g = a.arguments
        q, k, v = g["query"], g["key"], g["value"]
        if not (q is k and k is v) or g["use_separate_proj_weight"] or g["bias_k"] is not None \
                or g["add_zero_attn"] or g["key_padding_mask"] is not None or q.dim() != 3:
            self.unsupported.append(f"multi_head_attention_forward other than batched self-"
                                    f"attention without key padding ({self.scope() or 'model'})")
            return F.multi_head_attention_forward(*args, **kwargs)
        T, B, E = q.shape
        h = int(g["num_heads"])
        d = E // h
        qkv = self._linear(q, g["in_proj_weight"], g["in_proj_bias"],
                           F.linear(q, g["in_proj_weight"], g["in_proj_bias"]))
        parts = qkv.chunk(3, dim=-1)
        self._split(qkv, parts)
        heads = []
        for t in parts:   # [T, B, E] -> [B, h, T, d]
            u = t.reshape(T, B, h, d).permute(1, 2, 0, 3)
            self._carry(t, u)
            heads.append(u)
        mask = g["attn_mask"]
        p = float(g["dropout_p"]) if g["training"] else 0.0
        ctx, probs = self._attend(*heads, mask, bool(g["is_causal"]) and mask is None, p, None)
        m = ctx.permute(2, 0, 1, 3).reshape(T, B, E)
        self._carry(ctx, m)
        out = self._linear(m, g["out_proj_weight"], g["out_proj_bias"],
                           F.linear(m, g["out_proj_weight"], g["out_proj_bias"]),
                           )
        weights = None
        if g["need_weights"]:
            weights = probs.detach()
            weights = weights.mean(dim=1) if g["average_attn_weights"] else weights
        return out, weights


def _mode_class():
    from torch.overrides import TorchFunctionMode

    class _Mode(TorchFunctionMode):
        def __init__(self, tracer):
            super().__init__()
            self.tracer = tracer

        def __torch_function__(self, func, types, args=(), kwargs=None):
            return self.tracer.call(func, args, kwargs or {})
    return _Mode


def _scope_hooks(model, tracer) -> list:
    """Forward pre/post hooks that keep the module stack (names of non-parameter ops)."""
    handles = []
    for qname, mod in model.named_modules():
        def pre(m, inp, _q=qname):
            if not _q and inp and tracer.torch.is_tensor(inp[0]):
                tracer.reset(inp[0])   # each forward pass of the model starts a fresh graph
            tracer.stack.append(_q)

        def post(m, inp, out):
            tracer.stack.pop()
        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    return handles


def _run_traced(model, tracer, x):
    handles = _scope_hooks(model, tracer)
    try:
        with _mode_class()(tracer):
            return model(x)
    finally:
        for h in handles:
            h.remove()
        tracer.stack.clear()


def _input_doc(x, batch: int) -> dict:
    torch, _ = _torch()
    if not torch.is_floating_point(x):
        if x.dim() != 2:
            raise CaptureError(None, "example_input", "token ids must be N x T")
        return {"tokens": int(x.shape[1])}
    if x.dim() != 4:
        raise CaptureError(None, "example_input", "expected images N x C x H x W or token ids N x T")
    return {"channels": int(x.shape[1]), "height": int(x.shape[2]), "width": int(x.shape[3])}


def transformer_workload_from_model(model, example_input, name: str, *, description: str = "",
                                    dataset: str | None = None) -> Workload:
    """A validated Workload of a transformer-like ``nn.Module`` from one traced forward pass.

    `example_input`: images N x C x H x W (a conv patch embedding) or integer token ids N x T.
    The pass runs in training mode (dropout ops are seen) on a forked RNG, without gradients, so
    the model's state and the global random stream are untouched. Calls and modules prunesim cannot
    express are named in one warning line (see the module docstring).
    """
    torch, nn = _torch()
    if not isinstance(model, nn.Module):
        raise CaptureError(None, "model", f"expected a torch.nn.Module, got {type(model).__name__}")
    if not torch.is_tensor(example_input):
        raise CaptureError(None, "example_input", "expected a tensor")
    batch = int(example_input.shape[0])
    inp = _input_doc(example_input, batch)
    tracer = _Tracer(model, batch)
    tracer.reset(example_input)
    was = model.training
    try:
        model.train()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            _run_traced(model, tracer, example_input)
    finally:
        model.train(was)
    if not any(op["op"] in ("linear", "conv") for op in tracer.ops):
        raise CaptureError(None, "model", "no linear or conv layer ran in the forward pass")
    left = [f"{n} ({type(m).__name__})" for n, m in model.named_modules()
            if any(id(p) not in tracer.used_params for p in m.parameters(recurse=False))]
    dropped = list(dict.fromkeys(tracer.unsupported)) + left
    if dropped:
        warnings.warn(f"transformer_workload_from_model: {len(dropped)} call(s) or module(s) are not "
                      f"in the workload and not in the trace: {', '.join(dropped)}", stacklevel=2)
    doc = {"schema": 1, "name": name,
           "description": description or f"derived from {type(model).__name__} by prunesim "
                                         "transformer_workload_from_model",
           "source": "sim.capture.transformer.transformer_workload_from_model",
           **({"dataset": dataset} if dataset else {}), "input": inp, "layers": tracer.ops}
    if tracer.declared:
        doc["tensors"] = tracer.declared
    try:
        return workload_from_dict(doc, origin=f"<model {type(model).__name__}>")
    except PrunesimError as e:
        raise CaptureError(e.file, e.field, f"derived workload is invalid: {e.message}") from None


class TransformerCapture(Capture):
    """`Capture` for models traced by `transformer_workload_from_model`: dO of linears and matmuls.

    Use exactly like `Capture` (``with TransformerCapture(model, out, workload=wl, batch=B) as cap:
    with cap.iteration(epoch): loss = ...; loss.backward()``); inside an iteration block the model's
    forward pass must run (the tracer is active only there). Gradient transforms get kind "dO".
    """

    def __init__(self, model, out_dir, workload: Workload, **kw):
        tensors = tuple(kw.get("tensors", ("dO",)))
        if tensors != ("dO",):
            raise CaptureError(None, "tensors", "transformer capture records dO only")
        self._wl_layers = {l.name: l for l in workload.layers}
        super().__init__(model, out_dir, workload, **kw)
        self.provenance["capture"]["dO_definition"] = (
            "linear: gradient w.r.t. the F.linear output, [N, T, C_out]; matmul: gradient w.r.t. "
            "the per-head product, [N, heads, M, N] (Q K^T: dS before the scale; P V: the context)")
        self._tracer = _Tracer(model, self.batch, on_layer=self._on_layer)
        self._mode = None

    def _resolve_modules(self, model, workload, layer_names, warn: bool = True):
        wanted = [l.name for l in workload.layers if l.op in ("linear", "matmul", "conv")]
        if layer_names is not None:
            keep = set(layer_names)
            bad = keep - set(wanted)
            if bad:
                raise CaptureError(None, "layer_names", f"not linear/matmul/conv layers of "
                                   f"{workload.name}: {', '.join(sorted(bad))}")
            wanted = [n for n in wanted if n in keep]
        return {n: None for n in wanted}

    def __enter__(self) -> "TransformerCapture":
        from sim.traces.format import TraceWriter
        self.writer = TraceWriter(self.out_dir, self.workload, batch=self.batch,
                                  provenance=self.provenance, batch_subsample=self.subsample,
                                  overwrite=self.overwrite)
        self.writer.__enter__()
        self._handles = []
        return self

    def _on_layer(self, name: str, kind: str, out) -> None:
        st = self._state
        if st is None or name not in self.modules or not self._torch.is_grad_enabled():
            return
        layer = self.layers[name]
        rec = st.recording

        def hook(g):
            gb = self._batch_first(layer, g)
            new = self._apply(st, name, "dO", gb, rec)
            return None if new is None else self._unbatch(layer, g, new)
        if rec or "dO" in self.transform_kinds:
            out.register_hook(hook)

    def _batch_first(self, layer, g):
        """dO as the trace stores it: [N, T, C] for a linear, [N, heads, M, N] for a matmul."""
        b = self.batch
        if layer.op == "conv":
            return g
        if layer.op == "linear":
            if g.dim() == 3 and g.shape[0] != b and g.shape[1] == b:
                return g.transpose(0, 1)   # nn.MultiheadAttention's [T, N, C]
            return g.reshape(b, -1, g.shape[-1])
        m, n, _ = layer.mm
        return g.reshape(b, layer.groups, m, n)

    def _unbatch(self, layer, g, new):
        if layer.op == "linear" and g.dim() == 3 and g.shape[0] != self.batch:
            return new.transpose(0, 1).contiguous()
        return new.reshape(g.shape)

    def _save(self, st: _IterState, name: str, kind: str, t) -> None:
        super()._save(st, name, kind, t.contiguous())

    def iteration(self, epoch: int):
        return self._traced_iteration(epoch)

    @contextmanager
    def _traced_iteration(self, epoch: int):
        parent = Capture.iteration(self, epoch)
        st = parent.__enter__()
        handles = _scope_hooks(self.model, self._tracer)
        mode = _mode_class()(self._tracer)
        try:
            with mode:
                yield st
        except BaseException as e:
            for h in handles:
                h.remove()
            self._tracer.stack.clear()
            if not parent.__exit__(type(e), e, e.__traceback__):
                raise
        else:
            for h in handles:
                h.remove()
            self._tracer.stack.clear()
            parent.__exit__(None, None, None)
