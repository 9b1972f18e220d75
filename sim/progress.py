"""A small dependency-free progress bar on stderr: count, rate and ETA on one redrawn line.

    bar = Progress(total=40, label="sweep", unit="points")
    bar.update(3, note="a100 x resnet20")
    bar.close()

It draws only when the stream is a terminal (a log file or a CI pipe would fill with carriage
returns), unless `force=True` or PRUNESIM_PROGRESS=1; PRUNESIM_PROGRESS=0 silences it everywhere.
Redraws are throttled so a fast loop does not spend its time printing.

Long operations that report through a `progress: Callable[[str], None]` callback (trace synthesis,
capture) can drive a bar with `bar.callback`: every message advances the bar by one step and shows
as its note, except messages starting with 'warning:', which are printed above the bar.
"""
from __future__ import annotations

import os
import sys
import time
from typing import IO, Callable


def _fmt_duration(s: float) -> str:
    if s != s or s == float("inf"):
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def _enabled(stream: IO[str], force: bool | None) -> bool:
    env = os.environ.get("PRUNESIM_PROGRESS")
    if env == "0":
        return False
    if force or env == "1":
        return True
    if force is False:
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress bar; use as a context manager or call close(). Never raises on a closed stream."""

    def __init__(self, total: int | None, label: str = "", unit: str = "it", *,
                 stream: IO[str] | None = None, force: bool | None = None, width: int = 24,
                 min_interval: float = 0.1, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _enabled(self.stream, force)
        self.width = width
        self.min_interval = min_interval
        self.clock = clock
        self.n = 0
        self.note = ""
        self.start = clock()
        self._last_draw = -float("inf")
        self._last_len = 0
        self.closed = False

    # -- counting -----------------------------------------------------------------------------
    def update(self, n: int = 1, note: str | None = None) -> None:
        self.n += n
        if note is not None:
            self.note = note
        now = self.clock()
        done = self.total is not None and self.n >= self.total
        if now - self._last_draw >= self.min_interval or done:
            self._draw(now)

    def write(self, message: str) -> None:
        """Print a line above the bar (the bar is redrawn under it)."""
        if self.enabled:
            self._clear()
        self._emit(message + "\n")
        if self.enabled and not self.closed:
            self._draw(self.clock())

    def callback(self, message: str) -> None:
        """For APIs taking `progress: Callable[[str], None]`: one message = one step."""
        if message.startswith("warning:"):
            self.write(message)
        else:
            self.update(1, note=message)

    # -- rendering ----------------------------------------------------------------------------
    def text(self, now: float | None = None) -> str:
        """The bar's line: label, bar, count, rate, elapsed and ETA, and the last note."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        rate = self.n / elapsed
        parts = [self.label] if self.label else []
        if self.total:
            frac = min(1.0, self.n / self.total)
            fill = int(round(frac * self.width))
            eta = (self.total - self.n) / rate if rate > 0 else float("inf")
            parts += [f"[{'#' * fill}{'.' * (self.width - fill)}]", f"{self.n}/{self.total} {self.unit}",
                      f"{rate:.2f} {self.unit}/s", f"{_fmt_duration(elapsed)} elapsed",
                      f"ETA {_fmt_duration(eta) if self.n < self.total else '00:00'}"]
        else:
            parts += [f"{self.n} {self.unit}", f"{rate:.2f} {self.unit}/s",
                      f"{_fmt_duration(elapsed)} elapsed"]
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)

    def _emit(self, s: str) -> None:
        try:
            self.stream.write(s)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream must not lose the results
            self.enabled = False

    def _clear(self) -> None:
        if self._last_len:
            self._emit("\r" + " " * self._last_len + "\r")
            self._last_len = 0

    def _draw(self, now: float) -> None:
        self._last_draw = now
        if not self.enabled or self.closed:
            return
        line = self.text(now)
        try:
            cols = os.get_terminal_size(self.stream.fileno()).columns - 1
        except (OSError, ValueError, AttributeError):
            cols = 160
        line = line[:cols]
        pad = max(0, self._last_len - len(line))
        self._emit("\r" + line + " " * pad)
        self._last_len = len(line)

    def close(self) -> None:
        if self.closed:
            return
        if self.enabled:
            self._draw(self.clock())
            self._emit("\n")
        self.closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
