"""Synthetic gradients for the driver: a method's result on a layer when no trace is at hand.

One source for every engine (`prunesim layer`, the validation report, the system timeline):
`method_result_for` (seeded Laplace dO, or a method's nominal result on large tensors: SDGP's,
sim.methods.nm.nominal_nm_result) and `synthetic_dO` (dO from the shipped fitted gradient
statistics, sim/data/synth-default.yaml). The engines never synthesize gradients.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.methods.nm import nominal_nm_result  # noqa: F401  (SDGP without data; timeline, tests)
from sim.methods.registry import method_for

SYNTH_MAX_ELEMS = 1 << 20   # the largest dO built whole; larger ones run on a sub-batch


def method_result_for(spec, layer, batch: int, seed: int = 0, *, samples: int | None = None,
                      build_csr: bool = False):
    """Apply a method to this layer's synthesized dO, or None for dense.

    SDGP (n:m) on a dO of more than 2^20 elements uses the nominal result (density exactly n/m,
    work from the shape: nominal_nm_result). Otherwise dO is seeded Laplace values (heavy-tailed
    like real activation gradients). A tensor over 2^20 elements (or over `samples` samples) is
    not built whole: the method runs on the first b samples that fit and its WorkAccount is scaled
    by batch / b (every method's work is linear in the batch); DBTD's density is the sub-batch's.
    """
    if spec is None or method_for(spec).info.is_dense:
        return None
    method = method_for(spec)
    if not method.reads_gradient:
        # weight methods: nothing from dO (sim/methods/weight24.py)
        from sim.methods import apply_method
        return apply_method(spec, layer, np.ones(1, np.float32), key=0, batch=batch)
    shape = layer.tensor_shapes(batch)["dO"]
    per = int(np.prod(shape[1:]))
    if per * batch > SYNTH_MAX_ELEMS:
        nominal = method.nominal_result(spec, layer, batch)
        if nominal is not None:
            return nominal
    b = max(1, min(batch, SYNTH_MAX_ELEMS // max(per, 1)))
    if samples is not None:
        b = max(1, min(b, samples))
    rng = np.random.default_rng([seed, layer.index])
    g = rng.laplace(size=(b,) + tuple(shape[1:])).astype(np.float32)
    return result_on(spec, layer, g, batch, seed, build_csr=build_csr)


def result_on(spec, layer, g: np.ndarray, batch: int, seed: int = 0, *, build_csr: bool = False):
    """A method on a dO of b <= batch samples (synthetic, or a trace's), its work scaled to batch.

    zero/random/approx on a layer asked about alone: that layer is the approximated one (the
    schedule decides only in replay and in whole-network estimates)."""
    from sim.methods import apply_method, stream_key
    from sim.methods.base import scale_work
    if spec is None or method_for(spec).info.is_dense:
        return None
    if not method_for(spec).reads_gradient:
        return apply_method(spec, layer, g, key=0, batch=batch)
    b = g.shape[0]
    key = stream_key(seed, layer.index, 0)
    sched = True if method_for(spec).info.scheduled else None
    mr = apply_method(spec, layer, g, key=key, batch=batch, build_csr=build_csr, scheduled=sched)
    if b != batch:
        mr = scale_work(mr, batch / b)
        mr = replace(mr, extra=dict(mr.extra, synthesized_samples=b))
    return mr


def synthetic_dO(workload, samples: int, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """dO of every layer from the shipped gradient statistics (sim.traces.synth), `samples` deep."""
    from sim.traces import gradmodel as gm
    from sim.traces.synth import generate_layer, load_stats
    stats = load_stats(None)
    mapped, _ = gm.map_params(stats.layers, workload)
    out = {}
    for l in workload.layers:
        a = np.empty(l.tensor_shapes(samples)["dO"], np.float32)
        generate_layer(a, mapped[l.name], batch, seed, 0, l.index)
        out[l.name] = a
    return out
