"""`prunesim train`: whole-run estimate for a method and the dense baseline on a cluster."""
from __future__ import annotations

import json
from dataclasses import replace

from sim.errors import ConfigError


def _fmt_s(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s:.1f} s"


def build_runs(args):
    from sim.methods import parse_combination, parse_method, refuse_unused
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import (DEFAULT_BATCH, DEFAULT_EPOCHS, lasso_trajectory,
                                       load_trajectory, parametric_trajectory, parse_model_spec,
                                       simulate_run)
    from sim.workload import load_workload
    w = load_workload(args.workload)
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
    pt = next((sp for sp in specs if sp.id == "prunetrain"), None)
    spec = next((sp for sp in specs if sp.id != "prunetrain"), pt)
    ds = w.dataset or ""
    epochs = args.epochs or DEFAULT_EPOCHS.get(ds)
    batch = args.batch or DEFAULT_BATCH.get(ds)
    if epochs is None or batch is None:
        raise ConfigError(w.origin, "dataset", f"no default epochs/batch for dataset {ds!r}: "
                          "give --epochs and --batch")
    traj, dyn = None, None
    if pt is not None:
        t = args.trajectory
        if t is None or t == "model":
            traj = lasso_trajectory(w, pt.get("rho"), pt.get("interval"), epochs,
                                    batch * cl.devices)
        elif t.startswith("model:"):
            if "rho" in pt.given:
                raise ConfigError(None, "--trajectory", "the parametric model (model:keep=...) has "
                                  "no rho input: leave rho out or use --trajectory model")
            traj = parametric_trajectory(w, epochs, pt.get("interval"), **parse_model_spec(t))
        else:
            if set(pt.given) & {"rho", "interval"}:
                raise ConfigError(None, "--trajectory", "a trajectory file fixes the channels "
                                  "and their epochs: rho and interval change nothing, leave them out")
            traj = load_trajectory(t, w)
        dyn = "device"
    elif args.trajectory:
        raise ConfigError(None, "--trajectory", "only meaningful with --method prunetrain")
    run = simulate_run(w, cl, spec, epochs=epochs, batch=batch, trajectory=traj, dynamic_batch=dyn)
    if len(specs) > 1:
        run = replace(run, method="+".join(sp.label for sp in specs))
    dense = simulate_run(w, cl, parse_method("dense"), epochs=epochs, batch=batch)
    return w, cl, spec, run, dense


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
    fallback = run.timing_source.startswith("roofline")
    if args.json:
        out = {"workload": w.name, "cluster": cl.name, "devices": cl.devices,
               "dimensions": [{"name": d.name, "devices": d.devices, "link": d.link}
                              for d in cl.dimensions],
               "timing_source": run.timing_source, "timing_fallback": fallback,
               "method": run.to_json(), "dense": dense.to_json(),
               "ratios": {"train_seconds": run.train_seconds / dense.train_seconds,
                          "comm_bytes": (run.comm_bytes / dense.comm_bytes) if dense.comm_bytes else None},
               "tta": tta}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{w.name} on {cl.name}: {cl.devices} devices ("
          + " x ".join(f"{d.devices} {d.name} [{d.link}]" for d in cl.dimensions) + ")")
    print(f"per-layer times: {run.timing_source}" + ("  <-- FALLBACK, not the cycle-level engine"
                                                    if fallback else ""))
    print(f"trajectory: {run.trajectory}")
    for r in (run, dense):
        e0 = r.epochs[0]
        batches = sorted({e.batch for e in r.epochs})
        print(f"\n{r.method}: train {_fmt_s(r.train_seconds)}, communication "
              f"{r.comm_bytes / 1e12:.3f} TB payload in {_fmt_s(r.comm_seconds)} "
              f"(exposed {_fmt_s(sum(e.exposed_comm_seconds for e in r.epochs))})")
        print(f"  epoch 0: batch {e0.batch}/device, {e0.iterations} iterations, iteration "
              f"{e0.iteration.seconds * 1e3:.2f} ms (compute {e0.iteration.compute_seconds * 1e3:.2f}, "
              f"all-reduce {e0.iteration.comm_seconds * 1e3:.2f}, exposed "
              f"{e0.iteration.exposed_comm_seconds * 1e3:.2f}, {len(e0.iteration.buckets)} buckets)")
        if len(batches) > 1:
            changes = [f"{e.batch} (epoch {e.epoch})" for i, e in enumerate(r.epochs)
                       if i == 0 or e.batch != r.epochs[i - 1].batch]
            print("  dynamic mini-batch: " + " -> ".join(changes) + "; lr scaled with the batch")
        if e0.iteration.skipped_bytes:
            print(f"  zero approximation: WGC and all-reduce skipped for "
                  f"{e0.iteration.skipped_bytes / 1e6:.2f} MB of gradients on the first batch of "
                  "the schedule period")
        for n in r.notes:
            print(f"  note: {n}")
    print(f"\n{run.method} vs dense: time x{run.train_seconds / dense.train_seconds:.3f}"
          + (f", communication bytes x{run.comm_bytes / dense.comm_bytes:.3f}" if dense.comm_bytes
             else ""))
    if tta:
        for k in ("method", "dense"):
            t = tta[k]
            when = (f"{_fmt_s(t['seconds'])} (epoch {t['epoch']})" if t["seconds"] is not None
                    else t["status"])
            print(f"time to {tta['target']}: {k}: {when}")
        print("TTA speedup: " + (f"{tta['speedup']:.3f}x" if tta["speedup"] else
                                 "undefined (target not reached by both)"))
    return 0
