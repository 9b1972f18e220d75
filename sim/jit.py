"""Numba compilation ahead of a first run (`prunesim compile`), and a note while kernels compile.

Every kernel is `@njit(cache=True)`: Numba compiles it on first use for the argument types it is
called with and keeps the machine code in its on-disk cache (`__pycache__` beside the module, or
NUMBA_CACHE_DIR), so later processes load it in milliseconds. A process that finds the cache empty
pays the compilation instead: ~10 s for a replay's methods and statistics, ~20 s with the CPU
engines, on a 2-core machine. `compile_kernels` pays it once, ahead, by running the work a replay
and the demo do on a small bundled trace: every method of the registry, one hwconfig per engine
(GPU tensor cores with the patch kernels, the x86 and the ARM CPU pipelines), the trace statistics.
`make install` runs it, so the first `prunesim replay` after set-up starts warm.

`announce_compiles` makes a command say so when it compiles anyway (an edited module, a new
argument type, a Numba upgrade): one line when the first kernel compiles and one with the count and
seconds when the command ends, on a terminal only (as the progress bars; PRUNESIM_PROGRESS=1 forces
it, 0 silences it).
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable

ROOT = Path(__file__).resolve().parent.parent
# the trace, hwconfigs and iteration `compile_kernels` replays: small, but through every engine style
WARM_TRACE = ROOT / "traces" / "sample-cnn2-mnist5k"
WARM_HWCONFIGS = ("a100-sxm4-40gb", "xeon-e5-2680v4", "rpi4b")


class CompileLog:
    """Counts Numba compilations (cache misses) of this process: kernels and seconds."""

    def __init__(self, on_first: Callable[[str], None] | None = None):
        self.names: list[str] = []
        self.seconds = 0.0
        self.on_first = on_first
        self._lock = threading.Lock()
        self._depth = 0
        self._t0 = 0.0
        self.stop: Callable[[], None] = lambda: None     # set where a listener feeds it

    def start(self, name: str) -> None:
        with self._lock:
            # a kernel compiles the kernels it calls inside its own compilation: count the
            # outermost span's time once
            if self._depth == 0:
                self._t0 = time.perf_counter()
            self._depth += 1
            first = not self.names
            self.names.append(name)
        if first and self.on_first is not None:
            self.on_first(name)

    def end(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._t0


def _name(event) -> str:
    d = event.data.get("dispatcher") if isinstance(event.data, dict) else None
    f = getattr(d, "py_func", None)
    return f"{f.__module__}.{f.__qualname__}" if f is not None else "?"


def listen(log: CompileLog) -> Callable[[], None]:
    """Feed `log` from Numba's compile events; returns the function that stops it."""
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev):
            log.start(_name(ev))

        def on_end(self, ev):
            log.end()

    lst = _Listener()
    event.register("numba:compile", lst)
    return lambda: event.unregister("numba:compile", lst)


_ANNOUNCED: list[CompileLog] = []


def announce_compiles(stream: IO[str] | None = None, force: bool | None = None
                      ) -> CompileLog | None:
    """Say on `stream` (stderr) when this process compiles Numba kernels: once as the first one
    starts, and the count and seconds at exit (`summary`). Only on a terminal (sim.progress's
    rule); once per process. Returns the log it keeps, or None."""
    from sim.progress import _enabled
    stream = stream if stream is not None else sys.stderr
    if _ANNOUNCED or not _enabled(stream, force):
        return None

    def first(name: str) -> None:
        _say(stream, f"prunesim: compiling the simulator's Numba kernels for this machine "
                     f"(first use; kept in Numba's on-disk cache; `prunesim compile` does it "
                     f"ahead): {name} ...")

    log = CompileLog(first)
    log.stop = listen(log)
    _ANNOUNCED.append(log)
    atexit.register(summary, log, stream)
    return log


def summary(log: CompileLog, stream: IO[str]) -> None:
    """The closing line of announce_compiles, where anything was compiled."""
    if log.names:
        _say(stream, f"prunesim: compiled {len(log.names)} Numba kernel signatures in "
                     f"{log.seconds:.1f} s (cached: the next run loads them)")


def _say(stream: IO[str], text: str) -> None:
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):
        pass


def compile_kernels(progress: Callable[[str], None] | None = None) -> CompileLog:
    """Run a replay's and the demo's Numba work once on a small bundled trace so that every
    kernel it calls is compiled into Numba's on-disk cache (kernels already cached just load).
    Returns what was compiled."""
    from sim.driver import engines_for, run_trace
    from sim.methods.registry import METHODS
    from sim.replay import parse_methods
    from sim.traces.format import open_trace
    say = progress or (lambda _m: None)
    log = CompileLog()
    stop = listen(log)
    try:
        trace = open_trace(WARM_TRACE)
        methods = parse_methods(list(METHODS))
        for hw in WARM_HWCONFIGS:
            say(f"methods, trace statistics and the {hw} engine")
            # one thread: the kernels compile in this thread, in order (the CPU workers of a
            # replay would compile the same kernels, each waiting on Numba's compiler lock)
            for _ in run_trace(trace, methods, engines_for([hw]),
                               iteration=trace.iterations[0], threads=1):
                pass
    finally:
        stop()
    return log


def cmd_compile(args) -> int:
    t0 = time.perf_counter()
    log = compile_kernels(progress=lambda m: print(f"compiling: {m}", flush=True))
    print(f"{len(log.names)} kernel signatures compiled in {log.seconds:.1f} s "
          f"({time.perf_counter() - t0:.1f} s in all); the others were in Numba's cache already")
    return 0
