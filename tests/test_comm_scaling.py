"""PruneTrain's communication saving against the GPU count (sim/system/comm_saving.py).

The all-reduce payload saving does not depend on the GPU count; the time saving equals it when the
latency terms vanish and falls below it as the inter-node ring grows; the split into the model's
terms sums to the simulated total; the dynamic mini-batch's saving depends on the GPU count only
through the global-batch cap."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.methods import parse_method
from sim.system import collectives as co
from sim.system.batch_split import prunetrain_split
from sim.system.cluster import load_cluster
from sim.system.comm_saving import (allreduce_terms, allreduce_wire_by_level, run_comm_terms,
                                    saving_split)
from sim.system.prunetrain import DATASET_SAMPLES, lasso_trajectory, simulate_run
from sim.workload import load_workload

SCALES = (16, 32, 64, 128, 256)
RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def setting():
    w = load_workload("resnet50-imagenet")
    return w, load_cluster("prunetrain-v100-128"), lasso_trajectory(w, 0.25, 5, 90, 256)


def _runs(setting, cluster, **kw):
    w, _, tr = setting
    d = simulate_run(w, cluster, parse_method("dense"), epochs=90, batch=64, engine="roofline")
    p = simulate_run(w, cluster, parse_method("prunetrain:rho=0.25,interval=5"), epochs=90,
                     batch=64, trajectory=tr, engine="roofline", **kw)
    return d, p


def _without_latency(cluster, scale: float = 0.0):
    """The cluster with every dimension's per-step latency multiplied by `scale`."""
    dims = tuple(replace(d, latency=replace(d.latency, value=d.latency.value * scale))
                 for d in cluster.dimensions)
    return replace(cluster, dimensions=dims)


def test_terms_are_the_closed_form_and_the_simulation():
    for _ in range(30):
        lv = tuple(co.Level(int(RNG.integers(2, 40)), float(RNG.uniform(0, 2e-5)),
                            float(RNG.uniform(1e-12, 1e-9)), float(RNG.uniform(0, 1e-11)))
                   for _ in range(int(RNG.integers(1, 4))))
        n = float(RNG.uniform(1e3, 1e8))
        t = allreduce_terms(n, lv)
        assert sum(t.values()) == pytest.approx(co.allreduce_time(n, lv), rel=1e-12)
        assert sum(t.values()) == pytest.approx(co.simulate_allreduce(n, lv), rel=1e-9)
        shard = n
        for i, l in enumerate(lv):   # each level's terms, written out
            assert t[(i, "latency")] == pytest.approx(2 * (l.p - 1) * l.alpha, rel=1e-12)
            assert t[(i, "bandwidth")] == pytest.approx(2 * (l.p - 1) / l.p * shard * l.beta,
                                                        rel=1e-12)
            assert t[(i, "reduction")] == pytest.approx((l.p - 1) / l.p * shard * l.gamma,
                                                        rel=1e-12)
            shard /= l.p
        assert sum(allreduce_wire_by_level(n, lv)) == pytest.approx(co.allreduce_bytes_sent(n, lv),
                                                                    rel=1e-12)


def test_byte_saving_does_not_depend_on_gpu_count(setting):
    savings, wire = [], []
    for g in SCALES:
        cl = setting[1].with_devices(g)
        d, p = _runs(setting, cl)
        s = saving_split(d, p, co.levels_of(cl))
        assert s.bytes == pytest.approx(1 - p.comm_bytes / d.comm_bytes, rel=1e-12)
        savings.append(s.bytes)
        wire.append(1 - sum(s.pruned.wire) / sum(s.dense.wire))
    assert 0.3 < savings[0] < 0.8                       # pruning saves bytes at all
    assert max(savings) - min(savings) < 1e-12
    assert wire == pytest.approx(savings, rel=1e-12)    # on the wire too: 2 (p-1)/p x payload


def test_split_sums_to_the_simulated_saving(setting):
    for g in (16, 256):
        cl = setting[1].with_devices(g)
        d, p = _runs(setting, cl)
        s = saving_split(d, p, co.levels_of(cl))
        assert sum(s.contribution.values()) == pytest.approx(s.time, abs=1e-12)
        assert s.time == pytest.approx(1 - p.comm_seconds / d.comm_seconds, rel=1e-9)
        assert run_comm_terms(d, co.levels_of(cl)).seconds == pytest.approx(d.comm_seconds,
                                                                             rel=1e-9)
        assert sum(s.share.values()) == pytest.approx(1.0, rel=1e-12)
        # bandwidth terms save the payload's share, latency terms the all-reduce calls'
        for (i, term), v in s.term_saving.items():
            assert v == pytest.approx(s.bytes if term == "bandwidth" else s.calls, rel=1e-9)


def test_time_saving_reaches_byte_saving_without_latency(setting):
    gaps = []
    for scale in (1.0, 0.1, 0.01, 0.0):
        cl = _without_latency(setting[1], scale).with_devices(256)
        d, p = _runs(setting, cl)
        s = saving_split(d, p, co.levels_of(cl))
        gaps.append(s.bytes - s.time)
    assert gaps[0] > 0.01                       # at 256 GPUs the latency terms cost > 1 point
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] == pytest.approx(0.0, abs=1e-12)
    for g in SCALES:                            # no latency: equal at every GPU count
        cl = _without_latency(setting[1]).with_devices(g)
        s = saving_split(*_runs(setting, cl), co.levels_of(cl))
        assert s.time == pytest.approx(s.bytes, rel=1e-12)


def test_time_saving_falls_with_the_inter_node_latency_share(setting):
    shares, times = [], []
    for g in SCALES:
        cl = setting[1].with_devices(g)
        s = saving_split(*_runs(setting, cl), co.levels_of(cl))
        shares.append(s.share[(1, "latency")])
        times.append(s.time)
    assert shares == sorted(shares) and shares[-1] > 4 * shares[0]
    assert times == sorted(times, reverse=True)


def test_capped_dynamic_batch_depends_on_gpu_count_through_the_cap(setting):
    w, base, tr = setting
    spec = parse_method("prunetrain:rho=0.25,interval=5")
    out = {}
    for g in (16, 256):
        cl = base.with_devices(g)
        d, p = _runs(setting, cl)
        kw = dict(epochs=90, batch=64, trajectory=tr, samples=DATASET_SAMPLES["imagenet"],
                  dense=d, engine="roofline")
        capped = prunetrain_split(w, cl, spec, **kw)["run"]
        uncapped = prunetrain_split(w, cl, spec, max_global_batch=64 * g * 8, **kw)["run"]
        out[g] = [1 - r.comm_bytes / d.comm_bytes for r in (p, capped, uncapped)]
    # uncapped, the batch grows alike at both scales and saves more than the payload alone
    assert out[16][2] == pytest.approx(out[256][2], abs=0.005)
    assert out[16][2] > out[16][0] + 0.1
    # capped at 8192: 16 GPUs (512 a device) grow, 256 GPUs (64, the initial batch) do not
    assert out[16][1] == pytest.approx(out[16][2], abs=1e-12)
    assert out[256][1] == pytest.approx(out[256][0], abs=1e-12)
