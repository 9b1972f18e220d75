"""Cluster YAMLs: devices and a per-dimension network hierarchy (ASTRA-sim style lists).

    schema: 1
    name: dgx-a100-hdr
    description: ...
    device:
      hwconfig: a100-sxm4-40gb              # engine config for per-layer times (sim.engines)
      memory:        {value: 40 GB,     source: ...}   # capacity for the memory model
      peak_math:     {value: 312 TFLOPS, source: ...}  # roofline fallback only
      mem_bandwidth: {value: 1555 GB/s, source: ...}   # roofline fallback and optimizer step
      reserved:      {value: 0.5 GB,    source: ...}   # CUDA context, allocator slack
    training:
      activation_bytes: {value: 2, source: ...}        # bytes per activation element
      grad_bytes:       {value: 4, source: ...}        # bytes per gradient element all-reduced
      bucket:           {value: 25 MB, source: ...}    # DDP bucket cap
    dimensions:                                        # innermost first
      - {name: node, topology: ring, devices: 8, link: NVLink3, collective: ring,
         bandwidth: {value: 300 GB/s, source: ...}, latency: {value: 3.4 us, source: ...}}
      - {name: network, topology: ring, devices: 4, link: IB HDR, collective: ring, ...}

A dimension's `bandwidth` is what ONE device can send in that dimension, per direction (for a NIC
shared by several devices, its share); `latency` is the per-step alpha of the alpha-beta model.
The product of the dimensions' device counts is the cluster size; `with_devices(n)` keeps the
inner dimensions whole and grows or shrinks the outermost one (16 GPUs of 4-GPU nodes = 4 nodes,
256 = 64 nodes); fewer devices than one outer unit must divide it (1, 2 or 4 of a 4-GPU node).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.hwconfig import Quantity, _physical, parse_quantity
from sim.limits import check_range
from sim.yamlio import load_yaml_file

SCHEMA_VERSION = 1
TOPOLOGIES = ("ring",)
COLLECTIVES = ("ring",)


# a value in SI units, as written, and its source: the same record as a hwconfig parameter
Param = Quantity


@dataclass(frozen=True)
class Dimension:
    name: str
    topology: str
    devices: int
    link: str
    collective: str
    bandwidth: Param   # B/s per device per direction
    latency: Param     # s per step

    @property
    def alpha(self) -> float:
        return self.latency.value

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth.value


@dataclass(frozen=True)
class Device:
    hwconfig: str
    memory: Param
    peak_math: Param
    mem_bandwidth: Param
    reserved: Param


@dataclass(frozen=True)
class Training:
    activation_bytes: Param
    grad_bytes: Param
    bucket: Param


@dataclass(frozen=True)
class Cluster:
    name: str
    description: str
    device: Device
    training: Training
    dimensions: tuple[Dimension, ...]
    path: str

    @property
    def devices(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= d.devices
        return n

    def with_devices(self, n: int) -> "Cluster":
        """The same cluster with n devices. n >= one outermost unit (the product of the inner
        dimensions): the outermost dimension grows or shrinks to n / unit (so a 32-node cluster
        of 4-GPU nodes gives 16..256+ GPUs in whole nodes). n < unit: a divisor of the unit, cut
        from the inner dimensions (inner ones kept whole first). Anything else is refused."""
        unit = 1
        for d in self.dimensions[:-1]:
            unit *= d.devices
        outer = self.dimensions[-1]
        if n < 1:
            raise ConfigError(self.path, "gpus", f"{n} devices requested; need at least 1")
        check_range("devices", n, self.path, "gpus", error=ConfigError)
        if n >= unit:
            if n % unit:
                raise ConfigError(self.path, "gpus", f"{n} devices are not a multiple of "
                                  f"{unit}: the {outer.name} dimension joins whole units of "
                                  + " x ".join(f"{d.devices} ({d.name})" for d in self.dimensions[:-1]))
            if len(self.dimensions) > 1 and n == unit:
                return replace(self, dimensions=self.dimensions[:-1])
            return replace(self, dimensions=self.dimensions[:-1] + (replace(outer, devices=n // unit),))
        if unit % n:
            raise ConfigError(self.path, "gpus", f"{n} devices do not divide one {outer.name} unit "
                              f"of {unit} devices: use a divisor of {unit} or a multiple of it")
        dims, left = [], n
        for d in self.dimensions[:-1]:
            if left <= 1:
                break
            take = min(d.devices, left)
            if left % take or d.devices % take:
                raise ConfigError(self.path, "gpus", f"{n} devices do not fill whole "
                                  f"{d.name} groups of {d.devices}")
            dims.append(replace(d, devices=take))
            left //= take
        if not dims:   # one device: keep the innermost dimension with a single member
            dims = [replace(self.dimensions[0], devices=1)]
        return replace(self, dimensions=tuple(dims))


_DEVICE = {"memory": "size", "peak_math": "throughput", "mem_bandwidth": "bandwidth",
           "reserved": "size"}
_TRAINING = {"activation_bytes": "count", "grad_bytes": "count", "bucket": "size"}
_TRAINING_DEFAULT = {
    "activation_bytes": (4, "default: fp32 activations (PyTorch default training precision)"),
    "grad_bytes": (4, "default: fp32 gradients, as DDP all-reduces them for fp32 parameters"),
    "bucket": ("25 MB", "default: PyTorch DDP bucket_cap_mb=25"),
}
_DIM_KEYS = {"name", "topology", "devices", "link", "collective", "bandwidth", "latency"}


def _param(entry: Any, dimension: str, file: str, field: str) -> Param:
    if not isinstance(entry, dict) or set(entry) - {"value", "source"} or "value" not in entry:
        raise ConfigError(file, field, "expected {value: ..., source: ...}")
    src = entry.get("source")
    if not isinstance(src, str) or not src.strip():
        raise ConfigError(file, field + ".source", "every value needs a source")
    raw = entry["value"]
    if dimension == "count":
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise ConfigError(file, field + ".value", f"expected a positive integer, got {raw!r}")
        check_range("element_bytes", raw, file, field + ".value", ConfigError)
        return Param(float(raw), str(raw), src)
    v, written = parse_quantity(raw, dimension, file, field + ".value")
    if v <= 0:
        raise ConfigError(file, field + ".value", f"must be positive, got {raw!r}")
    _physical(dimension, v, raw, file, field + ".value")
    return Param(v, written, src)


def _keys(d: Any, allowed: set[str], required: set[str], file: str, field: str) -> dict:
    if not isinstance(d, dict):
        raise ConfigError(file, field, "expected a mapping")
    for k in d:
        if k not in allowed:
            raise ConfigError(file, f"{field}.{k}" if field else k,
                              f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for k in sorted(required):
        if k not in d:
            raise ConfigError(file, f"{field}.{k}" if field else k, "missing")
    return d


def cluster_from_dict(doc: Any, file: str = "<cluster>") -> Cluster:
    """Validate a parsed cluster document; every problem names the file and the field."""
    doc = _keys(doc, {"schema", "name", "description", "device", "training", "dimensions"},
                {"name", "device", "dimensions"}, file, "")
    if "schema" in doc and doc["schema"] != SCHEMA_VERSION:
        raise ConfigError(file, "schema", f"unsupported cluster schema {doc['schema']!r}")
    if not isinstance(doc["name"], str) or not doc["name"]:
        raise ConfigError(file, "name", "expected a non-empty string")
    dev = _keys(doc["device"], {"hwconfig", *_DEVICE}, {"hwconfig", *_DEVICE}, file, "device")
    if not isinstance(dev["hwconfig"], str) or not dev["hwconfig"]:
        raise ConfigError(file, "device.hwconfig", "expected a hwconfig name or path")
    device = Device(dev["hwconfig"], **{k: _param(dev[k], dim, file, f"device.{k}")
                                        for k, dim in _DEVICE.items()})
    if device.reserved.value >= device.memory.value:
        raise ConfigError(file, "device.reserved", "must be smaller than device.memory")
    tr = _keys(doc.get("training", {}), set(_TRAINING), set(), file, "training")
    training = Training(**{k: _param(tr.get(k, {"value": _TRAINING_DEFAULT[k][0],
                                                 "source": _TRAINING_DEFAULT[k][1]}),
                                     dim, file, f"training.{k}") for k, dim in _TRAINING.items()})
    dims_raw = doc["dimensions"]
    if not isinstance(dims_raw, list) or not dims_raw:
        raise ConfigError(file, "dimensions", "expected a non-empty list (innermost first)")
    dims, names = [], set()
    for i, d in enumerate(dims_raw):
        f = f"dimensions[{i}]"
        d = _keys(d, _DIM_KEYS, _DIM_KEYS, file, f)
        if not isinstance(d["name"], str) or not d["name"] or d["name"] in names:
            raise ConfigError(file, f + ".name", "expected a unique non-empty string")
        names.add(d["name"])
        if d["topology"] not in TOPOLOGIES:
            raise ConfigError(file, f + ".topology", f"unknown topology {d['topology']!r} "
                              f"(supported: {', '.join(TOPOLOGIES)})")
        if d["collective"] not in COLLECTIVES:
            raise ConfigError(file, f + ".collective", f"unknown collective {d['collective']!r} "
                              f"(supported: {', '.join(COLLECTIVES)})")
        n = d["devices"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(file, f + ".devices", f"expected a positive integer, got {n!r}")
        check_range("devices", n, file, f + ".devices", ConfigError)
        if not isinstance(d["link"], str) or not d["link"]:
            raise ConfigError(file, f + ".link", "expected the link's name (e.g. NVLink3)")
        dims.append(Dimension(d["name"], d["topology"], n, d["link"], d["collective"],
                              _param(d["bandwidth"], "bandwidth", file, f + ".bandwidth"),
                              _param(d["latency"], "time", file, f + ".latency")))
    cl = Cluster(doc["name"], str(doc.get("description", "")), device, training, tuple(dims), file)
    check_range("devices", cl.devices, file, "dimensions", ConfigError)  # their product
    return cl


def _zoo_dir() -> Path:
    import hwconfigs
    return Path(hwconfigs.__file__).parent / "clusters"


def bundled_clusters() -> list[str]:
    return sorted(p.stem for p in _zoo_dir().glob("*.yaml"))


def find_cluster(name_or_path: str | os.PathLike) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    f = _zoo_dir() / f"{name_or_path}.yaml"
    if f.is_file():
        return f
    raise ConfigError(name_or_path, None, "no such cluster config (bundled: "
                      + ", ".join(bundled_clusters()) + ")")


def load_cluster(name_or_path: str | os.PathLike) -> Cluster:
    path = find_cluster(name_or_path)
    return cluster_from_dict(load_yaml_file(path, ConfigError), str(path))
