"""Synthetic gradients for the driver: a method's result on a layer when no trace is at hand.

One source for every engine (`prunesim layer`, the validation report, the system timeline):
`method_result_for` (seeded Laplace dO, or SDGP's nominal result on large tensors),
`nominal_nm_result` (SDGP without data) and `synthetic_dO` (dO from the shipped fitted gradient
statistics, sim/data/synth-default.yaml). Moved here from the engines, which no longer synthesize
gradients (issue #19).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.methods.info import method_info

SYNTH_MAX_ELEMS = 1 << 20   # the largest dO built whole; larger ones run on a sub-batch


def nominal_nm_result(spec, layer, batch: int):
    """SDGP's MethodResult without data: on a dense dO the density is exactly n/m whatever the
    values, and the work account follows from the shape (the same counts sim.methods.nm.sdgp
    reports; a test keeps the two equal)."""
    from sim.methods import dense_result, sdgp_prunes
    from sim.methods.base import MethodResult, WorkAccount
    from sim.methods.nm import bits_per_index, parse_nm, resmag_after_reduction
    p = dict(spec.params)
    sel = spec.get("layers")
    if not sdgp_prunes(layer, sel):
        return dense_result(np.ones(1, np.float32), spec.id, p,
                            "not pruned: SDGP skips the stem and linear layers" if sel == "all"
                            and layer.op != "linear" else f"not pruned: outside layers={sel}")
    n, m = parse_nm(p["nm"])
    shape = layer.tensor_shapes(batch)["dO"]
    nb, c = shape[0], shape[1]
    hw_ = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    if layer.op == "linear":    # [N, T, C_out]: groups along C_out, tokens as positions
        nb, hw_, c = shape
    total = nb * c * hw_
    groups = -(-c // m)
    bits = bits_per_index(m)
    kept = nb * hw_ * sum(min(n, c - g * m) for g in range(groups))
    meta = nb * hw_ * ((groups * n * bits + 31) // 32) * 4
    mode = method_info(spec).nm_selection
    work = WorkAccount(elems_read=total, elems_written=kept, bytes_metadata=meta,
                       compares=kept * m, random_draws=total if mode == "random" else 0, passes=1)
    after = WorkAccount()
    if mode == "resmag":
        work = work + WorkAccount(elems_read=kept, elems_written=2 * kept, flops=2 * total + kept,
                                  passes=1)
        after = resmag_after_reduction(kept)
    from sim.methods import with_fusion
    return with_fusion(spec, MethodResult(
        spec.id, {"nm": f"{n}:{m}", **({"rescale": p["rescale"]} if "rescale" in p else {})},
        "nm", n / m, work, phases=("agbp",), extra={"nominal": True}, after_reduction=after))


def method_result_for(spec, layer, batch: int, seed: int = 0, *, samples: int | None = None,
                      build_csr: bool = False):
    """Apply a method to this layer's synthesized dO, or None for dense.

    SDGP (n:m) on a dO of more than 2^20 elements uses the nominal result (density exactly n/m,
    work from the shape: nominal_nm_result). Otherwise dO is seeded Laplace values (heavy-tailed
    like real activation gradients). A tensor over 2^20 elements (or over `samples` samples) is
    not built whole: the method runs on the first b samples that fit and its WorkAccount is scaled
    by batch / b (every method's work is linear in the batch); DBTD's density is the sub-batch's.
    """
    if spec is None or method_info(spec).is_dense:
        return None
    if method_info(spec).acts_on == "weights" and method_info(spec).family == "w24":
        # weight methods: nothing from dO (sim/methods/weight24.py)
        from sim.methods import apply_method
        return apply_method(spec, layer, np.ones(1, np.float32), key=0, batch=batch)
    shape = layer.tensor_shapes(batch)["dO"]
    per = int(np.prod(shape[1:]))
    if method_info(spec).family == "sdgp" and per * batch > SYNTH_MAX_ELEMS:
        return nominal_nm_result(spec, layer, batch)
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
    if spec is None or method_info(spec).is_dense:
        return None
    if method_info(spec).family == "w24":
        return apply_method(spec, layer, g, key=0, batch=batch)
    b = g.shape[0]
    key = stream_key(seed, layer.index, 0)
    sched = True if method_info(spec).scheduled else None
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
