"""`prunesim gemm` and `prunesim layer`: load the hwconfig, bound the work, hand over to the engine.

The bounds live here, at the input layer, so no engine ever sees a GEMM whose counts overflow or a
layer whose tensors cannot be allocated (sim/limits.py holds the numbers).
"""
from __future__ import annotations

import importlib

from sim.errors import ConfigError
from sim.hwconfig import KINDS, load_hwconfig
from sim.limits import available_memory, check_budget, check_range, fmt_bytes


def _engine(args):
    hw = load_hwconfig(args.hw)
    return importlib.import_module(KINDS[hw.kind]), hw


def cache_model_for(args, kinds):
    """The context of `--cache MODEL` (CPU cache misses: exact LRU or reuse profile); refused
    where no CPU hwconfig is simulated, since it would change nothing."""
    from contextlib import nullcontext

    from sim.engines.cpu.spmm import cache_model
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
    check_budget("layer_macs", args.m * args.n * args.k, None, "--m/--n/--k",
                 what=f"{args.m}x{args.n}x{args.k}")
    with cache_model_for(args, {hw.kind}):
        return mod.gemm_command(args, hw)


def _conv_batch(spec: str) -> int | None:
    """N of a --conv spec (the engines parse the rest through the workload validator)."""
    head = spec.split(",", 1)[0].strip()
    try:
        n = int(head)
    except ValueError:
        return None  # the engine reports the malformed spec
    check_range("batch", n, None, "--conv (N)", ConfigError)
    return n


def _check_layer_work(args, hw) -> None:
    """Every selected layer lowers at the batch (lowering refuses inexact counts); on a CPU, the
    synthetic dO the engine allocates for the whole workload must fit in memory."""
    from sim.workload import load_workload, lower
    if args.conv is not None and args.workload is None:
        n = _conv_batch(args.conv)
        if n is None:
            return
        batch = args.batch or n
        from sim.workload import workload_from_dict
        try:
            cin, cout, h, w, r, s, stride, pad = (int(x) for x in args.conv.split(",")[1:])
        except ValueError:
            return
        wl = workload_from_dict(
            {"name": "conv", "input": {"channels": cin, "height": h, "width": w},
             "layers": [{"name": "conv", "op": "conv", "in": "x", "out": "y", "c_out": cout,
                         "kernel": [r, s], "stride": stride, "pad": pad}]}, "--conv")
    elif args.workload is not None and args.conv is None:
        wl = load_workload(args.workload)
        batch = args.batch or 128
    else:
        return
    for l in wl.layers:
        lower(l, batch)
    if hw.kind != "cpu" or getattr(args, "trace", None) or \
            not any(m != "dense" for m in args.method):
        return
    samples = min(batch, getattr(args, "samples", None) or 2)
    elems = [samples * l.c_out * l.p * l.q for l in wl.layers]
    # the engine holds dO of every layer, and a method's pruned copy and CSR of the largest
    est = 4 * (sum(elems) + 3 * max(elems))
    check_budget("cpu_layer_bytes", est, None, "--samples/--batch",
                 yes_large=getattr(args, "yes_large", False),
                 what=f"synthetic dO of {wl.name} ({samples} samples)")
    avail = available_memory()
    if avail is not None and est > avail:
        raise ConfigError(None, "--samples/--batch", f"synthetic dO of {wl.name} needs about "
                          f"{fmt_bytes(est)}; {fmt_bytes(avail)} of memory is available")


def cmd_layer(args) -> int:
    mod, hw = _engine(args)
    _check_layer_work(args, hw)
    with cache_model_for(args, {hw.kind}):
        return mod.layer_command(args, hw)
