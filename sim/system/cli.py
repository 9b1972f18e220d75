"""`prunesim train`: whole-run estimate for a method and the dense baseline on a cluster."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

from sim.errors import ConfigError


def _fmt_s(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s:.1f} s"


def _workload_and_defaults(name: str):
    """The workload, and what a trace directory's provenance says of its training (dataset,
    training-set size, epochs, batch); a zoo name or workload YAML says nothing more."""
    from pathlib import Path

    from sim.workload import load_workload
    if (Path(name) / "manifest.json").is_file():
        from sim.replay import trace_training_defaults
        from sim.traces.format import open_trace
        tr = open_trace(name)
        return tr.workload, trace_training_defaults(tr)
    return load_workload(name), {}


def check_fits(cl, net, batch: int, overhead: float, field: str, what: str) -> None:
    """One error line naming `field` where `net` at `batch` exceeds the cluster's device memory
    by the memory model (sim.system.memory.footprint)."""
    from sim.system.memory import footprint
    need = footprint(net, batch, int(cl.training.activation_bytes.value),
                     int(cl.device.reserved.value), overhead).total
    if need > cl.device.memory.value:
        raise ConfigError(None, field, f"{what} needs {need / 1e9:,.1f} GB per device by the "
                          f"memory model; {cl.name}'s device has "
                          f"{cl.device.memory.value / 1e9:g} GB")


def _check_inputs(args, w, cl, epochs: int, batch: int, samples: int,
                  overhead: float = 0.0) -> None:
    """Refuse before any work: a device hwconfig that does not load (unless --roofline asks for the
    fallback), a --batch the device memory cannot hold, epochs x iterations above the budget."""
    import math

    from sim.errors import PrunesimError
    from sim.hwconfig import load_hwconfig
    from sim.limits import check_budget
    if not getattr(args, "roofline", False):
        try:
            load_hwconfig(cl.device.hwconfig)
        except PrunesimError as e:
            where = (None, "--hw") if args.hw else (cl.path, "device.hwconfig")
            raise ConfigError(*where, f"device hwconfig {cl.device.hwconfig!r} does not load "
                              f"({e}); --roofline times layers with the roofline model instead") \
                from None
    if args.batch:
        check_fits(cl, w, batch, overhead, "--batch", f"batch {batch} of {w.name}")
    if samples:
        per_epoch = math.ceil(samples / (batch * cl.devices))
        check_budget("train_iterations", epochs * per_epoch, None, "--epochs",
                     yes_large=getattr(args, "yes_large", False),
                     what=f"{epochs} epochs x {per_epoch} iterations")
        check_work(args, w, cl, epochs, batch, samples)


def check_work(args, w, cl, epochs: int, batch: int, samples: int, widths: int = 1,
               method_runs: int = 1, batch_points: int = 1) -> int:
    """Refuse (budget train_steps, sim/limits.py) a run whose work estimate, from counts alone,
    is above the budget, unless --yes-large: each run simulates one iteration per distinct
    (widths, batch) configuration, full and partial (the epoch's last, smaller batch), and each
    such iteration evaluates every layer on the engine and each distinct all-reduce bucket on
    the collective model. widths: the trajectory's distinct widths (1: none); batch_points: the
    given batch steps + 1; method_runs: runs of the method (the dynamic mini-batch's split runs
    three). Returns the estimate."""
    from sim.limits import check_budget
    from sim.system.collectives import allreduce_evaluation_steps, levels_of
    layers = len(w.layers)
    partial = 1 if samples % (batch * cl.devices) else 0
    dense = 1 + partial
    method = min(epochs, widths * batch_points) * (2 if widths * batch_points > 1 else 1 + partial)
    configs = dense + method_runs * method
    grad = w.params() * int(cl.training.grad_bytes.value)
    buckets = min(layers, math.ceil(grad / max(1.0, cl.training.bucket.value)) + 1)
    ring = allreduce_evaluation_steps(levels_of(cl))
    # a collective step is a few float additions (collectives.ring_phase_end), a layer a
    # cycle-level engine evaluation: the steps count at a tenth of a layer, so that the budget
    # bounds the engine work, which dominates (ResNet-20 PruneTrain on 256 GPUs: 242
    # configurations, 5 s)
    steps = configs * layers + math.ceil(configs * buckets * ring / 10)
    check_budget("train_steps", steps, None, "--workload",
                 yes_large=getattr(args, "yes_large", False),
                 what=f"{configs} (widths, batch) configurations of {1 + method_runs} runs x "
                      f"({layers:,} layers + {buckets} all-reduce buckets x {ring} collective "
                      f"steps on {cl.devices:,} devices, a tenth each)")
    return steps


def framework_arg(name):
    """The --framework profile (None: the default), its errors one line naming --framework."""
    from sim.errors import PrunesimError
    from sim.system.timeline import resolve_framework
    try:
        return resolve_framework(name)
    except PrunesimError as e:
        if name is None or e.field == "--framework":
            raise
        raise ConfigError(None, "--framework", str(e)) from None


def batch_steps_arg(text: str | None, epochs: int, w, cl, traj, overhead: float):
    """--batch-steps "EPOCH:BATCH,...": ((epoch, batch), ...) in epoch order, each epoch in the
    run and each batch one the device holds with the network of that epoch (memory model); one
    line naming --batch-steps otherwise."""
    from sim.system.prunetrain import apply_widths, check_batch_steps
    if text is None:
        return None
    pairs = []
    for part in text.split(","):
        e, colon, b = part.strip().partition(":")
        try:
            pairs.append((int(e), int(b)))
        except ValueError:
            raise ConfigError(None, "--batch-steps", f"{part.strip()!r}: expected EPOCH:BATCH "
                              "(integers)") from None
    try:
        steps = check_batch_steps(pairs, None, epochs)   # the checks simulate_run makes
    except ValueError as err:
        raise ConfigError(None, "--batch-steps", str(err)) from None
    for e, b in steps.items():
        check_fits(cl, apply_widths(w, traj.widths_at(e)) if traj else w, b, overhead,
                   "--batch-steps", f"batch {b} at epoch {e}")
    return tuple(sorted(steps.items())) or None


def build_runs(args):
    from sim.methods import (TRAJECTORY_MODEL_INPUTS, method_info, parse_combination,
                             parse_method, refuse_unused)
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import (lasso_trajectory, load_trajectory, parametric_trajectory,
                                       parse_model_spec, simulate_run)
    from sim.workload import load_workload
    w, d = _workload_and_defaults(args.workload)
    cl = load_cluster(args.cluster)
    if args.hw:
        cl = replace(cl, device=replace(cl.device, hwconfig=args.hw))
    if args.gpus is not None:
        cl = cl.with_devices(args.gpus)
    try:
        specs = parse_combination(args.method)
        for sp in specs:
            refuse_unused(sp, "train")
    except ValueError as e:
        raise ConfigError(None, "--method", str(e)) from None
    # prunetrain + a gradient method: the trajectory narrows the network, the other method acts
    # on the remaining channels (simulate_run with the narrowed widths and that method)
    pt = next((sp for sp in specs if method_info(sp).is_channel_plan), None)
    spec = next((sp for sp in specs if not method_info(sp).is_channel_plan), pt)
    from sim.replay import training_values
    v = training_values(d, w.dataset, epochs=args.epochs, batch=args.batch,
                        samples=getattr(args, "train_samples", None))
    ds, epochs, batch, samples = v["dataset"], v["epochs"], v["batch"], v["samples"]
    for opt, v in (("--epochs", epochs), ("--batch", batch), ("--train-samples", samples)):
        if v is None:
            raise ConfigError(w.origin, "dataset", f"no default for dataset {ds!r}: give {opt}"
                              + ("" if d else " (or a trace directory as --workload: its "
                                 "provenance records the training it ran)"))
    fw = framework_arg(getattr(args, "framework", None))
    _check_inputs(args, w, cl, epochs, batch, samples, fw.activation_overhead)
    traj, dyn, every = None, None, None
    if pt is not None:
        t = args.trajectory
        every = pt.get("interval")   # a model's reconfigurations; a file's are its own points
        if t is None or t == "model":
            traj = lasso_trajectory(w, pt.get("rho"), pt.get("interval"), epochs,
                                    batch * cl.devices, samples, weight_decay=pt.get("wd"))
        elif t.startswith("model:"):
            if set(pt.given) & {"rho", "wd"}:
                raise ConfigError(None, "--trajectory", "the parametric model (model:keep=...) has "
                                  "no rho or wd input: leave them out or use --trajectory model")
            traj = parametric_trajectory(w, epochs, pt.get("interval"), **parse_model_spec(t))
        else:
            if set(pt.given) & TRAJECTORY_MODEL_INPUTS:
                raise ConfigError(None, "--trajectory", "a trajectory file fixes the channels "
                                  "and their epochs: rho, interval and wd change nothing, leave "
                                  "them out")
            traj, every = load_trajectory(t, w), None
        dyn = getattr(args, "batch_rule", None) or "device"
        if getattr(args, "batch_rule", None) and getattr(args, "batch_steps", None):
            raise ConfigError(None, "--batch-rule", "--batch-steps gives the batch schedule, "
                              "the rule would set it too: pass one")
    elif args.trajectory:
        raise ConfigError(None, "--trajectory", "only meaningful with --method prunetrain")
    elif getattr(args, "batch_rule", None):
        raise ConfigError(None, "--batch-rule", "only meaningful with --method prunetrain (its "
                          "dynamic mini-batch)")
    engine = "roofline" if getattr(args, "roofline", False) else "auto"
    if traj is not None or getattr(args, "batch_steps", None):
        # the estimate again, now that the trajectory's reconfigurations are known
        check_work(args, w, cl, epochs, batch, samples,
                   widths=len(traj.points) + 1 if traj is not None else 1,
                   method_runs=3 if dyn is not None else 1,
                   batch_points=1 + len((getattr(args, "batch_steps", None) or "").split(",")))
    steps = batch_steps_arg(getattr(args, "batch_steps", None), epochs, w, cl, traj,
                            fw.activation_overhead)
    dense = simulate_run(w, cl, parse_method("dense"), epochs=epochs, batch=batch, samples=samples,
                         engine=engine, framework=fw)
    if dyn is not None:
        from sim.system.batch_split import prunetrain_split
        args.prunetrain_split = prunetrain_split(
            w, cl, spec, epochs=epochs, batch=batch, trajectory=traj, samples=samples,
            max_global_batch=getattr(args, "max_global_batch", None), dense=dense, engine=engine,
            framework=fw, batch_steps=steps, plan=pt, rule=dyn)
        run = args.prunetrain_split["run"]
    elif getattr(args, "max_global_batch", None):
        raise ConfigError(None, "--max-global-batch", "only meaningful with --method prunetrain "
                          "(its dynamic mini-batch)")
    else:
        run = simulate_run(w, cl, spec, epochs=epochs, batch=batch, trajectory=traj,
                           samples=samples, engine=engine, framework=fw, batch_steps=steps,
                           plan=pt)
    if len(specs) > 1:
        run = replace(run, method="+".join(sp.label for sp in specs))
    if pt is not None:
        args.prunetrain_flops = training_flops(run, dense, w, traj, epochs, every)
    return w, cl, spec, run, dense


def training_flops(run, dense, w, traj, epochs: int, interval: int | None) -> dict:
    """A PruneTrain run's training FLOPs vs dense, two ways: "gemm", the engine's GEMM FLOPs over
    the epochs run; "table1", as PruneTrain's Table 1 counts them (prunetrain.
    authors_training_fraction; None for a trajectory file, whose reconfigurations are its own
    points, not an interval's)."""
    from sim.system.prunetrain import authors_training_fraction, charged_epochs
    gemm = run.flops_vs(dense)
    if interval is None:
        return {"gemm": gemm, "table1": None, "charged_epochs": None}
    return {"gemm": gemm, "table1": authors_training_fraction(w, traj, epochs, interval),
            "charged_epochs": charged_epochs(epochs, interval)}


def _speedup(run, dense) -> float | None:
    from sim.replay import system_level_available
    if not system_level_available(run) or not run.train_seconds:
        return None
    return dense.train_seconds / run.train_seconds


def cmd_train(args) -> int:
    from sim.system.tta import load_curves, tta_report
    if (args.accuracy is None) != (args.target is None):
        raise ConfigError(None, "--target" if args.accuracy else "--accuracy",
                          "--accuracy and --target go together")
    w, cl, spec, run, dense = build_runs(args)
    tta = None
    if args.accuracy:
        tta = tta_report([e.seconds for e in run.epochs], [e.seconds for e in dense.epochs],
                         load_curves(args.accuracy), run.method, args.target)
    roofline = run.timing_source.startswith("roofline")
    from sim.system.timeline import ROOFLINE_ASKED
    fallback = roofline and run.timing_source != ROOFLINE_ASKED   # not asked for: say so loudly
    split = getattr(args, "prunetrain_split", None)
    split_json = {k: v for k, v in split.items() if k != "run"} if split else None
    if args.json:
        out = {"workload": w.name, "cluster": cl.name, "devices": cl.devices,
               "dimensions": [{"name": d.name, "devices": d.devices, "link": d.link}
                              for d in cl.dimensions],
               "timing_source": run.timing_source, "framework": run.framework,
               "timing_model": "roofline" if roofline else "engine", "timing_fallback": fallback,
               "method": run.to_json(), "dense": dense.to_json(),
               "epochs": len(run.epochs),
               # speedup: dense / method (> 1 faster); None where the method is not modeled here
               "speedup": _speedup(run, dense),
               "comm_bytes_vs_dense": (run.comm_bytes / dense.comm_bytes) if dense.comm_bytes
               else None,
               "tta": tta, "prunetrain_split": split_json,
               "training_flops_vs_dense": getattr(args, "prunetrain_flops", None)}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{w.name} on {cl.name}: {cl.devices} devices ("
          + " x ".join(f"{d.devices} {d.name} [{d.link}]" for d in cl.dimensions) + ")")
    print(f"per-layer times: {run.timing_source}" + ("  <-- FALLBACK, not the cycle-level engine"
                                                    if fallback else
                                                    "  <-- not the cycle-level engine"
                                                    if roofline else ""))
    print(f"framework profile: {run.framework} (non-GEMM kernels, optimizer and per-step "
          "overhead in every step; --framework gemm-only: GEMMs alone)")
    print(f"trajectory: {run.trajectory}")
    for r in (run, dense):
        e0 = r.epochs[0]
        batches = sorted({e.batch for e in r.epochs})
        print(f"\n{r.method}: train {_fmt_s(r.train_seconds)} over {len(r.epochs)} epochs, "
              f"all-reduce payload {r.comm_bytes / 1e12:.3f} TB per device in "
              f"{_fmt_s(r.comm_seconds)} "
              f"(exposed {_fmt_s(sum(e.exposed_comm_seconds for e in r.epochs))})")
        print(f"  epoch 0: batch {e0.batch}/device, {e0.iterations} iterations, iteration "
              f"{e0.iteration.seconds * 1e3:.2f} ms (compute {e0.iteration.compute_seconds * 1e3:.2f} "
              f"of which non-GEMM ops {e0.iteration.ops_seconds * 1e3:.2f}, optimizer "
              f"{e0.iteration.optimizer_seconds * 1e3:.2f}, "
              f"all-reduce {e0.iteration.comm_seconds * 1e3:.2f}, exposed "
              f"{e0.iteration.exposed_comm_seconds * 1e3:.2f}, {len(e0.iteration.buckets)} buckets)")
        if len(batches) > 1:
            changes = [f"{e.batch} (epoch {e.epoch})" for i, e in enumerate(r.epochs)
                       if i == 0 or e.batch != r.epochs[i - 1].batch]
            print(("  batch steps given: " if getattr(args, "batch_steps", None) else
                   "  dynamic mini-batch: ") + " -> ".join(changes) + "; lr scaled with the batch")
        if e0.iteration.skipped_bytes:
            print(f"  zero approximation: WGC and all-reduce skipped for "
                  f"{e0.iteration.skipped_bytes / 1e6:.2f} MB of gradients on the first batch of "
                  "the schedule period")
        from sim.replay import system_notes
        for n in system_notes(r.notes, r.timing_source):
            print(f"  note: {n}")
    sp = _speedup(run, dense)
    print(f"\n{run.method} vs dense: speedup (dense time / method time, > 1 faster) "
          + (f"{sp:.3f}" if sp is not None else "not available (compute effect not modeled at "
             "system level)")
          + (f"; communication bytes {run.comm_bytes / dense.comm_bytes:.3f} of dense's"
             if dense.comm_bytes else ""))
    fl = getattr(args, "prunetrain_flops", None)
    if fl:
        print(f"  training FLOPs: {fl['gemm']:.3f} of dense's (the engine's GEMMs over the "
              "epochs run); " + (f"{fl['table1']:.3f} as PruneTrain's Table 1 counts them (the "
                                 f"authors' MACs, {fl['charged_epochs']} epochs charged against "
                                 f"dense's {len(dense.epochs)})" if fl["table1"] is not None else
                                 "Table 1's count needs the model's interval, not a trajectory "
                                 "file"))
    if split:
        f = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        print(f"  split: pruning alone {f(split['pruning_alone'])} (dense's batch), batch growth "
              f"on top {f(split['batch_growth'])} ({split['rule']}), together "
              f"{f(split['together'])}; growth capped at a global batch of "
              f"{split['max_global_batch']} (--max-global-batch)")
        for m in split["warnings"]:
            print(f"prunesim: warning: {m}", file=sys.stderr)
    if tta:
        for k in ("method", "dense"):
            t = tta[k]
            when = (f"{_fmt_s(t['seconds'])} (epoch {t['epoch']})" if t["seconds"] is not None
                    else t["status"])
            print(f"time to {tta['target']}: {k}: {when}")
        print("TTA speedup: " + (f"{tta['speedup']:.3f}x" if tta["speedup"] else
                                 "undefined (target not reached by both)"))
    return 0
