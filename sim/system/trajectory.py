"""PruneTrain channel trajectories: per-layer (c_in, c_out) from each reconfiguration epoch on.

The data type shared by the trajectory sources (files and the parametric model in
sim.system.prunetrain, the lasso-dose model in sim.system.lasso_model); it lives below both so
that neither imports the other for it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from sim.errors import ConfigError
from sim.workload import Workload


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
    """The workload with some layers narrowed (pure: returns a new Workload)."""
    if not widths:
        return workload
    layers = tuple(replace(l, c_in=widths[l.name][0], c_out=widths[l.name][1])
                   if l.name in widths else l for l in workload.layers)
    return replace(workload, layers=layers)


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
