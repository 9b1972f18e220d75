"""Refactor guard (#19): replaying the bundled sample traces gives the numbers recorded before.

tests/data/golden_replay.json was written by tools/golden_replay.py before the engine interface and
driver refactor; every per-layer phase time, overhead, energy and network record must match it to
1e-9 relative. A change meant to move numbers regenerates the file and says so in its commit.
"""
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import golden_replay  # noqa: E402


def _close(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-18)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def _diffs(ref: dict, new: dict, path: str = "") -> list[str]:
    out = []
    for k in sorted(set(ref) | set(new)):
        p = f"{path}/{k}"
        if k not in ref or k not in new:
            out.append(f"{p}: {'missing now' if k not in new else 'new'}")
        elif isinstance(ref[k], dict) and isinstance(new[k], dict):
            out += _diffs(ref[k], new[k], p)
        elif not _close(ref[k], new[k]):
            out.append(f"{p}: was {ref[k]!r}, now {new[k]!r}")
    return out


def test_replay_numbers_unchanged():
    ref = json.loads(golden_replay.OUT.read_text())
    new = json.loads(json.dumps(golden_replay.compute()))
    d = _diffs(ref, new)
    assert not d, f"{len(d)} replayed numbers moved, e.g.:\n" + "\n".join(d[:15])
