"""The method registry: every gradient-pruning method is one `Method`, and `METHODS` holds them.

A method declares, in the module of its family, everything the rest of prunesim asks about it:

    info         MethodInfo (sim/methods/info.py): family, operand, phases, system-level effect,
                 kernel gaps per hardware kind, PyTorch twin or not
    params       {name: Param(parser, default, quiet, omitted)}: the spec syntax `id:k=v,...`
    ignored_by   {command: {param: reason}}: parameters a command accepts but whose value cannot
                 change its result (refuse_unused refuses them when written)
    apply(spec, layer, g, **ctx) -> MethodResult
                 the method on one layer's gradient tensor (ctx: key, batch, conv_index,
                 batch_index, n_conv, scheduled, build_csr, dense_output; see apply_method)
    reads_gradient, fusable, nominal_result(...), system_result(...), torch_twin(...),
    torch_fc_prune(...)
                 the questions callers used to answer by comparing ids

and `METHODS` / `method_for(id or spec)` answer for it. Code outside sim/methods never compares
method ids: it asks the Method or its MethodInfo (tests/test_method_registry.py greps for it).

Adding a method
---------------
1. In its family's module (FAMILIES below: dense.py, dbtd.py, approx.py, nm.py, prunetrain.py,
   weight24.py), write the kernel and a `Method` subclass (or an instance of an existing one) with
   its MethodInfo, params, ignored_by and apply, and append the instance to the module's `FAMILY`
   tuple. A new family is a new module with a `FAMILY` tuple, named in FAMILIES (the order of
   FAMILIES and of each FAMILY is the order of METHOD_IDS).
2. If it has a PyTorch twin (MethodInfo.torch_twin), override `torch_twin` (sim/methods/torch_ops.py
   holds the twins).
3. Tests: the method's kernel tests, and a second value for each new parameter in
   tests/test_method_options.py's ALT table (every option must change every command's result, or
   the command refuses it: say which in ignored_by). tests/test_method_registry.py checks that the
   new method has info and parameters and applies to a small tensor.
Nothing else changes: the parser, the commands, the engines, the system model and the plots ask the
registry.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from sim.methods.base import MethodResult
from sim.methods.info import INFO, MethodInfo
from sim.methods.layers import LAYER_SETS

__all__ = ["Param", "Method", "METHODS", "FAMILIES", "method_for", "find_method", "is_dense_id",
           "with_fusion", "ignoring", "rate", "fraction", "choice", "pos_int", "boolean", "FUSED",
           "LAYERS", "NOT_MODELLED", "TIME_ONLY", "ONE_TENSOR"]


# ---- parameters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One method parameter: its parser (text -> value; ValueError says what is wrong) and default.

    quiet: at its default it is left out of the spec's label (an option added later whose default
    keeps the behaviour the label always named). omitted: at its default it is left out of
    MethodSpec.params altogether (stored records key on the params, so points computed before the
    option existed keep their keys); an omitted parameter is quiet too."""

    parse: Callable[[str], Any]
    default: Any
    quiet: bool = False
    omitted: bool = False

    def hidden(self, value: Any) -> bool:
        """Left out of the label at this value."""
        return (self.quiet or self.omitted) and value == self.default


def rate(v: str) -> float:
    x = float(v)
    if not 0.0 < x < 1.0:
        raise ValueError("must be between 0 and 1 (exclusive)")
    return x


def fraction(v: str) -> float:
    x = float(v)
    if not 0.0 < x <= 1.0:
        raise ValueError("must be in (0, 1]")
    return x


def choice(*options: str) -> Callable[[str], str]:
    def check(v: str) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return v
    return check


def pos_int(v: str) -> int:
    x = int(v)
    if x < 1:
        raise ValueError("must be a positive integer")
    return x


def boolean(v: str) -> bool:
    if v not in ("true", "false"):
        raise ValueError("must be true or false")
    return v == "true"


# fused=true: the method's prune/compress runs in the epilogue of the kernel that produces dO
# instead of a separate pass (moves time, not values: sim/engines/gpu/stream.fused_epilogue)
FUSED = {"fused": Param(boolean, False, omitted=True)}


# which layers a method prunes (sim/methods/layers.py, LAYER_SETS)
LAYERS = {"layers": Param(choice(*LAYER_SETS), "all", omitted=True)}

# reasons a command ignores a parameter (ignored_by)
NOT_MODELLED = "its per-layer effect is not modelled at system level"
TIME_ONLY = "fusing the pass into dO's producer moves time, not values"
ONE_TENSOR = "prune applies the method to the one tensor given"


def ignoring(*tables: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Merge {command: {param: reason}} tables (a later table's reason wins)."""
    out: dict[str, dict[str, str]] = {}
    for t in tables:
        for cmd, params in t.items():
            out.setdefault(cmd, {}).update(params)
    return out


# ---- the protocol ------------------------------------------------------------------------------


class Method:
    """One method id: its declarations and its behaviour (see the module docstring).

    Subclasses override `apply` (every method but prunetrain transforms a gradient tensor), and
    where it applies `nominal_result`, `torch_twin` and `torch_fc_prune`."""

    # the result depends on the layer's gradient; False: on the layer alone (weight masks), so
    # callers need no gradient tensor to get it
    reads_gradient: bool = True

    def __init__(self, info: MethodInfo, params: Mapping[str, Param] | None = None,
                 ignored_by: Mapping[str, Mapping[str, str]] | None = None):
        self.info = info
        self.params: dict[str, Param] = dict(params or {})
        self.ignored_by: dict[str, dict[str, str]] = ignoring(ignored_by or {})

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def fusable(self) -> bool:
        """Has the fused=true option: its pass can run in the epilogue of dO's producer."""
        return "fused" in self.params

    def default(self, name: str) -> Any:
        return self.params[name].default

    def apply(self, spec, layer, g: np.ndarray, **ctx) -> MethodResult:
        """The method on one layer's gradient tensor g (NCHW dO, N x F for FC layers, N x T x C for
        linears); ctx as apply_method passes it."""
        raise NotImplementedError(f"{self.id} does not transform a gradient tensor")

    def nominal_result(self, spec, layer, batch: int) -> MethodResult | None:
        """The result without data, where the method's density and work follow from the shape
        alone (n:m: exactly n/m); None where they need the tensor."""
        return None

    def system_result(self, spec, layer, batch: int) -> MethodResult | None:
        """The result the system level (sim.system) charges on a layer it has no gradient of:
        nominal_result, except where the method says more (Wang's schedules: the result of a
        scheduled conv, with a synthetic pick where the kernel reads positions); None: dense."""
        return self.nominal_result(spec, layer, batch)

    def torch_twin(self, spec, layer):
        """The capture trainer's per-conv behaviour (a sim.methods.torch_ops.ConvMethod); the
        default leaves the conv's gradients alone. Only called where info.torch_twin."""
        from sim.methods import torch_ops as T
        return T.DenseMethod()

    def torch_fc_prune(self, spec, layer) -> Callable | None:
        """fn(g, key) -> pruned g for the gradient at an FC layer's output in capture training, or
        None (the FC layer's gradient is left alone)."""
        return None

    def __repr__(self) -> str:
        return f"<Method {self.id} ({type(self).__module__}.{type(self).__name__})>"


# ---- the registry ------------------------------------------------------------------------------

# the modules that register methods (each a FAMILY tuple of Method instances), in METHOD_IDS order
FAMILIES = ("sim.methods.dense", "sim.methods.dbtd", "sim.methods.approx", "sim.methods.nm",
            "sim.methods.prunetrain", "sim.methods.weight24")

METHODS: dict[str, Method] = {}


def _register(m: Method) -> None:
    if m.id in METHODS:
        raise ValueError(f"method {m.id!r} registered twice ({METHODS[m.id]!r}, {m!r})")
    for cmd, ign in m.ignored_by.items():
        extra = set(ign) - set(m.params)
        if extra:
            raise ValueError(f"method {m.id}: {cmd} ignores parameters it does not have: "
                             f"{', '.join(sorted(extra))}")
    METHODS[m.id] = m
    INFO[m.id] = m.info


def method_for(method) -> Method:
    """The Method of an id or of anything with an `.id` (a MethodSpec). ValueError if unknown."""
    mid = getattr(method, "id", method)
    try:
        return METHODS[mid]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {mid!r} (known: {', '.join(METHODS)})") from None


def find_method(method) -> Method | None:
    """method_for, or None for an unknown id (a stored record's combination id, None)."""
    mid = getattr(method, "id", method)
    return METHODS.get(mid) if isinstance(mid, str) else None


def is_dense_id(method) -> bool:
    """Whether a method id (a stored record's `method_id`, a curve's method) names the dense
    baseline; unknown ids, combinations and None do not."""
    m = find_method(method)
    return m is not None and m.info.is_dense


def with_fusion(spec, result: MethodResult) -> MethodResult:
    """The result marked `fused` when the spec says fused=true and the method did work on this
    layer (a layer it leaves dense has no pass to fuse)."""
    m = find_method(spec)
    if m is not None and m.fusable and spec.get("fused") and result.work.passes > 0:
        return replace(result, fused=True)
    return result


for _name in FAMILIES:
    for _m in importlib.import_module(_name).FAMILY:
        _register(_m)
del _name, _m
