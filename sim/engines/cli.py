"""`prunesim gemm` and `prunesim layer`: load the hwconfig and hand over to the engine of its kind."""
from __future__ import annotations

import importlib

from sim.hwconfig import KINDS, load_hwconfig


def _engine(args):
    hw = load_hwconfig(args.hw)
    return importlib.import_module(KINDS[hw.kind]), hw


def cmd_gemm(args) -> int:
    mod, hw = _engine(args)
    return mod.gemm_command(args, hw)


def cmd_layer(args) -> int:
    mod, hw = _engine(args)
    return mod.layer_command(args, hw)
