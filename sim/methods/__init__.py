"""Methods: turn a layer's gradient tensor into the operand structure the engines simulate.

A method is named by a spec string `id[:key=value,...]`, e.g. `dbtd:p=0.99,sigma=unbiased` or
`sdgp-resmag:nm=2:4`. `parse_method` validates it into a frozen MethodSpec; `apply_method` is a pure
function of (spec, layer, tensor, random key, schedule position) returning a MethodResult.

Every method is a `Method` in the registry (sim/methods/registry.py: `METHODS`, `method_for`), which
declares its parameters, the parameters each command ignores, its MethodInfo and its `apply`; this
module's functions ask it. The registry's docstring says how to add a method.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# the registry first: it imports the family modules, which register their methods
from sim.methods.registry import (METHODS, Method, Param, find_method, is_dense_id, method_for,
                                  with_fusion)
from sim.methods.base import MethodResult, dense_result
from sim.methods.info import MethodInfo, method_info
from sim.methods.layers import LAYER_SETS, layer_selected, linear_role, sdgp_prunes
from sim.methods.prunetrain import TRAJECTORY_MODEL_INPUTS
from sim.methods.rng import stream_key
from sim.workload import Layer

__all__ = ["MethodSpec", "parse_method", "parse_combination", "apply_method", "refuse_unused",
           "with_fusion", "METHOD_IDS", "MethodResult", "stream_key", "MethodInfo", "method_info",
           "Method", "METHODS", "method_for", "find_method", "is_dense_id", "Param", "PARAMS",
           "IGNORED_BY", "dense_result", "LAYER_SETS", "layer_selected", "linear_role",
           "sdgp_prunes", "TRAJECTORY_MODEL_INPUTS"]

METHOD_IDS = tuple(METHODS)
# id -> {param: (parser, default)}: the registry's parameters as a plain table
PARAMS: dict[str, dict[str, tuple[Callable[[str], Any], Any]]] = {
    mid: {k: (prm.parse, prm.default) for k, prm in m.params.items()} for mid, m in METHODS.items()}
# command -> id -> {param: reason}: the parameters a command accepts but whose value cannot change
# its result (each Method's ignored_by); refuse_unused refuses them when written
# (tests/test_method_options.py walks every option through the commands)
COMMANDS = ("train", "replay", "sweep", "prune", "capture")
IGNORED_BY: dict[str, dict[str, dict[str, str]]] = {
    cmd: {mid: dict(m.ignored_by[cmd]) for mid, m in METHODS.items() if m.ignored_by.get(cmd)}
    for cmd in COMMANDS}


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
        return p[key] if key in p else method_for(self.id).default(key)

    @property
    def label(self) -> str:
        params = method_for(self.id).params
        shown = [(k, v) for k, v in self.params if not params[k].hidden(v)]
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
    if name not in METHODS:
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
    allowed = METHODS[name].params
    out = {}
    for k, v in raw.items():
        if k not in allowed:
            raise ValueError(f"method {name} takes no parameter {k!r} "
                             f"(allowed: {', '.join(allowed) or 'none'})")
        try:
            out[k] = allowed[k].parse(str(v))
        except ValueError as e:
            raise ValueError(f"method {name} parameter {k}={v!r}: {e}") from None
    given = tuple(sorted(out))
    for k, prm in allowed.items():
        out.setdefault(k, prm.default)
        if prm.omitted and out[k] == prm.default:
            del out[k]
    return MethodSpec(name, tuple(sorted(out.items())), given)


def refuse_unused(spec: MethodSpec, command: str) -> None:
    """Raise ValueError if `spec` was given a parameter that `command` ignores (the Method's
    ignored_by).

    An option a command accepts must change its result, or the command refuses it."""
    ign = method_for(spec.id).ignored_by.get(command, {})
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
    if any(method_info(s).is_dense for s in specs):
        raise ValueError(f"method combination {text!r}: dense composes with nothing (it is the "
                         "baseline)")
    grad = [s.id for s in specs if not method_info(s).is_channel_plan]
    if len(grad) > 1:
        raise ValueError(f"methods {' and '.join(grad)} do not compose: both rewrite the same "
                         "layer's gradients (combine one of them with prunetrain)")
    if len(specs) > 2:
        raise ValueError(f"method combination {text!r}: at most prunetrain + one gradient method")
    return specs


def apply_method(spec: MethodSpec, layer: Layer, g: np.ndarray, *, key: int, batch: int,
                 conv_index: int = 0, batch_index: int = 0, n_conv: int = 1,
                 scheduled: bool | None = None, build_csr: bool = True,
                 dense_output: bool = True) -> MethodResult:
    """Apply a method to one layer's gradient tensor g (NCHW dO, or N x F for FC layers): its
    Method's `apply`, the result marked fused where the spec says fused=true (with_fusion: where
    the pass runs changes time only, never the values).

    key: the random stream of this (layer, iteration), from stream_key(seed, layer.index, iteration).
    batch: the training batch (the `random` method's scale). conv_index / batch_index / n_conv place
    the layer in an approximation schedule; `scheduled` overrides the schedule (True: apply).
    dense_output=False lets structured methods skip the pruned tensor in dense form when only
    their compressed structure is needed (SDGP: values + metadata).
    """
    result = method_for(spec.id).apply(spec, layer, g, key=key, batch=batch,
                                       conv_index=conv_index, batch_index=batch_index,
                                       n_conv=n_conv, scheduled=scheduled, build_csr=build_csr,
                                       dense_output=dense_output)
    return with_fusion(spec, result)
