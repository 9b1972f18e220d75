"""Peak-memory measurements against the memory model: a framework's activation overhead, fitted.

research.prunetrain.measure_memory measures one training step's peak allocation on a CUDA device
(torch.cuda.max_memory_allocated) for a workload's dense widths and for pruned widths read from
trajectory files; its rows are bundled under hwconfigs/measurements/memory-*.json.
sim.system.memory counts what autograd keeps (checked tensor by tensor on the CPU: ResNet-50's
saved tensors are 86.1 MB a sample, the model's count 85.9 MB), the largest layer's backward
transients and im2col buffer, and the weights, gradients and momentum. What the device holds beyond
that at its peak (the gradients of forked tensors summed while both branches' are alive, cuDNN's
backward-data and backward-filter workspaces, the caching allocator's rounding) is not counted
op by op: it is one share of the activations per framework profile
(FrameworkProfile.activation_overhead), fitted here by least squares through the origin over a
file's rows, with each row's error kept so the fit can be judged.

    python -m research.prunetrain.measure_memory --fit hwconfigs/measurements/memory-h200-torch2.11-resnet50.json
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ConfigError
from sim.workload import Workload

REPO = Path(__file__).resolve().parents[2]
MEASUREMENTS_DIR = REPO / "hwconfigs" / "measurements"
# the measurement the pytorch-eager profile's activation_overhead was fitted to
PYTORCH_MEMORY_FILE = MEASUREMENTS_DIR / "memory-h200-torch2.11-resnet50.json"
SCHEMA = "prunesim-memory-measurements"


@dataclass(frozen=True)
class MemoryRow:
    widths: str          # "dense", or a trajectory file (path from the repository root)
    epoch: int           # the trajectory's epoch whose widths were measured (0 for dense)
    batch: int
    allocated: int       # peak bytes allocated in the measured step
    reserved: int        # peak bytes the caching allocator held
    repeat: bool = False  # a second measurement of a (widths, batch) already measured


@dataclass(frozen=True)
class MemoryMeasurements:
    path: str
    workload: str
    device: str
    torch: str
    rows: tuple[MemoryRow, ...]


def _int(v, file: str, fld: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(file, fld, f"expected a positive integer (bytes or samples), got {v!r}")
    return v


def load_memory_measurements(path: str | Path) -> MemoryMeasurements:
    """Read and check a measurement file; every problem names the file and the field."""
    f = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f, None, f"cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f, None, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(f, "schema", f"expected {SCHEMA!r}")
    for k in ("workload", "device", "torch"):
        if not isinstance(doc.get(k), str):
            raise ConfigError(f, k, "missing or not a string")
    raw = doc.get("rows")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f, "rows", "expected a non-empty list")
    rows = []
    for i, r in enumerate(raw):
        fld = f"rows[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("widths"), str):
            raise ConfigError(f, fld + ".widths", "expected a mapping with widths, batch, "
                              "allocated and reserved")
        dense = r["widths"] == "dense"
        if not dense and not (REPO / r["widths"]).is_file():
            raise ConfigError(f, fld + ".widths", f"no trajectory file {r['widths']!r} "
                              "(paths are from the repository root)")
        epoch = 0 if dense else r.get("epoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f, fld + ".epoch", f"expected the trajectory's epoch, got {epoch!r}")
        rows.append(MemoryRow(r["widths"], epoch, _int(r.get("batch"), f, fld + ".batch"),
                              _int(r.get("allocated"), f, fld + ".allocated"),
                              _int(r.get("reserved"), f, fld + ".reserved"),
                              bool(r.get("repeat", False))))
    return MemoryMeasurements(f, doc["workload"], doc["device"], doc["torch"], tuple(rows))


def row_network(workload: Workload, row: MemoryRow) -> Workload:
    """The network a row measured: the workload, or it at a trajectory's widths."""
    if row.widths == "dense":
        return workload
    from sim.system.prunetrain import load_trajectory
    from sim.system.trajectory import apply_widths
    return apply_widths(workload, load_trajectory(REPO / row.widths, workload).widths_at(row.epoch))


@dataclass(frozen=True)
class RowCheck:
    row: MemoryRow
    activations: int     # the model's activations of the row's network and batch
    counted: int         # the model's footprint without the overhead (no reserve)
    modeled: int         # ... with the fitted overhead

    @property
    def error(self) -> float:
        """modeled / measured - 1."""
        return self.modeled / self.row.allocated - 1


@dataclass(frozen=True)
class OverheadFit:
    share: float                 # peak extra per byte of activations
    checks: tuple[RowCheck, ...]

    @property
    def rms(self) -> float:
        return math.sqrt(sum(c.error ** 2 for c in self.checks) / len(self.checks))


def fit_activation_overhead(m: MemoryMeasurements, activation_bytes: int = 4) -> OverheadFit:
    """Least squares through the origin of (measured - counted) on the activations, over the
    rows that are not repeats; every row (repeats too) checked with the fitted share."""
    from sim.errors import PrunesimError
    from sim.system.memory import footprint
    from sim.workload import load_workload
    try:
        w = load_workload(m.workload)
    except PrunesimError as e:
        raise ConfigError(m.path, "workload", f"{m.workload!r} does not load ({e})") from None
    nets: dict[tuple[str, int], Workload] = {}
    base = []
    for r in m.rows:
        key = (r.widths, r.epoch)
        if key not in nets:
            nets[key] = row_network(w, r)
        fp = footprint(nets[key], r.batch, activation_bytes)
        base.append((r, fp.activations, fp.total))
    fit_rows = [(r, a, c) for r, a, c in base if not r.repeat]
    if not fit_rows:
        raise ConfigError(m.path, "rows", "every row is marked a repeat: nothing to fit")
    share = (sum((r.allocated - c) * a for r, a, c in fit_rows)
             / sum(a * a for _, a, _ in fit_rows))
    checks = tuple(RowCheck(r, a, c, c + int(round(share * a))) for r, a, c in base)
    return OverheadFit(share, checks)
