"""The whole training step in the system timeline (#13): non-GEMM kernels, the profile's optimizer,
`train --framework`, and the V100 vs 1080 Ti PruneTrain comparison."""
from __future__ import annotations

import json

import pytest

from sim.methods import parse_method
from sim.system.cluster import load_cluster
from sim.system.timeline import layer_times, simulate_iteration
from sim.workload import load_workload


@pytest.fixture(scope="module")
def a100():
    return load_cluster("dgx-a100-hdr")


def test_step_with_profile_at_least_gemm_only(a100):
    w = load_workload("resnet20")
    g = layer_times(w, 128, a100.device, a100.training, framework="gemm-only")
    p = layer_times(w, 128, a100.device, a100.training)          # pytorch-eager
    assert p.framework == "pytorch-eager" and g.framework == "gemm-only"
    assert g.ops_seconds == 0 and g.optimizer == 0 and p.ops_seconds > 0 and p.optimizer > 0
    assert p.gemm_seconds == pytest.approx(g.gemm_seconds, rel=1e-12)
    ig = simulate_iteration(g.layers, (), 25e6, g.optimizer)
    ip = simulate_iteration(p.layers, (), 25e6, p.optimizer, overhead_seconds=p.step_overhead)
    assert ip.seconds > ig.seconds
    assert ip.ops_seconds == pytest.approx(p.ops_seconds)
    # pools, adds and the loss are entries of their own, without gradient bytes
    names = [l.name for l in p.layers]
    assert "loss" == names[-1] and len(names) > len(w.layers)


def test_gemm_only_reproduces_the_old_iteration_except_the_optimizer(a100):
    """gemm-only: the step is exactly the engine's GEMM phases per layer as before #13 (no non-GEMM
    kernels, no optimizer, no framework time); what moved under the other profiles is the optimizer
    step (once params x 5 FP32 words / mem_bandwidth, OPTIMIZER_WORDS_PER_PARAM) and the ops."""
    from sim.driver import simulate_layer
    from sim.hwconfig import load_hwconfig
    w = load_workload("resnet20")
    g = layer_times(w, 128, a100.device, a100.training, framework="gemm-only")
    assert [l.name for l in g.layers] == [l.name for l in w.layers]
    assert g.optimizer == 0 and g.step_overhead == 0
    hw = load_hwconfig(a100.device.hwconfig)
    for lt, l in zip(g.layers, w.layers):
        assert lt.fwd_ops == 0 and lt.bwd_ops == 0
        ks = simulate_layer(hw, l, 128, dtype="fp16")
        for ph in ("fwd", "agbp", "wgc"):
            want = sum(k.seconds for k in ks.get(ph, []))
            assert getattr(lt, ph) == pytest.approx(want, rel=1e-12), (l.name, ph)


def test_zero_skips_wgc_not_bn_backward(a100):
    w = load_workload("resnet20")
    t = layer_times(w, 128, a100.device, a100.training)
    skip = frozenset(c.name for c in w.convs[:5])
    dense = simulate_iteration(t.layers, (), 25e6, t.optimizer)
    z = simulate_iteration(t.layers, (), 25e6, t.optimizer, skip)
    saved = sum(l.wgc for l in t.layers if l.name in skip)
    assert dense.compute_seconds - z.compute_seconds == pytest.approx(saved)
    assert z.ops_seconds == dense.ops_seconds


def test_roofline_path_adds_stream_ops_at_bandwidth(a100):
    from sim.frameworks import load_framework
    from sim.stepops import step_ops
    w = load_workload("cnn2")
    t = layer_times(w, 64, a100.device, a100.training, engine="roofline")
    ops = step_ops(w, 64, profile=load_framework("pytorch-eager"),
                   dtype_bytes=int(a100.training.activation_bytes.value))
    bw = a100.device.mem_bandwidth.value
    assert t.ops_seconds == pytest.approx(sum(o.bytes for o in ops if o.phase != "optimizer") / bw)
    assert t.optimizer == pytest.approx(sum(o.bytes for o in ops if o.phase == "optimizer") / bw)


def test_prunetrain_narrows_step_ops_and_adds_group_lasso(a100):
    from sim.system.prunetrain import apply_widths
    w = load_workload("resnet20")
    narrow = apply_widths(w, {l.name: (max(1, l.c_in // 2) if i else l.c_in, max(1, l.c_out // 2))
                              for i, l in enumerate(w.convs)})
    d = layer_times(w, 128, a100.device, a100.training, engine="roofline")
    n = layer_times(narrow, 128, a100.device, a100.training, engine="roofline")
    pt = layer_times(narrow, 128, a100.device, a100.training, engine="roofline",
                     method=parse_method("prunetrain"))
    assert n.ops_seconds < d.ops_seconds < 2 * n.ops_seconds + 1
    assert pt.ops_seconds > n.ops_seconds         # the group-lasso passes


def _pt_savings(uniform: float | None = None):
    """(saving, dense memory-bound share) per GPU of ResNet-50 ImageNet pruned by the model's
    rho-0.25 trajectory (final widths), or with every channel space cut to `uniform`."""
    from sim.system.prunetrain import apply_widths, lasso_trajectory
    w = load_workload("resnet50-imagenet")
    if uniform is None:
        widths = lasso_trajectory(w, 0.25, 5, 90, 256).widths_at(89)
    else:
        last = w.layers[-1].name
        widths = {l.name: (max(1, round(l.c_in * uniform)) if i else l.c_in,
                           l.c_out if l.name == last else max(1, round(l.c_out * uniform)))
                  for i, l in enumerate(w.layers)}
    wp = apply_widths(w, widths)
    out = {}
    for c in ("gtx1080ti-11gb", "prunetrain-v100-128"):
        cl = load_cluster(c)
        d = layer_times(w, 64, cl.device, cl.training)
        p = layer_times(wp, 64, cl.device, cl.training)
        tot = lambda t: t.gemm_seconds + t.ops_seconds + t.optimizer  # noqa: E731
        out[c] = (1 - tot(p) / tot(d), d.ops_seconds / tot(d))
    return out


def test_v100_memory_bound_share_is_smaller():
    s = _pt_savings()
    assert s["prunetrain-v100-128"][1] < s["gtx1080ti-11gb"][1]


@pytest.mark.parametrize("uniform", [None, 0.7])
def test_v100_saving_exceeds_1080ti(uniform):
    """PruneTrain's V100 saving exceeds the 1080 Ti's (VALIDATION.md C) under the model's
    trajectory and under a uniform cut to 0.7 of the channels (about the paper's inference FLOPs).
    It fails under a trajectory whose residual nodes stay almost dense: the
    ordering depends on the trajectory's shape, not only on the engines."""
    s = _pt_savings(uniform)
    assert s["prunetrain-v100-128"][0] > s["gtx1080ti-11gb"][0]


def _train(capsys, *extra):
    from sim.cli import main
    rc = main(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--epochs", "1",
               "--gpus", "8", "--json", *extra])
    return rc, capsys.readouterr()


def test_train_framework_changes_result(capsys):
    rc, out = _train(capsys)
    assert rc == 0
    d = json.loads(out.out)
    rc, out = _train(capsys, "--framework", "gemm-only")
    g = json.loads(out.out)
    assert d["framework"] == "pytorch-eager" and g["framework"] == "gemm-only"
    assert d["method"]["framework"] == "pytorch-eager"
    assert d["dense"]["train_seconds"] > g["dense"]["train_seconds"]


def test_train_unknown_framework_is_one_line(capsys):
    from sim.cli import main
    rc = main(["train", "--workload", "resnet20", "--cluster", "dgx-a100-hdr", "--epochs", "1",
               "--framework", "nosuch"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err and "--framework" in err and "nosuch" in err


def test_the_steps_ops_move_the_trainings_bytes_not_the_engines_default():
    """fp32 training on a tensor-core GPU (the V100 of prunetrain-v100-128: its engine's default
    dtype is fp16) moves 4 bytes per activation in BN / ReLU / add, as its GEMMs run fp32: the
    non-GEMM kernels follow the cluster's activation_bytes, and at twice the bytes they take
    longer (bandwidth-bound at full-size tensors) but never beat the HBM's peak."""
    from dataclasses import replace

    from sim.driver import engine_for
    from sim.hwconfig import load_hwconfig
    from sim.stepops import step_ops
    from sim.system.timeline import resolve_framework
    cl = load_cluster("prunetrain-v100-128")
    assert engine_for(load_hwconfig(cl.device.hwconfig)).step_dtype_bytes() == 2
    w = load_workload("resnet50-imagenet")
    fp32 = layer_times(w, 64, cl.device, cl.training)
    half = replace(cl.training, activation_bytes=replace(cl.training.activation_bytes, value=2.0))
    fp16 = layer_times(w, 64, cl.device, half)
    assert fp32.ops_seconds > 1.5 * fp16.ops_seconds
    moved = sum(o.bytes for o in step_ops(w, 64, profile=resolve_framework(None), dtype_bytes=4)
                if o.phase != "optimizer")
    assert moved / fp32.ops_seconds <= cl.device.mem_bandwidth.value
