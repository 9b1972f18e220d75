"""The result store: one SQLite file (standard library), one row per simulated point.

A point is one (hardware, workload/trace, method, seed) combination replayed by one prunesim
version. Its key is the SHA-256 of every input that can change its numbers (`KEY_FIELDS`), so a
rerun or a resumed sweep finds the point already there and never stores it twice (INSERT OR IGNORE
on the primary key). Each point is written in its own transaction, together with its per-layer
rows, so a kill -9 leaves whole points or nothing; WAL mode lets readers (plots, export) open the
file while a sweep is writing.

Rows hold the flat record as JSON (floats round-trip exactly), plus a few indexed columns; no
pickle anywhere. `records(kind)` returns plain dicts, in the order they were stored.

    prunesim export results.sqlite --csv out.csv [--parquet out.parquet] [--kind layer]
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

from sim.errors import PrunesimError
from sim.outputs import check_output

SCHEMA_VERSION = 1
# PRAGMA application_id of every prunesim store ('PSIM'): the marker that lets prunesim tell its own
# files from any other SQLite file, which it must never add tables to.
APPLICATION_ID = 0x5053494D
KINDS = ("network", "layer")
# Everything that determines a point's numbers. The hwconfig's name is included besides its content
# checksum because records are read by name (two files with equal numbers stay two points), and
# `only_iteration` (a replay restricted to one captured iteration) defaults to None.
# `cache_model` (how the CPU engine counts cache misses) is None for hardware without a simulated
# cache; "exact" is left out of the key, so points stored before the field existed (all exact LRU)
# keep their keys and a resumed sweep does not recompute them.
# `framework` / `framework_checksum` (the profile of the whole-step columns, sim.frameworks): a
# point under another profile, or an edited profile file, is another point. Records stored before
# the whole step (no profile: GEMM phases only) have neither; their keys leave both out, as they
# did, so those points keep their keys (and read back without the whole-step columns).
KEY_FIELDS = ("prunesim", "hw", "hw_checksum", "workload", "trace_checksum", "batch", "iterations",
              "only_iteration", "seed", "method_id", "method_params", "cache_model", "framework",
              "framework_checksum")
_OPTIONAL = ("only_iteration", "cache_model", "framework", "framework_checksum")
_REQUIRED = tuple(f for f in KEY_FIELDS if f not in _OPTIONAL)
DEFAULT_CACHE_MODEL = "exact"   # sim.engines.cpu.spmm.CACHE_MODEL's default (not imported: Numba)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    key      TEXT PRIMARY KEY,   -- SHA-256 of the inputs (network rows) or of (point, layer)
    kind     TEXT NOT NULL,      -- 'network' or 'layer'
    point    TEXT NOT NULL,      -- the network row this row belongs to (its own key for network)
    hw       TEXT NOT NULL,
    workload TEXT NOT NULL,
    method   TEXT NOT NULL,
    seed     INTEGER NOT NULL,
    prunesim TEXT NOT NULL,
    created  TEXT NOT NULL,      -- UTC time of the write (not part of the record: records stay
                                 -- identical across reruns)
    record   TEXT NOT NULL       -- the flat record, JSON
);
CREATE INDEX IF NOT EXISTS records_kind_point ON records (kind, point);
"""


_RECORD_COLUMNS = ["key", "kind", "point", "hw", "workload", "method", "seed", "prunesim", "created",
                   "record"]


class StoreError(PrunesimError):
    """A result store cannot be opened, read or exported."""


def _canon(v: Any) -> Any:
    """JSON-safe and finite: NaN/inf become None (JSON has no such numbers), tuples lists."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return v


def point_key(record: dict) -> str:
    """The key of a network-level record: SHA-256 of its KEY_FIELDS in canonical JSON."""
    missing = [f for f in _REQUIRED if f not in record]
    if missing:
        raise StoreError(None, "record", f"missing key inputs {missing}")
    doc = {f: _canon(record.get(f)) for f in KEY_FIELDS}
    if doc["cache_model"] in (None, DEFAULT_CACHE_MODEL):
        del doc["cache_model"]
    if doc["framework"] is None and doc["framework_checksum"] is None:
        del doc["framework"], doc["framework_checksum"]
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cache_model_field(hw_kind: str, name: str | None = None) -> str | None:
    """A record's `cache_model`: the CPU engine's cache model (`name`, else the default), None for
    hardware whose engine simulates no cache (the option changes nothing there)."""
    return (name or DEFAULT_CACHE_MODEL) if hw_kind == "cpu" else None


def point_record(rec: dict, hw, *, cache_model: str | None = None,
                 only_iteration: int | None = None, trace_source: str = "trace",
                 overrides: dict | None = None) -> dict:
    """The one shape of a stored network record (replay --db, sweep and the API all store this):
    the driver's network record plus where the point came from, with its `key` first."""
    r = {**rec, "only_iteration": only_iteration, "trace_source": trace_source,
         "hw_path": hw.path, "hw_overrides": json.dumps(overrides or {}, sort_keys=True),
         "cache_model": cache_model_field(rec["hw_kind"], cache_model)}
    return {"key": point_key(r), **r}


def layer_key(point: str, layer: str) -> str:
    return hashlib.sha256(f"{point}\0{layer}".encode()).hexdigest()


class ResultStore:
    """An open result store. `ResultStore(path)` creates the file if needed; `create=False` only
    opens an existing one (export must not leave an empty file behind a typo)."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = os.fspath(path)
        p = Path(self.path)
        if self.path != ":memory:":
            if not create and not p.is_file():
                raise StoreError(p, None, "no such result store")
            if p.exists() and not p.is_file():
                raise StoreError(p, None, "exists and is not a file")
            if not p.parent.exists():
                raise StoreError(p, None, f"directory {p.parent} does not exist")
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per point
            self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._check_marker(p)
            self.db.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against a killed process (the WAL is written before COMMIT returns);
            # only a power loss may drop the last transactions, never corrupt or half-write a row
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
            if row is None:
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise StoreError(p, "meta.schema", f"store schema {row[0]} (this prunesim reads "
                                 f"{SCHEMA_VERSION})")
            self.db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise StoreError(p, None, f"not a prunesim result store ({e})") from None
        except StoreError:
            self.db.close()
            raise

    def _check_marker(self, p: Path) -> None:
        """Refuse a SQLite file that is not a prunesim store, before writing anything to it.

        A store carries APPLICATION_ID. One made before the marker existed is recognized by its
        tables (meta with a schema row, and records) and gets the marker; an empty database (a new
        or zero-length file) is ours to create. Anything else is someone else's data."""
        app = self.db.execute("PRAGMA application_id").fetchone()[0]
        if app == APPLICATION_ID:
            return
        tables = {r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view', 'index', 'trigger')")}
        if app == 0 and not tables:
            return
        legacy = app == 0 and {"meta", "records"} <= tables and \
            [r[1] for r in self.db.execute("PRAGMA table_info(records)")] == _RECORD_COLUMNS and \
            self.db.execute("SELECT 1 FROM meta WHERE name='schema'").fetchone() is not None
        if not legacy:
            what = f"application_id {app:#x}" if app else f"tables {', '.join(sorted(tables))}"
            raise StoreError(p, None, f"a SQLite file that is not a prunesim result store ({what}); "
                             "refusing to add tables to it")

    # -- writing --------------------------------------------------------------------------------
    def put(self, record: dict, layers: Iterable[dict] = ()) -> bool:
        """Store one point (and its per-layer rows) atomically; False if its key was already there.

        The record is not modified; the stored copy carries `key` (and each layer row `key` and
        `point`). A record that brings its own `key` must bring the right one.
        """
        key = point_key(record)
        if record.get("key", key) != key:
            raise StoreError(self.path, "key", f"record key {record['key']} does not match its "
                             f"inputs ({key})")
        rec = {"key": key, **{k: v for k, v in record.items() if k != "key"}}
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        rows = [(key, "network", key, rec)]
        for lr in layers:
            lk = layer_key(key, str(lr["layer"]))
            rows.append((lk, "layer", key, {"key": lk, "point": key,
                                            **{k: v for k, v in lr.items() if k not in ("key", "point")}}))
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                cur = self.db.execute(*self._insert(rows[0], now))
                inserted = cur.rowcount == 1
                if inserted:
                    for r in rows[1:]:
                        self.db.execute(*self._insert(r, now))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StoreError(self.path, None, f"cannot write: {e}") from None
        return inserted

    @staticmethod
    def _insert(row: tuple, now: str) -> tuple[str, tuple]:
        key, kind, point, rec = row
        text = json.dumps(_canon(rec), allow_nan=False, separators=(",", ":"))
        return ("INSERT OR IGNORE INTO records (key, kind, point, hw, workload, method, seed, "
                "prunesim, created, record) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (key, kind, point, str(rec.get("hw", "")), str(rec.get("workload", "")),
                 str(rec.get("method", "")), int(rec.get("seed", 0)), str(rec.get("prunesim", "")),
                 now, text))

    # -- reading --------------------------------------------------------------------------------
    def keys(self, kind: str = "network") -> set[str]:
        return {r[0] for r in self.db.execute("SELECT key FROM records WHERE kind=?", (kind,))}

    def __contains__(self, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM records WHERE key=?", (key,)).fetchone() is not None

    def count(self, kind: str = "network") -> int:
        return self.db.execute("SELECT COUNT(*) FROM records WHERE kind=?", (kind,)).fetchone()[0]

    def records(self, kind: str = "network") -> list[dict]:
        """Every row of this kind as a plain dict, in the order stored."""
        if kind not in KINDS:
            raise StoreError(self.path, "kind", f"unknown record kind {kind!r} (one of {KINDS})")
        out = []
        try:
            for key, text in self.db.execute(
                    "SELECT key, record FROM records WHERE kind=? ORDER BY rowid", (kind,)):
                try:
                    out.append(json.loads(text))
                except ValueError:
                    raise StoreError(self.path, f"records[{key}]", "corrupt record JSON") from None
        except sqlite3.DatabaseError as e:
            raise StoreError(self.path, None, f"cannot read: {e}") from None
        return out

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------------------------
# Export


# Every export has these columns, even when the records predate them or none is set: whether a
# point ran ("ok" / "not run"), why not, and why some of its layers ran dense (sim.replay).
STATUS_COLUMNS = ("status", "reason", "fallback")


def columns(records: list[dict]) -> list[str]:
    """`key` first, then every field in the order first seen (records may differ in fields), then
    any of STATUS_COLUMNS not seen."""
    cols = {"key": None}
    for r in records:
        for k in r:
            cols.setdefault(k, None)
    for k in STATUS_COLUMNS:
        cols.setdefault(k, None)
    return list(cols)


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, float):
        return repr(v)  # shortest round-trip form: the CSV holds the stored value exactly
    return v


def _atomic(path: Path, write) -> None:
    if path.parent and not path.parent.exists():
        raise StoreError(path, None, f"directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise StoreError(path, None, f"cannot write: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def export_csv(records: list[dict], out: str | os.PathLike) -> None:
    cols = columns(records)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(cols)
            for r in records:
                w.writerow([_cell(r.get(c)) for c in cols])
    _atomic(Path(out), write)


def export_parquet(records: list[dict], out: str | os.PathLike) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError(out, None, "Parquet export needs pyarrow (pip install pyarrow); "
                         "--csv works without it") from None
    cols = columns(records)
    # nested values as JSON text so every column has one type
    rows = [{c: (json.dumps(r[c], sort_keys=True) if isinstance(r.get(c), (list, dict)) else r.get(c))
             for c in cols} for r in records]
    table = pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in cols})
    _atomic(Path(out), lambda tmp: pq.write_table(table, tmp))


def cmd_export(args) -> int:
    if not args.csv and not args.parquet:
        raise StoreError(args.db, None, "nothing to do: give --csv OUT.csv and/or --parquet OUT.parquet")
    for out in (args.parquet, args.csv):
        if out:
            check_output(out, inputs=[args.db], force=getattr(args, "force", False))
    with ResultStore(args.db, create=False) as st:
        recs = st.records(args.kind)
    if args.parquet:  # first: a missing pyarrow fails before anything is written
        export_parquet(recs, args.parquet)
        print(f"wrote {len(recs)} {args.kind} rows to {args.parquet}")
    if args.csv:
        export_csv(recs, args.csv)
        print(f"wrote {len(recs)} {args.kind} rows to {args.csv}")
    return 0
