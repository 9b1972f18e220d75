"""The CPU engine's sparse-path patterns built from the method's CSR (no dense mask) match the
mask path exactly, and the per-method-result memo returns the right pattern."""
from types import SimpleNamespace

import numpy as np

from sim.engines.cpu.engine import _SamplePattern
from sim.engines.cpu.spmm import (csr_of_keys, csr_of_mask, csr_t_of_keys, mask_of_result,
                                  pattern_keys, sample_transpose_keys)
from sim.methods.base import CSR


def _mr(n, c, pq, density, seed, shuffle=False, dup=False):
    rng = np.random.default_rng(seed)
    mask = rng.random((n * c, pq)) < density
    indptr, indices = csr_of_mask(mask)
    if shuffle or dup:
        rows = []
        for r in range(n * c):
            cols = list(indices[indptr[r]:indptr[r + 1]])
            if dup and cols:
                cols.append(cols[0])
            if shuffle:
                rng.shuffle(cols)
            rows.append(cols)
        indptr = np.concatenate([[0], np.cumsum([len(x) for x in rows])]).astype(np.int64)
        indices = np.array([x for r in rows for x in r], np.int32)
    csr = CSR(indptr, indices, np.ones(indices.size, np.float32), (n * c, pq))
    return SimpleNamespace(csr=csr, pruned=None)


def _mask_path(mr, n, c, pq):
    mask = mask_of_result(mr, n * c, pq)
    t = mask.reshape(n, c, pq).transpose(0, 2, 1).reshape(n * pq, c)
    return int(mask.sum()), csr_of_mask(mask), csr_of_mask(t)


def _same(a, b):
    return all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b))


def test_keys_match_the_mask_path():
    for n, c, pq, d, sh, dup in [(3, 5, 7, 0.3, False, False), (2, 16, 49, 0.05, True, False),
                                 (4, 8, 10, 0.5, True, True), (1, 3, 4, 0.0, False, False),
                                 (2, 4, 6, 1.0, False, True)]:
        mr = _mr(n, c, pq, d, 1, sh, dup)
        nnz, fwd, tr = _mask_path(mr, n, c, pq)
        keys = pattern_keys(mr, n * c, pq)
        assert keys.size == nnz
        assert _same(csr_of_keys(keys, n * c, pq), fwd)
        assert _same(csr_of_keys(sample_transpose_keys(keys, n, c, pq), n * pq, c), tr)
        assert _same(csr_t_of_keys(keys, n, c, pq), tr)        # the counting kernel, same CSR
        pat = _SamplePattern(mr, n, c, pq)
        assert pat.nnz == nnz and _same(pat.csr(), fwd) and _same(pat.csr_t(), tr)


def test_pruned_tensor_without_csr():
    rng = np.random.default_rng(3)
    pruned = np.where(rng.random((2, 4, 3, 3)) < 0.3, 1.0, 0.0).astype(np.float32)
    mr = SimpleNamespace(csr=None, pruned=pruned)
    nnz, fwd, tr = _mask_path(mr, 2, 4, 9)
    pat = _SamplePattern(mr, 2, 4, 9)
    assert pat.nnz == nnz and _same(pat.csr(), fwd) and _same(pat.csr_t(), tr)


def test_memo_follows_the_method_result_and_shape():
    a, b = _mr(2, 4, 9, 0.3, 1), _mr(2, 4, 9, 0.3, 2)
    pa = _SamplePattern.of(a, 2, 4, 9)
    assert _SamplePattern.of(a, 2, 4, 9) is pa                 # same result: reused
    pb = _SamplePattern.of(b, 2, 4, 9)                         # another result: rebuilt
    assert pb is not pa and _same(pb.csr(), _mask_path(b, 2, 4, 9)[1])
    p2 = _SamplePattern.of(b, 4, 2, 9)                         # same result, other geometry
    assert p2 is not pb and _same(p2.csr_t(), _mask_path(b, 4, 2, 9)[2])
