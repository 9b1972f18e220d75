"""The validation report: the row type (Row), the group registry (GROUPS), computing the groups,
the markdown report and the terminal table, and `prunesim validate` itself.

A section module computes its rows from the engines, the methods and the system model; the
published figure sits next to each only as a comparison target (the PUB_* tables of the section
modules are the one place those figures live; no model code reads them). A miss is information:
the exit status is non-zero only when a row could not be computed."""
from __future__ import annotations

import datetime
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# rows


@dataclass
class Row:
    section: str              # A, B, C, D or HW3
    what: str
    published: float | str | None
    modeled: float | str | None
    unit: str = ""
    source: str = ""          # hwconfig / workload / method / gradients that produced it
    status: str = "ok"        # ok | outlier | qualitative | input | not-modeled | failed
    note: str = ""            # the computed diagnosis shown in "where we miss and why"
    lo_hi: tuple | None = None  # published range instead of one value
    points: bool = False      # a signed gain in %: compare in percentage points, not relative

    @property
    def rel_error(self) -> float | None:
        m, p = self.modeled, self.published
        if not isinstance(m, (int, float)) or m is None:
            return None
        if self.points:
            return None
        if self.lo_hi:
            lo, hi = self.lo_hi
            return 0.0 if lo <= m <= hi else (m - lo) / lo if m < lo else (m - hi) / hi
        if not isinstance(p, (int, float)) or not p:
            return None
        return (m - p) / p

    def to_json(self) -> dict:
        d = asdict(self)
        d["rel_error"] = self.rel_error
        return d


def _fail(section: str, what: str, exc: BaseException) -> Row:
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return Row(section, what, None, None, status="failed", note=msg)

# the sections' row groups (imported here, after Row and _fail, which they import)
from .hardware import rows_hw3  # noqa: E402
from .literature import rows_t_literature  # noqa: E402
from .prunetrain import BATCH_RULE_ORDER, PUB_C_TABLE1, rows_c  # noqa: E402
from .sdgp import rows_d_accuracy, rows_d_tensorcore, rows_d_whole_step  # noqa: E402
from .silicon import rows_s_silicon  # noqa: E402
from .wang import rows_b  # noqa: E402
from .ye import rows_a  # noqa: E402


GROUPS: dict[str, tuple[str, Callable]] = {
    "hw3": ("HW3", rows_hw3), "d": ("D", rows_d_tensorcore),
    "d-step": ("D", rows_d_whole_step), "b": ("B", rows_b), "c": ("C", rows_c),
    "a": ("A", rows_a), "d-accuracy": ("D", rows_d_accuracy),
    "t": ("T", rows_t_literature), "s": ("S", rows_s_silicon)}
SECTION_TITLES = {
    "A": "A. Ye et al. 2020: DBTD + stochastic pruning on CPUs",
    "B": "B. Wang et al. 2019: approximate WGC on a TITAN Xp",
    "C": "C. PruneTrain (Lym et al. 2019)",
    "D": "D. SDGP (McDanel et al. 2022) on A100",
    "HW3": "HARDWARE.md §3: measured 2:4 sparse vs dense GEMMs",
    "T": "T. 2:4 transformer training (literature: Hu et al. 2024)",
    "S": "S. Silicon measured here: a lent H100 SXM5 (2026-11-23; model fitted to none of it)"}


# the groups in the order a parallel run starts them: the slowest first, so that they overlap
# the rest (PruneTrain's trajectory fits, then Ye's CPU replays); groups not named here follow
HEAVY_FIRST = ("c", "a", "b", "s", "hw3")


def default_jobs(groups: tuple[str, ...] | None = None) -> int:
    """Worker processes for `validate`: the CPUs this process may use, at most one per group."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, len(groups or GROUPS)))


def _run_group(g: str, section: str, fn: Callable, quick: bool, on_row=None) -> tuple:
    """One group's rows, its error (traceback text, failed row) or None, and its seconds."""
    t0 = time.perf_counter()
    rows: list[Row] = []
    err = None
    try:
        for r in fn(quick=quick):
            rows.append(r)
            if on_row:
                on_row(r)
    except Exception as e:  # noqa: BLE001 - reported as a failed row, exit status 1
        err = (traceback.format_exc().rstrip(), _fail(section, f"group {g}", e))
    return rows, err, time.perf_counter() - t0


def _group_task(task: tuple) -> tuple:
    """A worker's job: (group, section, function, quick) -> (group, rows, error, seconds)."""
    g, section, fn, quick = task
    return (g, *_run_group(g, section, fn, quick))


def _importable(fn) -> bool:
    """Whether a worker process can find `fn` by its module and name (a module-level function);
    a local function (a test's stand-in) runs in this process instead."""
    mod = sys.modules.get(getattr(fn, "__module__", None) or "")
    return (getattr(fn, "__qualname__", None) == getattr(fn, "__name__", "")
            and getattr(mod, fn.__name__, None) is fn)


def compute(quick: bool = False, groups: tuple[str, ...] | None = None, log=None,
            progress: bool | None = False, jobs: int = 1) -> list[Row]:
    """Every row; a group that raises becomes a failed row (and the others still run).

    progress: a bar on stderr with the row being computed (None: only on a terminal).
    jobs: worker processes (a spawn pool, as sweeps use); the groups run in parallel, heaviest
    first, and the rows come back in the order of `groups` whatever order they finish in, the
    same rows as jobs=1 (each group computes from its own inputs, no state shared between them)."""
    from sim.progress import Progress
    todo = groups or tuple(GROUPS)
    jobs = max(1, min(int(jobs or 1), len(todo)))
    done: dict[str, list[Row]] = {}
    with Progress(len(todo), "validate", "groups", force=progress) as bar:
        def finish(g, rows, err, secs):
            if err:
                if log:
                    bar.write(err[0])
                rows = rows + [err[1]]
            done[g] = rows
            bar.update(1, note=f"{g} done")
            if log:
                bar.write(f"  {g}: {secs:.1f} s")

        if jobs == 1:
            n = 0
            for g in todo:
                section, fn = GROUPS[g]
                bar.update(0, note=f"{g}: starting")

                def on_row(r, g=g):
                    nonlocal n
                    n += 1
                    bar.update(0, note=f"{g}: {n} rows, last: {r.what[:48]}")
                finish(g, *_run_group(g, section, fn, quick, on_row))
        else:
            rank = {g: i for i, g in enumerate(HEAVY_FIRST)}
            order = sorted(todo, key=lambda g: rank.get(g, len(rank)))
            tasks = [(g, *GROUPS[g], quick) for g in order]
            inline = [t for t in tasks if not _importable(t[2])]
            pooled = [t for t in tasks if t not in inline]
            # spawn, not fork: the parent may hold Numba/BLAS threads, which fork does not copy
            from sim.results.sweep import _worker_init
            ctx = multiprocessing.get_context("spawn")
            pool = ctx.Pool(min(jobs, max(1, len(pooled))), initializer=_worker_init,
                            initargs=(os.getpid(),))
            try:
                bar.update(0, note="running " + ", ".join(order))
                results = pool.imap_unordered(_group_task, pooled, chunksize=1)
                for g, section, fn, q in inline:
                    finish(g, *_run_group(g, section, fn, q))
                for g, *rest in results:
                    finish(g, *rest)
                pool.close()
            finally:
                pool.terminate()  # on Ctrl-C or an error: stop the workers now
                pool.join()
    return [r for g in todo for r in done[g]]


# ---------------------------------------------------------------------------------------------
# output


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if unit == "%":
        return f"{v:.1f} %"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _err(r: Row) -> str:
    e = r.rel_error
    if r.status in ("input", "not-modeled", "failed"):
        return r.status
    if r.points and isinstance(r.modeled, (int, float)) and isinstance(r.published, (int, float)):
        return f"{r.modeled - r.published:+.1f} pts"
    if e is None:
        return "n/a"
    s = f"{100 * e:+.0f} %"
    return s + (" (outlier)" if r.status == "outlier" else "")


REPORT_TITLE = "# Validation: published results vs prunesim's models"


def is_validation_report(path: Path) -> bool:
    """A report `prunesim validate` wrote (its title, then its 'Generated by' line): a rerun
    replaces it without --force (docs/validation.md is one, refreshed by `make docs`)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith(REPORT_TITLE + "\n\nGenerated by `prunesim validate")


def _prunetrain_targets(rows: list[Row]) -> list[str]:
    """The report's PruneTrain summary, counted: how many of Table 1's FLOPs rows (training and
    inference, the model's own trajectory) are within 15 % of the published, and which are not;
    how many dynamic mini-batch steps land within one reconfiguration interval, per capacity
    rule."""
    names = {f"{r[0]}: {kind} FLOPs vs dense" for r in PUB_C_TABLE1
             for kind in ("training", "inference")}
    t1 = [r for r in rows if r.section == "C" and r.what in names and r.rel_error is not None]
    steps = {mode: [r for r in rows if r.section == "C" and ": dynamic mini-batch reaches " in
                    r.what and f"({mode} capacity" in r.what] for mode in BATCH_RULE_ORDER}
    lines = []
    if t1:
        out = [r for r in t1 if abs(r.rel_error) > 0.15]
        lines += [f"PruneTrain Table 1: {len(t1) - len(out)} of {len(t1)} FLOPs rows within 15 % "
                  "of the published (training FLOPs counted as the authors' script counted them)"
                  + (": outside, " + "; ".join(f"{r.what} {100 * r.rel_error:+.0f} %"
                                               for r in out) if out else "") + ".", ""]
    if any(steps.values()):
        lines += ["PruneTrain dynamic mini-batch steps within one reconfiguration interval of the "
                  "published epochs: " + ", ".join(
                      f"{mode} capacity {sum(r.status == 'ok' for r in rs)} of {len(rs)}"
                      for mode, rs in steps.items() if rs) + ".", ""]
    return lines


def markdown(rows: list[Row], command: str, seconds: float, quick: bool) -> str:
    today = datetime.date.today().isoformat()
    out = [REPORT_TITLE, "",
           f"Generated by `{command}` on {today} in {seconds:.0f} s"
           + (" (`--quick`: some rows skipped)" if quick else "") + ". Do not edit by hand.", "",
           "Every *modeled* value is computed by the engines, methods and system model from "
           "hwconfigs, workload shapes and gradients (source column); the *published* value is "
           "the comparison target from `../shared/spec/VALIDATION.md` or `HARDWARE.md` §3. "
           "Relative error = (modeled - published) / published; for a published range, the "
           "distance to the nearest bound (0 inside). Status: `input` rows are published "
           "accuracies that feed TTA studies (not model outputs); `not-modeled` rows are "
           "measurements whose setting the models do not describe (reason given); `outlier` "
           "rows are flagged by VALIDATION.md itself. Section S compares with this project's own "
           "measurements on a lent H100 (hwconfigs/measurements/), not with a publication.", ""]
    n_ok = sum(r.status in ("ok", "outlier", "qualitative") for r in rows)
    n_fail = sum(r.status == "failed" for r in rows)
    out += [f"{len(rows)} rows: {n_ok} computed, {n_fail} failed, "
            f"{sum(r.status == 'input' for r in rows)} inputs, "
            f"{sum(r.status == 'not-modeled' for r in rows)} not modeled.", ""]
    out += _prunetrain_targets(rows)
    for sec in SECTION_TITLES:
        rs = [r for r in rows if r.section == sec]
        out += [f"## {SECTION_TITLES[sec]}", ""]
        if not rs:
            out += ["(skipped in this run)", ""]
            continue
        out += ["| what | published | modeled | rel. error | produced by |", "|---|---|---|---|---|"]
        for r in rs:
            out.append(f"| {r.what} | {_fmt(r.published, r.unit)} | {_fmt(r.modeled, r.unit)} | "
                       f"{_err(r)} | {r.source or '-'} |")
        out.append("")
    out += ["## Where we miss and why", "",
            "Rows more than 25 % off (5 points for signed gains, or outside the published "
            "range), with the numbers the "
            "models computed along the way:", ""]
    misses = [r for r in rows if r.status in ("ok", "outlier") and (
        (r.rel_error is not None and abs(r.rel_error) > 0.25) or
        (r.points and abs(r.modeled - r.published) > 5))]
    seen = set()
    for r in misses:
        out.append(f"- **{r.section}: {r.what}**: published {_fmt(r.published, r.unit)}, modeled "
                   f"{_fmt(r.modeled, r.unit)} ({_err(r)})."
                   + (f" {r.note}." if r.note and r.note not in seen else ""))
        seen.add(r.note)
    dens = [r for r in rows if r.section == "A" and r.unit == "density" and "p=" in r.what]
    if dens:
        over = statistics.median(r.modeled / r.published for r in dens if r.published)
        out += ["", f"- **A, densities in general**: median modeled/published {over:.1f}x. The "
                "gradients are synthetic, from a model fitted on real MNIST / digits captures "
                "of small CIFAR-shaped networks (docs/explanation/synthetic-traces.md), not CIFAR ResNets; "
                "the `input-fed` rows feed the engine the published density instead. DBTD's stochastic pruning keeps |g|/tau of the "
                "sub-threshold values, so density depends on how peaked the real gradients are "
                "(VALIDATION.md A's note). The CPU speedups inherit this: sparse time scales "
                "with density."]
    fails = [r for r in rows if r.status == "failed"]
    if fails:
        out += ["", "## Rows that could not be computed", ""]
        out += [f"- {r.section}: {r.what}: {r.note}" for r in fails]
    return "\n".join(out) + "\n"


def print_table(rows: list[Row]) -> None:
    from sim.results.tables import format_table
    shown = [r for r in rows if r.status != "input"]
    print(format_table(["sec", "what", "published", "modeled", "error", "produced by"],
                       [[r.section, r.what[:78], _fmt(r.published, r.unit)[:24],
                         _fmt(r.modeled, r.unit), _err(r), r.source[:70]] for r in shown]))
    n_in = len(rows) - len(shown)
    if n_in:
        print(f"(+ {n_in} published accuracies listed in the report as TTA inputs, not modeled)")


def cmd_validate(args) -> int:
    if args.out:  # before any row is computed: the report may replace only an earlier report
        from sim.outputs import check_output
        check_output(args.out, force=getattr(args, "force", False), field="--out",
                     ours=is_validation_report)
    t0 = time.perf_counter()
    quick = bool(getattr(args, "quick", False))
    groups = tuple(g for g in (getattr(args, "only", None) or []) if g) or None
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if not args.json else None
    jobs = getattr(args, "jobs", None) or default_jobs(groups)
    rows = compute(quick, groups, log=log, progress=False if args.json else None, jobs=jobs)
    secs = time.perf_counter() - t0
    cmd = "prunesim validate" + (" --quick" if quick else "") + \
        "".join(f" --only {g}" for g in (groups or ()))
    if args.out:
        from sim.outputs import write_atomic
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        text = markdown(rows, cmd, secs, quick)
        write_atomic(args.out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if args.json:
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v
        print(json.dumps({"seconds": secs, "quick": quick,
                          "rows": [{k: clean(v) for k, v in r.to_json().items()} for r in rows]},
                         indent=1))
    else:
        print_table(rows)
        print(f"\n{len(rows)} rows in {secs:.0f} s; report written to {args.out}")
    return 1 if any(r.status == "failed" for r in rows) else 0
