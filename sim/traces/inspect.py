"""`prunesim trace info` and `prunesim trace check`.

Both stream the trace one tensor at a time (memory-mapped, statistics and checks in bounded
memory), so they work on traces far larger than RAM. `info` summarises; `check` verifies and is the
command to run before trusting a trace (info reads values without verifying checksums).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

from sim.errors import TraceError
from sim.traces.format import open_checked_trace, read_tensor
from sim.traces.format import KINDS, LOG_COLUMNS, MANIFEST, Trace, TensorRecord, open_trace
from sim.traces.stats import QUANTILE_SAMPLE, layer_stats
from sim.workload import Workload, load_workload

# Layer geometry compared by `trace check --workload` (what fixes every tensor's shape).
GEOMETRY_FIELDS = ("op", "c_in", "c_out", "h", "w", "p", "q", "r", "s", "stride", "pad", "groups")
_PROVENANCE_ORDER = ("model", "dataset", "method", "seed")


def ordered_records(trace: Trace, iteration: int | None = None) -> list[TensorRecord]:
    """Records in (iteration, network order, kind) order; only `iteration` when given."""
    order = {l.name: i for i, l in enumerate(trace.workload.layers)}
    recs = [r for r in trace.records if iteration is None or r.iteration == iteration]
    if iteration is not None and not recs:
        raise TraceError(trace.path / MANIFEST, "iterations",
                         f"no tensors at iteration {iteration} (recorded: {trace.iterations})")
    return sorted(recs, key=lambda r: (r.iteration, order[r.layer], KINDS.index(r.kind)))


def stream_stats(trace: Trace, records: list[TensorRecord]) -> Iterator[tuple[TensorRecord, dict]]:
    """(record, layer_stats) per tensor; one tensor memory-mapped at a time, not verified."""
    for rec in records:
        arr = trace.load(rec, verify=False)
        try:
            st = layer_stats(arr)
        except (OSError, ValueError) as e:  # e.g. a file truncated after it was opened
            raise TraceError(trace.path / rec.path, None, f"unreadable tensor data ({e})") from None
        finally:
            del arr
        yield rec, st


# ----------------------------------------------------------------------------------------------
# info


def finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite_or_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_or_none(x) for x in v]
    return v


def _g(v: float, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _epochs(trace: Trace) -> list[int]:
    return sorted({r.epoch for r in trace.records})


def _summary(trace: Trace) -> dict:
    m = trace.manifest
    w = trace.workload
    its = sorted({(r.iteration, r.epoch) for r in trace.records})
    return {
        "trace": str(trace.path),
        "format": m.get("format"),
        "schema_version": m.get("schema_version"),
        "created": m.get("created"),
        "complete": trace.complete,
        "workload": {"name": w.name, "description": w.description, "layers": len(w.layers),
                     "checksum": w.checksum},
        "batch": trace.batch,
        "batch_subsample": m.get("batch_subsample"),
        "recorded_batch": trace.recorded_batch,
        "provenance": trace.provenance,
        "iterations": [{"iteration": i, "epoch": e} for i, e in its],
        "epochs": _epochs(trace),
        "tensors": len(trace.records),
        "tensor_bytes": sum(r.nbytes for r in trace.records),
        "log": trace.log,
    }


def _fmt_provenance(prov: dict) -> list[str]:
    keys = [k for k in _PROVENANCE_ORDER if k in prov]
    keys += sorted(k for k in prov if k not in keys and k != "software")
    lines = ["provenance: " + (", ".join(f"{k}={prov[k]}" for k in keys) if keys else "(none)")]
    sw = prov.get("software")
    if isinstance(sw, dict) and sw:
        lines.append("software:   " + ", ".join(f"{k} {v}" for k, v in sw.items()))
    elif sw:
        lines.append(f"software:   {sw}")
    return lines


def _iteration_span(items: list[int]) -> str:
    if not items:
        return "none"
    if len(items) <= 8:
        return ", ".join(map(str, items))
    return f"{items[0]}, {items[1]}, ..., {items[-1]}"


def cmd_info(args) -> int:
    from sim.results.tables import format_table
    trace = open_trace(args.trace)
    records = ordered_records(trace, getattr(args, "iteration", None))  # raises before any output
    recs_stats = stream_stats(trace, records)
    s = _summary(trace)
    if getattr(args, "json", False):
        tensors = []
        for rec, st in recs_stats:
            tensors.append({"iteration": rec.iteration, "epoch": rec.epoch, "layer": rec.layer,
                            "kind": rec.kind, "shape": list(rec.shape), "dtype": rec.dtype,
                            "path": rec.path, **finite_or_none(st)})
        s["records"] = tensors
        print(json.dumps(finite_or_none(s), indent=1, allow_nan=False))
        return 0

    state = "complete" if s["complete"] else "INCOMPLETE (capture interrupted; holds what was " \
                                            "finished)"
    print(f"trace:      {s['trace']}  ({s['format']} v{s['schema_version']}, created {s['created']})")
    print(f"status:     {state}")
    w = s["workload"]
    print(f"workload:   {w['name']}: {w['description']}  ({w['layers']} conv/fc layers, "
          f"checksum {w['checksum'][:12]})")
    sub = (f", sub-sampled to {s['batch_subsample']} samples per recorded tensor"
           if s["batch_subsample"] else "")
    print(f"batch:      {s['batch']}{sub}")
    for line in _fmt_provenance(s["provenance"]):
        print(line)
    its = [x["iteration"] for x in s["iterations"]]
    print(f"recorded:   {len(its)} iteration(s) [{_iteration_span(its)}] over epoch(s) "
          f"[{_iteration_span(s['epochs'])}]; {s['tensors']} tensors, "
          f"{s['tensor_bytes'] / 1e6:.1f} MB")
    if trace.log:
        print("\ntraining log")
        rows = [[_g(r[c], ".4f") if isinstance(r[c], float) else ("-" if r[c] is None else r[c])
                 for c in LOG_COLUMNS] for r in trace.log]
        print(format_table(list(LOG_COLUMNS), rows))
    else:
        print("training log: (none)")

    header = ["layer", "kind", "shape", "dtype", "density", "zero frac", "mean |g|", "std",
              "max |g|", "kurtosis", "p50 |g|nz", "p99 |g|nz"]
    current, rows = None, []

    def flush():
        if rows:
            print(f"\niteration {current[0]} (epoch {current[1]})")
            print(format_table(header, rows))

    for rec, st in recs_stats:
        if (rec.iteration, rec.epoch) != current:
            flush()
            current, rows = (rec.iteration, rec.epoch), []
        q = st["quantiles"]
        rows.append([rec.layer, rec.kind, "x".join(map(str, rec.shape)), rec.dtype,
                     _g(st["density"], ".4f"), _g(st["zero_fraction"], ".4f"),
                     _g(st["mean_abs"], ".3e"), _g(st["std"], ".3e"), _g(st["max_abs"], ".3e"),
                     _g(st["kurtosis"], ".2f"), _g(q.get("p50"), ".3e"), _g(q.get("p99"), ".3e")])
    flush()
    print("\nvalues not verified here; run `prunesim trace check` to verify checksums and "
          f"finiteness. |g|nz: quantiles of the nonzero magnitudes (estimated from a "
          f"{QUANTILE_SAMPLE}-value sample).")
    return 0


# ----------------------------------------------------------------------------------------------
# check


def compare_geometry(trace: Trace, other: Workload) -> None:
    """Raise TraceError at the first layer/field where the trace's workload differs from `other`."""
    mfile = trace.path / MANIFEST
    mine = trace.workload
    what = f"workload {other.name} ({other.origin})"
    if tuple(mine.input_shape) != tuple(other.input_shape):
        raise TraceError(mfile, "workload.input", f"trace has input {list(mine.input_shape)}, "
                         f"{what} has {list(other.input_shape)}")
    for i, (a, b) in enumerate(zip(mine.layers, other.layers)):
        if a.name != b.name:
            raise TraceError(mfile, f"workload.layers[{i}].name", f"trace has layer {a.name!r}, "
                             f"{what} has {b.name!r}")
        for f in GEOMETRY_FIELDS:
            if getattr(a, f) != getattr(b, f):
                raise TraceError(mfile, f"workload.layers[{i}] ({a.name}).{f}",
                                 f"trace has {getattr(a, f)}, {what} has {getattr(b, f)}")
    if len(mine.layers) != len(other.layers):
        n = min(len(mine.layers), len(other.layers))
        extra = (mine.layers if len(mine.layers) > n else other.layers)[n].name
        raise TraceError(mfile, f"workload.layers[{n}]",
                         f"trace has {len(mine.layers)} conv/fc layers, {what} has "
                         f"{len(other.layers)} (first unmatched: {extra!r})")


def _unreferenced(trace: Trace) -> list[str]:
    """Files under tensors/ that no record names (e.g. temporaries of a killed capture)."""
    named = {r.path for r in trace.records}
    root = trace.path / "tensors"
    out = []
    if root.is_dir() and not root.is_symlink():
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                rel = Path(dirpath, f).relative_to(trace.path).as_posix()
                if rel not in named:
                    out.append(rel)
    return sorted(out)


def check_trace(path: str | os.PathLike, workload: str | None = None) -> dict:
    """Verify a whole trace, one tensor at a time; raise TraceError at the first problem."""
    # manifest, embedded workload, record shapes vs workload, log checksum, what replay needs
    trace = open_checked_trace(path)
    if workload is not None:
        compare_geometry(trace, load_workload(workload))
    rb = trace.recorded_batch
    layers = {l.name: l for l in trace.workload.layers}
    nbytes = 0
    for rec in ordered_records(trace):
        want = layers[rec.layer].tensor_shapes(rb)[rec.kind]
        if rec.shape != tuple(want):  # open_trace checks this too; kept as a second guard
            raise TraceError(trace.path / MANIFEST, "records", f"{rec.layer}.{rec.kind} of "
                             f"iteration {rec.iteration} has shape {list(rec.shape)}, workload "
                             f"expects {list(want)}")
        read_tensor(trace.path, rec)      # the same single read replay uses
        nbytes += (trace.path / rec.path).stat().st_size
    return {"tensors": len(trace.records), "bytes": nbytes, "complete": trace.complete,
            "iterations": trace.iterations, "log_rows": len(trace.log),
            "unreferenced": _unreferenced(trace)}


def cmd_check(args) -> int:
    res = check_trace(args.trace, getattr(args, "workload", None))
    print(f"OK: {res['tensors']} tensors, {res['bytes'] / 1e6:.1f} MB verified")
    if not res["complete"]:
        print(f"note: the capture was interrupted (manifest complete=false); the trace holds "
              f"{len(res['iterations'])} finished iteration(s)")
    if res["unreferenced"]:
        print(f"note: {len(res['unreferenced'])} file(s) under tensors/ are not in the manifest and "
              f"were ignored (first: {res['unreferenced'][0]})")
    return 0
