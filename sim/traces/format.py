"""Trace format v1: a directory of checksummed .npy tensors, a JSON manifest and a training log.

Layout (docs/reference/trace-format.md is the user-facing description):

    TRACE/manifest.json                 schema, workload, provenance, one record per tensor file
    TRACE/log.csv                       per-epoch training log
    TRACE/tensors/itNNNNNNN/LAYER.KIND.npy

Writers never leave a half-written file that a reader could take as valid: every file is written
under a temporary name and renamed into place, and the manifest is rewritten (atomically) after each
captured iteration, so an interrupted capture is a readable, shorter trace. Readers memory-map
tensors (never unpickle), verify SHA-256, header shape and dtype against the manifest and the
workload, and finiteness, all in bounded memory.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import io
import json
import math
import os
import platform
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from sim import __version__
from sim.errors import PrunesimError, TraceError
from sim.limits import BUDGETS, check_range
from sim.workload import Workload, workload_from_dict

FORMAT = "prunesim-trace"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
LOG = "log.csv"
KINDS = ("dO", "I", "W", "dI")
DTYPES = ("float16", "float32", "float64")
LOG_COLUMNS = ("epoch", "train_loss", "val_acc", "samples_seen", "wall_time_s", "method")
_CHUNK_BYTES = 1 << 22  # bounded working set for hashing and scanning


# ----------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class TensorRecord:
    """One tensor file: which iteration, layer and kind it holds, and how to verify it."""

    iteration: int
    epoch: int
    layer: str
    kind: str
    path: str          # relative to the trace directory, '/'-separated
    shape: tuple[int, ...]
    dtype: str
    sha256: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict:
        return {"iteration": self.iteration, "epoch": self.epoch, "layer": self.layer,
                "kind": self.kind, "path": self.path, "shape": list(self.shape),
                "dtype": self.dtype, "sha256": self.sha256}


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK_BYTES)
            if not block:
                return h.hexdigest()
            h.update(block)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def software_versions() -> dict[str, str]:
    out = {"prunesim": __version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch  # noqa: F401 - only to record its version when present
        out["torch"] = torch.__version__
    except ImportError:
        pass
    return out


# ----------------------------------------------------------------------------------------------
# Writer


class TraceWriter:
    """Create a trace directory and stream tensors into it, one file at a time.

    Use as a context manager; `close()` marks the trace complete. Tensors can be added whole
    (`add`) or filled in place through a memory map (`open_tensor`) so huge layers never need to
    sit in RAM.
    """

    def __init__(self, out_dir: str | os.PathLike, workload: Workload, *, batch: int,
                 provenance: dict[str, Any], batch_subsample: int | None = None,
                 overwrite: bool = False):
        self.path = Path(out_dir)
        if self.path.is_symlink():  # dangling or not: never replaced, never written through
            raise TraceError(self.path, None, "is a symbolic link; a trace is written to a new "
                             "path or, with --force, over a trace directory")
        if self.path.exists():
            if not overwrite:
                raise TraceError(self.path, None, "already exists (use --force to replace it)")
            if not self.path.is_dir():
                raise TraceError(self.path, None, "exists and is not a trace directory")
            if any(self.path.iterdir()) and not (self.path / MANIFEST).exists():
                raise TraceError(self.path, None, "exists, is not empty and holds no trace; "
                                 "refusing to delete it")
            shutil.rmtree(self.path)
        self.workload = workload
        self.batch = int(batch)
        self.batch_subsample = batch_subsample
        self.provenance = dict(provenance)
        self.provenance.setdefault("software", software_versions())
        self.records: list[TensorRecord] = []
        self._keys: set[tuple[int, str, str]] = set()
        self.iterations: dict[int, int] = {}  # iteration -> epoch
        self.log_rows: list[dict[str, Any]] = []
        self.created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.complete = False
        # Born complete with its (empty) manifest: built under a hidden name and renamed into place,
        # so a kill at any moment leaves either no directory or a readable one.
        final = self.path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = final.with_name(f".{final.name}.creating{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "tensors").mkdir(parents=True)
        self.path = staging
        self._write_manifest()
        os.rename(staging, final)
        self.path = final

    # -- tensors --------------------------------------------------------------------------------
    def _check_new(self, iteration: int, epoch: int, layer: str, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown tensor kind {kind!r} (known: {KINDS})")
        if layer not in {l.name for l in self.workload.layers}:
            raise ValueError(f"layer {layer!r} is not in workload {self.workload.name}")
        if (iteration, layer, kind) in self._keys:
            raise ValueError(f"{layer}.{kind} of iteration {iteration} already recorded")
        if self.iterations.get(iteration, epoch) != epoch:
            raise ValueError(f"iteration {iteration} already recorded with another epoch")

    @contextmanager
    def open_tensor(self, iteration: int, epoch: int, layer: str, kind: str,
                    shape: tuple[int, ...], dtype: str = "float32") -> Iterator[np.ndarray]:
        """Yield a writable memory map; on clean exit the file is hashed and committed."""
        self._check_new(iteration, epoch, layer, kind)
        dtype = np.dtype(dtype).name
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype} not supported (use one of {DTYPES})")
        rel = f"tensors/it{iteration:07d}/{layer}.{kind}.npy"
        final = self.path / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=tuple(shape))
        try:
            yield mm
            mm.flush()
        except BaseException:
            del mm
            tmp.unlink(missing_ok=True)
            raise
        del mm
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self.records.append(TensorRecord(iteration, epoch, layer, kind, rel, tuple(int(s) for s in shape),
                                         dtype, _sha256_file(final)))
        self._keys.add((iteration, layer, kind))
        self.iterations[iteration] = epoch

    def add(self, iteration: int, epoch: int, layer: str, kind: str, array: np.ndarray) -> None:
        """Record one whole tensor (its dtype is kept: float16, float32 or float64)."""
        array = np.asarray(array)
        with self.open_tensor(iteration, epoch, layer, kind, array.shape, array.dtype.name) as mm:
            mm[...] = array

    def end_iteration(self) -> None:
        """Make everything recorded so far durable and readable (rewrites the manifest)."""
        self._write_manifest()

    # -- training log ---------------------------------------------------------------------------
    def log_epoch(self, epoch: int, train_loss: float, val_acc: float | None, samples_seen: int,
                  wall_time_s: float, method: str) -> None:
        vals = (train_loss, wall_time_s) + (() if val_acc is None else (val_acc,))
        if not all(math.isfinite(float(v)) for v in vals):
            # readers refuse non-finite log values; fail here rather than write an unreadable trace
            raise ValueError(f"epoch {epoch}: non-finite value in training log "
                             f"(train_loss={train_loss}, val_acc={val_acc}, wall_time_s={wall_time_s})")
        self.log_rows.append({"epoch": int(epoch), "train_loss": float(train_loss),
                              "val_acc": "" if val_acc is None else float(val_acc),
                              "samples_seen": int(samples_seen), "wall_time_s": float(wall_time_s),
                              "method": method})
        buf = io.StringIO()
        wr = csv.DictWriter(buf, fieldnames=LOG_COLUMNS, lineterminator="\n")
        wr.writeheader()
        wr.writerows(self.log_rows)
        _atomic_write_text(self.path / LOG, buf.getvalue())
        self._write_manifest()

    # -- manifest -------------------------------------------------------------------------------
    def _write_manifest(self) -> None:
        layers = []
        for l in self.workload.layers:
            kinds = sorted({r.kind for r in self.records if r.layer == l.name})
            if kinds:
                layers.append({"name": l.name, "kinds": kinds})
        m = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "complete": self.complete,
            "workload": self.workload.to_dict(),
            "batch": self.batch,
            "batch_subsample": self.batch_subsample,
            "provenance": self.provenance,
            "iterations": [{"iteration": i, "epoch": e} for i, e in sorted(self.iterations.items())],
            "layers": layers,
            "log": {"path": LOG, "sha256": _sha256_file(self.path / LOG)}
            if (self.path / LOG).exists() else None,
            "records": [r.to_json() for r in self.records],
        }
        _atomic_write_text(self.path / MANIFEST, json.dumps(m, indent=1, allow_nan=False) + "\n")

    def close(self) -> None:
        self.complete = True
        self._write_manifest()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._write_manifest()  # keep what was captured; `complete` stays false


# ----------------------------------------------------------------------------------------------
# Reader

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def _need(d: dict, key: str, typ, file, field: str):
    if key not in d:
        raise TraceError(file, field, "missing")
    v = d[key]
    if typ is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise TraceError(file, field, f"expected an integer, got {v!r}")
    if typ is not int and not isinstance(v, typ):
        raise TraceError(file, field, f"expected {getattr(typ, '__name__', typ)}, got {v!r}")
    return v


class Trace:
    """A validated, lazily read trace. Open with `open_trace(path)`."""

    def __init__(self, path: Path, manifest: dict, workload: Workload, records: list[TensorRecord],
                 log: list[dict[str, Any]]):
        self.path = path
        self.manifest = manifest
        self.workload = workload
        self.records = records
        self.log = log
        self._by_key = {(r.iteration, r.layer, r.kind): r for r in records}

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))

    @property
    def batch(self) -> int:
        return self.manifest["batch"]

    @property
    def recorded_batch(self) -> int:
        """Samples per recorded tensor: the sub-sample when one was taken, else the batch."""
        return self.manifest.get("batch_subsample") or self.manifest["batch"]

    @property
    def provenance(self) -> dict:
        return self.manifest.get("provenance", {})

    @property
    def iterations(self) -> list[int]:
        return sorted({r.iteration for r in self.records})

    def epoch_of(self, iteration: int) -> int:
        for r in self.records:
            if r.iteration == iteration:
                return r.epoch
        raise KeyError(iteration)

    def layer_names(self, kind: str = "dO") -> list[str]:
        """Recorded layers of this kind, in network order."""
        have = {r.layer for r in self.records if r.kind == kind}
        return [l.name for l in self.workload.layers if l.name in have]

    def record(self, iteration: int, layer: str, kind: str = "dO") -> TensorRecord:
        try:
            return self._by_key[(iteration, layer, kind)]
        except KeyError:
            raise TraceError(self.path / MANIFEST, "records",
                             f"no {kind} tensor of layer {layer!r} at iteration {iteration}") from None

    def load(self, rec: TensorRecord, verify: bool = True) -> np.ndarray:
        """Memory-map one tensor read-only; with verify, check checksum, header and finiteness."""
        f = self.path / rec.path
        if verify:
            verify_record(self.path, rec)
        arr = load_npy(f)
        if arr.shape != rec.shape or arr.dtype.name != rec.dtype:
            raise TraceError(f, "header", f"holds {arr.dtype.name}{list(arr.shape)}, manifest says "
                             f"{rec.dtype}{list(rec.shape)}")
        return arr

    def tensor(self, iteration: int, layer: str, kind: str = "dO", verify: bool = True) -> np.ndarray:
        return self.load(self.record(iteration, layer, kind), verify=verify)

    def stream(self, kind: str = "dO", iteration: int | None = None,
               verify: bool = True) -> Iterator[tuple[TensorRecord, np.ndarray]]:
        """Yield (record, memmap) layer by layer in network order; one tensor mapped at a time."""
        for r in self.ordered_records(kind, iteration):
            yield r, self.load(r, verify=verify)

    def ordered_records(self, kind: str = "dO", iteration: int | None = None) -> list[TensorRecord]:
        """The records of one tensor kind (at one iteration, or all) in (iteration, network) order;
        an iteration the trace does not hold is an error."""
        order = {l.name: i for i, l in enumerate(self.workload.layers)}
        recs = [r for r in self.records if r.kind == kind and (iteration is None or r.iteration == iteration)]
        if iteration is not None and not recs:
            raise TraceError(self.path / MANIFEST, "iterations",
                             f"no {kind} tensors at iteration {iteration} (have {self.iterations})")
        return sorted(recs, key=lambda r: (r.iteration, order[r.layer]))


def load_npy(f: Path, mmap: bool = True) -> np.ndarray:
    """np.load without pickle; any failure to parse the file (a corrupt header can raise a
    SyntaxError or tokenize error from numpy's header parser) becomes a TraceError naming it."""
    try:
        return np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - every way a .npy can be unreadable is the file's fault
        raise TraceError(f, None, f"unreadable or truncated .npy ({type(e).__name__}: {e})") from None


def verify_record(trace_dir: Path, rec: TensorRecord) -> None:
    """Check one tensor file against its record: present, size, SHA-256, header, finite values."""
    f = trace_dir / rec.path
    if f.is_symlink():
        raise TraceError(f, None, "is a symbolic link; trace tensors must be regular files")
    if not f.is_file():
        raise TraceError(f, None, "missing tensor file")
    arr = load_npy(f)
    if arr.dtype.name != rec.dtype:
        raise TraceError(f, "dtype", f"file holds {arr.dtype.name}, manifest says {rec.dtype}")
    if tuple(arr.shape) != rec.shape:
        raise TraceError(f, "shape", f"file holds {list(arr.shape)}, manifest says {list(rec.shape)}")
    if arr.ndim > 1 and not arr.flags.c_contiguous:
        raise TraceError(f, "fortran_order", "Fortran-ordered .npy; trace tensors are C-ordered")
    del arr
    digest = _sha256_file(f)
    if digest != rec.sha256:
        raise TraceError(f, "sha256", f"checksum mismatch (manifest {rec.sha256[:12]}..., "
                         f"file {digest[:12]}...): the file is corrupt or was modified")
    arr = load_npy(f)
    flat = arr.reshape(-1)
    step = max(1, _CHUNK_BYTES // arr.dtype.itemsize)
    for start in range(0, flat.size, step):
        chunk = np.asarray(flat[start:start + step])
        ok = np.isfinite(chunk)
        if not ok.all():
            bad = start + int(np.argmin(ok))
            idx = np.unravel_index(bad, arr.shape)
            raise TraceError(f, "values", f"non-finite value {chunk[bad - start]} at index "
                             f"{list(map(int, idx))}")


def _check_rel_path(root: Path, rel: Any, file: Path, field: str) -> str:
    if not isinstance(rel, str) or not rel:
        raise TraceError(file, field, f"expected a relative path, got {rel!r}")
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel:
        raise TraceError(file, field, f"path {rel!r} escapes the trace directory")
    resolved = (root / p).resolve()
    if root.resolve() not in resolved.parents:
        raise TraceError(file, field, f"path {rel!r} escapes the trace directory")
    return rel


def _read_log(root: Path, meta: Any, mfile: Path) -> list[dict[str, Any]]:
    if meta is None:
        return []
    if not isinstance(meta, dict):
        raise TraceError(mfile, "log", "expected {path, sha256} or null")
    rel = _check_rel_path(root, meta.get("path"), mfile, "log.path")
    f = root / rel
    if not f.is_file():
        raise TraceError(f, None, "training log named in the manifest is missing")
    if _sha256_file(f) != meta.get("sha256"):
        raise TraceError(f, "sha256", "checksum mismatch: the training log is corrupt or was modified")
    rows = []
    with open(f, newline="", encoding="utf-8") as fh:
        rd = csv.DictReader(fh)
        if tuple(rd.fieldnames or ()) != LOG_COLUMNS:
            raise TraceError(f, "header", f"expected columns {','.join(LOG_COLUMNS)}")
        for i, row in enumerate(rd, start=2):
            try:
                rows.append({"epoch": int(row["epoch"]), "train_loss": float(row["train_loss"]),
                             "val_acc": float(row["val_acc"]) if row["val_acc"] else None,
                             "samples_seen": int(row["samples_seen"]),
                             "wall_time_s": float(row["wall_time_s"]), "method": row["method"]})
            except (TypeError, ValueError) as e:
                raise TraceError(f, f"line {i}", f"bad value ({e})") from None
            if not all(math.isfinite(v) for k, v in rows[-1].items()
                       if isinstance(v, float)):
                raise TraceError(f, f"line {i}", "non-finite number")
    return rows


def _load_manifest_json(mfile: Path) -> Any:
    """The manifest's JSON, with its size and nesting bounded (sim/limits.py): json's recursive
    decoder would otherwise end a deeply nested file in RecursionError."""
    size = mfile.stat().st_size
    if size > BUDGETS["json_bytes"].limit:
        raise TraceError(mfile, None, f"{size:,} bytes: larger than the "
                         f"{int(BUDGETS['json_bytes'].limit):,}-byte limit of a manifest")
    depth = int(BUDGETS["json_depth"].limit)
    try:
        m = json.loads(mfile.read_text(encoding="utf-8"),
                       parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"bad constant {c}")))
    except RecursionError:
        raise TraceError(mfile, None, f"nested deeper than {depth} levels") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(mfile, None, f"malformed JSON ({e})") from None
    level = [m]
    for _ in range(depth + 1):
        level = [v for x in level if isinstance(x, (dict, list))
                 for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return m
    raise TraceError(mfile, None, f"nested deeper than {depth} levels")


def _check_iterations(m: dict, mfile: Path) -> None:
    """`iterations`: a list of {iteration, epoch} (the writer always writes one)."""
    its = m.get("iterations")
    if not isinstance(its, list):
        raise TraceError(mfile, "iterations", f"expected a list of {{iteration, epoch}}, got {its!r}")
    for i, e in enumerate(its):
        fld = f"iterations[{i}]"
        if not isinstance(e, dict) or set(e) != {"iteration", "epoch"}:
            raise TraceError(mfile, fld, f"expected {{iteration, epoch}}, got {e!r}")
        for k in ("iteration", "epoch"):
            v = _need(e, k, int, mfile, f"{fld}.{k}")
            check_range("iteration_index", v, mfile, f"{fld}.{k}", TraceError)


def open_trace(path: str | os.PathLike) -> Trace:
    """Open and validate a trace directory's manifest (tensors are checked when read)."""
    root = Path(path)
    if not root.is_dir():
        raise TraceError(root, None, "no such trace directory")
    mfile = root / MANIFEST
    if not mfile.is_file():
        raise TraceError(mfile, None, "missing: not a prunesim trace directory")
    m = _load_manifest_json(mfile)
    if not isinstance(m, dict):
        raise TraceError(mfile, None, "expected a JSON object")
    if m.get("format") != FORMAT:
        raise TraceError(mfile, "format", f"expected {FORMAT!r}, got {m.get('format')!r}")
    ver = m.get("schema_version")
    if isinstance(ver, bool) or ver != SCHEMA_VERSION:  # true == 1 in Python
        raise TraceError(mfile, "schema_version", f"unknown schema version {ver!r} "
                         f"(this prunesim reads {SCHEMA_VERSION})")
    wdoc = _need(m, "workload", dict, mfile, "workload")  # outside the try: its field is final
    try:
        workload = workload_from_dict(wdoc, origin=f"{mfile}: workload")
    except PrunesimError as e:
        raise TraceError(mfile, f"workload.{e.field}" if e.field else "workload", e.message) from None
    batch = _need(m, "batch", int, mfile, "batch")
    sub = m.get("batch_subsample")
    check_range("batch", batch, mfile, "batch", TraceError)
    if sub is not None and (isinstance(sub, bool) or not isinstance(sub, int) or not 1 <= sub <= batch):
        raise TraceError(mfile, "batch_subsample", f"must be null or an integer in 1..{batch}, got {sub!r}")
    _check_iterations(m, mfile)
    if not isinstance(m.get("provenance", {}), dict):
        raise TraceError(mfile, "provenance", "expected an object")
    recorded_batch = sub or batch
    layers = {l.name: l for l in workload.layers}
    raw = _need(m, "records", list, mfile, "records")
    records: list[TensorRecord] = []
    seen_paths: set[str] = set()
    seen_keys: set[tuple] = set()
    for i, r in enumerate(raw):
        fld = f"records[{i}]"
        if not isinstance(r, dict):
            raise TraceError(mfile, fld, "expected an object")
        it = _need(r, "iteration", int, mfile, fld + ".iteration")
        ep = _need(r, "epoch", int, mfile, fld + ".epoch")
        layer = _need(r, "layer", str, mfile, fld + ".layer")
        kind = _need(r, "kind", str, mfile, fld + ".kind")
        if it < 0 or ep < 0:
            raise TraceError(mfile, fld, "iteration and epoch must be >= 0")
        check_range("iteration_index", it, mfile, fld + ".iteration", TraceError)
        check_range("iteration_index", ep, mfile, fld + ".epoch", TraceError)
        if layer not in layers:
            raise TraceError(mfile, fld + ".layer", f"layer {layer!r} is not in workload "
                             f"{workload.name}")
        if kind not in KINDS:
            raise TraceError(mfile, fld + ".kind", f"unknown tensor kind {kind!r} (known: {KINDS})")
        rel = _check_rel_path(root, r.get("path"), mfile, fld + ".path")
        if rel in seen_paths or (it, layer, kind) in seen_keys:
            raise TraceError(mfile, fld, "duplicate record")
        seen_paths.add(rel)
        seen_keys.add((it, layer, kind))
        dtype = _need(r, "dtype", str, mfile, fld + ".dtype")
        if dtype not in DTYPES:
            raise TraceError(mfile, fld + ".dtype", f"unsupported dtype {dtype!r} (use {DTYPES})")
        shape = _need(r, "shape", list, mfile, fld + ".shape")
        if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
            raise TraceError(mfile, fld + ".shape", f"expected positive integers, got {shape!r}")
        want = layers[layer].tensor_shapes(recorded_batch)[kind]
        if tuple(shape) != want:
            raise TraceError(mfile, fld + ".shape", f"{layer}.{kind} has shape {shape}, workload "
                             f"{workload.name} at recorded batch {recorded_batch} expects {list(want)}")
        sha = _need(r, "sha256", str, mfile, fld + ".sha256")
        if not _SHA_RE.match(sha):
            raise TraceError(mfile, fld + ".sha256", "expected 64 lowercase hex digits")
        records.append(TensorRecord(it, ep, layer, kind, rel, tuple(shape), dtype, sha))
    log = _read_log(root, m.get("log"), mfile)
    return Trace(root, m, workload, records, log)


# ----------------------------------------------------------------------------------------------
# One validation path for `trace check` and `replay`, and a single read of each tensor

MAX_BATCH = 1 << 20   # the largest mini-batch a trace may claim (a million samples)


def open_checked_trace(path: str | os.PathLike) -> Trace:
    """open_trace plus what replay needs to use the trace; `trace check` and `replay` both open
    traces through this, so a trace check calls OK is one replay can use."""
    trace = open_trace(path)
    mfile = trace.path / MANIFEST
    if trace.batch > MAX_BATCH:
        raise TraceError(mfile, "batch", f"{trace.batch} samples per batch is beyond the "
                         f"{MAX_BATCH} a trace may hold")
    if not trace.records:
        raise TraceError(mfile, "records", "empty: the trace holds no tensor")
    if not any(r.kind == "dO" for r in trace.records):
        raise TraceError(mfile, "records", "no dO tensor: replay needs the output gradients")
    return trace


def read_tensor(trace_dir: Path, rec: TensorRecord, *, stats: bool = False
                ) -> tuple[np.ndarray, dict | None]:
    """Read one tensor file once into memory: its bytes are hashed as they arrive and checked
    against the record (regular file, header, size, SHA-256); values are checked finite by the
    statistics pass when `stats` (layer_stats: a NaN or Inf shows in its mean or max |g|), else by
    a scan of the array in memory. Returns (array, stats or None)."""
    from sim.traces.stats import layer_stats
    f = trace_dir / rec.path
    if f.is_symlink():
        raise TraceError(f, None, "is a symbolic link; trace tensors must be regular files")
    if not f.is_file():
        raise TraceError(f, None, "missing tensor file")
    h = hashlib.sha256()
    try:
        with open(f, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            head = fh.tell()
            fh.seek(0)
            h.update(fh.read(head))
            if dtype.hasobject:
                raise ValueError("object arrays are not trace tensors")
            if dtype.name != rec.dtype:
                raise TraceError(f, "dtype", f"file holds {dtype.name}, manifest says {rec.dtype}")
            if tuple(shape) != rec.shape:
                raise TraceError(f, "shape", f"file holds {list(shape)}, manifest says "
                                 f"{list(rec.shape)}")
            if fortran and len(shape) > 1:
                raise TraceError(f, "fortran_order", "Fortran-ordered .npy; trace tensors are "
                                 "C-ordered")
            arr = np.empty(shape, dtype)
            buf = memoryview(arr.reshape(-1).view(np.uint8))
            pos = 0
            while pos < len(buf):
                got = fh.readinto(buf[pos:pos + _CHUNK_BYTES])
                if not got:
                    raise ValueError(f"data ends after {pos} of {len(buf)} bytes")
                h.update(buf[pos:pos + got])
                pos += got
            rest = fh.read(_CHUNK_BYTES)
            while rest:
                h.update(rest)            # trailing bytes: the checksum below tells
                rest = fh.read(_CHUNK_BYTES)
    except TraceError:
        raise
    except Exception as e:  # noqa: BLE001 - every way a .npy can be unreadable is the file's fault
        raise TraceError(f, None, f"unreadable or truncated .npy ({type(e).__name__}: {e})") from None
    if h.hexdigest() != rec.sha256:
        raise TraceError(f, "sha256", f"checksum mismatch (manifest {rec.sha256[:12]}..., file "
                         f"{h.hexdigest()[:12]}...): the file is corrupt or was modified")
    st = layer_stats(arr) if stats else None
    if st is not None and arr.size and math.isfinite(st["max_abs"]) and math.isfinite(st["mean"]):
        return arr, st
    flat = arr.reshape(-1)
    step = max(1, _CHUNK_BYTES // arr.dtype.itemsize)
    for start in range(0, flat.size, step):
        ok = np.isfinite(flat[start:start + step])
        if not ok.all():
            bad = start + int(np.argmin(ok))
            idx = np.unravel_index(bad, arr.shape)
            raise TraceError(f, "values", f"non-finite value {flat[bad]} at index "
                             f"{list(map(int, idx))}")
    return arr, st


def stream_checked(trace: Trace, kind: str = "dO", iteration: int | None = None
                   ) -> Iterator[tuple[TensorRecord, np.ndarray, dict]]:
    """(record, array, layer_stats) layer by layer in network order, each tensor read once
    (read_tensor: checksum, header, finiteness and statistics from one read)."""
    for r in trace.ordered_records(kind, iteration):
        arr, st = read_tensor(trace.path, r, stats=True)
        yield r, arr, st
