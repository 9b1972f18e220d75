"""Every ```python block of the docs (docs/*.md, README.md) runs as a script (issue 20.7).

Each block runs in its own process in a fresh temporary directory that links the repository's
traces/, hwconfigs/ and workloads/ (examples use paths relative to the repository root); blocks
that import torch need the capture extra.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks():
    out = []
    for f in DOCS:
        for i, m in enumerate(FENCE.finditer(f.read_text(encoding="utf-8"))):
            code = m.group(1)
            marks = [pytest.mark.torch] if re.search(r"^\s*import torch|from torch", code, re.M) \
                else []
            out.append(pytest.param(code, id=f"{f.name}#{i}", marks=marks))
    return out


BLOCKS = _blocks()


def test_the_docs_have_python_examples():
    names = {p.id.split("#")[0] for p in BLOCKS}
    assert {"capture.md", "workflows.md"} <= names


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_example_runs(code, tmp_path):
    if "import torch" in code:
        pytest.importorskip("torch")
    for d in ("traces", "hwconfigs", "workloads"):
        (tmp_path / d).symlink_to(ROOT / d, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_hwconfig_notes_cite_shipped_sources():
    """Source notes point to docs/sources.md sections that exist, never to files not shipped."""
    secs = set(re.findall(r"^## (\d+)\.", (ROOT / "docs/sources.md").read_text(encoding="utf-8"),
                          re.M))
    files = sorted(ROOT.glob("hwconfigs/*.yaml")) + sorted(ROOT.glob("hwconfigs/clusters/*.yaml"))
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert "HARDWARE.md" not in text and "VALIDATION.md" not in text, f.name
        for n in re.findall(r"docs/sources\.md (?:§|section )?(\d+)", text):
            assert n in secs, f"{f.name}: docs/sources.md §{n} does not exist"
