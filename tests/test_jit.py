"""Numba compilation ahead of a first run: the compile log, the terminal note, `prunesim compile`."""
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from sim import jit

ROOT = Path(__file__).resolve().parent.parent


def _fresh_kernels():
    # new dispatchers every call, not cached: each first call is a real compilation
    @njit
    def inner(x):
        return x * 2

    @njit
    def outer(x):
        return inner(x) + 1

    return outer


def test_compile_log_counts_every_signature_and_the_outermost_time_once():
    log = jit.CompileLog()
    stop = jit.listen(log)
    try:
        outer = _fresh_kernels()
        assert outer(np.float64(1.0)) == 3.0
        assert outer(np.int64(1)) == 3              # a second signature: compiled again
        outer(np.int64(2))                         # known signature: nothing compiled
    finally:
        stop()
    names = [n.rsplit(".", 1)[-1] for n in log.names]
    assert names.count("outer") == 2 and names.count("inner") == 2
    assert log._depth == 0 and 0 < log.seconds < 60
    _fresh_kernels()(1.0)                          # after stop(): not counted
    assert len(log.names) == 4


def test_the_note_names_the_first_kernel_and_the_count(monkeypatch):
    monkeypatch.setattr(jit, "_ANNOUNCED", [])
    monkeypatch.setattr(jit.atexit, "register", lambda *a, **k: None)
    out = io.StringIO()
    log = jit.announce_compiles(out, force=True)
    try:
        _fresh_kernels()(1.0)
        assert jit.announce_compiles(out, force=True) is None     # once per process
    finally:
        log.stop()
    first = out.getvalue().splitlines()
    assert len(first) == 1 and "compiling" in first[0] and "outer" in first[0]
    jit.summary(log, out)
    assert "compiled 2 Numba kernel signatures" in out.getvalue().splitlines()[-1]


def test_no_note_off_a_terminal(monkeypatch):
    monkeypatch.setattr(jit, "_ANNOUNCED", [])
    monkeypatch.delenv("PRUNESIM_PROGRESS", raising=False)
    assert jit.announce_compiles(io.StringIO()) is None
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")
    assert jit.announce_compiles(io.StringIO(), force=None) is None


@pytest.mark.slow
def test_after_prunesim_compile_a_replay_compiles_nothing(tmp_path):
    # an empty Numba cache of its own: `prunesim compile` fills it, then a replay of another trace
    # with the demo's methods on three engines loads every kernel from it
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "sim", "compile"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.splitlines()[-1].split()[0]) > 20
    code = ("from sim import jit\n"
            "from sim.driver import engines_for, run_trace\n"
            "from sim.replay import parse_methods\n"
            "from sim.traces.format import open_trace\n"
            "from analysis.report import METHODS\n"
            "log = jit.CompileLog(); jit.listen(log)\n"
            "tr = open_trace('traces/sample-resnet20-mnist5k')\n"
            "for _ in run_trace(tr, parse_methods(list(METHODS)), engines_for(list(jit.WARM_HWCONFIGS)),"
            " iteration=tr.iterations[0]): pass\n"
            "print(len(log.names), log.names[:5])\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "0", r.stdout
