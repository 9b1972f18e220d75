"""Hardware configs: YAML files of quantities with units and sources, validated into frozen records.

A hwconfig file:

    schema: 1
    name: a100-sxm4-40gb
    kind: gpu                     # which engine family reads it (see KINDS)
    description: NVIDIA A100 SXM4 40GB
    base: other.yaml              # optional: start from another config (path or name) and override
    params:
      sm_count:      {value: 108, source: "ISSCC21 [V]"}
      clock:         {value: 1.41 GHz, source: "ISSCC21, boost clock for peak math [V]"}
      hbm_bandwidth: {value: 1555 GB/s, source: "NVIDIA A100 blog [V]"}

Every parameter has a value and a source; dimensional values carry a unit, converted to SI base
units (Hz, B, B/s, s, flop/s) on load, so engines never see unit strings. Which parameters a kind
takes, their dimensions and ranges, are declared by the engine module of that kind (`HW_FIELDS`).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.limits import HW_DIMENSION_MAX, RANGES, check_range
from sim.yamlio import load_yaml_file

SCHEMA_VERSION = 1
# kind -> module that declares HW_FIELDS for it
KINDS = {"gpu": "sim.engines.gpu.params", "cpu": "sim.engines.cpu.params"}

# dimension -> {unit: factor to the SI base unit of that dimension}
_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
UNITS: dict[str, dict[str, float]] = {
    "frequency": {f"{p}Hz": f for p, f in _DEC.items()},
    "size": {**{f"{p}B": f for p, f in _DEC.items()}, **{f"{p}B": f for p, f in _BIN.items()}},
    "bandwidth": {**{f"{p}B/s": f for p, f in _DEC.items()}, **{f"{p}B/s": f for p, f in _BIN.items()},
                  **{f"{p}b/s": f / 8 for p, f in _DEC.items()}},
    "time": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9},
    "cycles": {"cycle": 1.0, "cycles": 1.0, "clk": 1.0},
    "bytes_per_cycle": {"B/clk": 1.0, "B/cycle": 1.0},
    "ops_per_cycle": {"FMA/clk": 1.0, "flop/clk": 1.0, "op/clk": 1.0},
    "throughput": {"flop/s": 1.0, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15},
    "power": {"W": 1.0, "kW": 1e3},
    "energy_per_op": {"pJ/FMA": 1e-12, "nJ/FMA": 1e-9},       # joules per FMA
    "energy_per_byte": {"pJ/B": 1e-12, "pJ/bit": 8e-12, "nJ/B": 1e-9},   # joules per byte
    "fraction": {"": 1.0, "%": 0.01},
}
_QTY_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


@dataclass(frozen=True)
class Field:
    """A hwconfig parameter, declared once: its dimension (see UNITS, or 'count', 'text',
    'list'), what it means, its bounds, and `attr`, the attribute of the engine's spec dataclass
    its SI value (default `default` when absent) is passed to by keyword (spec_values)."""

    dimension: str
    doc: str
    required: bool = True
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    attr: str | None = None
    default: Any = None


@dataclass(frozen=True)
class Quantity:
    """A parameter as loaded: value in SI base units (or int / str / list), as written, and source."""

    value: Any
    written: str
    source: str


@dataclass(frozen=True)
class HwConfig:
    """A validated hardware description. Engines read params[name].value (SI units)."""

    name: str
    kind: str
    description: str
    params: dict[str, Quantity]
    path: str
    checksum: str  # of the resolved content (base merged), for result keys

    def value(self, name: str, default: Any = None) -> Any:
        q = self.params.get(name)
        return default if q is None else q.value


def parse_quantity(text: Any, dimension: str, file: str, field: str) -> tuple[float, str]:
    """'1.41 GHz' -> (1.41e9, '1.41 GHz'), checking the unit belongs to the dimension."""
    units = UNITS[dimension]
    if isinstance(text, bool):
        raise ConfigError(file, field, f"expected a quantity, got {text!r}")
    if isinstance(text, (int, float)):
        if "" not in units:
            raise ConfigError(file, field, f"missing unit (a {dimension}: one of "
                              f"{', '.join(u for u in units if u)})")
        v = float(text)
        unit = ""
    else:
        m = _QTY_RE.match(str(text))
        if not m:
            raise ConfigError(file, field, f"expected a number with a unit, got {text!r}")
        v, unit = float(m.group(1)), m.group(2)
        if unit not in units:
            hint = f"one of {', '.join(repr(u) for u in units if u)}" + \
                   (" or none" if "" in units else "")
            what = "missing unit" if unit == "" else f"unit {unit!r} is not a {dimension}"
            raise ConfigError(file, field, f"{what} (expected {hint})")
    if not math.isfinite(v):
        raise ConfigError(file, field, f"not a finite number: {text!r}")
    return v * units[unit], str(text)


def _check_value(spec: Field, raw: Any, file: str, fld: str) -> Any:
    if spec.dimension == "count":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ConfigError(file, fld, f"expected an integer count, got {raw!r}")
        v: Any = raw
    elif spec.dimension == "text":
        if not isinstance(raw, str) or (spec.choices and raw not in spec.choices):
            allowed = f" (one of {', '.join(spec.choices)})" if spec.choices else ""
            raise ConfigError(file, fld, f"expected text{allowed}, got {raw!r}")
        return raw
    elif spec.dimension == "list":
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise ConfigError(file, fld, f"expected a list of strings, got {raw!r}")
        if spec.choices:
            bad = [x for x in raw if x not in spec.choices]
            if bad:
                raise ConfigError(file, fld, f"unknown entries {bad} (allowed: {', '.join(spec.choices)})")
        return tuple(raw)
    else:
        v, _ = parse_quantity(raw, spec.dimension, file, fld)
    if spec.minimum is not None and v < spec.minimum:
        raise ConfigError(file, fld, f"{raw!r} is below the minimum {spec.minimum:g}")
    if spec.maximum is not None and v > spec.maximum:
        raise ConfigError(file, fld, f"{raw!r} is above the maximum {spec.maximum:g}")
    _physical(spec.dimension, v, raw, file, fld)
    return v


def _physical(dimension: str, v: Any, raw: Any, file: str, fld: str) -> None:
    """Bounds no engine declares but every one needs: a count or quantity no real machine has is a
    typo, and would make an engine loop or overflow (sim/limits.py)."""
    if dimension == "count":
        pname = fld.split(".")[1] if fld.count(".") >= 1 else fld
        check_range(pname if pname in RANGES else "hw_count", v, file, fld, ConfigError)
    elif dimension in HW_DIMENSION_MAX:
        hi, shown = HW_DIMENSION_MAX[dimension]
        if v > hi:
            raise ConfigError(file, fld, f"{raw!r} is above {shown}, the physical range of a "
                              f"{dimension} (sim/limits.py)")


def sourced_entry(entry: Any, file: str, fld: str, kinds: str) -> tuple[Any, str]:
    """(raw value, source) of a `{value, source}` parameter entry (hwconfigs, framework
    profiles); `kinds` says in the error what a source may be."""
    if not isinstance(entry, dict) or set(entry) - {"value", "source"} or "value" not in entry:
        raise ConfigError(file, fld, "expected {value: ..., source: ...}")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(file, fld + ".source", f"every parameter needs a source ({kinds})")
    return entry["value"], source


# the last line of a hwconfig `prunesim calibrate` (CPU or --gpu) wrote
SEAL = "# written by prunesim calibrate; sha256 of the lines above: "


def calibrated_entry(key: str, value, source: str) -> str:
    """One `params:` line of a calibrated hwconfig: `  key: {value: V, source: "S"}`."""
    v = value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return f"  {key}: {{value: {json.dumps(v) if isinstance(v, str) else v}, source: {json.dumps(source)}}}"


def calibration_seal(body: str) -> str:
    """The last line of a calibrated hwconfig: the checksum of the text above it, so a file edited
    since (values or sources) is the user's and is replaced only with --force."""
    return f"{SEAL}{hashlib.sha256(body.encode()).hexdigest()}\n"


def spec_values(hw: "HwConfig", fields: dict[str, Field]) -> dict[str, Any]:
    """{attr: SI value} of every declared field with an `attr`: what an engine's spec dataclass is
    built from by keyword (counts as int, quantities as float, text and lists as they are)."""
    out: dict[str, Any] = {}
    for name, f in fields.items():
        if f.attr is None:
            continue
        v = hw.value(name, f.default)
        if v is not None and f.dimension == "count":
            v = int(v)
        elif v is not None and f.dimension not in ("text", "list"):
            v = float(v)
        out[f.attr] = v
    return out


def fields_for(kind: str) -> dict[str, Field]:
    return importlib.import_module(KINDS[kind]).HW_FIELDS


def _zoo_dir() -> Path:
    import hwconfigs
    return Path(hwconfigs.__file__).parent


def find_hwconfig(name_or_path: str | os.PathLike, relative_to: Path | None = None) -> Path:
    p = Path(name_or_path)
    cands = [p] if p.is_absolute() else ([relative_to / p] if relative_to else []) + [p]
    for c in cands:
        if c.suffix in (".yaml", ".yml") and c.is_file():
            return c
    f = _zoo_dir() / (p.name if p.suffix in (".yaml", ".yml") else f"{name_or_path}.yaml")
    if f.is_file():
        return f
    known = ", ".join(sorted(x.stem for x in _zoo_dir().glob("*.yaml")))
    raise ConfigError(name_or_path, None, f"no such hardware config (bundled: {known})")


def _raw(path: Path, chain: tuple[str, ...] = ()) -> dict:
    """The document with its base merged in (params override the base's one by one)."""
    key = str(path.resolve())
    if key in chain:
        raise ConfigError(path, "base", "circular base chain: " + " -> ".join(chain + (key,)))
    doc = load_yaml_file(path, ConfigError)
    if not isinstance(doc, dict):
        raise ConfigError(path, None, "expected a mapping with name, kind and params")
    allowed = {"schema", "name", "kind", "description", "base", "params"}
    for k in doc:
        if k not in allowed:
            raise ConfigError(path, k, f"unknown key (allowed: {', '.join(sorted(allowed))})")
    if "schema" in doc and doc["schema"] != SCHEMA_VERSION:
        raise ConfigError(path, "schema", f"unsupported hwconfig schema {doc['schema']!r}")
    params = doc.get("params", {})
    if not isinstance(params, dict):
        raise ConfigError(path, "params", "expected a mapping of parameter name to {value, source}")
    merged: dict[str, Any] = {}
    kind = doc.get("kind")
    if "base" in doc:
        if not isinstance(doc["base"], str):
            raise ConfigError(path, "base", "expected a hwconfig path or name")
        try:
            base_path = find_hwconfig(doc["base"], path.parent)
        except ConfigError as e:
            raise ConfigError(path, "base", e.message) from None
        base = _raw(base_path, chain + (key,))
        merged.update(base["params"])
        if kind is None:
            kind = base["kind"]
        elif kind != base["kind"]:
            raise ConfigError(path, "kind", f"{kind!r} differs from its base's {base['kind']!r}")
    merged.update(params)
    return {"name": doc.get("name"), "kind": kind, "description": doc.get("description", ""),
            "params": merged, "origin": {k: str(path) for k in params}}


def load_hwconfig(name_or_path: str | os.PathLike) -> HwConfig:
    """Load, merge (base) and validate a hwconfig; every problem names the file and the field."""
    path = find_hwconfig(name_or_path)
    doc = _raw(path)
    file = str(path)
    if not isinstance(doc["name"], str) or not doc["name"]:
        raise ConfigError(file, "name", "missing or not a string")
    kind = doc["kind"]
    if kind not in KINDS:
        raise ConfigError(file, "kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    spec = fields_for(kind)
    params: dict[str, Quantity] = {}
    for name, entry in doc["params"].items():
        fld = f"params.{name}"
        src_file = doc["origin"].get(name, file)
        if name not in spec:
            raise ConfigError(src_file, fld, f"unknown parameter for a {kind} config (known: "
                              f"{', '.join(sorted(spec))})")
        raw, source = sourced_entry(entry, src_file, fld, "datasheet, paper, or 'calibrated on "
                                    "<machine> by prunesim calibrate'")
        value = _check_value(spec[name], raw, src_file, fld + ".value")
        params[name] = Quantity(value, str(entry["value"]), source)
    for name, f in spec.items():
        if f.required and name not in params:
            raise ConfigError(file, f"params.{name}", f"missing ({f.doc})")
    return HwConfig(doc["name"], kind, str(doc["description"] or ""), params, file,
                    content_checksum(kind, params))


def content_checksum(kind: str, params: dict[str, Quantity]) -> str:
    """SHA-256 of what a config says (kind, every value as written and its source): the key of
    every result computed on it, whether it came from a file, a base chain or an override."""
    canon = json.dumps({"kind": kind, "params": {k: [str(v.written), v.source]
                                                 for k, v in sorted(params.items())}}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def with_overrides(hw: HwConfig, params: dict[str, Any], *, origin: str | os.PathLike | None = None,
                   name: str | None = None) -> HwConfig:
    """A variant of `hw` with some parameters replaced, validated exactly as a file's would be.

    `params` maps a parameter name to a raw value as a hwconfig file would write it ('3000 GB/s',
    132, ['2:4']) or to {value, source}. Errors name `origin` (e.g. a sweep grid file) and the
    field. The variant's name defaults to 'base[k=v,...]' so records of variants never collide,
    and its checksum covers the overridden values and sources like a file with `base:` would.
    """
    file = os.fspath(origin) if origin is not None else hw.path
    spec = fields_for(hw.kind)
    merged = dict(hw.params)
    for pname, raw in params.items():
        fld = f"params.{pname}"
        if pname not in spec:
            raise ConfigError(file, fld, f"unknown parameter for a {hw.kind} config ({hw.name}; "
                              f"known: {', '.join(sorted(spec))})")
        if isinstance(raw, dict):
            if set(raw) - {"value", "source"} or "value" not in raw:
                raise ConfigError(file, fld, "expected a value or {value: ..., source: ...}")
            value, source = raw["value"], raw.get("source")
            if not isinstance(source, str) or not source.strip():
                raise ConfigError(file, fld + ".source", "every parameter needs a source")
        else:
            value, source = raw, f"override from {file}"
        merged[pname] = Quantity(_check_value(spec[pname], value, file, fld), str(value), source)
    label = ",".join(f"{k}={_label(v['value'] if isinstance(v, dict) else v)}"
                     for k, v in params.items())
    return HwConfig(name or f"{hw.name}[{label}]", hw.kind, hw.description, merged, hw.path,
                    content_checksum(hw.kind, merged))


def _label(v: Any) -> str:
    return "+".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
