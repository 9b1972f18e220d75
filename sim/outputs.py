"""Where prunesim may write a file: a new path, or with --force an existing regular file that is not
one of the command's inputs. Never a device, a directory, a FIFO or the input being read."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from sim.errors import PrunesimError


class OutputError(PrunesimError):
    """An output path prunesim refuses to write."""


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 force: bool = False, field: str | None = None) -> Path:
    """`path` if writing it (atomically: a temporary file renamed over it) destroys nothing that is
    not a previous result the user asked to replace; else OutputError naming the path."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if p.is_symlink():
            raise OutputError(p, field, "is a dangling symbolic link; refusing to replace "
                              "it") from None
        return p
    except OSError as e:
        raise OutputError(p, field, f"cannot inspect: {e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(p, field, "exists and is not a regular file; refusing to replace it")
    for i in inputs:
        try:
            same = os.path.samefile(p, i)
        except OSError:
            continue
        if same:
            raise OutputError(p, field, f"is also an input ({os.fspath(i)}); write the result to "
                              "another file")
    if not force:
        raise OutputError(p, field, "already exists (give --force to replace it)")
    return p
