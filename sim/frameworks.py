"""Framework profiles: which non-GEMM kernels a training stack launches, and how (YAML, with sources).

A profile states the facts about a software stack that change a training step's non-GEMM work
(sim/stepops.py) without changing the hardware: which ops it fuses into one kernel, what each kernel
launch costs on the host, the optimizer and how it is implemented, how gradients are zeroed. A file
under hwconfigs/frameworks/ (or any path):

    schema: 1
    name: pytorch-eager
    description: PyTorch eager mode with cuDNN defaults
    params:
      fusions:         {value: [fc-bias], source: "..."}
      launch_overhead: {value: 5 us, source: "..."}
      optimizer:       {value: sgd-momentum, source: "..."}
      optimizer_impl:  {value: foreach, source: "..."}
      zero_grad:       {value: set-to-none, source: "..."}
      activation_overhead: {value: 0.19, source: "measured: ..."}   # optional; peak memory

Every parameter has a value and a source ("estimate: <reasoning>" where no document states it);
times carry units (sim.hwconfig.parse_quantity). Problems end in one line naming the file, the field
and, for a fusion, the op: `FILE: params.fusions.value: unknown fusion 'bn-gelu' (known: ...)`.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.hwconfig import parse_quantity, sourced_entry
from sim.yamlio import load_yaml_file

SCHEMA_VERSION = 1

# Fusions a profile may name; each makes two (or three) ops one kernel whose bytes drop the
# intermediate tensor's round trip to memory (sim/stepops.py says what each removes).
FUSIONS = {
    "bn-relu": "BN training forward writes relu(y) (cuDNN CUDNN_BATCHNORM_OPS_BN_ACTIVATION); "
               "BN backward applies the ReLU mask itself",
    "bn-add-relu": "BN + residual add + ReLU in one kernel (cuDNN CUDNN_BATCHNORM_OPS_BN_ADD_"
                   "ACTIVATION): the block's last BN reads the shortcut tensor z",
    "add-relu": "residual add and its ReLU in one elementwise kernel",
    "conv-bias": "a conv's bias added in the GEMM epilogue (no separate bias-add kernel)",
    "conv-bias-relu": "a conv's bias and ReLU in the GEMM epilogue "
                      "(cudnnConvolutionBiasActivationForward)",
    "fc-bias": "an FC layer's bias in the GEMM epilogue (cuBLASLt bias epilogue)",
    "fc-bias-relu": "an FC layer's bias and ReLU in the GEMM epilogue (cuBLASLt RELU_BIAS)",
    "softmax-xent": "softmax and cross-entropy in one kernel that also writes the logits' gradient "
                    "(TensorFlow's SparseSoftmaxCrossEntropyWithLogits)",
}
OPTIMIZERS = ("sgd-momentum", "adam")
OPTIMIZER_IMPLS = ("per-param", "foreach", "fused", "per-param-fused")
ZERO_GRAD = ("set-to-none", "memset", "memset-add")
BATCH_NORM = ("two-pass", "caffe")
MAXPOOL_MASK = ("int64-indices", "int32-indices", "recompute")
STEP_OPS = ("all", "none")

# name -> (kind, required when step_ops is 'all', choices or None, default)
_PARAMS: dict[str, tuple[str, bool, tuple[str, ...] | None, Any]] = {
    "step_ops": ("text", False, STEP_OPS, "all"),
    "fusions": ("list", True, tuple(FUSIONS), ()),
    "launch_overhead": ("time", True, None, 0.0),
    "step_overhead": ("time", False, None, 0.0),
    "optimizer": ("text", True, OPTIMIZERS, "sgd-momentum"),
    "optimizer_impl": ("text", True, OPTIMIZER_IMPLS, "per-param"),
    "zero_grad": ("text", True, ZERO_GRAD, "set-to-none"),
    "batch_norm": ("text", False, BATCH_NORM, "two-pass"),
    "maxpool_mask": ("text", False, MAXPOOL_MASK, "int64-indices"),
    # the step's peak allocation beyond sim.system.memory's count, per byte of activations
    "activation_overhead": ("fraction", False, None, 0.0),
}
# an overhead of several activations' worth is a typo (70 for 0.70, or % left off)
_MAX_OVERHEAD = 2.0
_TOP = {"schema", "name", "description", "params"}
# a host-side launch or per-step cost above this is a typo (a minute per kernel)
_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class FrameworkProfile:
    """A validated framework profile; times in seconds, choices as strings."""

    name: str
    description: str
    path: str
    step_ops: bool                    # False: GEMMs only (today's numbers)
    fusions: frozenset[str]
    launch_overhead: float            # s of host dispatch per kernel launch
    step_overhead: float              # s per step, fixed
    optimizer: str
    optimizer_impl: str
    zero_grad: str
    batch_norm: str
    maxpool_mask: str
    activation_overhead: float = 0.0  # peak memory beyond sim.system.memory's, x activations
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    checksum: str = ""

    def fused(self, name: str) -> bool:
        return name in self.fusions


def frameworks_dir() -> Path:
    import hwconfigs
    return Path(hwconfigs.__file__).parent / "frameworks"


def framework_names() -> list[str]:
    return sorted(p.stem for p in frameworks_dir().glob("*.yaml"))


def find_framework(name_or_path: str | os.PathLike) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or os.sep in str(name_or_path):
        if not p.is_file():
            raise ConfigError(p, None, "no such framework profile")
        return p
    f = frameworks_dir() / f"{name_or_path}.yaml"
    if f.is_file():
        return f
    raise ConfigError(None, "--framework", f"unknown framework profile {str(name_or_path)!r} "
                      f"(bundled: {', '.join(framework_names())})")


def _value(name: str, raw: Any, file: str, fld: str) -> Any:
    kind, _, choices, _ = _PARAMS[name]
    if kind == "time":
        v, _ = parse_quantity(raw, "time", file, fld)
        if v < 0 or v > _MAX_SECONDS:
            raise ConfigError(file, fld, f"{raw!r} is outside 0 s .. {_MAX_SECONDS:g} s")
        return v
    if kind == "fraction":
        v, _ = parse_quantity(raw, "fraction", file, fld)
        if v < 0 or v > _MAX_OVERHEAD:
            raise ConfigError(file, fld, f"{raw!r} is outside 0 .. {_MAX_OVERHEAD:g} (a share of "
                              "the activations: 0.19 or 19 %)")
        return v
    if kind == "list":
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise ConfigError(file, fld, f"expected a list of fusion names, got {raw!r}")
        for x in raw:
            if x not in FUSIONS:
                raise ConfigError(file, fld, f"unknown fusion {x!r} (known: "
                                  f"{', '.join(FUSIONS)})")
        return frozenset(raw)
    if not isinstance(raw, str) or raw not in choices:
        raise ConfigError(file, fld, f"expected one of {', '.join(choices)}, got {raw!r}")
    return raw


def framework_from_dict(doc: Any, origin: str = "<framework>") -> FrameworkProfile:
    """Validate a parsed profile document; every problem names the file and the field."""
    file = origin
    if not isinstance(doc, dict):
        raise ConfigError(file, None, "expected a mapping with name, description and params")
    for k in doc:
        if k not in _TOP:
            raise ConfigError(file, str(k), f"unknown key (allowed: {', '.join(sorted(_TOP))})")
    if "schema" in doc and doc["schema"] != SCHEMA_VERSION:
        raise ConfigError(file, "schema", f"unsupported framework schema {doc['schema']!r}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(file, "name", "missing or not a string")
    params = doc.get("params")
    if not isinstance(params, dict):
        raise ConfigError(file, "params", "expected a mapping of parameter name to {value, source}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    written: dict[str, Any] = {}
    for pname, entry in params.items():
        fld = f"params.{pname}"
        if pname not in _PARAMS:
            raise ConfigError(file, fld, f"unknown parameter (known: {', '.join(sorted(_PARAMS))})")
        raw, src = sourced_entry(entry, file, fld, "a document, or 'estimate: <reasoning>'")
        values[pname] = _value(pname, raw, file, fld + ".value")
        sources[pname] = src
        written[pname] = [entry["value"], src]
    step_ops = values.get("step_ops", "all") == "all"
    for pname, (_, required, _, default) in _PARAMS.items():
        if pname not in values:
            if required and step_ops:
                raise ConfigError(file, f"params.{pname}", "missing (needed unless step_ops is none)")
            values[pname] = frozenset(default) if pname == "fusions" else default
    canon = json.dumps({"name": name, "params": written}, sort_keys=True, default=str)
    return FrameworkProfile(
        name=name, description=str(doc.get("description") or ""), path=file, step_ops=step_ops,
        fusions=values["fusions"], launch_overhead=float(values["launch_overhead"]),
        step_overhead=float(values["step_overhead"]), optimizer=values["optimizer"],
        optimizer_impl=values["optimizer_impl"], zero_grad=values["zero_grad"],
        batch_norm=values["batch_norm"], maxpool_mask=values["maxpool_mask"],
        activation_overhead=float(values["activation_overhead"]), sources=sources,
        checksum=hashlib.sha256(canon.encode()).hexdigest())


def load_framework(name_or_path: str | os.PathLike) -> FrameworkProfile:
    """Load a bundled profile by name (hwconfigs/frameworks/NAME.yaml) or any profile by path."""
    f = find_framework(name_or_path)
    return framework_from_dict(load_yaml_file(f, ConfigError), origin=str(f))
