"""Time to accuracy: per-epoch simulated time x accuracy curves -> time to reach a target.

Accuracy curves come from a trace's training log (TRACE/log.csv: epoch, val_acc, method, ...), or
a CSV with columns epoch,accuracy and optionally method (one curve per method; rows without a
method, or a file without the column, are a curve shared by every method). Accuracies are read
as written: fractions (0..1) or percent, the target in the same scale.

The time to accuracy is the simulated time through the end of the first epoch whose accuracy
reaches the target; a curve that never reaches it (within the simulated epochs) gives None and is
reported as "not reached", never as a number.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sim.errors import ConfigError


@dataclass(frozen=True)
class Curve:
    method: str | None           # None: applies to any method
    points: tuple[tuple[int, float], ...]   # (epoch, accuracy), epochs ascending


def load_curves(path: str | Path) -> list[Curve]:
    p = Path(path)
    if p.is_dir():
        p = p / "log.csv"
    file = str(p)
    from sim.limits import BUDGETS, read_input_text
    if not p.exists():
        raise ConfigError(file, None, "no such accuracy file (a CSV or a trace directory)")
    text = read_input_text(p, error=ConfigError, what="accuracy file",
                           max_bytes=BUDGETS["text_bytes"].limit)
    rd = csv.DictReader(io.StringIO(text, newline=""))
    cols = set(rd.fieldnames or ())
    acc_col = "accuracy" if "accuracy" in cols else "val_acc" if "val_acc" in cols else None
    if "epoch" not in cols or acc_col is None:
        raise ConfigError(file, "header", "expected columns epoch and accuracy (or a trace "
                          "log's val_acc)")
    by: dict[str | None, dict[int, float]] = {}
    for i, row in enumerate(rd, start=2):
        a = (row.get(acc_col) or "").strip()
        if not a:
            continue          # epoch not evaluated
        try:
            e, v = int(row["epoch"]), float(a)
        except ValueError:
            raise ConfigError(file, f"line {i}", "epoch must be an integer and "
                              f"{acc_col} a number") from None
        if e < 0 or not math.isfinite(v):
            raise ConfigError(file, f"line {i}", "negative epoch or non-finite accuracy")
        m = (row.get("method") or "").strip() or None
        by.setdefault(m, {})[e] = v
    if not by:
        raise ConfigError(file, acc_col, "no accuracy values")
    return [Curve(m, tuple(sorted(d.items()))) for m, d in by.items()]


def curve_for(curves: Sequence[Curve], method: str) -> Curve | None:
    """The curve of `method` (its label or id), else the shared curve, else None."""
    mid = method.split(":", 1)[0]
    for key in (method, mid):
        for c in curves:
            if c.method == key:
                return c
    for c in curves:
        if c.method is None:
            return c
    return None


def time_to_accuracy(epoch_seconds: Sequence[float], curve: Curve, target: float) -> tuple[float | None, int | None]:
    """(seconds, epoch) at the end of the first epoch reaching target, or (None, None)."""
    for e, acc in curve.points:
        if acc >= target and e < len(epoch_seconds):
            return float(sum(epoch_seconds[:e + 1])), e
    return None, None


def tta_report(method_epochs: Sequence[float], dense_epochs: Sequence[float], curves: Sequence[Curve],
               method: str, target: float) -> dict:
    cm, cd = curve_for(curves, method), curve_for(curves, "dense")
    out: dict = {"target": target}
    for name, c, ep in (("method", cm, method_epochs), ("dense", cd, dense_epochs)):
        if c is None:
            out[name] = {"seconds": None, "epoch": None, "status": "no accuracy curve"}
            continue
        s, e = time_to_accuracy(ep, c, target)
        out[name] = {"seconds": s, "epoch": e, "curve": c.method or "shared",
                     "status": "reached" if s is not None else "not reached",
                     "best_accuracy": max(a for _, a in c.points)}
    s_m, s_d = out["method"]["seconds"], out["dense"]["seconds"]
    out["speedup"] = (s_d / s_m) if (s_m and s_d) else None
    return out
