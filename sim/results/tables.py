"""Plain-text tables for the CLI: fixed-width columns, numbers right-aligned."""
from __future__ import annotations

from typing import Any, Sequence


def _is_number(v: Any) -> bool:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return True
    try:
        float(str(v).replace(",", ""))
        return True
    except ValueError:
        return False


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    # "-" marks a missing number: it does not make a numeric column text
    right = [all(_is_number(r[i]) for r in rows if r[i] not in ("", "-"))
             and any(r[i] not in ("", "-") for r in rows)
             for i in range(len(header))] if rows else [False] * len(header)
    lines = []
    for j, r in enumerate(cells):
        parts = [c.rjust(w) if right[i] and j else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


class StreamTable:
    """A table printed row by row as results arrive (fixed column widths, header once)."""

    def __init__(self, header: Sequence[str], widths: Sequence[int], out=None):
        import sys
        self.header, self.widths = list(header), [max(w, len(h)) for h, w in zip(header, widths)]
        self.out = out or sys.stdout
        self._started = False

    def row(self, cells: Sequence[Any]) -> None:
        if not self._started:
            print("  ".join(h.ljust(w) for h, w in zip(self.header, self.widths)).rstrip(), file=self.out)
            print("  ".join("-" * w for w in self.widths), file=self.out)
            self._started = True
        parts = [str(c).rjust(w) if _is_number(c) else str(c).ljust(w)
                 for c, w in zip(cells, self.widths)]
        print("  ".join(parts).rstrip(), file=self.out, flush=True)


# One convention for every ratio the CLI prints: a speedup, dense time / method time, so > 1 means
# faster than dense. Every caption says so.
SPEEDUP_RULE = "speedup = dense time / method time on the same hardware: > 1 is faster"


def _ms(v) -> str:
    return f"{v * 1e3:.3f}" if v is not None else "-"


def _x(v) -> str:
    return f"{v:.3f}" if v is not None else "-"


# What the phase columns of a performance table hold (replay, sweep and the demo say it once).
STEP_CAPTION = ("FWD/AGBP/WGC = the conv and FC GEMMs with the methods' own kernels; fwd-ops/bwd-ops "
                "= BN, ReLU, pooling, residual adds, bias and the loss (sim.stepops); optim = the "
                "optimizer update and zero_grad; framework = the profile's fixed per-step time; "
                "conv back-prop = AGBP + WGC, GEMM step = FWD + AGBP + WGC, whole step = all of "
                "them, under the framework profile named in the record")


def performance_table(records: list[dict], workload: bool = False) -> str:
    """Network-level records (replay, sweep, store) as a table: phase times (the GEMM phases and
    the whole step's other phases), conv back-prop, GEMM-step and whole-step speedups, and per
    point whether it ran ("not run" points have no numbers) or fell back to dense somewhere.
    Records stored before the whole step (no `whole_step_s`) show "-" in its columns."""
    fw = any(r.get("framework_s") for r in records)   # a column only where a profile sets it
    header = (["workload"] if workload else []) + [
        "hardware", "method", "framework", "FWD ms", "AGBP ms", "WGC ms", "fwd-ops ms",
        "bwd-ops ms", "optim ms"] + (["framework ms"] if fw else []) + [
        "overhead %", "conv back-prop speedup", "GEMM step speedup", "whole step speedup",
        "status"]
    rows = []
    for r in records:
        status = r.get("status") or "ok"
        if status == "ok" and r.get("fallback"):
            status = "ok, " + r["fallback"].split(":", 1)[0]
        step = r.get("step_s")
        rows.append(([r.get("workload", "")] if workload else []) + [
            r["hw"], r["method"], r.get("framework") or "-", _ms(r.get("fwd_s")),
            _ms(r.get("agbp_s")), _ms(r.get("wgc_s")), _ms(r.get("fwd_ops_s")),
            _ms(r.get("bwd_ops_s")), _ms(r.get("optimizer_s"))]
            + ([_ms(r.get("framework_s"))] if fw else []) + [
            f"{100 * r['overhead_s'] / step:.1f}" if step else "-",
            _x(r.get("backprop_speedup")), _x(r.get("step_speedup")),
            _x(r.get("whole_step_speedup")), status])
    return format_table(header, rows)
