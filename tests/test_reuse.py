"""Reuse-distance profiles: kernels against their references, profile misses against the exact LRU
simulation, profile reuse across geometries, and the `--cache` option."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from sim.cli import main
from sim.engines.cpu import cache as cs
from sim.engines.cpu import reuse as rs
from sim.engines.cpu.spec import cpu_spec
from sim.engines.cpu.spmm import SpmmJob, random_csr, simulate_spmm
from sim.hwconfig import load_hwconfig


def test_stack_distances_match_reference():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 40, 3000)
    np.testing.assert_array_equal(rs.stack_distances(ids, 40), rs.stack_distances_ref(ids))


@pytest.mark.parametrize("threads,pf", [(1, (4, 6, 2)), (2, (2, 3, 1)), (2, (8, 20, 2)),
                                        (1, (0, 0, 0))])
def test_prefetch_replay_matches_reference(threads, pf):
    """The replayed stream table and the distances (and blocks of consecutive lines) over accesses
    and prefetch lookups, against a scanned table and an explicit LRU stack; lookups past the last
    id (152) are first touches."""
    rng = np.random.default_rng(threads * 10 + pf[0])
    base = np.repeat(rng.integers(0, 30, 300) * 5, 5) + np.tile(np.arange(5), 300)
    ids = np.where(rng.random(1500) < 0.15, rng.integers(0, 150, 1500), base)
    thread = rng.integers(0, threads, 1500).astype(np.int32)
    d = rs.stack_distances(ids, 152)
    got = rs.prefetch_replay(ids, thread, threads, 152, d, 8, *pf)
    ref = rs.prefetch_replay_ref(ids, thread, threads, 152, d, 8, *pf)
    assert (got[2].size > 300) == (pf[0] > 0) and (got[3] < 0).any() == (pf[0] > 0)
    assert (got[1] <= np.maximum(got[0], 0)).all() and got[1].max() > 1
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_distance_bins_round_trip():
    d = np.array([-1, 0, 5, 63, 64, 100, 1000, 10 ** 6])
    back = rs.bin_distance(rs.distance_bin(d))
    assert back[0] == -1 and np.array_equal(back[1:4], d[1:4])
    assert np.all(np.abs(back[4:] / d[4:] - 1) < 0.05)


@pytest.mark.parametrize("chunk,threads", [(0, 1), (24, 1), (0, 2)])
def test_fully_associative_l1_misses_are_exact(chunk, threads):
    """One set: LRU misses exactly when the stack distance reaches the ways, so the profile's L1
    counts must equal the exact simulator's count for count (no prefetcher)."""
    indptr, indices = random_csr(40, 30, 0.2, seed=3)
    starts = np.array([[0, 20], [5, 25], [10, 30]], np.int64)[:, :threads]
    nrows = np.array([[5, 5], [5, 5], [6, 6]], np.int64)[:, :threads]
    measure = np.array([False, True, True])
    line, n_b = 64, 40
    lv = [cs.make_level(threads, 16 * line, 16, line), cs.make_level(threads, 64 * line, 64, line),
          cs.make_level(1, 256 * line, 256, line)]
    now = cs.warm_region(cs.B_BASE, 30 * n_b * 4, line, threads, *lv, True, False, 0)
    counts = np.zeros((3, threads, cs.N_COUNTS), np.int64)
    pf = [np.zeros((threads, 0), np.int64)] * 3
    cs.spmm_stream(indptr, indices, starts, nrows, measure, n_b, chunk, line, *lv, True, False,
                   *pf, 0, 0, counts, now)
    prof = rs.build_profile(indptr, indices, starts[None], nrows[None], measure[None], n_b, 30,
                            chunk, line)
    got = rs.misses_from_profile(prof, line=line, l1=(16 * line, 16), l2=(64 * line, 64),
                                 l2_private=True, l3=(256 * line, 256), pf_streams=0, pf_dist=0,
                                 pf_degree=0).reshape(3, threads, cs.N_COUNTS)
    np.testing.assert_allclose(got[..., cs.L1_HIT], counts[..., cs.L1_HIT])
    np.testing.assert_allclose(got[..., :4].sum(-1), counts[..., :4].sum(-1))


def test_binomial_model_against_random_mapping():
    """Smith's model is exact in expectation for lines placed at random: a random line stream
    through the exact set-associative kernel misses as often as the profile predicts (3%)."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 3000, 40000)
    lv = cs.make_level(1, 64 * 4 * 64, 4, 64)                 # 64 sets x 4 ways
    perm = rng.permutation(3000)                              # random set of each line
    miss = sum(not cs._lookup(lv, 0, int(perm[x]), i + 1) for i, x in enumerate(ids))
    d = rs.stack_distances(ids, 3000)
    pred = rs.miss_probability(d, 64 * 4 * 64, 4, 64).sum()
    assert abs(pred / miss - 1) < 0.03


def test_set_depths_match_reference_and_exact_lru():
    """Per-set depths against per-set lists (reads included), and against the exact
    set-associative kernel: a line misses an LRU set of A ways exactly when its depth is A or
    more, count for count, on B-like rows a fixed stride apart (so the sets fill unevenly)."""
    rng = np.random.default_rng(11)
    rows = rng.integers(0, 40, 1200)
    tags = (rows[:, None] * 72 + rng.integers(0, 12, 1200)[:, None] * 6 + np.arange(6)).ravel()
    offs = tags + 5 * 128                       # a region offset: a multiple of every set count
    touch = rng.random(tags.size) > 0.1
    counts = rs.SET_COUNTS[:3]
    got = rs.set_depths(tags, offs, touch, counts, 12)
    np.testing.assert_array_equal(got, rs.set_depths_ref(tags, offs, touch, counts, 12))
    assert 0 < (got == 12).mean() < 0.5 and (got[touch] == 0).any()
    for j, sets in enumerate(counts):
        ways = 4 + 2 * j
        lv = cs.make_level(1, int(sets) * ways * 64, ways, 64)
        on = np.nonzero(touch)[0]              # reads leave the exact level untouched
        miss = [not cs._lookup(lv, 0, int(offs[i]), n + 1) for n, i in enumerate(on)]
        np.testing.assert_array_equal(miss, got[on, j] >= ways)


@pytest.mark.parametrize("threads,pf", [(1, (4, 6, 2)), (2, (0, 0, 0))])
def test_depth_counts_match_reference(threads, pf):
    """The fused per-(kind, set count, bin, depth) counts of a replayed stream against the events
    laid out as arrays and priced by set_depths_ref; ids 0-151 in two regions (starts 0, 70,
    152), lookups past 152 are no line."""
    rng = np.random.default_rng(3 + threads)
    base = np.repeat(rng.integers(0, 30, 300) * 5, 5) + np.tile(np.arange(5), 300)
    ids = np.where(rng.random(1500) < 0.15, rng.integers(0, 150, 1500), base)
    thread = rng.integers(0, threads, 1500).astype(np.int32)
    d = rs.stack_distances(ids, 152)
    dist, _, lk_at, lk_d, _, _, ev_ref, lk_y = rs.prefetch_replay(ids, thread, threads, 152, d, 8,
                                                                  *pf)
    keep = rng.random(1500) < 0.7
    args = (ids, d, keep, rs.distance_bin(dist), lk_at, lk_y, rs.distance_bin(lk_d), ev_ref,
            np.array([0, 70, 152]), np.array([2, 4, 8]), 6, 8)
    got = rs.depth_counts(*args)
    np.testing.assert_array_equal(got, rs.depth_counts_ref(*args))
    kinds = got.sum(axis=(1, 2, 3))
    assert kinds[rs.DEMAND] > 0 and kinds[rs.READ] > 0 and (kinds[rs.LOOKUP] > 0) == (pf[0] > 0)
    assert got[..., 6].sum() > 0 and got[..., :6].sum() > 0


@pytest.mark.parametrize("run,sets,ways,pool", [(16, 64, 4, 96), (24, 128, 8, 200)])
def test_run_model_against_sequential_rows(run, sets, ways, pool):
    """Whole rows of `run` consecutive lines (as B rows stream) through the exact set-associative
    kernel miss as often as the run model predicts (1.5%); counting the accessed line's own row
    among the conflicting runs predicted 2.2% too many on the first case."""
    rng = np.random.default_rng(run)
    ids = (rng.integers(0, pool, 1500)[:, None] * run + np.arange(run)).ravel()
    lv = cs.make_level(1, sets * ways * 64, ways, 64)
    miss = sum(not cs._lookup(lv, 0, int(x), i + 1) for i, x in enumerate(ids))
    d = rs.stack_distances(ids, pool * run)
    pred = rs.miss_probability(d, sets * ways * 64, ways, 64, run).sum()
    assert abs(pred / miss - 1) < 0.015


PRODUCTS = [(256, 128, 1152, 4, 0.2), (784, 128, 1152, 8, 0.1), (196, 256, 2304, 8, 0.05)]


def _both(hw, prod, threads=1):
    m, k, n, u, d = prod
    ip, ix = random_csr(u * m, k, d, seed=1)
    job = SpmmJob(ip, ix, m, k, n, u, 8.0)
    cpu = cpu_spec(load_hwconfig(hw), threads)
    return simulate_spmm(cpu, job, cache="exact"), simulate_spmm(cpu, job, cache="profile")


@pytest.mark.parametrize("hw", ["rpi4b", "xeon-e5-2680v4"])
@pytest.mark.parametrize("prod", PRODUCTS[:2])
def test_profile_l1_misses_within_3_percent(hw, prod):
    ex, pr = _both(hw, prod)
    miss = lambda r: 1 - r[3]["hit_rates"]["l1"]          # noqa: E731
    assert pr[3]["cache_model"] == "profile" and ex[3]["cache_model"] == "exact"
    assert abs(miss(pr) / miss(ex) - 1) <= 0.03


@functools.lru_cache(maxsize=None)
def _misses_same_groups(hw, p):
    """Per level, the misses per demand access of both models on the same sampled groups
    ("fixed" sampling: the adaptive exact run stops after 24 groups, the profile uses all 60, so
    their counts would differ by sampling too). The demand accesses are the same stream, so these
    ratios compare the miss counts themselves. l1, l2: demand accesses missing that level;
    l2_all: with the prefetch lookups that miss L2; dram: lines brought from DRAM, demand and
    prefetch (the L3's misses on the Xeon, the L2's on the Pi, which has no L3)."""
    m, k, n, u, d = PRODUCTS[p]
    ip, ix = random_csr(u * m, k, d, seed=1)
    job = SpmmJob(ip, ix, m, k, n, u, 8.0)
    cpu = cpu_spec(load_hwconfig(hw), 1)
    out = []
    for model in ("exact", "profile"):
        _, _, by, det = simulate_spmm(cpu, job, cache=model, sampling="fixed")
        h = det["hit_rates"]
        dem = by["l1"] / cpu.line / h["l1"]
        pf = det["prefetched_lines"] / dem
        out.append({"l1": 1 - h["l1"], "l2": h["l3"] + h["dram"], "l2_all": h["l3"] + h["dram"] + pf,
                    "dram": by["dram"] / cpu.line / dem})
    return out


@pytest.mark.parametrize("level", ["l1", "l2", "l2_all", "dram"])
@pytest.mark.parametrize("hw,p", [(hw, p) for hw in ("rpi4b", "xeon-e5-2680v4") for p in range(3)])
def test_profile_miss_counts_within_3_percent(hw, p, level):
    """Miss counts from profiles within 3% of the exact LRU, every level of the six
    products (misses per demand access on identical groups: _misses_same_groups)."""
    ex, pr = _misses_same_groups(hw, p)
    assert abs(pr[level] / ex[level] - 1) <= 0.03, (pr[level], ex[level])


@pytest.mark.parametrize("hw", ["rpi4b", "xeon-e5-2680v4"])
@pytest.mark.parametrize("prod", PRODUCTS)
def test_profile_seconds_within_2_percent(hw, prod):
    ex, pr = _both(hw, prod)
    assert abs(pr[0] / ex[0] - 1) <= 0.02


@pytest.mark.parametrize("hw", ["rpi4b", "xeon-e5-2680v4"])
def test_profile_seconds_within_2_percent_four_threads(hw):
    """Four threads: the Pi's shared L2 takes the interleaved stream, the Xeon's private L2s each
    thread's own accesses and prefetches (a replay per thread, lookups matched back in order)."""
    ex, pr = _both(hw, PRODUCTS[0], threads=4)
    assert pr[3]["threads"] == 4 and pr[3]["prefetched_lines"] > 0
    assert abs(pr[0] / ex[0] - 1) <= 0.02


def test_profile_is_built_once_per_pattern_for_every_geometry():
    rs.clear_profiles()
    before = rs.cache_stats()
    ip, ix = random_csr(512, 128, 0.1, seed=4)
    job = SpmmJob(ip, ix, 512, 128, 576, 1, 1.0)
    base = cpu_spec(load_hwconfig("rpi4b"))
    secs = []
    for l2 in (256 << 10, 512 << 10, 1 << 20, 2 << 20):
        cpu = dataclasses.replace(base, l2=(l2,) + base.l2[1:])
        secs.append(simulate_spmm(cpu, job, cache="profile")[0])
    after = rs.cache_stats()
    assert after["built"] - before["built"] == 1 and after["reused"] - before["reused"] == 3
    assert secs[0] >= secs[-1]


def test_cache_option_changes_result_and_is_refused_without_cpu(capsys):
    out = {}
    for model in ("exact", "profile"):
        assert main(["gemm", "--hw", "xeon-e5-2680v4", "--m", "1024", "--n", "1152", "--k", "128",
                     "--density", "0.1", "--dtype", "fp32", "--cache", model]) == 0
        out[model] = capsys.readouterr().out
    assert out["exact"] != out["profile"]
    assert main(["gemm", "--hw", "a100-sxm4-40gb", "--m", "64", "--n", "64", "--k", "64",
                 "--cache", "profile"]) == 2
    assert "--cache" in capsys.readouterr().err


@pytest.mark.parametrize("l2_private,pf,l2", [(True, (32, 20, 2), 32768), (False, (8, 8, 1), 32768),
                                            (True, (0, 0, 0), 32768), (True, (32, 20, 2), 65536),
                                            (False, (8, 8, 1), 131072)])
def test_counts_kernel_matches_numpy_reference(l2_private, pf, l2):
    """64 sets: the binomial model; 128 and 256 sets: the measured set depths."""
    ip, ix = random_csr(300, 64, 0.15, seed=7)
    starts = np.array([[0], [100], [200]], np.int64)
    nrows = np.array([[100], [100], [100]], np.int64)
    prof = rs.build_profile(ip, ix, starts[None], nrows[None], np.array([[False, True, True]]),
                            256, 64, 24, 64)
    kw = dict(line=64, l1=(4096, 2), l2=(l2, 8), l2_private=l2_private, l3=(1 << 20, 16),
              pf_streams=pf[0], pf_dist=pf[1], pf_degree=pf[2])
    got = rs.misses_from_profile(prof, **kw)
    np.testing.assert_allclose(got, rs.misses_from_profile_ref(prof, **kw), rtol=1e-9, atol=1e-9)
    assert got[:, cs.PF_L3:].sum() > 0 if pf[0] else got[:, cs.PF_L3:].sum() == 0
