"""PruneTrain channel trajectories: per-layer (c_in, c_out) from each reconfiguration epoch on.

The data type shared by the trajectory sources (files and the parametric model in
sim.system.prunetrain, the lasso-dose model in sim.system.prunetrain_model); it lives below both so
that neither imports the other for it.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from sim.errors import ConfigError
from sim.workload import Workload, workload_from_dict


@dataclass(frozen=True)
class Trajectory:
    points: tuple[tuple[int, tuple[tuple[str, int, int], ...]], ...]   # (epoch, ((layer, cin, cout)))
    source: str

    def widths_at(self, epoch: int) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for e, ws in self.points:
            if e <= epoch:
                out = {n: (a, b) for n, a, b in ws}
        return out


def apply_widths(workload: Workload, widths: dict[str, tuple[int, int]]) -> Workload:
    """The workload with some layers narrowed (pure: returns a new Workload). A layer of width 0
    (c_in or c_out) is dead: its residual block's path is removed, as PruneTrain does
    (without_paths)."""
    if not widths:
        return workload
    dead = frozenset(n for n, (a, b) in widths.items() if a == 0 or b == 0)
    base = without_paths(workload, dead) if dead else workload
    layers = tuple(_narrowed(l, *widths[l.name]) if l.name in widths else l for l in base.layers)
    return replace(base, layers=layers)


def _narrowed(layer, c_in: int, c_out: int):
    """The layer at c_in x c_out; a depthwise conv (groups = channels) keeps one group per
    channel, so its groups follow its width."""
    if layer.depthwise:
        if c_in != c_out:
            raise ValueError(f"depthwise conv {layer.name}: {c_in} input and {c_out} output "
                             f"channels (one channel space, they must agree)")
        return replace(layer, c_in=c_in, c_out=c_out, groups=c_in)
    return replace(layer, c_in=c_in, c_out=c_out)


@dataclass(frozen=True)
class ResidualPath:
    """A residual block's removable path: the convs from the fork tensor the block reads to its
    add (in op order), the add, and the add's other operand (the fork itself, or a projection
    shortcut's output)."""

    layers: tuple[str, ...]
    add: str
    add_out: str
    other: str


def residual_paths(workload: Workload) -> dict[str, ResidualPath]:
    """Per conv layer on a residual block's path, that path: PruneTrain's removal groups
    (rm_layers.py in the authors' code lists, for each ResNet, the convs of every block's residual
    branch; a projection shortcut is not among them). A path is the chain of convs walked back
    from an add's operand while each conv's input feeds nothing else, up to a fork that the add's
    other operand also comes from (directly, or through one conv: a projection); of the two
    chains the longer is the path. An add whose operands do not meet at one fork, or whose two
    chains are equally long, has no removable path."""
    producer = {op["out"]: op for op in workload.ops}
    readers = _readers(workload)

    def chain(t: str) -> tuple[list[str], str]:
        names: list[str] = []
        while readers.get(t) == 1 and producer.get(t, {}).get("op") in ("conv", "fc"):
            names.append(producer[t]["name"])
            t = producer[t]["in"]
        return names[::-1], t

    out: dict[str, ResidualPath] = {}
    for op in workload.ops:
        if op.get("op") != "add" or not isinstance(op["in"], list) or len(op["in"]) != 2:
            continue
        (ca, fa), (cb, fb) = chain(op["in"][0]), chain(op["in"][1])
        if fa != fb or len(ca) == len(cb):
            continue
        path, other = (ca, op["in"][1]) if len(ca) > len(cb) else (cb, op["in"][0])
        rp = ResidualPath(tuple(path), op["name"], op["out"], other)
        out.update({n: rp for n in path})
    return out


def _readers(workload: Workload) -> dict[str, int]:
    """How many ops read each tensor."""
    out: dict[str, int] = {}
    for op in workload.ops:
        for t in op["in"] if isinstance(op["in"], list) else [op["in"]]:
            out[t] = out.get(t, 0) + 1
    return out


_WITHOUT: OrderedDict = OrderedDict()   # (checksum, origin, dead) -> Workload: epochs repeat


def without_paths(workload: Workload, dead: frozenset[str]) -> Workload:
    """The workload with the residual path of every dead layer removed, as PruneTrain's
    reconfiguration does once a conv on the path keeps no channel: the path's convs (and their
    BN / ReLU) and the block's add go; what read the add's output reads its other operand; the
    add's ReLU moves to a projection shortcut that only the add read (an identity operand is
    already a ReLU output in a post-activation ResNet). A dead layer on no residual path is an
    error: PruneTrain removes only those."""
    key = (workload.checksum, workload.origin, dead)
    if key not in _WITHOUT:
        _WITHOUT[key] = _rebuilt_without(workload, dead)
        if len(_WITHOUT) > 64:
            _WITHOUT.popitem(last=False)
    # the rebuilt workload is the op list's; keep the widths of a workload already narrowed
    kept = {l.name: l for l in workload.layers}
    base = _WITHOUT[key]
    return replace(base, layers=tuple(replace(l, c_in=kept[l.name].c_in, c_out=kept[l.name].c_out)
                                      for l in base.layers))


def _rebuilt_without(workload: Workload, dead: frozenset[str]) -> Workload:
    """without_paths' workload, rebuilt from the op list (uncached)."""
    paths = residual_paths(workload)
    bad = sorted(n for n in dead if n not in paths)
    if bad:
        raise ConfigError(workload.origin, f"layer {bad[0]}",
                          "width 0 removes a layer, which PruneTrain does only to a residual "
                          "block's path (its convs from the block's input to the add); this layer "
                          "is on none")
    blocks = {paths[n].add: paths[n] for n in dead}
    gone = {n for p in blocks.values() for n in (*p.layers, p.add)}
    rename = {p.add_out: p.other for p in blocks.values()}
    readers = _readers(workload)
    relu_to = {p.other for p in blocks.values()
               if any(op["name"] == p.add and op.get("relu") for op in workload.ops)
               and readers.get(p.other) == 1}

    def new_name(t: str) -> str:
        while t in rename:          # consecutive dead blocks: follow to the first live tensor
            t = rename[t]
        return t

    doc = workload.to_dict()
    ops = []
    for op in doc["layers"]:
        if op["name"] in gone:
            continue
        op = dict(op)
        op["in"] = [new_name(t) for t in op["in"]] if isinstance(op["in"], list) else new_name(op["in"])
        if op["out"] in relu_to and op.get("op") == "conv":
            op["relu"] = True
        ops.append(op)
    doc["layers"] = ops
    return workload_from_dict(doc, workload.origin)


def layer_widths(workload: Workload, chans: dict, width: dict) -> tuple:
    """(layer, c_in, c_out) of every layer once its channel spaces keep `width` of `chans` channels
    (an FC layer's inputs are the flattened positions of its input space's channels)."""
    ws = []
    for l in workload.layers:
        if l.in_space not in width or l.out_space not in width:
            # attention matmuls read q / k / v slices no conv or FC layer writes: PruneTrain's
            # groups (conv in/out channels, FC inputs) say nothing about them
            raise ConfigError(workload.origin, f"layer {l.name}",
                              f"PruneTrain prunes the channels of conv and FC layers; this "
                              f"{l.op} layer's channel space {l.in_space!r} is not one of them, "
                              f"so {workload.name} has no PruneTrain trajectory")
        cin = width[l.in_space] * (l.c_in // chans[l.in_space]) if l.op == "fc" else width[l.in_space]
        ws.append((l.name, cin, width[l.out_space]))
    return tuple(ws)
