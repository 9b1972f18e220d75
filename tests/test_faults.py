"""Faults: kill -9 at random moments during synthesis and capture never leaves a file that a reader
takes as valid, and a rerun produces exactly what an uninterrupted run does."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.errors import TraceError
from sim.traces.format import open_trace, verify_record

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "sim", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _checksums(d: Path) -> dict:
    m = json.loads((d / "manifest.json").read_text())
    return {(r["iteration"], r["layer"], r["kind"]): r["sha256"] for r in m["records"]}


def _assert_partial_is_sound(d: Path) -> int:
    """Whatever a killed writer left: no manifest at all, or a manifest whose every record verifies."""
    if not (d / "manifest.json").exists():
        return 0
    tr = open_trace(d)           # must parse: the manifest is only ever replaced atomically
    for rec in tr.records:
        verify_record(d, rec)    # every listed tensor is complete and matches its checksum
    # files the manifest does not list (a temporary file, or a tensor renamed into place after
    # the last manifest rewrite) may remain: readers only ever open listed records
    listed = {r.path for r in tr.records}
    assert all((d / p).is_file() for p in listed)
    return len(tr.records)


SYNTH = ["trace", "synth", "--workload", "resnet20", "--batch", "16", "--iterations", "3",
         "--seed", "5"]


@pytest.fixture(scope="module")
def reference_synth(tmp_path_factory):
    """The uninterrupted run's checksums: started here, waited for on first use (each synthesis
    is one single-threaded process of ~10 s, mostly start-up: it runs beside the test's own)."""
    d = tmp_path_factory.mktemp("ref") / "t"
    p = _run(SYNTH + ["--out", str(d)])
    done: dict = {}

    def checksums() -> dict:
        if not done:
            assert p.wait(timeout=300) == 0
            done["sums"] = _checksums(d)
        return done["sums"]
    yield checksums
    if p.poll() is None:
        p.kill()
        p.wait()


def test_kill9_during_synthesis_then_rerun(tmp_path, reference_synth):
    rng = random.Random(1)
    kills = 0
    for attempt in range(3):
        d = tmp_path / f"t{attempt}"
        p = _run(SYNTH + ["--out", str(d)])
        # kill once the writer has a manifest (start-up takes seconds: a kill before it would
        # leave nothing to check), at a random moment of the writing
        deadline = time.time() + 120
        while p.poll() is None and not (d / "manifest.json").exists() and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait(timeout=60)
        # the manifest is only ever replaced atomically: once there, a kill cannot remove it
        assert (d / "manifest.json").exists()
        _assert_partial_is_sound(d)
    # the reruns (with --force over each partial directory) equal an uninterrupted run; they are
    # started together once every kill has landed (their directories are separate)
    reruns = [(d, _run(SYNTH + ["--out", str(d), "--force"]))
              for d in (tmp_path / f"t{attempt}" for attempt in range(3))]
    try:
        for d, p in reruns:
            assert p.wait(timeout=300) == 0
            assert _checksums(d) == reference_synth()
            assert open_trace(d).complete
    finally:
        for _, p in reruns:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert kills >= 1, "the synthesis always finished before the kill: make it longer"


def test_partial_trace_is_flagged_incomplete(tmp_path):
    d = tmp_path / "t"
    p = _run(SYNTH + ["--out", str(d), "--iterations", "40"])
    deadline = time.time() + 60
    while time.time() < deadline and not (d / "manifest.json").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    n = _assert_partial_is_sound(d)
    if n:
        assert not open_trace(d).complete


def test_capture_killed_leaves_a_sound_trace(tmp_path):
    pytest.importorskip("torch")
    d = tmp_path / "cap"
    p = _run(["capture", "--workload", "cnn2", "--dataset", "digits", "--epochs", "3",
              "--batch", "32", "--every", "5", "--subsample", "2", "--threads", "1",
              "--out", str(d)])
    time.sleep(6.0)
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    _assert_partial_is_sound(d)


def test_a_listed_tensor_replaced_by_a_partial_write_is_caught(cnn2_trace):
    """What atomic renames prevent, shown directly: a torn file is never accepted. (The trace is
    the shared cnn2 fixture, written by TraceWriter as `trace synth` writes its traces; a synth
    subprocess here cost ~6 s, nearly all of it start-up.)"""
    d = cnn2_trace
    verify_record(d, open_trace(d).records[0])      # whole, it verifies
    tr = open_trace(d)
    f = d / tr.records[0].path
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError):
        verify_record(d, tr.records[0])
