#!/usr/bin/env python
"""Carry 32 x 32 CIFAR-10 to a device machine in parts that fit its per-call tree limit.

A device call carries the working tree and at most 64 MiB in all (the tracked tree is ~23 MB), and
CIFAR-10's 50,000 training images are 154 MB raw (zlib: 92 %). Lossless prediction brings them to
~56 %: the LOCO-I median edge predictor (JPEG-LS) per channel, then R and B as differences from G,
then lzma. Three parts of ~30 MB each; each call unpacks its part to the machine's /tmp, which
stays while the machine is held, and the last call joins them into the file the runs read.

    python tools/pack_cifar10.py pack --images 52000 --parts 3 .devdata/c32   # here, ~5 min
    python tools/pack_cifar10.py unpack .devdata/c32/part0 /tmp/pp/part0.npz  # there, per call
    python tools/pack_cifar10.py join /tmp/pp/part*.npz /tmp/data             # -> cifar10-60k.npz

--images 52000: the training batches and the first 2,000 test images (the runs' validation set
needs no more). The joined file is byte-for-byte the first N images of tools/fetch_cifar10.py's.
"""
from __future__ import annotations

import argparse
import lzma
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def residuals(x: np.ndarray) -> np.ndarray:
    """uint8 N x 3 x H x W images -> uint8 prediction residuals (mod 256) of the same shape."""
    d = x.astype(np.int16)
    a = np.zeros_like(d)
    b = np.zeros_like(d)
    c = np.zeros_like(d)
    a[..., :, 1:] = d[..., :, :-1]
    b[..., 1:, :] = d[..., :-1, :]
    c[..., 1:, 1:] = d[..., :-1, :-1]
    r = (d - _median_edge(a, b, c)) % 256
    # colour channels move together: R and B as residuals of G's residual
    r[:, 0] = (r[:, 0] - r[:, 1]) % 256
    r[:, 2] = (r[:, 2] - r[:, 1]) % 256
    return r.astype(np.uint8)


def _median_edge(a, b, c):
    mx, mn = np.maximum(a, b), np.minimum(a, b)
    return np.where(c >= mx, mn, np.where(c <= mn, mx, a + b - c))


def reconstruct(r: np.ndarray) -> np.ndarray:
    """The inverse of residuals: pixels in raster order, each from its decoded neighbours
    (vectorised over images and channels: H x W numpy steps)."""
    r = r.astype(np.int16)
    r[:, 0] = (r[:, 0] + r[:, 1]) % 256
    r[:, 2] = (r[:, 2] + r[:, 1]) % 256
    n, ch, h, w = r.shape
    d = np.zeros((n, ch, h, w), np.int16)
    zero = np.zeros((n, ch), np.int16)
    for i in range(h):
        for j in range(w):
            a = d[:, :, i, j - 1] if j else zero
            b = d[:, :, i - 1, j] if i else zero
            c = d[:, :, i - 1, j - 1] if i and j else zero
            d[:, :, i, j] = (r[:, :, i, j] + _median_edge(a, b, c)) % 256
    return d.astype(np.uint8)


def pack(src: Path, images: int, parts: int, out: Path) -> None:
    with np.load(src, allow_pickle=False) as z:
        x, y, source = z["x"][:images], z["y"][:images], str(z["source"])
    edges = np.linspace(0, len(x), parts + 1).astype(int)
    for p in range(parts):
        s, e = int(edges[p]), int(edges[p + 1])
        d = out / f"part{p}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "pixels.xz").write_bytes(lzma.compress(residuals(x[s:e]).tobytes(), preset=6))
        np.savez(d / "meta.npz", y=y[s:e], start=s, shape=np.array(x[s:e].shape), source=source)
        print(f"part{p}: images {s}-{e - 1}, {(d / 'pixels.xz').stat().st_size / 1e6:.1f} MB")


def unpack(part: Path, dest: Path) -> None:
    with np.load(part / "meta.npz", allow_pickle=False) as m:
        shape, y, start, source = tuple(int(v) for v in m["shape"]), m["y"], m["start"], m["source"]
    r = np.frombuffer(lzma.decompress((part / "pixels.xz").read_bytes()), np.uint8).reshape(shape)
    dest.parent.mkdir(parents=True, exist_ok=True)
    np.savez(dest, x=reconstruct(r), y=y, start=start, source=source)
    print(f"{part} -> {dest}: {shape[0]} images")


def join(parts: list[Path], dest: Path) -> Path:
    loaded = []
    for p in parts:
        with np.load(p, allow_pickle=False) as m:
            loaded.append((int(m["start"]), m["x"], m["y"], str(m["source"])))
    loaded.sort(key=lambda t: t[0])
    at = 0
    for start, x, _, _ in loaded:
        if start != at:
            raise SystemExit(f"{dest}: parts do not tile the images (expected one starting at "
                             f"{at}, got {start})")
        at += len(x)
    dest.mkdir(parents=True, exist_ok=True)
    f = dest / "cifar10-60k.npz"
    np.savez(f, x=np.concatenate([t[1] for t in loaded]), y=np.concatenate([t[2] for t in loaded]),
             source=loaded[0][3])
    print(f"joined {at} images -> {f}")
    return f


def main(argv=None) -> int:
    from sim.capture.datasets import CIFAR10_FILE, data_dir
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pack")
    a.add_argument("out", type=Path)
    a.add_argument("--images", type=int, default=52000)
    a.add_argument("--parts", type=int, default=3)
    a.add_argument("--src", type=Path, default=None)
    b = sub.add_parser("unpack")
    b.add_argument("part", type=Path)
    b.add_argument("dest", type=Path)
    c = sub.add_parser("join")
    c.add_argument("parts", type=Path, nargs="+")
    c.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        pack(args.src or data_dir() / CIFAR10_FILE, args.images, args.parts, args.out)
    elif args.cmd == "unpack":
        unpack(args.part, args.dest)
    else:
        join(args.parts, args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
