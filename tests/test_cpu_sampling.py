"""The CPU SpMM's confidence-driven sampling: rounds of spread systematic groups, a
regression estimate on the groups' line accesses, a stop once the 95% half-width meets the target; the
estimate against the exhaustive simulation, thread independence, early stops and the fixed mode."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.engines.cpu import spmm as sp
from sim.engines.cpu.spec import cpu_spec
from sim.engines.cpu.spmm import SpmmJob, random_csr, simulate_spmm
from sim.hwconfig import load_hwconfig

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cpus():
    return {h: cpu_spec(load_hwconfig(h)) for h in ("xeon-e5-2680v4", "rpi4b")}


def _job(m, k, n, units, density, seed=1, scale=8.0):
    ip, ix = random_csr(units * m, k, density, seed=seed)
    return SpmmJob(ip, ix, m, k, n, units, scale)


def _locality_job(units=4, m=256, k=2048, n=1152, nnz=24, seed=5):
    """Rows whose B rows come from a small window (cache-resident after their first touch) or
    from anywhere in a B far larger than the caches, switching at irregular row blocks: the
    cycles per line access vary along the product (what the regression on accesses cannot absorb)."""
    rng = np.random.default_rng(seed)
    rows = units * m
    local = np.repeat(rng.random(rows // 8) < 0.5, 8)
    idx = [np.sort(rng.choice(32, nnz, replace=False)) if loc
           else np.sort(rng.choice(k, nnz, replace=False)) for loc in local]
    indptr = np.arange(rows + 1, dtype=np.int64) * nnz
    return SpmmJob(indptr, np.concatenate(idx).astype(np.int32), m, k, n, units, 1.0)


# the sampled products of the existing tests: tests/test_cpu_engine.py's 3% test (with its 4-row
# groups) and the products of tests/test_reuse.py large enough to be sampled
PRODUCTS = [("xeon-e5-2680v4", (256, 128, 1152, 4, 0.2), 4, 1),
            ("rpi4b", (256, 128, 1152, 4, 0.2), 4, 1),
            ("xeon-e5-2680v4", (784, 128, 1152, 8, 0.1), None, 0),
            ("rpi4b", (784, 128, 1152, 8, 0.1), None, 0),
            ("xeon-e5-2680v4", (196, 256, 2304, 8, 0.05), 2, 3)]


@pytest.mark.parametrize("hw,prod,unit_rows,seed", PRODUCTS)
def test_adaptive_within_3_percent_of_exhaustive(cpus, hw, prod, unit_rows, seed):
    cpu, job = cpus[hw], _job(*prod)
    ex = simulate_spmm(cpu, job, exhaustive=True, cache="exact")
    ad = simulate_spmm(cpu, job, exhaustive=False, unit_rows=unit_rows, seed=seed, cache="exact",
                       sampling="adaptive")
    d = ad[3]
    assert d["simulation"] == "sampled" and d["sampling"]["mode"] == "adaptive"
    assert d["sampling"]["estimator"] == "regression"
    assert abs(ad[0] / ex[0] - 1) <= 0.03
    # the reported interval and sample size
    assert d["groups_measured"] == sum(
        len(r) for r in sp._plan(job, cpu.threads, 1.0, False, seed, d["rows_per_group"],
                                 sp.SAMPLE_UNITS).rounds[:d["sampling"]["rounds"]])
    lo, hi = d["ci95_cycles"]
    assert lo <= ad[0] <= hi
    if d["sampling"]["rounds"] < d["sampling"]["rounds_max"]:
        assert d["ci95_rel"] <= d["sampling"]["target_rel"]


def test_homogeneous_stops_early_heterogeneous_goes_on(cpus):
    cpu = cpus["rpi4b"]
    homo = simulate_spmm(cpu, _job(784, 128, 1152, 8, 0.1), cache="exact", sampling="adaptive")
    het_job = _locality_job()
    het = simulate_spmm(cpu, het_job, exhaustive=False, cache="exact", sampling="adaptive")
    h, t = homo[3]["sampling"], het[3]["sampling"]
    assert h["rounds"] == sp.MIN_ROUNDS < h["rounds_max"]
    assert homo[3]["groups_measured"] == sp.MIN_ROUNDS * sp.ROUND_UNITS < sp.SAMPLE_UNITS
    assert homo[3]["ci95_rel"] <= sp.TARGET_REL
    assert t["rounds"] > sp.MIN_ROUNDS and het[3]["groups_measured"] > homo[3]["groups_measured"]
    # what the sample estimates: the exhaustive simulation in the same groups (a group's time is
    # the largest of its bounds, so the grouping itself moves this product's total by 17%: see
    # docs/explanation/performance.md), inside the reported interval
    ex = simulate_spmm(cpu, het_job, exhaustive=True, cache="exact",
                       unit_rows=het[3]["rows_per_group"])
    lo, hi = het[3]["ci95_cycles"]
    assert lo <= ex[0] <= hi


def test_rounds_are_spread_systematic_subsamples_of_the_fixed_picks(cpus):
    assert sp.spread_order(5) == [0, 3, 1, 4, 2]
    for k in range(1, 12):
        assert sorted(sp.spread_order(k)) == list(range(k))
    job = _job(784, 128, 1152, 8, 0.1)
    cpu = cpus["xeon-e5-2680v4"]
    plan = sp._plan(job, 1, 300.0, False, 7, None, sp.SAMPLE_UNITS)
    picks = np.sort(np.concatenate(plan.rounds))
    u, row = np.divmod(plan.starts[plan.measured][:, 0], job.m)       # the fixed plan's groups
    assert np.array_equal(picks, np.sort(u * plan.per_unit + row // plan.unit_rows))
    first = plan.rounds[0]
    # every round spans the product: one pick per k consecutive picks, not the first rows
    assert len(plan.rounds) == 5 and all(r.size == sp.ROUND_UNITS for r in plan.rounds)
    assert first.max() > 0.8 * plan.population and first.min() < 0.2 * plan.population
    assert cpu.threads == 1


def test_fixed_mode_is_the_old_sampler(cpus):
    cpu, job = cpus["xeon-e5-2680v4"], _job(784, 128, 1152, 8, 0.1)
    fx = simulate_spmm(cpu, job, cache="exact", sampling="fixed")
    with sp.sampling("fixed"):
        again = simulate_spmm(cpu, job, cache="exact")
    assert fx == again
    assert fx[3]["groups_measured"] == sp.SAMPLE_UNITS
    assert fx[3]["sampling"] == {"mode": "fixed", "estimator": "mean", "rounds": 5,
                                 "rounds_max": 5, "target_rel": None}
    ad = simulate_spmm(cpu, job, cache="exact")                      # the default
    assert ad[3]["sampling"]["mode"] == "adaptive"
    assert ad[3]["groups_measured"] < fx[3]["groups_measured"]
    with pytest.raises(ValueError, match="unknown sampling"):
        simulate_spmm(cpu, job, sampling="smarts")


def test_regression_estimate_is_exact_when_y_is_linear_in_x():
    x = np.array([3.0, 5.0, 7.0, 2.0])
    est, half = sp.regression_estimate(4.0 + 2.5 * x, x, 100.0, 40)
    assert est == pytest.approx(40 * 4.0 + 250.0) and half == pytest.approx(0.0, abs=1e-6)
    # equal x everywhere: the mean per group
    est, half = sp.regression_estimate(np.array([1.0, 2.0, 3.0]), np.ones(3), 30.0, 30)
    assert est == pytest.approx(60.0) and 0.0 < half < math.inf
    est, half = sp.regression_estimate(np.array([1.0, 2.0, 3.0]), np.ones(3), 3.0, 3)
    assert est == pytest.approx(6.0) and half == 0.0             # the whole population: no error
    assert sp._t975(11) == pytest.approx(2.201, abs=2e-3)
    assert sp._t975(59) == pytest.approx(2.001, abs=1e-3)


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
import numba
from test_cpu_sampling import _locality_job, _job
from sim.engines.cpu.spec import cpu_spec
from sim.engines.cpu.spmm import simulate_spmm
from sim.hwconfig import load_hwconfig
out = [numba.get_num_threads()]
for hw in ("xeon-e5-2680v4", "rpi4b"):
    cpu = cpu_spec(load_hwconfig(hw))
    for job in (_locality_job(), _job(784, 128, 1152, 8, 0.1)):
        r = simulate_spmm(cpu, job, exhaustive=False, cache="exact", sampling="adaptive")
        out.append([r[0], r[1], r[2], r[3]])
print(json.dumps(out))
"""


def test_adaptive_result_does_not_depend_on_the_thread_count():
    res = {}
    # the two children run side by side (independent processes: ~2x less wall time on 2 cores)
    procs = {n: subprocess.Popen([sys.executable, "-c", _CHILD, str(ROOT)],
                                 env=dict(os.environ, NUMBA_NUM_THREADS=str(n),
                                          PYTHONPATH=str(ROOT)),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (1, 2)}
    for n, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        res[n] = json.loads(out.strip().splitlines()[-1])
    assert res[1][0] == 1 and res[2][0] == 2
    assert res[1][1:] == res[2][1:]
