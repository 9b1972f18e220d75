"""Methods: turn a layer's gradient tensor into the operand structure the engines simulate.

A method is named by a spec string `id[:key=value,...]`, e.g. `dbtd:p=0.99,sigma=unbiased` or
`sdgp-resmag:nm=2:4`. `parse_method` validates it into a frozen MethodSpec; `apply_method` is a pure
function of (spec, layer, tensor, random key, schedule position) returning a MethodResult.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sim.methods.base import MethodResult, WorkAccount
from sim.methods.info import MethodInfo, method_info
from sim.methods.nm import parse_nm
from sim.methods.rng import stream_key
from sim.workload import Layer

__all__ = ["MethodSpec", "parse_method", "parse_combination", "apply_method", "refuse_unused", "with_fusion", "METHOD_IDS", "MethodResult",
           "stream_key", "MethodInfo", "method_info"]


def _rate(v: str) -> float:
    x = float(v)
    if not 0.0 < x < 1.0:
        raise ValueError("must be between 0 and 1 (exclusive)")
    return x


def _fraction(v: str) -> float:
    x = float(v)
    if not 0.0 < x <= 1.0:
        raise ValueError("must be in (0, 1]")
    return x


def _choice(*options: str) -> Callable[[str], str]:
    def check(v: str) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return v
    return check


def _nm(v: str) -> str:
    n, m = parse_nm(v)
    return f"{n}:{m}"


def _pos_int(v: str) -> int:
    x = int(v)
    if x < 1:
        raise ValueError("must be a positive integer")
    return x


def _bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise ValueError("must be true or false")
    return v == "true"


def _weight_decay(v: str) -> float:
    x = float(v)
    # SGD weight decay per step, a coefficient (no unit); CNN training uses 1e-5..1e-3
    if not (math.isfinite(x) and 0 < x <= 0.01):
        raise ValueError("must be an SGD weight decay in (0, 0.01], e.g. 5e-4")
    return x


def _schedule(v: str) -> int:
    x = int(v)
    if x not in (1, 2, 3):
        raise ValueError("paper schedules are 1, 2 and 3")
    return x


_SCHED = {"schedule": (_schedule, 1)}
# fused=true: the method's prune/compress runs in the epilogue of the kernel that produces dO
# instead of a separate pass (moves time, not values: sim/engines/gpu/stream.fused_epilogue)
_FUSED = {"fused": (_bool, False)}
# which layers an n:m method prunes (docs/transformers.md, "Methods on linears"): `all` (default):
# convs with more than 3 input channels (the SDGP authors' rule, so CNN results are unchanged) and
# every transformer `linear`; `conv` convs only; `linear` every linear; `ffn` / `attn` the linears
# of the MLP / attention blocks (linear_role). A CNN's `fc` classifier is never pruned.
LAYER_SETS = ("all", "conv", "linear", "ffn", "attn")
_LAYERS = {"layers": (_choice(*LAYER_SETS), "all")}
# id -> {param: (parser, default)}
PARAMS: dict[str, dict[str, tuple[Callable[[str], Any], Any]]] = {
    "dense": {},
    "dbtd": {"p": (_rate, 0.99), "sigma": (_choice("paper", "unbiased", "meanabs"), "paper"),
             "fc": (_choice("dense", "prune"), "dense"), **_FUSED},
    "topk": {"keep": (_fraction, 0.01), "fc": (_choice("dense", "prune"), "dense")},
    "zero": dict(_SCHED),
    "random": dict(_SCHED),
    "approx": dict(_SCHED),
    "approx-topk": {**_SCHED, "k": (_pos_int, 2)},
    "sdgp-random": {"nm": (_nm, "2:4"), **_FUSED, **_LAYERS},
    "sdgp-mag": {"nm": (_nm, "2:4"), **_FUSED, **_LAYERS},
    "sdgp-resmag": {"nm": (_nm, "2:4"), "rescale": (_choice("sample-channel", "channel"),
                                                    "sample-channel"), **_FUSED, **_LAYERS},
    # wd: the training's SGD weight decay (None: the authors' for the data set, 5e-4 on CIFAR,
    # 1e-4 on ImageNet; sim.system.lasso_model.authors_weight_decay), an input of the lasso model
    # timing: "wall" (the step's whole time) or "authors" (as PruneTrain's scripts time a step:
    # less the group-lasso penalty's forward, sim.stepops._method_ops)
    "prunetrain": {"rho": (_rate, 0.2), "interval": (_pos_int, 10), "wd": (_weight_decay, None),
                   "timing": (_choice("wall", "authors"), "wall")},
    # weight-side 2:4 (sim/methods/weight24.py): FWD only, and transposable masks (FWD + AGBP)
    "w24": dict(_LAYERS),
    "w24t": {**_LAYERS, "search": (_choice("greedy", "exhaustive"), "greedy")},
}
METHOD_IDS = tuple(PARAMS)
# prunetrain's options that only its lasso-dose trajectory model reads: a trajectory file, which
# fixes the widths and their epochs, refuses them (train, replay, sweep)
TRAJECTORY_MODEL_INPUTS = frozenset({"rho", "interval", "wd"})
# (param, value) pairs left out of a label: a later-added option at the default that keeps the
# behaviour the label always named (DBTD / top-k leave FC layers dense; methods run as a separate
# pass unless fused=true)
QUIET_DEFAULTS = {("fc", "dense"), ("fused", False), ("layers", "all"), ("wd", None),
                  ("timing", "wall")}
# (param, value) pairs left out of MethodSpec.params altogether: stored records key on the params
# (method_params), so points computed before fused existed keep their keys
OMITTED_DEFAULTS = {("fused", False), ("layers", "all"), ("wd", None), ("timing", "wall")}


@dataclass(frozen=True)
class MethodSpec:
    """A validated method id with its parameters (all of them, defaults filled in)."""

    id: str
    params: tuple[tuple[str, Any], ...]
    # the parameters the user wrote (the others are defaults): a command that ignores a parameter
    # refuses it only when it was given (refuse_unused)
    given: tuple[str, ...] = field(default=(), compare=False)

    def get(self, key: str) -> Any:
        p = dict(self.params)
        return p[key] if key in p else PARAMS[self.id][key][1]

    @property
    def label(self) -> str:
        shown = [(k, v) for k, v in self.params if (k, v) not in QUIET_DEFAULTS]
        if not shown:
            return self.id
        return f"{self.id}:" + ",".join(f"{k}={_text(v)}" for k, v in shown)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "params": dict(self.params)}


def _text(v: Any) -> str:
    """A parameter value as the spec syntax writes it (booleans lower-case, as parsed)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def parse_method(text: str, overrides: dict[str, Any] | None = None) -> MethodSpec:
    """Parse `id[:k=v,...]`; overrides (e.g. from CLI flags) win. Raises ValueError with the field."""
    name, _, rest = str(text).partition(":")
    if name not in PARAMS:
        raise ValueError(f"unknown method {name!r} (known: {', '.join(METHOD_IDS)})")
    raw: dict[str, Any] = {}
    if rest:
        # split on commas, but "nm=2:4" keeps its colon
        for part in rest.split(","):
            k, eq, v = part.partition("=")
            if not eq:
                raise ValueError(f"method parameter {part!r} must be key=value")
            if k.strip() in raw:
                raise ValueError(f"method {name} parameter {k.strip()!r} given twice in {text!r}")
            raw[k.strip()] = v.strip()
    for k, v in (overrides or {}).items():
        if v is not None:
            raw[k] = v
    allowed = PARAMS[name]
    out = {}
    for k, v in raw.items():
        if k not in allowed:
            raise ValueError(f"method {name} takes no parameter {k!r} "
                             f"(allowed: {', '.join(allowed) or 'none'})")
        try:
            out[k] = allowed[k][0](str(v))
        except ValueError as e:
            raise ValueError(f"method {name} parameter {k}={v!r}: {e}") from None
    given = tuple(sorted(out))
    for k, (_, default) in allowed.items():
        out.setdefault(k, default)
        if (k, out[k]) in OMITTED_DEFAULTS:
            del out[k]
    return MethodSpec(name, tuple(sorted(out.items())), given)


# parameters a command accepts but whose value cannot change its result, with the reason; a command
# refuses them when written (tests/test_method_options.py walks every option through the commands)
_NOT_MODELLED = "its per-layer effect is not modelled at system level"
_TIME_ONLY = "fusing the pass into dO's producer moves time, not values"
_FUSABLE = ("dbtd", "sdgp-random", "sdgp-mag", "sdgp-resmag")
_SDGP = ("sdgp-random", "sdgp-mag", "sdgp-resmag")
_ONE_TENSOR = "prune applies the method to the one tensor given"
IGNORED_BY: dict[str, dict[str, dict[str, str]]] = {
    "train": {"dbtd": {"p": _NOT_MODELLED, "sigma": _NOT_MODELLED, "fc": _NOT_MODELLED,
                       "fused": _NOT_MODELLED},
              "topk": {"keep": _NOT_MODELLED, "fc": _NOT_MODELLED},
              "approx": {"schedule": _NOT_MODELLED},
              "approx-topk": {"schedule": _NOT_MODELLED, "k": _NOT_MODELLED},
              "sdgp-resmag": {"rescale": "rescaling changes values, not work or time"},
              "w24": {"layers": _NOT_MODELLED},
              "w24t": {"layers": _NOT_MODELLED, "search": _NOT_MODELLED}},
    "replay": {"sdgp-resmag": {"rescale": "rescaling changes values, not work or time"}},
    # a sweep replays each point as replay does
    "sweep": {"sdgp-resmag": {"rescale": "rescaling changes values, not work or time"}},
    "prune": {**{m: {"schedule": "prune applies the method to the one tensor given"}
                 for m in ("zero", "approx", "approx-topk")},
              **{m: {"fused": _TIME_ONLY} for m in _FUSABLE},
              **{m: {"fused": _TIME_ONLY, "layers": _ONE_TENSOR} for m in _SDGP}},
    # capture records values from real training: where the pass runs changes no value
    "capture": {"prunetrain": {"timing": "how a step is timed changes no value a capture "
                                         "records"},
                **{m: {"fused": _TIME_ONLY} for m in _FUSABLE},
                **{m: {"fused": _TIME_ONLY,
                       "layers": "capture's PyTorch twin prunes the dO of convs only"}
                   for m in _SDGP}},
}


def refuse_unused(spec: MethodSpec, command: str) -> None:
    """Raise ValueError if `spec` was given a parameter that `command` ignores (IGNORED_BY).

    An option a command accepts must change its result, or the command refuses it."""
    ign = IGNORED_BY.get(command, {}).get(spec.id, {})
    bad = [k for k in spec.given if k in ign]
    if bad:
        raise ValueError(f"{command} ignores {spec.id} parameter {bad[0]} ({ign[bad[0]]}): "
                         "leave it out")


def parse_combination(text: str) -> tuple[MethodSpec, ...]:
    """`a+b`: methods that compose (METHODS.md: PruneTrain's channel trajectory with one gradient
    method on the remaining channels). One spec alone is a one-element tuple. Raises ValueError
    for pairs that do not compose: two gradient methods (both rewrite dO or dW of the same layer),
    or a method repeated."""
    parts = [p.strip() for p in str(text).split("+")]
    if any(not p for p in parts):
        raise ValueError(f"empty method in combination {text!r}")
    specs = tuple(parse_method(p) for p in parts)
    if len(specs) == 1:
        return specs
    ids = [s.id for s in specs]
    if len(set(ids)) < len(ids):
        raise ValueError(f"method combination {text!r} repeats a method")
    if "dense" in ids:
        raise ValueError(f"method combination {text!r}: dense composes with nothing (it is the "
                         "baseline)")
    grad = [s.id for s in specs if s.id != "prunetrain"]
    if len(grad) > 1:
        raise ValueError(f"methods {' and '.join(grad)} do not compose: both rewrite the same "
                         "layer's gradients (combine one of them with prunetrain)")
    if len(specs) > 2:
        raise ValueError(f"method combination {text!r}: at most prunetrain + one gradient method")
    return specs


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


def dense_result(g: np.ndarray, method: str = "dense", params: dict | None = None,
                 note: str | None = None) -> MethodResult:
    n = int(np.size(g))
    density = float(np.count_nonzero(g)) / n if n else 0.0
    extra = {"note": note} if note else {}
    return MethodResult(method, params or {}, "dense", density, WorkAccount(), pruned=None,
                        phases=(), extra=extra)


def with_fusion(spec: MethodSpec, result: MethodResult) -> MethodResult:
    """The result marked `fused` when the spec says fused=true and the method did work on this
    layer (a layer it leaves dense has no pass to fuse)."""
    if "fused" in PARAMS.get(spec.id, {}) and spec.get("fused") and result.work.passes > 0:
        from dataclasses import replace
        return replace(result, fused=True)
    return result


def apply_method(spec: MethodSpec, layer: Layer, g: np.ndarray, *, key: int, batch: int,
                 conv_index: int = 0, batch_index: int = 0, n_conv: int = 1,
                 scheduled: bool | None = None, build_csr: bool = True,
                 dense_output: bool = True) -> MethodResult:
    """Apply a method to one layer's gradient tensor (see _apply); fused=true marks the result
    (with_fusion): where the pass runs changes time only, never the values."""
    return with_fusion(spec, _apply(spec, layer, g, key=key, batch=batch, conv_index=conv_index,
                                    batch_index=batch_index, n_conv=n_conv, scheduled=scheduled,
                                    build_csr=build_csr, dense_output=dense_output))


def _apply(spec: MethodSpec, layer: Layer, g: np.ndarray, *, key: int, batch: int,
           conv_index: int = 0, batch_index: int = 0, n_conv: int = 1,
           scheduled: bool | None = None, build_csr: bool = True,
           dense_output: bool = True) -> MethodResult:
    """Apply a method to one layer's gradient tensor g (NCHW dO, or N x F for FC layers).

    key: the random stream of this (layer, iteration), from stream_key(seed, layer.index, iteration).
    batch: the training batch (the `random` method's scale). conv_index / batch_index / n_conv place
    the layer in an approximation schedule; `scheduled` overrides the schedule (True: apply).
    dense_output=False lets structured methods skip the pruned tensor in dense form when only
    their compressed structure is needed (SDGP: values + metadata).
    """
    from sim.methods import approx as _approx
    from sim.methods import dbtd as _dbtd
    from sim.methods import nm as _nm_mod
    from sim.methods import schedule as _schedule_mod

    p = dict(spec.params)
    mid = spec.id
    if mid == "dense":
        return dense_result(g)
    if mid in ("dbtd", "topk") and layer.op == "fc" and p["fc"] == "dense":
        # Ye et al. prune conv-layer gradients only; fc=prune opts the linear layers in
        return dense_result(g, mid, p, "not pruned: DBTD / top-k leave FC layers dense (fc=prune)")
    if mid == "dbtd":
        # a Conv-ReLU layer's dO is ReLU'-masked: DBTD's real target is the dI behind it
        return _dbtd.dbtd(g, p["p"], key, p["sigma"], build_csr=build_csr,
                          relu_masked=layer.dbtd_target == "dI")
    if mid == "topk":
        return _dbtd.topk(g, p["keep"], build_csr=build_csr)
    if mid.startswith("sdgp-"):
        sel = spec.get("layers")
        if not sdgp_prunes(layer, sel):
            why = ("not pruned: SDGP skips the stem and linear layers" if sel == "all"
                   and layer.op != "linear" else f"not pruned: outside layers={sel}")
            return dense_result(g, mid, p, why)
        kw = dict(rescale=p.get("rescale", "sample-channel"), dense_output=dense_output)
        if layer.op == "linear" and np.ndim(g) == 3:
            # a linear's dO is [N, T, C_out] (PyTorch's layout): groups of m along C_out, the
            # reduction of AGBP (dI = dO W); tokens play the conv's positions
            n_, t_, c_ = np.shape(g)
            r = _nm_mod.sdgp(np.reshape(g, (n_, t_, 1, c_)), p["nm"], mid.split("-", 1)[1], key,
                             layout="nhwc", **kw)
            if r.pruned is None:
                return r
            from dataclasses import replace as _replace
            return _replace(r, pruned=r.pruned.reshape(n_, t_, c_))
        return _nm_mod.sdgp(g, p["nm"], mid.split("-", 1)[1], key, **kw)
    if mid in ("zero", "random", "approx", "approx-topk"):
        if layer.op != "conv":
            return dense_result(g, mid, p, "not approximated: the schedule covers conv layers")
        if scheduled is None:
            table = _schedule_mod.paper_schedule(p["schedule"], n_conv)
            scheduled = _schedule_mod.applies(table, conv_index, batch_index)
        if not scheduled:
            return dense_result(g, mid, p, "not scheduled for this (layer, batch)")
        if mid == "zero":
            return _approx.zero(np.shape(g))
        if mid == "random":
            return _approx.random_dw(layer.tensor_shapes(1)["W"], batch, key)
        return _approx.approx(g, 1 if mid == "approx" else p["k"])
    if mid in ("w24", "w24t"):
        from sim.methods.weight24 import w24_applies, weight24
        if not layer_selected(layer, spec.get("layers")):
            return dense_result(g, mid, p, f"not pruned: outside layers={spec.get('layers')}")
        why = w24_applies(layer, mid == "w24t")
        if why:
            return dense_result(np.ones(1, np.float32), mid, p, why)
        return weight24(mid, p, layer)
    if mid == "prunetrain":
        raise ValueError("prunetrain acts on weights over epochs, not on one gradient tensor: "
                         "use sim.methods.prunetrain.channel_plan")
    raise ValueError(f"unknown method {mid!r}")
