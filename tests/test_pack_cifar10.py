"""tools/pack_cifar10.py: the lossless carry of CIFAR-10 to a device machine."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import pack_cifar10 as pc  # noqa: E402


def _images(n=24, seed=0):
    rng = np.random.default_rng(seed)
    # smooth images (what the predictor is for) and pure noise (its worst case) alike
    yy, xx = np.mgrid[0:32, 0:32]
    smooth = (xx * 4 + yy * 3)[None, None] + rng.integers(0, 8, (n // 2, 3, 32, 32))
    noise = rng.integers(0, 256, (n - n // 2, 3, 32, 32))
    return np.concatenate([smooth % 256, noise]).astype(np.uint8)


def test_residuals_invert_exactly():
    x = _images()
    r = pc.residuals(x)
    assert r.dtype == np.uint8 and r.shape == x.shape
    assert np.array_equal(pc.reconstruct(r), x)
    # the predictor has work to do: smooth images leave small residuals
    assert np.mean(np.minimum(r[:12], 256 - r[:12].astype(int))) < 8


def test_pack_unpack_join_round_trip(tmp_path):
    x, y = _images(30), np.arange(30) % 10
    np.savez(tmp_path / "src.npz", x=x, y=y, source="test")
    pc.pack(tmp_path / "src.npz", 28, 3, tmp_path / "c32")
    for p in (2, 0, 1):       # any order
        pc.unpack(tmp_path / "c32" / f"part{p}", tmp_path / "pp" / f"p{p}.npz")
    f = pc.join(sorted((tmp_path / "pp").glob("*.npz")), tmp_path / "data")
    with np.load(f, allow_pickle=False) as z:
        assert np.array_equal(z["x"], x[:28]) and np.array_equal(z["y"], y[:28])
        assert str(z["source"]) == "test"


def test_join_refuses_a_missing_part(tmp_path):
    import pytest
    x = _images(12)
    np.savez(tmp_path / "src.npz", x=x, y=np.zeros(12, int), source="t")
    pc.pack(tmp_path / "src.npz", 12, 3, tmp_path / "c")
    pc.unpack(tmp_path / "c" / "part0", tmp_path / "pp" / "a.npz")
    pc.unpack(tmp_path / "c" / "part2", tmp_path / "pp" / "c.npz")
    with pytest.raises(SystemExit, match="do not tile"):
        pc.join(sorted((tmp_path / "pp").glob("*.npz")), tmp_path / "d")
