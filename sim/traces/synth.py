"""Fit activation-gradient statistics to a captured trace, and synthesize full-size traces from them.

    prunesim trace fit TRACE --out STATS.yaml
    prunesim trace synth --workload resnet50-imagenet --batch 64 --out T [--stats STATS.yaml]

The statistical model, its fit and the cross-network mapping live in sim.traces.gradmodel;
docs/explanation/synthetic-traces.md explains them and compares synthetic with captured traces.

Generation is streamed: every dO tensor is filled through TraceWriter.open_tensor (a memory map) in
blocks of at most _BLOCK_ELEMS elements, so peak memory does not grow with the tensor. The random
stream is a pure function of (seed, iteration, layer index, sample): each sample has its own three
PCG64 streams (plane factors, magnitudes, sign/mask), so the output is bit-identical on rerun and
does not depend on the block size, and a sub-sampled trace holds exactly the first samples of the
full one.
"""
from __future__ import annotations

import dataclasses

import datetime as _dt
import hashlib
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from sim import __version__
from sim.errors import TraceError
from sim.traces import gradmodel as gm
from sim.traces.format import MANIFEST, TraceWriter, open_trace
from sim.workload import Workload, load_workload
from sim.yamlio import load_yaml_file

DEFAULT_STATS = Path(__file__).resolve().parent.parent / "data" / "synth-default.yaml"
_BLOCK_ELEMS = 1 << 18   # elements generated per step (a few MB of float32 temporaries)
_FP16_MAX = 65504.0


# ----------------------------------------------------------------------------------------------
# Statistics files


@dataclass
class Stats:
    """A statistics YAML: fitted per-layer parameters plus where they came from."""

    layers: list[gm.LayerParams]
    provenance: dict[str, Any]
    path: str | None = None
    sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_doc(self) -> dict:
        return {"format": gm.STATS_FORMAT, "schema": gm.STATS_SCHEMA, "model": gm.MODEL,
                "provenance": self.provenance, "layers": [p.to_yaml() for p in self.layers]}


_HEADER = """\
# prunesim activation-gradient statistics (model {model}); written by `prunesim trace fit`.
# Per layer: g = S*A[n]*B[c]*U[n,c]*sign*e*mask, S = scale_per_sample/batch, log-normal A, B, U
# (log-sd sigma_n, sigma_c, sigma_nc), log e with quantiles logq (relative to the median) at the
# levels listed under provenance.quantile_levels, dead planes and Beta-distributed per-plane zero
# fractions. See docs/explanation/synthetic-traces.md.
"""


def write_stats(stats: Stats, path: str | os.PathLike) -> None:
    text = _HEADER.format(model=gm.MODEL) + yaml.safe_dump(stats.to_doc(), sort_keys=False,
                                                           default_flow_style=None, width=100)
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)


_STATS_CACHE: dict[tuple, Stats] = {}


def load_stats(path: str | os.PathLike | None = None) -> Stats:
    """Read and validate a statistics YAML (default: the one shipped with prunesim). Parsed files
    are cached per process by (path, size, mtime): the shipped file has hundreds of layers."""
    p = Path(path) if path is not None else DEFAULT_STATS
    try:
        st = p.stat()
        ck = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        ck = None
    if ck is not None and ck in _STATS_CACHE:
        return _STATS_CACHE[ck]
    out = _load_stats(p)
    if ck is not None:
        _STATS_CACHE[ck] = out
    return out


def _load_stats(p: Path) -> Stats:
    doc = load_yaml_file(p, TraceError)
    if not isinstance(doc, dict):
        raise TraceError(p, "(top level)", "expected a mapping with format, schema, model, "
                         "provenance and layers")
    allowed = {"format", "schema", "model", "provenance", "layers"}
    for k in doc:
        if k not in allowed:
            raise TraceError(p, str(k), "unknown key (allowed: " + ", ".join(sorted(allowed)) + ")")
    for k in sorted(allowed):
        if k not in doc:
            raise TraceError(p, k, "missing")
    if doc["format"] != gm.STATS_FORMAT:
        raise TraceError(p, "format", f"expected {gm.STATS_FORMAT!r}, got {doc['format']!r}")
    if doc["schema"] not in gm.STATS_SCHEMAS or isinstance(doc["schema"], bool):
        raise TraceError(p, "schema", f"unsupported schema {doc['schema']!r} (this prunesim "
                         f"reads {', '.join(map(str, gm.STATS_SCHEMAS))})")
    if doc["model"] != gm.MODEL:
        raise TraceError(p, "model", f"unknown model {doc['model']!r} (this prunesim has {gm.MODEL})")
    if not isinstance(doc["provenance"], dict):
        raise TraceError(p, "provenance", "expected a mapping")
    raw = doc["layers"]
    if not isinstance(raw, list) or not raw:
        raise TraceError(p, "layers", "expected a non-empty list of fitted layers")
    layers = []
    seen = set()
    for i, d in enumerate(raw):
        lp = gm.layer_params_from_dict(d, p, f"layers[{i}]")
        if (lp.name, lp.progress) in seen:
            raise TraceError(p, f"layers[{i}].name", f"duplicate layer {lp.name!r}"
                             + (f" at progress {lp.progress}" if lp.progress is not None else ""))
        seen.add((lp.name, lp.progress))
        layers.append(lp)
    sha = hashlib.sha256(p.read_bytes()).hexdigest()
    return Stats(layers=layers, provenance=doc["provenance"], path=str(p), sha256=sha)


# ----------------------------------------------------------------------------------------------
# Fit


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def iteration_progress(tr) -> dict[int, float] | None:
    """Fraction of the training schedule at each recorded iteration (None: the trace does not say,
    e.g. a synthetic one): provenance.training.progress (capture --record-every), else the
    iteration over epochs x iterations_per_epoch."""
    tp = tr.provenance.get("training") if isinstance(tr.provenance, dict) else None
    if not isinstance(tp, dict):
        return None
    prog = tp.get("progress")
    if isinstance(prog, dict) and prog:
        try:
            return {int(k): float(v) for k, v in prog.items()}
        except (TypeError, ValueError):
            raise TraceError(tr.path / MANIFEST, "provenance.training.progress",
                             "expected iteration: fraction pairs") from None
    total = tp.get("total_iterations")
    if not total and isinstance(tp.get("epochs"), int) and isinstance(tp.get("iterations_per_epoch"), int):
        total = tp["epochs"] * tp["iterations_per_epoch"]
    if not isinstance(total, int) or total < 1:
        return None
    return {i: min(1.0, i / total) for i in tr.iterations}


def progress_bin(x: float) -> int:
    """0 for the untrained network (progress 0), then 1, 2, ... for the PROGRESS_BINS spans."""
    if x <= 0.0:
        return 0
    edges = gm.PROGRESS_BINS
    return next(i for i in range(1, len(edges)) if x <= edges[i] or i == len(edges) - 1)


def fit(trace_path: str | os.PathLike, progress: Callable[[str], None] | None = None,
        by_progress: bool = True) -> Stats:
    """Fit the model to every recorded dO layer of a trace.

    With by_progress (and a trace that says where in training each iteration is), the fits are
    averaged within training-progress bins (gradmodel.PROGRESS_BINS) and each layer gets one
    parameter set per bin, tagged with the bin's mean progress; otherwise over all iterations.
    Tensors are memory-mapped and read in sample blocks, one layer at a time (bounded memory).
    """
    tr = open_trace(trace_path)
    if not tr.complete:
        raise TraceError(tr.path / MANIFEST, "complete", "false: the capture was interrupted or "
                         "is still running; re-run it (tools/long_captures.py resumes a set)")
    depths = gm.relative_depths(tr.workload.layers)
    prog = iteration_progress(tr) if by_progress else None
    per_layer: dict[tuple[str, int], list[dict]] = {}
    bin_prog: dict[int, list[float]] = {}
    dtypes = set()
    for rec, arr in tr.stream("dO"):
        dtypes.add(rec.dtype)
        try:
            censor = rec.dtype == "float16" and not gm.is_masked(tr.workload.layer(rec.layer))
            f = gm.fit_tensor(arr, tr.batch, censor_zeros=censor)
        except ValueError as e:
            raise TraceError(tr.path / rec.path, None, f"cannot fit: {e}") from None
        b = -1 if prog is None else progress_bin(prog[rec.iteration])
        per_layer.setdefault((rec.layer, b), []).append(f)
        if prog is not None and rec.layer == tr.workload.layers[0].name:
            bin_prog.setdefault(b, []).append(prog[rec.iteration])
        if progress:
            progress(f"fit it {rec.iteration} {rec.layer}: density "
                     f"{f['density']:.3f}")
        del arr
    if not per_layer:
        raise TraceError(tr.path / MANIFEST, "records", "no dO tensors to fit")
    layers = []
    for l in tr.workload.layers:
        for (name, b), fits in per_layer.items():
            if name != l.name:
                continue
            avg = gm.average_fits(fits)
            pr = None if b < 0 or b not in bin_prog else \
                float(f"{sum(bin_prog[b]) / len(bin_prog[b]):.4f}")
            layers.append(gm.LayerParams(name=l.name, op=l.op, block=l.block,
                                         masked=gm.is_masked(l), depth=depths[l.name],
                                         plane=l.p * l.q, **avg, progress=pr, channels=l.c_out))
    mprov = tr.provenance
    ds = mprov.get("dataset", tr.workload.dataset)
    if isinstance(ds, dict):
        ds = ds.get("name", "unnamed")
    prov = {
        "trace": str(Path(trace_path)),
        "trace_manifest_sha256": _sha256(tr.path / MANIFEST),
        "workload": tr.workload.name,
        "workload_sha256": tr.workload.checksum,
        "dataset": ds,
        "trace_command": mprov.get("command"),
        "trace_synthetic": bool(mprov.get("synthetic", False)),
        "batch": tr.batch,
        "recorded_batch": tr.recorded_batch,
        "iterations": tr.iterations,
        "trace_schema_version": tr.manifest.get("schema_version"),
        "progress": None if prog is None else {str(i): round(v, 4) for i, v in sorted(prog.items())},
        "train_acc_final": (tr.provenance.get("training") or {}).get("train_acc", [None])[-1]
        if (tr.provenance.get("training") or {}).get("train_acc") else None,
        "dtype": sorted(dtypes),
        "zeros": "float16 zeros in layers without a ReLU mask treated as censored (flush-to-zero) "
                 "values, not as structural zeros" if "float16" in dtypes else "as recorded",
        "prunesim": __version__,
        "quantile_levels": list(gm.LEVELS),
        "fitted": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return Stats(layers=layers, provenance=prov)


def fit_many(trace_paths: list[str | os.PathLike],
             progress: Callable[[str], None] | None = None) -> Stats:
    """Fit several traces into one statistics set (e.g. a Conv-BN-ReLU and a Conv-ReLU network, so
    synthesis has data for both block kinds). Layer names get their workload as prefix; the
    provenance lists every source under `sources`."""
    vers = {}
    for p in trace_paths:
        vers.setdefault(open_trace(p).manifest.get("schema_version"), []).append(str(p))
    if len(vers) > 1:
        (v0, p0), (v1, p1) = list(vers.items())[:2]
        raise TraceError(p1[0], "schema_version", f"{v1} differs from {p0[0]}'s {v0}: fit traces "
                         "of one schema version together")
    if len(trace_paths) == 1:
        return fit(trace_paths[0], progress)
    parts = [fit(p, progress) for p in trace_paths]
    names = [st.provenance["workload"] + "@" + str(st.provenance.get("dataset")) for st in parts]
    layers = []
    # one network prefix per trace (the same network on two datasets is two sources)
    dup = {n for n in names if names.count(n) > 1}
    for st, nm in zip(parts, names):
        wl = st.provenance["workload"]
        prefix = wl if sum(1 for x in names if x.split("@")[0] == wl) == 1 else nm
        if nm in dup:
            raise TraceError(st.provenance["trace"], None, f"two traces of {nm}: fit one per "
                             "network and dataset")
        layers += [dataclasses.replace(lp, name=f"{prefix}/{lp.name}") for lp in st.layers]
        st.provenance["prefix"] = prefix
    prov = {k: v for k, v in parts[0].provenance.items()
            if k in ("prunesim", "quantile_levels", "fitted")}
    prov["workload"] = "+".join(st.provenance["workload"] for st in parts)
    prov["iterations"] = sorted({i for st in parts for i in st.provenance["iterations"]})
    prov["sources"] = [st.provenance for st in parts]
    return Stats(layers=layers, provenance=prov)


def cmd_fit(args) -> int:
    """`prunesim trace fit` without --check (sim.traces.loo.cmd_fit runs the check, then this)."""
    if args.out is None:
        raise TraceError(None, "--out", "required (unless --check)")
    from sim.outputs import check_output
    check_output(args.out, force=getattr(args, "force", False), field="--out")
    stats = fit_many(args.trace)
    write_stats(stats, args.out)
    print(f"fitted {len(stats.layers)} layers of {stats.provenance['workload']} "
          f"({len(stats.provenance['iterations'])} iterations) -> {args.out}")
    print(f"{'layer':<16}{'block':<14}{'progress':>9}{'depth':>6}{'q10':>7}{'q90':>7}{'sig_n':>7}{'sig_c':>7}{'sig_nc':>7}"
          f"{'dead':>7}{'zero':>7}{'density':>8}{'scale*B':>11}")
    for p in stats.layers:
        print(f"{p.name:<16}{p.block:<14}{'-' if p.progress is None else f'{p.progress:.2f}':>9}{p.depth:6.2f}{p.logq[gm.LEVELS.index(0.1)]:7.2f}{p.logq[gm.LEVELS.index(0.9)]:7.2f}{p.sigma_n:7.3f}{p.sigma_c:7.3f}"
              f"{p.sigma_nc:7.3f}{p.dead_fraction:7.3f}{p.zero_fraction:7.3f}{p.density:8.3f}"
              f"{p.scale_per_sample:11.4g}")
    return 0


# ----------------------------------------------------------------------------------------------
# Synthesis


def _sample_streams(seed: int, iteration: int, layer_index: int, n: int):
    ss = np.random.SeedSequence([seed, iteration, layer_index, 1, n])
    return [np.random.Generator(np.random.PCG64(s)) for s in ss.spawn(3)]


def _layer_stream(seed: int, iteration: int, layer_index: int):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, iteration, layer_index, 0])))


def generate_layer(out: np.ndarray, prm: dict, batch: int, seed: int, iteration: int,
                   layer_index: int, block_elems: int | None = None) -> None:
    """Fill `out` (N, C[, P, Q]; a memory map is fine) with one synthetic dO tensor.

    `prm` holds the mapped parameters (gradmodel.map_params); `batch` is the training batch the
    loss is averaged over (sets the scale). Works sample by sample, in blocks of block_elems.
    """
    block = int(block_elems or _BLOCK_ELEMS)
    n_rec, c = out.shape[0], out.shape[1]
    plane = int(np.prod(out.shape[2:], dtype=np.int64)) if out.ndim > 2 else 1
    s_abs = prm["scale_per_sample"] / batch
    sn, sc, snc = prm["sigma_n"], prm["sigma_c"], prm["sigma_nc"]
    dead, zf, kappa, pos = prm["dead_fraction"], prm["zero_fraction"], prm["zero_kappa"], prm["pos_fraction"]
    logq = np.asarray(prm["logq"], dtype=np.float64)
    logq = logq - gm.log_mean_abs(logq)         # E e = 1
    shp_n, shp_c, shp_nc = (np.asarray(prm[k], dtype=np.float64) for k in ("shape_n", "shape_c", "shape_nc"))
    ez = gm.EZKNOTS
    mn, mc, mnc = (gm.log_mean_abs(q, ez, sg) for q, sg in ((shp_n, sn), (shp_c, sc), (shp_nc, snc)))
    lim = _FP16_MAX if out.dtype == np.float16 else float(np.finfo(np.float32).max)
    lrng = _layer_stream(seed, iteration, layer_index)
    log_b = sc * gm.logq_of_z(lrng.standard_normal(c), shp_c, ez) - mc
    for n in range(n_rec):
        prng, mrng, srng = _sample_streams(seed, iteration, layer_index, n)
        log_a = sn * float(gm.logq_of_z(np.array([prng.standard_normal()]), shp_n, ez)[0]) - mn
        logfac = (math.log(s_abs) + log_a) + log_b \
            + (snc * gm.logq_of_z(prng.standard_normal(c), shp_nc, ez) - mnc)
        dead_c = prng.random(c) < dead
        if zf <= 0.0:
            theta = np.ones(c)
        elif kappa is None:
            theta = np.full(c, 1.0 - zf)
        else:
            theta = prng.beta(kappa * (1.0 - zf), kappa * zf, c)
        theta[dead_c] = 0.0
        th32 = theta.astype(np.float32)
        thp32 = (theta * pos).astype(np.float32)
        dst = out[n].reshape(-1)
        total = c * plane
        for start in range(0, total, block):
            stop = min(total, start + block)
            k = stop - start
            c0, c1 = start // plane, (stop - 1) // plane + 1
            counts = np.full(c1 - c0, plane, dtype=np.int64)
            counts[0] -= start - c0 * plane
            counts[-1] -= c1 * plane - stop
            z = mrng.standard_normal(k, dtype=np.float32)
            lg = gm.logq_of_z(z, logq)
            lg += np.repeat(logfac[c0:c1], counts)
            mag = np.exp(lg).astype(np.float32)
            u = srng.random(k, dtype=np.float32)
            th = np.repeat(th32[c0:c1], counts)
            mag[u >= th] = 0.0
            np.negative(mag, out=mag, where=(u >= np.repeat(thp32[c0:c1], counts)) & (u < th))
            np.clip(mag, -lim, lim, out=mag)
            dst[start:stop] = mag


def _require_progress(stats: Stats, train_progress: float | None, field: str = "--progress") -> None:
    """A progress value must change the result: refuse it for statistics fitted without one."""
    if train_progress is not None and not any(p.progress is not None for p in stats.layers):
        raise TraceError(stats.path, field, "these statistics were fitted without training "
                         "progress (schema 1, or traces without training provenance): refit them "
                         "with `prunesim trace fit` on captures, or leave out --progress")


def _round(v):
    if v is None:
        return None
    if isinstance(v, (tuple, list)):
        return [float(f"{x:.4f}") for x in v]
    return float(f"{v:.6g}")


def synth(workload: Workload | str, batch: int, out: str | os.PathLike, stats: Stats | str | None = None,
          iterations: int = 1, seed: int = 0, dtype: str = "float32", *, subsample: int | None = None,
          force: bool = False, progress: Callable[[str], None] | None = None,
          block_elems: int | None = None, yes_large: bool = False,
          train_progress: float | None = None) -> Path:
    """Write a synthetic dense trace: dO of every conv and FC layer, for each iteration.

    `subsample` records only the first S samples of each batch (like capture --subsample); the
    gradient scale still follows `batch`. `train_progress` (a fraction of the training schedule)
    takes the gradient statistics at that point of training; None (default) averages them over
    the whole run (gradmodel.at_progress). Returns the trace directory.
    """
    train_progress = gm.check_progress(train_progress)
    wl = load_workload(workload) if isinstance(workload, (str, os.PathLike)) else workload
    if not isinstance(stats, Stats):
        stats = load_stats(stats)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TraceError(None, "seed", f"must be a non-negative integer, got {seed!r}")
    if np.dtype(dtype).name not in ("float32", "float16"):
        raise TraceError(None, "dtype", f"expected float32 or float16, got {dtype!r}")
    if batch < 1 or iterations < 1:
        raise TraceError(None, "batch", "batch and iterations must be >= 1")
    if subsample is not None and not 1 <= subsample <= batch:
        raise TraceError(None, "subsample", f"must be in 1..{batch}, got {subsample}")
    _require_progress(stats, train_progress)
    mapped, warnings = gm.map_params(stats.layers, wl, train_progress)
    rec_batch = subsample or batch
    for w in warnings:
        if progress:
            progress(f"warning: {w}")
    prov = {
        "method": "dense",
        "synthetic": True,
        "generator": {"module": "sim.traces.synth", "model": gm.MODEL, "seed": seed,
                      "prunesim": __version__},
        "stats": {"path": stats.path or "<in memory>", "sha256": stats.sha256,
                  "source": stats.provenance},
        "dataset": stats.provenance.get("dataset"),
        "training_progress": "averaged over the run" if train_progress is None else train_progress,
        "mapping": {name: {"rule": d["rule"], "from": d["from"], "t": round(d["t"], 4)}
                    for name, d in mapped.items()},
        "mapping_warnings": warnings,
        "params": {name: {k: _round(v) for k, v in d.items() if k not in ("rule", "from", "t")}
                   for name, d in mapped.items()},
    }
    total_bytes = sum(int(np.prod(l.tensor_shapes(rec_batch)["dO"])) for l in wl.layers) \
        * np.dtype(dtype).itemsize * iterations
    _check_size(out, wl, rec_batch, dtype, iterations, total_bytes, yes_large)
    created: list[Path] = []
    try:
        return _write(out, wl, batch, prov, subsample, force, iterations, rec_batch, dtype, mapped,
                      seed, block_elems, progress, total_bytes, created)
    except BaseException as e:
        # a failed synthesis leaves nothing that could pass for a trace (only what it created)
        for d in created:
            shutil.rmtree(d, ignore_errors=True)
        if isinstance(e, (OSError, MemoryError)):
            raise TraceError(out, None, f"synthesis failed ({type(e).__name__}: {e}); the partial "
                             "trace was removed") from None
        raise


def _check_size(out, wl: Workload, rec_batch: int, dtype: str, iterations: int, total_bytes: int,
                yes_large: bool) -> None:
    """The whole trace's bytes against the budget and the free disk, the largest tensor (mapped
    whole) against an address-space limit: refused before the directory is created."""
    from sim.limits import check_budget, fmt_bytes, free_disk
    what = f"{wl.name} at batch {rec_batch}, {iterations} iteration(s), {dtype}"
    check_budget("synth_bytes", total_bytes, out, "--batch/--iterations", yes_large=yes_large,
                 error=TraceError, what=what)
    check_budget("synth_layer_samples", len(wl.layers) * rec_batch * iterations, out,
                 "--batch/--iterations", yes_large=yes_large, error=TraceError,
                 what=f"{len(wl.layers)} layers x batch {rec_batch} x {iterations} iteration(s)")
    free = free_disk(out)
    if free is not None and total_bytes > free:
        raise TraceError(out, "--batch/--iterations", f"{what}: {fmt_bytes(total_bytes)} does not fit "
                         f"the {fmt_bytes(free)} free on its disk")
    largest = max(int(np.prod(l.tensor_shapes(rec_batch)["dO"])) for l in wl.layers) \
        * np.dtype(dtype).itemsize
    try:
        import resource
        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        cap = None
    if cap not in (None, getattr(resource, "RLIM_INFINITY", None)) and largest > cap // 2:
        raise TraceError(out, "--batch", f"{what}: its largest tensor ({fmt_bytes(largest)}) cannot "
                         f"be mapped under the {fmt_bytes(cap)} address-space limit")


def _write(out, wl, batch, prov, subsample, force, iterations, rec_batch, dtype, mapped, seed,
           block_elems, progress, total_bytes, created: list[Path]) -> Path:
    n_layers = len(wl.layers)
    written = 0
    t0 = time.perf_counter()
    with TraceWriter(out, wl, batch=batch, provenance=prov, batch_subsample=subsample,
                     overwrite=force) as tw:
        created.append(tw.path)
        for it in range(iterations):
            for li, l in enumerate(wl.layers):
                shape = l.tensor_shapes(rec_batch)["dO"]
                with tw.open_tensor(it, 0, l.name, "dO", shape, dtype) as mm:
                    generate_layer(mm, mapped[l.name], batch, seed, it, l.index, block_elems)
                written += int(np.prod(shape)) * np.dtype(dtype).itemsize
                if progress:
                    dt = max(time.perf_counter() - t0, 1e-9)
                    progress(f"[it {it + 1}/{iterations} layer {li + 1}/{n_layers}] {l.name:<14} "
                             f"{'x'.join(map(str, shape)):<18} {written / 2**20:9.1f} / "
                             f"{total_bytes / 2**20:.1f} MB  {written / 2**20 / dt:7.1f} MB/s")
            tw.end_iteration()
    return Path(out)


def cmd_synth(args) -> int:
    stats = load_stats(args.stats)
    wl = load_workload(args.workload)
    if args.seed < 0:
        raise TraceError(None, "--seed", f"must be >= 0, got {args.seed}")
    gm.check_progress(getattr(args, "progress", None))
    from sim.progress import Progress
    t0 = time.perf_counter()
    # a bar with rate and ETA on a terminal; one line per layer in logs and pipes
    with Progress(len(wl.layers) * args.iterations, "synth", "layers") as bar:
        cb = bar.callback if bar.enabled else (lambda s: print(s, file=sys.stderr, flush=True))
        path = synth(wl, args.batch, args.out, stats, iterations=args.iterations, seed=args.seed,
                     dtype=args.dtype, force=args.force, subsample=getattr(args, "subsample", None),
                     progress=cb, yes_large=getattr(args, "yes_large", False),
                     train_progress=getattr(args, "progress", None))
    print(f"wrote synthetic trace {path} ({wl.name}, batch {args.batch}, {args.iterations} "
          f"iteration(s), seed {args.seed}, stats {stats.path}) in {time.perf_counter() - t0:.1f} s")
    return 0


def synthetic_grads(workload: Workload, samples: int, batch: int, seed: int = 0,
                    stats: Stats | str | None = None, train_progress: float | None = None,
                    iteration: int = 0) -> dict[str, np.ndarray]:
    """In-memory synthetic dO of every layer (`samples` deep, scale of `batch`): what `synth`
    writes, without a trace directory."""
    if not isinstance(stats, Stats):
        stats = load_stats(stats)
    _require_progress(stats, gm.check_progress(train_progress), "train_progress")
    mapped, _ = gm.map_params(stats.layers, workload, train_progress)
    out = {}
    for l in workload.layers:
        a = np.empty(l.tensor_shapes(samples)["dO"], np.float32)
        generate_layer(a, mapped[l.name], batch, seed, iteration, l.index)
        out[l.name] = a
    return out
