"""Error types for bad input: every one names the file and the field at fault.

The CLI turns any PrunesimError into one line on stderr and a non-zero exit, never a traceback.
"""
from __future__ import annotations

import os


class PrunesimError(Exception):
    """Bad input, located: `file: field: message`."""

    def __init__(self, file: str | os.PathLike | None, field: str | None, message: str):
        self.file = os.fspath(file) if file is not None else None
        # a YAML key can be any scalar (`1:` is an int key): the field is shown as text
        self.field = str(field) if field is not None else None
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = [p for p in (self.file, self.field) if p]
        return ": ".join(where + [self.message])


class WorkloadError(PrunesimError):
    """A workload YAML (or a workload embedded in a trace manifest) is malformed."""


class TraceError(PrunesimError):
    """A trace directory is missing, corrupt, truncated or inconsistent with its manifest."""


class ConfigError(PrunesimError):
    """A hardware, cluster or sweep configuration is malformed."""


class CaptureError(PrunesimError):
    """Capture cannot proceed (missing optional dependency, unknown dataset, bad model)."""
