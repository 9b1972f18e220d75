"""`dense`: the baseline. Every gradient stays as it is; every speedup is relative to it."""
from __future__ import annotations

from sim.methods.base import dense_result
from sim.methods.info import MethodInfo
from sim.methods.registry import Method


class Dense(Method):
    def apply(self, spec, layer, g, **ctx):
        return dense_result(g)


FAMILY = (Dense(MethodInfo("dense", "dense", "", (), "none")),)
