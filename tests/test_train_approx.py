"""Wang et al.'s methods in `prunesim train` (sim.system): a scheduled (conv, batch) pair's WGC is
charged as the engine's kernels for the method's shape-only result (approx, approx-topk: the patch
engine; random: the generation kernel), averaged over the schedule's period; zero skips WGC and
its all-reduce; AGBP and the all-reduce of a full dW stay as dense's."""
from __future__ import annotations

import numpy as np
import pytest

from sim.methods import method_for, parse_method, refuse_unused
from sim.methods.approx import approx, approx_nominal, random_dw, random_nominal
from sim.methods.schedule import paper_schedule
from sim.system.cluster import load_cluster
from sim.system.prunetrain import simulate_run
from sim.workload import load_workload

SAMPLES = 1280          # 10 iterations at batch 128: the ratios do not depend on the count
BATCH = 128


@pytest.fixture(scope="module")
def titan():
    return load_cluster("titan-xp-12gb")


@pytest.fixture(scope="module")
def r20():
    return load_workload("resnet20")


_RUNS: dict = {}


def run(w, cl, spec, **kw):
    key = (w.name, cl.name, spec, tuple(sorted(kw.items())))
    if key not in _RUNS:
        _RUNS[key] = simulate_run(w, cl, parse_method(spec), epochs=1, batch=BATCH,
                                  samples=SAMPLES, **kw)
    return _RUNS[key]


def test_approx_changes_train_time_and_says_what_is_charged(titan, r20):
    from sim.replay import system_level_available
    d, a = run(r20, titan, "dense"), run(r20, titan, "approx")
    assert system_level_available(a)
    assert a.train_seconds != pytest.approx(d.train_seconds, rel=1e-6)
    assert a.comm_bytes == d.comm_bytes                 # a full dW is still sent
    note = " ".join(a.notes)
    assert "patch engine" in note and "instead of the dense WGC GEMM" in note
    assert "seeded uniform" in note                     # the synthetic pick is said


def test_schedule_changes_the_result(titan, r20):
    t = {s: run(r20, titan, f"approx:schedule={s}").train_seconds for s in (1, 2, 3)}
    assert len({round(v, 12) for v in t.values()}) == 3, t
    rt = {s: run(r20, titan, f"random:schedule={s}").train_seconds for s in (1, 2, 3)}
    assert len({round(v, 12) for v in rt.values()}) == 3, rt


def test_k_changes_the_result(titan, r20):
    k2, k3 = run(r20, titan, "approx-topk:k=2"), run(r20, titan, "approx-topk:k=3")
    assert k2.train_seconds != pytest.approx(k3.train_seconds, rel=1e-9)
    for spec in ("approx:schedule=2", "approx-topk:k=3,schedule=3", "random:schedule=3",
                 "zero:schedule=2"):
        refuse_unused(parse_method(spec), "train")      # accepted: each changes the result


def _scheduled(w, sched):
    table = paper_schedule(sched, len(w.convs))
    return [c for i, c in enumerate(w.convs) if table[i, 0]]


def _wgc(hw, layer, mr):
    from sim.driver import engine_for, phase_kernels
    ks = phase_kernels(engine_for(hw), layer, BATCH, mr, phases=("wgc",), dtype="fp32")["wgc"]
    return sum(k.seconds for k in ks), [k.kernel for k in ks]


def test_the_patch_kernels_are_what_is_charged(titan, r20):
    """Schedule 1 (period 1) on one device: the backward ends earlier than dense's by exactly
    the scheduled convs' dense WGC minus the patch engine's time for them."""
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig("titan-xp")
    d, a = run(r20, titan, "dense"), run(r20, titan, "approx")
    saved = {"approx": 0.0, "topk": 0.0}
    for c in _scheduled(r20, 1):
        dense, _ = _wgc(hw, c, None)
        t1, names = _wgc(hw, c, approx_nominal(c, BATCH, 1))
        assert "approx-wgc" in names and "transpose-I" in names and "transpose-dW" in names
        saved["approx"] += dense - t1
        saved["topk"] += dense - _wgc(hw, c, approx_nominal(c, BATCH, 3))[0]
    di = d.epochs[0].iteration
    assert di.compute_seconds - a.epochs[0].iteration.compute_seconds == pytest.approx(
        saved["approx"], rel=1e-9)
    tk = run(r20, titan, "approx-topk:k=3").epochs[0].iteration
    assert di.compute_seconds - tk.compute_seconds == pytest.approx(saved["topk"], rel=1e-9)
    assert a.epochs[0].iteration.comm_bytes == di.comm_bytes


def test_random_charges_its_generation_kernel_and_zero_still_skips(titan, r20):
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig("titan-xp")
    d, z, r = run(r20, titan, "dense"), run(r20, titan, "zero"), run(r20, titan, "random")
    sched = _scheduled(r20, 1)
    zi, ri, di = z.epochs[0].iteration, r.epochs[0].iteration, d.epochs[0].iteration
    # zero: WGC and its all-reduce skipped on the scheduled convs
    assert set(zi.skipped_wgc) == {c.name for c in sched} and zi.skipped_bytes > 0
    # random: the generation kernel on each scheduled conv, the full dW still all-reduced
    gen = 0.0
    for c in sched:
        t, names = _wgc(hw, c, random_nominal(c.tensor_shapes(1)["W"], BATCH))
        assert names == ["random-dw"] and t > 0
        gen += t
    assert ri.skipped_wgc == () and ri.comm_bytes == di.comm_bytes
    assert ri.compute_seconds - zi.compute_seconds == pytest.approx(gen, rel=1e-9)
    assert d.train_seconds > r.train_seconds > z.train_seconds
    assert "generation kernel" in " ".join(r.notes)


def test_nominal_results_match_the_methods_on_data(r20):
    """The shape-only results carry the work the methods report on a gradient of that shape;
    the synthetic pick is deterministic, in range and k distinct positions per (n, c)."""
    c = r20.convs[5]
    g = np.random.default_rng(0).laplace(size=c.tensor_shapes(8)["dO"]).astype(np.float32)
    for k in (1, 3):
        nom, real = approx_nominal(c, 8, k), approx(g, k)
        assert nom.work == real.work and nom.structure == real.structure == "per-channel"
        idx = nom.pick.index
        assert idx.shape == real.pick.index.shape and idx.min() >= 0 and idx.max() < c.p * c.q
        assert all(len(set(row)) == k for row in idx.reshape(-1, k).tolist())
        assert np.array_equal(idx, approx_nominal(c, 8, k).pick.index)
    w = c.tensor_shapes(1)["W"]
    assert random_nominal(w, 8).work == random_dw(w, 8, key=3).work
    spec = parse_method("approx")
    assert method_for(spec).system_result(spec, r20.layers[-1], 8) is None     # the FC layer


def test_refusals_are_one_line(titan, r20):
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="roofline model has no model") as e:
        run(r20, titan, "approx", engine="roofline")
    assert "\n" not in str(e.value)
    from dataclasses import replace
    xeon = replace(titan, device=replace(titan.device, hwconfig="xeon-e5-2680v4"))
    with pytest.raises(ConfigError, match="GPU kernels"):
        simulate_run(r20, xeon, parse_method("approx"), epochs=1, batch=8, samples=8)
    # a grouped conv on the schedule (MobileNet's depthwise conv2): refused, not dense
    with pytest.raises(ConfigError, match="ungrouped convs"):
        simulate_run(load_workload("mobilenet-imagenet"), titan, parse_method("approx"),
                     epochs=1, batch=8, samples=8)
    # the roofline model has random's generation: the dW write at mem_bandwidth
    rr, dr = run(r20, titan, "random", engine="roofline"), run(r20, titan, "dense",
                                                                engine="roofline")
    gen = sum(int(np.prod(c.tensor_shapes(1)["W"])) * 4 for c in _scheduled(r20, 1)) \
        / titan.device.mem_bandwidth.value
    dense = sum(l.wgc for l in _roofline_layers(r20, titan) if l.name in
                {c.name for c in _scheduled(r20, 1)})
    assert dr.epochs[0].iteration.compute_seconds - rr.epochs[0].iteration.compute_seconds \
        == pytest.approx(dense - gen, rel=1e-9)


def _roofline_layers(w, cl):
    from sim.system.timeline import layer_times
    return layer_times(w, BATCH, cl.device, cl.training, engine="roofline").layers


def test_train_prints_the_speedup(capsys):
    from conftest import run_main
    rc, out, err = run_main(["train", "--workload", "resnet20", "--cluster", "titan-xp-12gb",
                             "--method", "approx:schedule=2", "--epochs", "1",
                             "--train-samples", str(SAMPLES)], capsys)
    assert rc == 0, err
    line = [l for l in out.splitlines() if "vs dense: speedup" in l][0]
    assert "not available" not in line
    assert float(line.split("faster) ")[1].split(";")[0]) > 0
    assert "scheduled WGC per iteration" in out
