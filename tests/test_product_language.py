"""prunesim is a product: no tracked text file and no file or folder name speaks of how or when
it was built (numbered work sessions, tasks, issues or stops). Facts cite their
primary sources instead (papers, datasheets, repositories, bundled measurement files).

The words are matched case-insensitively. Generic technical uses that are not the development
process are removed before matching (pytest's `scope="session"` fixtures); a name is split at
`_`, `-` and `.` so that a test file named after a numbered task reads as its words.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".cfg", ".toml", ".txt"}
TEXT_NAMES = {"Makefile"}
EXCLUDED = {THIS}

PATTERNS = {
    "session": re.compile(r"\bsessions?\b", re.I),
    "task N": re.compile(r"\btask ?#?\d+", re.I),
    "issue N": re.compile(r"\bissue #?\d+", re.I),
    "stop N": re.compile(r"\bstop \d+", re.I),
}
# technical uses of the words that are not the development process
GENERIC = [re.compile(r"""scope\s*=\s*["']session["']""")]


def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted({p for p in out.splitlines() if (ROOT / p).exists()})


def _hits(text: str) -> list[str]:
    for g in GENERIC:
        text = g.sub("", text)
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pat in PATTERNS.items():
            m = pat.search(line)
            if m:
                found.append(f"{n}: {what}: {line.strip()[:120]}")
    return found


def test_the_patterns_catch_the_process_and_spare_generic_uses():
    n = 12   # the examples are built from n so that this file itself reads clean
    for bad in (f"in session {n} we", "this session", f"Sessions {n}-{n + 6}", f"task {n}",
                f"TASK #{n}", f"task{n}", f"issue {n}", f"Issue #{n}", f"stop {n}"):
        assert _hits(bad), bad
    for ok in ('@pytest.fixture(scope="session")', "the task pair at 40 labels",
               "NVIDIA/cutlass#1335", "pytorch#96147", "an issue with 4 ranks", "a stop-gap",
               "the tasks of a sweep"):
        assert not _hits(ok), ok


FILES = _files()


@pytest.mark.parametrize("path", [p for p in FILES if p not in EXCLUDED
                                  and (Path(p).suffix in TEXT_SUFFIXES
                                       or Path(p).name in TEXT_NAMES)], ids=str)
def test_no_development_process_in_text(path):
    try:
        text = (ROOT / path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        pytest.skip("not UTF-8 text")
    hits = _hits(text)
    assert not hits, f"{path}:\n" + "\n".join(hits[:20])


def test_no_development_process_in_names():
    bad = []
    for path in FILES:
        for part in Path(path).parts:
            if _hits(re.sub(r"[_.\-]", " ", part)):
                bad.append(path)
                break
    assert not bad, "\n".join(bad[:40])
