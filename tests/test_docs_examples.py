"""The documentation's examples run and its links resolve.

Every ```python block of docs/**/*.md and README.md runs as a script, each in its own process in a
fresh temporary directory that links the repository's traces/, hwconfigs/ and workloads/ (examples
use paths relative to the repository root); blocks that import torch need the capture extra.
Every relative Markdown link points to a file that exists.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _name(f: Path) -> str:
    return f.relative_to(ROOT).as_posix()


def _blocks():
    out = []
    for f in DOCS:
        for i, m in enumerate(FENCE.finditer(f.read_text(encoding="utf-8"))):
            code = m.group(1)
            marks = [pytest.mark.torch] if re.search(r"^\s*import torch|from torch", code, re.M) \
                else []
            out.append(pytest.param(code, id=f"{_name(f)}#{i}", marks=marks))
    return out


BLOCKS = _blocks()


def test_the_docs_have_python_examples():
    names = {p.id.split("#")[0] for p in BLOCKS}
    assert {"docs/tutorial.md", "docs/how-to/capture.md", "docs/how-to/sweep.md",
            "docs/how-to/transformers.md"} <= names


def test_the_docs_are_organised_for_users():
    """The map of the docs names every page, and every page is under one of the four kinds."""
    index = (ROOT / "docs/index.md").read_text(encoding="utf-8")
    for f in DOCS:
        rel = f.relative_to(ROOT / "docs").as_posix() if f.parent != ROOT else None
        if rel is None or rel == "index.md":
            continue
        assert rel in index, f"docs/index.md does not link {rel}"
        assert rel in ("tutorial.md", "validation.md") or \
            rel.split("/")[0] in ("how-to", "reference", "explanation"), rel


@pytest.mark.parametrize("page", DOCS, ids=_name)
def test_relative_links_resolve(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{_name(page)}: link to {target} does not resolve"


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
    """Source notes point to sections of docs/explanation/sources.md that exist, never to files
    not shipped."""
    secs = set(re.findall(r"^## (\d+)\.",
                          (ROOT / "docs/explanation/sources.md").read_text(encoding="utf-8"), re.M))
    files = sorted(ROOT.glob("hwconfigs/*.yaml")) + sorted(ROOT.glob("hwconfigs/clusters/*.yaml"))
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert "HARDWARE.md" not in text and "VALIDATION.md" not in text, f.name
        for n in re.findall(r"docs/(?:explanation/)?sources\.md (?:§|section )?(\d+)", text):
            assert n in secs, f"{f.name}: docs/explanation/sources.md §{n} does not exist"
