"""Shared fixtures: small but real-looking traces of the zoo workload cnn2.

`cnn2_trace` is a fresh copy (in the test's tmp_path) of a trace written once per test run with
TraceWriter: batch 8 sub-sampled to 2, two captured iterations (0 in epoch 0, 50 in epoch 1), dO of
every layer (float16 for convs, float32 for FC layers; one written through `open_tensor`'s memory
map), plus I of the first layer and W of the last at iteration 0, and a two-epoch training log.
Values are heavy-tailed (Student-t, 3 degrees of freedom) and ReLU-sparse, from a seeded numpy RNG.
Tests may corrupt their copy freely. `cnn2_trace_arrays` holds the arrays that were written, keyed
by (iteration, layer, kind); `trace_factory` writes a new trace with other options.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

# Hypothesis keeps a cache (constants, examples) under ./.hypothesis by default; tests write only
# inside temporary directories, so point it at one (unless the user chose a directory).
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    _hypothesis_dir = tempfile.mkdtemp(prefix="prunesim-hypothesis-")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _hypothesis_dir
    atexit.register(shutil.rmtree, _hypothesis_dir, True)

# One BLAS thread for NumPy/SciPy (OpenBLAS) in the test process and the subprocesses it starts,
# unless the user chose otherwise. The suite runs one test at a time on a 2-core machine, where a
# second BLAS thread gains little, and when anything else holds a core (a subprocess the test
# started, another job) OpenBLAS's spinning threads stall each other: the lasso-model fits took
# 5-20x longer (test_fit_recovers_known_parameters 0.4 s alone, 7-8 s in a loaded run). Results do
# not depend on it (sim.engines.cpu.calibrate pins BLAS to one thread itself for its measurements).
# Set before NumPy is first imported, which is here (pytest and its plugins do not import it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sim.traces.format import TraceWriter
from sim.workload import Workload, load_workload

CNN2_BATCH = 8
CNN2_SUBSAMPLE = 2
CNN2_ITERATIONS = ((0, 0), (50, 1))          # (iteration, epoch)
CNN2_LOG = [
    dict(epoch=0, train_loss=2.1034, val_acc=None, samples_seen=400, wall_time_s=1.25, method="dense"),
    dict(epoch=1, train_loss=1.7311, val_acc=0.4125, samples_seen=800, wall_time_s=2.5, method="dense"),
]
CNN2_PROVENANCE = {"model": "cnn2", "dataset": "synthetic-test", "method": "dense", "seed": 1234}


def run_main(argv, capsys):
    """`prunesim ARGV` in this process: (exit status, stdout, stderr)."""
    from sim.cli import main
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def heavy_tailed(rng: np.random.Generator, shape, dtype, density: float = 0.4,
                 scale: float = 1e-3) -> np.ndarray:
    """ReLU-sparse, Student-t(3) distributed values like real activation gradients."""
    x = rng.standard_t(3, size=shape) * scale
    x *= rng.random(shape) < density
    return x.astype(dtype)


def write_trace(out: Path, workload: Workload | str = "cnn2", *, batch: int = CNN2_BATCH,
                subsample: int | None = CNN2_SUBSAMPLE, iterations=CNN2_ITERATIONS, seed: int = 0,
                extra_kinds: bool = True, log=CNN2_LOG, shuffle: bool = False,
                provenance: dict | None = None) -> dict:
    """Write a trace with TraceWriter; return {(iteration, layer, kind): array written}."""
    w = load_workload(workload) if isinstance(workload, (str, Path)) else workload
    rb = subsample or batch
    rng = np.random.default_rng(seed)
    arrays: dict[tuple[int, str, str], np.ndarray] = {}
    with TraceWriter(out, w, batch=batch, batch_subsample=subsample,
                     provenance=dict(provenance or CNN2_PROVENANCE)) as tw:
        for n, (it, ep) in enumerate(iterations):
            jobs = [(l, "dO") for l in w.layers]
            if extra_kinds and n == 0:
                jobs += [(w.layers[0], "I"), (w.layers[-1], "W")]
            if shuffle:
                jobs = [jobs[i] for i in rng.permutation(len(jobs))]
            for j, (layer, kind) in enumerate(jobs):
                dtype = "float16" if (layer.op == "conv" and kind == "dO") else "float32"
                shape = layer.tensor_shapes(rb)[kind]
                a = heavy_tailed(rng, shape, dtype)
                if kind == "dO" and layer.op == "conv" and layer is w.convs[-1]:
                    # fill through the memory map, in slabs, as capture does for huge layers
                    with tw.open_tensor(it, ep, layer.name, kind, shape, dtype) as mm:
                        for i in range(shape[0]):
                            mm[i] = a[i]
                else:
                    tw.add(it, ep, layer.name, kind, a)
                arrays[(it, layer.name, kind)] = a
            tw.end_iteration()
        for row in log or ():
            tw.log_epoch(**row)
    return arrays


@pytest.fixture(scope="session")
def _cnn2_pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine") / "cnn2-trace"
    arrays = write_trace(out)
    return out, arrays


@pytest.fixture
def cnn2_trace(tmp_path, _cnn2_pristine) -> Path:
    """Path of a fresh, valid cnn2 trace directory in this test's tmp_path (safe to corrupt)."""
    dst = tmp_path / "cnn2-trace"
    shutil.copytree(_cnn2_pristine[0], dst)
    return dst


@pytest.fixture
def cnn2_trace_arrays(_cnn2_pristine) -> dict:
    """{(iteration, layer, kind): array} exactly as written into `cnn2_trace` (do not modify)."""
    return _cnn2_pristine[1]


@pytest.fixture
def trace_factory(tmp_path) -> Callable[..., tuple[Path, dict]]:
    """trace_factory(name='trace', **write_trace options) -> (path, arrays)."""
    def make(name: str = "trace", **kw) -> tuple[Path, dict]:
        out = tmp_path / name
        return out, write_trace(out, **kw)
    return make
