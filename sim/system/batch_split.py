"""PruneTrain's dynamic mini-batch, as `prunesim train` reports it: the speedup over dense split
into pruning alone and batch growth on top, with the growth capped at a stated global batch.

Pruning shrinks the per-iteration work; the dynamic mini-batch then grows the per-device batch
into what its capacity rule frees (sim.system.prunetrain.BATCH_RULES: memory by default), which
cuts iterations and all-reduces. A single
"PruneTrain vs dense" ratio mixes the two, and dense keeps its initial batch, so the report gives
    pruning alone   = dense time / (pruned widths, initial batch) time
    batch growth    = (pruned widths, initial batch) time / (pruned widths, grown batch) time
    together        = pruning alone x batch growth
Growth is capped at a global batch of DEFAULT_MAX_GLOBAL_BATCH unless told otherwise: Goyal et al.
(2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") show the linear learning-rate
scaling that PruneTrain relies on keeping accuracy up to a global batch of 8192 and losing it
beyond; a larger cap is allowed with a warning. The cap is applied here, on the finished run's
epochs (an epoch's numbers depend only on its widths and batch), so the run model stays as it is.
"""
from __future__ import annotations

from dataclasses import replace

from sim.system.memory import BATCH_STEP

DEFAULT_MAX_GLOBAL_BATCH = 8192


def capped_run(grown, fixed_at_cap, cap: int, initial: int):
    """`grown`'s epochs, with each epoch whose per-device batch exceeds `cap` taken from
    `fixed_at_cap` (the same trajectory at batch `cap` throughout)."""
    eps = tuple(e if e.batch <= cap else replace(fixed_at_cap.epochs[i], lr_scale=cap / initial)
                for i, e in enumerate(grown.epochs))
    note = f"dynamic mini-batch capped at {cap}/device"
    return replace(grown, epochs=eps, notes=tuple(grown.notes) + (note,))


def prunetrain_split(workload, cluster, spec, *, epochs: int, batch: int, trajectory, samples: int,
                     max_global_batch: int | None = None, dense=None,
                     engine: str = "auto", framework=None, batch_steps=None, plan=None,
                     rule: str = "device") -> dict:
    """The capped PruneTrain run with dynamic mini-batch, and its speedup split (module doc).
    rule: the dynamic mini-batch's capacity rule (sim.system.prunetrain.BATCH_RULES).
    batch_steps: a given schedule ((epoch, batch), ...) in place of the rule.
    plan: PruneTrain's spec where `spec` is a gradient method combined with it (simulate_run)."""
    from sim.methods import parse_method
    from sim.system.prunetrain import simulate_run
    nd = cluster.devices
    cap_global = max_global_batch or DEFAULT_MAX_GLOBAL_BATCH
    warnings = []
    if cap_global > DEFAULT_MAX_GLOBAL_BATCH:
        warnings.append(f"global batch cap {cap_global} is beyond {DEFAULT_MAX_GLOBAL_BATCH}, where "
                        "linear learning-rate scaling is shown to keep accuracy (Goyal et al. "
                        "2017): the accuracy of such a run is not established")
    kw = dict(epochs=epochs, trajectory=trajectory, samples=samples, engine=engine,
              framework=framework, plan=plan)
    grown = simulate_run(workload, cluster, spec, batch=batch, **kw,
                         **({"batch_steps": batch_steps} if batch_steps else
                            {"dynamic_batch": rule}))
    peak = max(e.batch for e in grown.epochs)
    cap = max(batch, batch + BATCH_STEP * ((cap_global // nd - batch) // BATCH_STEP))
    run = grown
    if peak > cap:
        fixed = simulate_run(workload, cluster, spec, batch=cap, **kw)
        run = capped_run(grown, fixed, cap, batch)
        warnings.append(f"the dynamic mini-batch would reach {peak}/device ({peak * nd} global on "
                        f"{nd} devices); capped at {cap}/device ({cap * nd} global, cap "
                        f"{cap_global})")
    if batch * nd > cap_global:
        warnings.append(f"the initial global batch {batch * nd} already exceeds the cap "
                        f"{cap_global}")
    pruned = simulate_run(workload, cluster, spec, batch=batch, **kw)
    dense = dense or simulate_run(workload, cluster, parse_method("dense"), batch=batch,
                                  epochs=epochs, samples=samples, engine=engine,
                                  framework=framework)
    ratio = lambda a, b: a.train_seconds / b.train_seconds if b.train_seconds else None  # noqa: E731
    return {"run": run, "pruning_alone": ratio(dense, pruned), "batch_growth": ratio(pruned, run),
            "together": ratio(dense, run), "cap_per_device": cap, "max_global_batch": cap_global,
            "rule": "given steps" if batch_steps else rule,
            "peak_batch_uncapped": peak, "warnings": warnings}
