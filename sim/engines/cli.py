"""`prunesim gemm` and `prunesim layer`: load the hwconfig and hand over to the engine of its kind."""
from __future__ import annotations

import importlib

from sim.hwconfig import KINDS, load_hwconfig


def _engine(args):
    hw = load_hwconfig(args.hw)
    return importlib.import_module(KINDS[hw.kind]), hw


def cache_model_for(args, kinds):
    """The context of `--cache MODEL` (CPU cache misses: exact LRU or reuse profile); refused
    where no CPU hwconfig is simulated, since it would change nothing."""
    from contextlib import nullcontext

    from sim.engines.cpu import cache_model
    from sim.errors import ConfigError
    name = getattr(args, "cache_model", None)
    if name is None:
        return nullcontext()
    if "cpu" not in kinds:
        raise ConfigError(None, "--cache", "only the CPU engine simulates caches; no CPU hwconfig "
                          "is given")
    return cache_model(name)


def cmd_gemm(args) -> int:
    mod, hw = _engine(args)
    with cache_model_for(args, {hw.kind}):
        return mod.gemm_command(args, hw)


def cmd_layer(args) -> int:
    mod, hw = _engine(args)
    with cache_model_for(args, {hw.kind}):
        return mod.layer_command(args, hw)
