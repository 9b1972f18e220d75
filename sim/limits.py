"""Physical ranges and work budgets: the one place where every size a user can give is bounded.

Every dimension, count, batch and epoch that reaches prunesim from a command line, a workload, a
hwconfig, a cluster or a trace manifest is checked against `RANGES` before any work starts; work
that depends on several of them (a trace's bytes, a sweep's points, a layer's multiply-adds) is
estimated and checked against `BUDGETS`. A hard range is a physical bound (nothing real is that
large, or a number beyond it can no longer be computed exactly); a budget marked `soft` is only
a guard against a typo costing hours or the disk, and `--yes-large` lifts it. docs/reference/limits.md
renders both tables; tests/test_hostile.py checks that the doc and these tables agree.
"""
from __future__ import annotations

import math
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import PrunesimError


class LimitError(PrunesimError):
    """A value outside its physical range, or a job larger than its budget."""


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    unit: str
    why: str


# Float64 holds every integer up to 2**53 exactly: FLOP and byte counts beyond it are rounded.
EXACT = 2 ** 53

RANGES: dict[str, Range] = {
    "batch": Range(1, 2 ** 20, "samples", "mini-batch per device; the largest published is 65,536"),
    "channels": Range(1, 2 ** 20, "channels", "c_in/c_out/classes of one layer; real nets: <= "
                      "65,536"),
    "spatial": Range(1, 2 ** 16, "pixels", "height/width of one feature map"),
    "kernel": Range(1, 1024, "pixels", "conv/pool kernel side"),
    "stride": Range(1, 1024, "pixels", "conv/pool stride"),
    "pad": Range(0, 512, "pixels", "and smaller than the kernel: an output row past that sees "
                 "only padding"),
    "layers": Range(1, 10_000, "ops", "ops in one workload"),
    "gemm_dim": Range(1, 2 ** 31, "elements", "M, N or K of one GEMM (CUDA grid and BLAS int "
                      "limits)"),
    "epochs": Range(1, 10_000, "epochs", "training epochs (published schedules: <= 1,000)"),
    "iterations": Range(1, 100_000, "iterations", "iterations of a synthetic trace"),
    "iteration_index": Range(0, 2 ** 40, "", "an iteration number in a trace"),
    "devices": Range(1, 2 ** 20, "devices", "devices of a cluster (per dimension and in all); the "
                     "largest machines have ~10^5 GPUs"),
    "element_bytes": Range(1, 8, "B", "bytes per activation or gradient element (fp8 .. fp64)"),
    "threads": Range(1, 4096, "threads", "CPU threads"),
    "train_samples": Range(1, 10 ** 10, "samples", "training-set size (ImageNet-22k: 1.4e7)"),
    "global_batch": Range(1, 2 ** 24, "samples", "global mini-batch over all devices"),
    "samples": Range(1, 4096, "samples", "synthetic dO samples of the CPU engine"),
    "seed": Range(0, 2 ** 63 - 1, "", "seed of the counter RNG (64-bit)"),
    "hw_count": Range(0, 10 ** 6, "", "a counted hwconfig parameter (SMs, cores, registers, ...)"),
    "sm_count": Range(1, 10_000, "SMs", "streaming multiprocessors (H100: 132)"),
    "cores": Range(1, 10_000, "cores", "CPU cores per socket"),
}

# hwconfig dimensions (SI base units after conversion): a value outside is a unit typo
HW_DIMENSION_MAX: dict[str, tuple[float, str]] = {
    "frequency": (1e11, "100 GHz"),
    "size": (1e15, "1 PB"),
    "bandwidth": (1e15, "1 PB/s"),
    "time": (1e3, "1000 s"),
    "cycles": (1e5, "100,000 cycles"),
    "bytes_per_cycle": (1e9, "1e9 B/clk"),
    "ops_per_cycle": (1e9, "1e9 op/clk"),
    "throughput": (1e21, "1 ZFLOPS"),
    "power": (1e7, "10 MW"),
}


@dataclass(frozen=True)
class Budget:
    limit: float
    unit: str
    soft: bool   # True: --yes-large lifts it
    why: str


BUDGETS: dict[str, Budget] = {
    "yaml_bytes": Budget(16 * 2 ** 20, "B", False, "size of one YAML file (workloads are ~10 kB)"),
    "yaml_nodes": Budget(1_000_000, "nodes", False, "YAML nodes after expanding aliases (an alias "
                         "bomb expands exponentially)"),
    "yaml_depth": Budget(64, "levels", False, "nesting depth of a YAML document"),
    "yaml_line_chars": Budget(65_536, "characters", False, "one line of a YAML file (the longest "
                              "bundled line is under 1,000)"),
    "yaml_int_digits": Budget(1_000, "digits", False, "digits of one YAML integer (every count "
                              "prunesim reads has at most 20)"),
    "text_bytes": Budget(64 * 2 ** 20, "B", False, "size of a CSV input (accuracy logs, "
                         "trajectories: ~100 kB)"),
    "json_bytes": Budget(256 * 2 ** 20, "B", False, "size of a trace manifest"),
    "json_depth": Budget(64, "levels", False, "nesting depth of a trace manifest"),
    "layer_macs": Budget(EXACT // 2, "MACs", False, "multiply-adds of one GEMM: FLOP counts (2 per "
                         "MAC) stay exact in float64"),
    "grid_points": Budget(10_000, "points", True, "hardware variants of one sweep grid"),
    "sweep_points": Budget(100_000, "points", True, "traces x hardware x methods of one sweep"),
    "train_iterations": Budget(1e9, "iterations", True, "epochs x iterations of `train`"),
    "train_steps": Budget(20_000, "steps", True, "simulated steps of `train`: per distinct "
                          "(widths, batch) configuration of each run, its layers (each a "
                          "cycle-level engine evaluation, ~1-3 ms) and its all-reduce buckets x "
                          "the collective model's steps (a tenth each)"),
    "synth_layer_samples": Budget(100_000, "layer-samples", True, "layers x recorded batch "
                                  "x iterations of one synthetic trace (`trace synth`, a sweep's "
                                  "workloads; ~1 ms each: the sample streams of a layer)"),
    "sweep_layer_evaluations": Budget(10_000_000, "layer evaluations", True, "traces x "
                                      "iterations x layers x hardware x methods of one sweep"),
    "synth_bytes": Budget(64 * 2 ** 30, "B", True, "bytes of one synthetic trace (also: never "
                          "more than the free disk)"),
    "cpu_layer_bytes": Budget(4 * 2 ** 30, "B", True, "tensors the CPU engine allocates for one "
                              "layer (also: never more than the available memory)"),
}


def _fmt(v: float) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:g}"
    v = int(v)
    return f"{v:,}" if abs(v) < 10 ** 15 else f"{v:.3g}"


def fmt_bytes(n: float) -> str:
    for unit, f in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{int(n)} B"


def check_range(name: str, value: Any, file: Any = None, field: str | None = None,
                error: type[PrunesimError] = LimitError) -> Any:
    """`value` if it is a number inside RANGES[name], else `error(file, field, ...)`."""
    r = RANGES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise error(file, field or name, f"expected a number, got {value!r}")
    if not r.lo <= value <= r.hi:
        raise error(file, field or name, f"{_fmt(value)} is outside {_fmt(r.lo)}..{_fmt(r.hi)}"
                    f"{' ' + r.unit if r.unit else ''} ({r.why})")
    return value


def check_budget(name: str, estimate: float, file: Any = None, field: str | None = None,
                 yes_large: bool = False, error: type[PrunesimError] = LimitError,
                 what: str = "") -> None:
    """Refuse work whose estimate exceeds BUDGETS[name] (a soft budget yields to --yes-large)."""
    b = BUDGETS[name]
    if estimate <= b.limit or (b.soft and yes_large):
        return
    show = fmt_bytes if b.unit == "B" else (lambda v: f"{_fmt(v)} {b.unit}")
    hint = "; give --yes-large to run it anyway" if b.soft else ""
    raise error(file, field or name, f"{what + ': ' if what else ''}estimated {show(estimate)} "
                f"exceeds the limit of {show(b.limit)} ({b.why}){hint}")


def free_disk(path: str | os.PathLike) -> int | None:
    """Free bytes on the filesystem that would hold `path` (None when it cannot be told)."""
    p = Path(path).absolute()
    for d in (p, *p.parents):
        if d.exists():
            try:
                return shutil.disk_usage(d).free
            except OSError:
                return None
    return None


def available_memory() -> int | None:
    """Bytes of memory a new allocation can get: MemAvailable, and an address-space ulimit."""
    best = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    best = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            best = soft if best is None else min(best, soft)
    except (ImportError, OSError, ValueError):
        pass
    return best


# ---------------------------------------------------------------------------------- input files

def file_kind(mode: int) -> str:
    """What a stat mode names, as an error message says it."""
    for test, what in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_input_file(path: str | os.PathLike, field: str | None = None, *,
                     error: type[PrunesimError] = LimitError, what: str = "file",
                     max_bytes: float | None = None, missing_ok: bool = False,
                     directory_ok: bool = False) -> os.stat_result | None:
    """Refuse, before anything opens it, an input that is not a regular file: a device, a FIFO,
    a socket, a directory (unless directory_ok), or a file larger than max_bytes. Returns its
    stat (following links), or None for a missing path where missing_ok."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise error(path, field, f"no such {what}") from None
    except OSError as e:
        raise error(path, field, f"cannot read: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode) and directory_ok:
        return st
    if not stat.S_ISREG(st.st_mode):
        raise error(path, field, f"is {file_kind(st.st_mode)}, not a regular file; refusing to "
                    f"read it as a {what}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(path, field, f"{st.st_size:,} bytes: larger than the "
                    f"{fmt_bytes(max_bytes)} limit of a {what}")
    return st


def read_input_bytes(path: str | os.PathLike, field: str | None = None, *,
                     error: type[PrunesimError] = LimitError, what: str = "file",
                     max_bytes: float) -> bytes:
    """The bytes of a regular file of at most max_bytes (check_input_file first). It is opened
    non-blocking and checked again on the open descriptor, so a path swapped for a FIFO or a device
    after the check is refused too, and never more than max_bytes + 1 bytes are read."""
    check_input_file(path, field, error=error, what=what, max_bytes=max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise error(path, field, f"cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise error(path, field, f"is {file_kind(st.st_mode)}, not a regular file; refusing "
                        f"to read it as a {what}")
        data = f.read(int(max_bytes) + 1)
    if len(data) > max_bytes:
        raise error(path, field, f"larger than the {fmt_bytes(max_bytes)} limit of a {what}")
    return data


def read_input_text(path: str | os.PathLike, field: str | None = None, *,
                    error: type[PrunesimError] = LimitError, what: str = "file",
                    max_bytes: float, encoding: str = "utf-8") -> str:
    """read_input_bytes, decoded (a decoding error is one line naming the file)."""
    data = read_input_bytes(path, field, error=error, what=what, max_bytes=max_bytes)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise error(path, field, f"cannot read: not {encoding} text ({e.reason} at byte "
                    f"{e.start})") from None


# The command-line options that name an input, per command: "file" (a regular file), "dir" (a
# directory: a trace), "file|dir" (either: a trace directory or a file). Checked by
# check_cli_inputs before a command runs; a value that names nothing on disk passes (a zoo or
# bundled name, a glob, or a path the command reports missing). tests/test_input_files.py checks
# that every path-taking option of the parser is here.
INPUT_OPTIONS: dict[str, dict[str, str]] = {
    "workload show": {"name": "file"},
    "workload export": {"name": "file"},
    "trace info": {"trace": "dir"},
    "trace check": {"trace": "dir", "workload": "file"},
    "trace fit": {"trace": "dir"},
    "trace synth": {"workload": "file", "stats": "file"},
    "capture": {"workload": "file"},
    "prune": {"input": "file"},
    "gemm": {"hw": "file"},
    "layer": {"hw": "file", "workload": "file", "trace": "dir"},
    "calibrate": {"hw": "file", "from_measurements": "file"},
    "train": {"workload": "file|dir", "cluster": "file", "hw": "file", "trajectory": "file",
              "accuracy": "file|dir", "framework": "file"},
    "replay": {"trace": "dir", "hw": "file", "cluster": "file", "trajectory": "file",
               "framework": "file", "db": "file"},
    "sweep": {"hw": "file", "workload": "file", "trace": "dir", "grid": "file", "db": "file",
              "cache": "dir", "stats": "file", "framework": "file"},
    "export": {"db": "file"},
    "plot": {"db": "file", "accuracy": "file|dir", "cluster": "file", "workload": "file"},
}

# the INPUT_OPTIONS that are positional arguments (an error names only their path)
POSITIONAL_INPUTS = {("workload show", "name"), ("workload export", "name"), ("trace info", "trace"),
                     ("trace check", "trace"), ("trace fit", "trace"), ("prune", "input"),
                     ("replay", "trace"), ("export", "db"), ("plot", "db")}

# files a directory option reads from inside the directory, checked with it
_DIR_MEMBERS = {"dir": ("manifest.json",), "file|dir": ("manifest.json", "log.csv")}


def _command_of(args) -> str:
    parts = [getattr(args, "command", None)]
    parts += [getattr(args, k, None) for k in ("workload_command", "trace_command")]
    return " ".join(p for p in parts if p)


def _check_cli_path(value: str, option: str | None, kind: str) -> None:
    try:
        st = os.stat(value)
    except (OSError, ValueError):
        return          # not on disk: a zoo/bundled name, a glob, or the command's own error
    if stat.S_ISDIR(st.st_mode):
        if kind == "file":
            if os.sep in value or os.path.splitext(value)[1]:   # named as a path, not a name
                raise LimitError(value, option, "is a directory, not a regular file")
            return
        for member in _DIR_MEMBERS[kind]:
            _check_cli_path(os.path.join(value, member), option, "file")
        return
    if stat.S_ISREG(st.st_mode):
        if kind == "dir":
            raise LimitError(value, option, "is a regular file, not a trace directory")
        return
    raise LimitError(value, option, f"is {file_kind(st.st_mode)}, not a regular file; refusing "
                     "to read it")


def check_cli_inputs(args) -> None:
    """One error line for an input option whose path exists but is not what the option reads
    (INPUT_OPTIONS): a device, a FIFO, a socket, a directory where a file is expected, a file
    where a trace directory is. Runs before the command reads anything."""
    for dest, kind in INPUT_OPTIONS.get(_command_of(args), {}).items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        option = None if (_command_of(args), dest) in POSITIONAL_INPUTS else \
            "--" + dest.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and not (dest == "trajectory" and
                                           (v == "model" or v.startswith("model:"))):
                _check_cli_path(v, option, kind)
