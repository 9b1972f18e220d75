"""Where prunesim may write a file: a new path, or an existing regular file that is not one of the
command's inputs and is either a file prunesim wrote (`ours`) or one the user asks to replace with
--force. Never a device, a directory, a FIFO, a symbolic link's target or the input being read.

`OutputDir` does the same for commands that write several files into one directory (`plot`,
`workload export`): a file there is prunesim's when the directory's manifest (MANIFEST) lists it
with the checksum it has now, so a rerun replaces its own outputs and never a file the user put
there or edited since.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Callable, Iterable

from sim.errors import PrunesimError


class OutputError(PrunesimError):
    """An output path prunesim refuses to write."""


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 force: bool = False, field: str | None = None,
                 ours: Callable[[Path], bool] | None = None) -> Path:
    """`path` if writing it (atomically: a temporary file renamed over it) destroys nothing that is
    not a previous result of prunesim or one the user asked to replace; else OutputError naming
    the path. `ours(path)` tells an existing regular file that prunesim itself wrote there."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise OutputError(p, field, f"cannot inspect: {e}") from None
    if stat.S_ISLNK(st.st_mode):
        # renaming over a link would replace the link, writing through it the file it names
        # (perhaps an input): neither is what OUT means, so a link is never an output
        raise OutputError(p, field, "is a symbolic link; refusing to replace it (give the path "
                          "it points to, or a new one)")
    if not stat.S_ISREG(st.st_mode):
        what = " (a directory)" if stat.S_ISDIR(st.st_mode) else ""
        raise OutputError(p, field, f"exists and is not a regular file{what}; refusing to "
                          "replace it")
    for i in inputs:
        try:
            same = os.path.samefile(p, i)
        except OSError:
            continue
        if same:
            raise OutputError(p, field, f"is also an input ({os.fspath(i)}); write the result to "
                              "another file")
    if force or (ours is not None and ours(p)):
        return p
    raise OutputError(p, field, "already exists (give --force to replace it)")


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a temporary file beside `path`, then rename it over `path`: a killed or
    failed writer leaves the old file (or nothing), never a half-written one."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


MANIFEST = ".prunesim-outputs.json"
_MANIFEST_BYTES = 1 << 20   # a few hundred names; a larger one is not ours


class OutputDir:
    """A directory prunesim writes named files into (created if missing)."""

    def __init__(self, path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 force: bool = False, field: str = "--out"):
        self.path = Path(path)
        self.inputs = list(inputs)
        self.force = force
        self.field = field
        if self.path.is_symlink() and not self.path.is_dir():
            raise OutputError(self.path, field, "is a symbolic link to no directory; refusing to "
                              "write through it")
        if self.path.exists() and not self.path.is_dir():
            raise OutputError(self.path, field, "exists and is not a directory (a directory of "
                              "files is written here)")
        self._files = self._load()

    def _manifest(self) -> Path:
        return self.path / MANIFEST

    def _load(self) -> dict[str, str]:
        m = self._manifest()
        try:
            st = os.lstat(m)
        except OSError:
            return {}
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(m, None, "exists and is not a regular file; refusing to replace it")
        if st.st_size > _MANIFEST_BYTES:
            return {}
        try:
            doc = json.loads(m.read_text(encoding="utf-8"))
            files = doc["files"]
            # an unreadable manifest claims nothing: its directory's files need --force
            return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _ours(self, p: Path) -> bool:
        want = self._files.get(p.name)
        try:
            return want is not None and sha256_file(p) == want
        except OSError:
            return False

    def check(self, name: str) -> Path:
        """The path of `name` in the directory, if prunesim may write it (see check_output)."""
        if Path(name).name != name or name in ("", ".", "..", MANIFEST):
            raise OutputError(self.path / name, self.field, "not a plain file name")
        return check_output(self.path / name, inputs=self.inputs, force=self.force,
                            field=self.field, ours=self._ours)

    def write(self, name: str, write: Callable[[Path], None]) -> Path:
        """Write `name` atomically through write(tmp) and record it as prunesim's."""
        p = self.check(name)
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(p, write)
        self._files[name] = sha256_file(p)
        check_output(self._manifest(), force=True, field=self.field)
        doc = {"written_by": "prunesim", "files": dict(sorted(self._files.items()))}
        write_atomic(self._manifest(), lambda t: t.write_text(json.dumps(doc, indent=1) + "\n",
                                                              encoding="utf-8"))
        return p
