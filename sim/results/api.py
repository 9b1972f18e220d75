"""The Python API: the CLI's replay, sweep and export, returning plain records (lists of dicts).

    from sim.results import api
    recs = api.replay("traces/sample-resnet20-mnist5k", hw=["a100-sxm4-40gb", "xeon-e5-2680v4"])
    recs = api.sweep(hw=["hwconfigs/a100*.yaml"], traces=["traces/sample-cnn2-mnist5k"],
                     grid="grid.yaml", db="results.sqlite")
    df = pandas.DataFrame(api.records("results.sqlite"))      # or layer rows: kind="layer"

Bad input raises the same sim.errors exceptions the CLI reports (ConfigError, TraceError, ...).
Records are the ones stored (with their `key`): a point replayed here, run in a sweep (without
a grid) or read back with records() gives the same record.
"""
from __future__ import annotations

import os
from pathlib import Path

from sim.errors import ConfigError
from sim.results.store import ResultStore, point_record


def replay(trace: str | os.PathLike, hw: list[str], methods: list[str] | None = None, *,
           seed: int = 0, iteration: int | None = None,
           db: str | os.PathLike | None = None, cache_model: str | None = None,
           framework: str | os.PathLike | None = None, trajectory: str | None = None,
           epochs: int | None = None, train_samples: int | None = None) -> list[dict]:
    """`prunesim replay TRACE --hw ... --method ...`: one network-level record per (hw, method).

    `trajectory`, `epochs`, `train_samples`: replay's --trajectory / --epochs / --train-samples
    for PruneTrain columns (`prunetrain[...][+METHOD]`, sim.replay.Combined).

    `framework` is replay's `--framework` (a profile name or path, sim.frameworks; None: the
    default for each hardware kind, sim.replay.DEFAULT_FRAMEWORK): the whole-step columns.
    With `db` the records are also stored (existing points are kept, not duplicated).
    `cache_model` is replay's `--cache` (CPU hardware only: "exact", the default, or "profile").
    """
    from sim.driver import engines_for, run_trace
    from sim.replay import Totals, check_columns, parse_methods
    from sim.traces.format import open_trace
    tr = open_trace(Path(trace).resolve())  # records name traces by absolute path, as sweeps do
    engines = engines_for(list(hw))
    try:
        specs = parse_methods(list(methods or []), "replay", trajectory, epochs, train_samples)
    except ValueError as e:
        raise ConfigError(None, "--method", str(e)) from None
    check_columns(specs, tr)
    if framework is not None:
        from sim.frameworks import load_framework
        framework = load_framework(os.fspath(framework))
    totals = Totals(tr, specs, engines, seed, framework)
    from sim.results.sweep import _cache_model
    with _cache_model(cache_model):
        for step in run_trace(tr, specs, engines, seed=seed, iteration=iteration):
            totals.add(step)
    by_name = {e.hw.name: e.hw for e in engines}
    recs = [point_record(r, by_name[r["hw"]], cache_model=cache_model, only_iteration=iteration)
            for r in totals.records()]
    if db is not None:
        with ResultStore(db) as st:
            for r in recs:
                st.put(r)
    return recs


def sweep(hw: list[str], *, workloads: list[str] | None = None, traces: list[str] | None = None,
          methods: list[str] | None = None, db: str | os.PathLike | None = None,
          batch: int | None = None, grid: str | os.PathLike | None = None, jobs: int | None = None,
          scheduler: str | None = None, seed: int = 0, cache: str | os.PathLike | None = None,
          stats: str | None = None, progress: bool | None = False,
          cache_model: str | None = None,
          framework: str | os.PathLike | None = None) -> list[dict]:
    """`prunesim sweep ...`: the records of every point of the sweep (run now or stored before).
    `framework`: as in replay().

    Without `db` the results live in an in-memory store for this call only (nothing resumes).
    `jobs` defaults to os.cpu_count(); `scheduler` is a Dask scheduler address.
    """
    from sim.results import sweep as sw
    st = ResultStore(db if db is not None else ":memory:")
    try:
        res = sw.sweep(list(hw), workloads=workloads, traces=traces, methods=methods, batch=batch,
                       grid=os.fspath(grid) if grid is not None else None, jobs=jobs,
                       scheduler=scheduler, seed=seed,
                       cache=os.fspath(cache) if cache is not None else None, stats=stats,
                       progress=progress, store=st, cache_model=cache_model,
                       framework=framework)
        wanted = set(res.keys or ())
        return [r for r in st.records() if r["key"] in wanted]
    finally:
        st.close()


def records(db: str | os.PathLike, kind: str = "network") -> list[dict]:
    """Every stored record of a result store ('network' points, or per-'layer' rows)."""
    with ResultStore(db, create=False) as st:
        return st.records(kind)


def export(db: str | os.PathLike, csv: str | os.PathLike | None = None,
           parquet: str | os.PathLike | None = None, kind: str = "network") -> int:
    """`prunesim export`: write CSV and/or Parquet; returns the number of rows written."""
    from sim.results.store import export_csv, export_parquet
    recs = records(db, kind)
    if parquet is not None:
        export_parquet(recs, parquet)
    if csv is not None:
        export_csv(recs, csv)
    return len(recs)
