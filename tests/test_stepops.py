"""Non-GEMM kernels of a training step: byte counts against hand arithmetic on a tiny workload."""
from __future__ import annotations

import dataclasses

import pytest

from sim.errors import WorkloadError
from sim.frameworks import framework_from_dict, load_framework
from sim.methods import parse_method
from sim.stepops import (PARAM_BYTES, StreamOp, cpu_stream_args,
                         mta_launches, param_tensors, phase_totals, step_ops)
from sim.workload import load_workload, workload_from_dict

N = 2


def tiny(c=4, extra=()):
    # conv+bn+relu (8x8), max pool 2 -> 4x4, conv+bn, residual add with relu, fc
    return workload_from_dict({
        "name": "tiny", "input": {"channels": 3, "height": 8, "width": 8},
        "layers": [
            {"name": "c1", "op": "conv", "in": "x", "out": "c1", "c_out": c, "kernel": 3, "pad": 1,
             "bn": True, "relu": True},
            {"name": "p1", "op": "pool", "in": "c1", "out": "p1", "kind": "max", "kernel": 2},
            {"name": "c2", "op": "conv", "in": "p1", "out": "c2", "c_out": c, "kernel": 3, "pad": 1,
             "bn": True},
            {"name": "a1", "op": "add", "in": ["c2", "p1"], "out": "a1", "relu": True},
            {"name": "fc", "op": "fc", "in": "a1", "out": "fc", "c_out": 10},
            *extra]}, origin="tiny.yaml")


def prof(**over):
    params = {"fusions": [], "launch_overhead": "0 s", "optimizer": "sgd-momentum",
              "optimizer_impl": "per-param", "zero_grad": "set-to-none"}
    params.update(over)
    return framework_from_dict({"name": "t", "params": {k: {"value": v, "source": "test"}
                                                        for k, v in params.items()}})


def by_kernel(ops, layer):
    return {o.kernel: o for o in ops if o.layer == layer}


def test_conv_bn_relu_bytes():
    ops = step_ops(tiny(), N, profile=prof(), dtype_bytes=2)
    n = N * 4 * 8 * 8                      # c1's output elements
    k = by_kernel(ops, "c1")
    assert k["bn-fwd-stats"].read_bytes == 2 * n + 2 * 4 * PARAM_BYTES
    assert k["bn-fwd-normalize"].read_bytes == 2 * n + 4 * 4 * PARAM_BYTES
    assert k["bn-fwd-normalize"].write_bytes == 2 * n
    assert (k["relu-fwd"].read_bytes, k["relu-fwd"].write_bytes) == (2 * n, 2 * n)
    assert (k["relu-bwd"].read_bytes, k["relu-bwd"].write_bytes) == (4 * n, 2 * n)
    assert k["bn-bwd-reduce"].read_bytes == 4 * n + 2 * 4 * PARAM_BYTES
    assert k["bn-bwd-dx"].write_bytes == 2 * n
    assert "bias-add" not in k                 # BN convs have no bias


def test_pool_add_fc_loss_bytes():
    ops = step_ops(tiny(), N, profile=prof(), dtype_bytes=2)
    ni, no = N * 4 * 64, N * 4 * 16
    p = by_kernel(ops, "p1")
    assert p["maxpool-fwd"].read_bytes == 2 * ni
    assert p["maxpool-fwd"].write_bytes == 2 * no + 8 * no          # y + int64 indices
    assert (p["maxpool-bwd"].read_bytes, p["maxpool-bwd"].write_bytes) == (2 * no + 8 * no, 2 * ni)
    # p1 feeds c2 and the add: one gradient sum at the fork
    assert (p["grad-fan-in-add"].read_bytes, p["grad-fan-in-add"].write_bytes) == (4 * no, 2 * no)
    a = by_kernel(ops, "a1")
    assert (a["add-fwd"].read_bytes, a["add-fwd"].write_bytes) == (4 * no, 2 * no)
    assert "relu-fwd" in a and "relu-bwd" in a
    f = by_kernel(ops, "fc")
    assert "bias-add" in f and f["bias-grad"].write_bytes == 10 * PARAM_BYTES
    loss = by_kernel(ops, "loss")
    assert loss["log-softmax-fwd"].read_bytes == 2 * N * 10


def test_execution_order_and_phases():
    ops = step_ops(tiny(), N, profile=prof())
    phases = [o.phase for o in ops]
    assert phases == sorted(phases, key=["fwd-ops", "bwd-ops", "optimizer"].index)
    bwd_layers = [o.layer for o in ops if o.phase == "bwd-ops"]
    assert bwd_layers[0] == "loss" and bwd_layers[-1] == "c1"
    # the fork's gradient sum comes before the pool's own backward
    k = [o.kernel for o in ops if o.layer == "p1" and o.phase == "bwd-ops"]
    assert k == ["grad-fan-in-add", "maxpool-bwd"]


def test_fusions_remove_the_intermediate_round_trip():
    wl, n = tiny(), N * 4 * 64
    plain = step_ops(wl, N, profile=prof())
    fused = step_ops(wl, N, profile=prof(fusions=["bn-relu"]))
    c1p, c1f = by_kernel(plain, "c1"), by_kernel(fused, "c1")
    assert "relu-fwd" not in c1f and "relu-bwd" not in c1f
    mask = (n + 7) // 8
    assert c1f["bn-fwd-normalize"].write_bytes == 2 * n + mask
    saved = sum(o.bytes for o in plain) - sum(o.bytes for o in fused)
    # drop relu fwd (4n) and bwd (6n); pay the bit mask once written and twice read
    assert saved == 4 * n + 6 * n - 3 * mask
    # bn-add-relu: c2's BN adds the shortcut; the add kernel and its ReLU disappear
    no = N * 4 * 16
    f2 = step_ops(wl, N, profile=prof(fusions=["bn-add-relu"]))
    assert not [o for o in f2 if o.layer == "a1"]
    c2 = by_kernel(f2, "c2")
    assert c2["bn-fwd-normalize"].read_bytes == 4 * no + 4 * 4 * PARAM_BYTES
    assert c2["bn-bwd-dx"].write_bytes == 4 * no              # dx and dz
    # add-relu: one kernel, ReLU backward stays
    f3 = by_kernel(step_ops(wl, N, profile=prof(fusions=["add-relu"])), "a1")
    assert set(f3) == {"add-relu-fwd", "relu-bwd"}
    # fc bias in the GEMM epilogue
    assert "bias-add" not in by_kernel(step_ops(wl, N, profile=prof(fusions=["fc-bias"])), "fc")


def test_optimizer_words_per_parameter():
    wl = tiny()
    p = sum(param_tensors(wl))
    assert p == wl.params()
    sgd = {o.kernel: o for o in step_ops(wl, N, profile=prof())}["sgd-momentum-per-param"]
    assert (sgd.read_bytes, sgd.write_bytes) == (7 * p * 4, 4 * p * 4)
    assert sgd.launches == 4 * len(param_tensors(wl))
    fused = [o for o in step_ops(wl, N, profile=prof(optimizer_impl="fused"))
             if o.phase == "optimizer"][0]
    assert (fused.read_bytes, fused.write_bytes, fused.launches) == (3 * p * 4, 2 * p * 4, 1)
    adam = [o for o in step_ops(wl, N, profile=prof(optimizer="adam")) if o.phase == "optimizer"][0]
    assert (adam.read_bytes, adam.write_bytes) == (13 * p * 4, 8 * p * 4)
    afused = [o for o in step_ops(wl, N, profile=prof(optimizer="adam", optimizer_impl="fused"))
              if o.phase == "optimizer"][0]
    assert (afused.read_bytes, afused.write_bytes) == (4 * p * 4, 3 * p * 4)
    memset = [o for o in step_ops(wl, N, profile=prof(zero_grad="memset")) if o.op == "zero-grad"]
    assert memset[0].write_bytes == 4 * p


def test_multi_tensor_apply_launches():
    assert mta_launches(3, [100] * 48) == 1
    assert mta_launches(3, [100] * 49) == 2
    assert mta_launches(1, [320 * 65536]) == 1
    assert mta_launches(1, [320 * 65536 + 1]) == 2


def test_narrowed_workload_shrinks_bn_traffic():
    wide, narrow = step_ops(tiny(8), N, profile=prof()), step_ops(tiny(4), N, profile=prof())
    bn = lambda ops: sum(o.bytes for o in ops if o.op == "bn")
    assert bn(narrow) < bn(wide)
    assert phase_totals(narrow)["bwd-ops"]["read_bytes"] < phase_totals(wide)["bwd-ops"]["read_bytes"]


def test_methods():
    wl, pr = tiny(), prof()
    base = step_ops(wl, N, profile=pr)
    for m in ("zero", "sdgp-mag:nm=2:4", "approx"):       # nothing changes in the non-GEMM work
        assert step_ops(wl, N, profile=pr, method=parse_method(m)) == base
    pt = step_ops(wl, N, profile=pr, method=parse_method("prunetrain"))
    lasso = [o for o in pt if o.op == "group-lasso"]
    # per layer its norms (fwd) and gradient (bwd), then one pass over all the group norms
    assert {o.layer for o in lasso} == {"c1", "c2", "fc"} and len(pt) == len(base) + 7
    # the authors' _get_group_lasso: pow and sum per grouping (c1 and fc: one grouping each)
    assert [o.launches for o in lasso if o.kernel == "group-lasso-fwd"] == [2, 4, 2]
    norms = next(o for o in lasso if o.kernel == "group-lasso-norms")
    c1, c2, fc = (next(x for x in wl.layers if x.name == n) for n in ("c1", "c2", "fc"))
    assert norms.elems == c1.c_out + c2.c_out + c2.c_in + fc.c_in and norms.launches == 9


def test_authors_timing_drops_the_penalty_forward_only():
    """prunetrain:timing=authors: PruneTrain's scripts subtract the penalty's forward from each
    step's time; its backward and every other kernel stay."""
    wl, pr = tiny(), prof()
    wall = step_ops(wl, N, profile=pr, method=parse_method("prunetrain"))
    auth = step_ops(wl, N, profile=pr, method=parse_method("prunetrain:timing=authors"))
    assert auth == [o for o in wall if not (o.op == "group-lasso" and o.phase == "fwd-ops")]
    assert any(o.op == "group-lasso" and o.phase == "bwd-ops" for o in auth)


def test_gemm_only_gives_no_ops():
    assert step_ops(load_workload("resnet20"), 128, profile=load_framework("gemm-only")) == []


def test_unknown_op_is_one_line():
    wl = tiny()
    bad = dataclasses.replace(wl, ops=wl.ops + ({"name": "sm", "op": "swish", "in": "fc",
                                                 "out": "sm"},))
    with pytest.raises(WorkloadError) as ei:
        step_ops(bad, N, profile=prof())
    assert "\n" not in str(ei.value) and "'swish'" in str(ei.value) and "(sm).op" in str(ei.value)


def test_caffe_and_tensorflow_profiles_run_the_zoo():
    wl = load_workload("resnet20")
    pt = step_ops(wl, 128, profile=load_framework("pytorch-eager"))
    cf = step_ops(wl, 128, profile=load_framework("caffe"), dtype_bytes=4)
    tf = step_ops(wl, 128, profile=load_framework("tensorflow-1"))
    assert sum(o.bytes for o in cf) > 2 * sum(o.bytes for o in pt)   # fp32 and Caffe's extra passes
    assert [o for o in tf if o.kernel == "softmax-xent-fwd"]
    assert all(o.read_bytes >= 0 and o.write_bytes >= 0 and o.launches >= 1 for o in pt + cf + tf)


def _op(r=1000, w=500, flops=0, launches=1):
    return StreamOp("l", "relu", "fwd-ops", "k", r, w, flops, launches, 100, "")


def test_gpu_engine_stream_is_a_streaming_kernel_with_host_dispatch():
    from sim.engines.base import engine_for
    from sim.engines.gpu.stream import stream_kernel
    from sim.hwconfig import load_hwconfig
    hw = load_hwconfig("a100-sxm4-40gb")
    e = engine_for(hw)
    op = _op(r=3_000_000, w=1_000_000, flops=10 ** 6, launches=2)
    ref = stream_kernel(hw, "x", read_bytes=3e6, write_bytes=1e6, ops=5e5, launches=2)
    k = e.stream(op)
    assert k.seconds == pytest.approx(ref.seconds, rel=1e-12) and k.category == "step-op"
    # host dispatch costs only where it exceeds the GPU's own time
    assert e.stream(op, dispatch_s=1e-9).seconds == pytest.approx(k.seconds, rel=1e-12)
    slow = e.stream(op, dispatch_s=1e-3)
    assert slow.seconds == pytest.approx(2e-3) and slow.breakdown["dispatch"] > 0
    assert sum(slow.breakdown.values()) == pytest.approx(slow.seconds)


def test_cpu_stream_args():
    op = StreamOp("l", "relu", "bwd-ops", "relu-bwd", 800, 400, 100, 1, 100, "", 800, 400)
    a = cpu_stream_args(op, dtype_bytes=4)
    assert (a["loads"], a["stores"], a["elems"]) == (2.0, 1.0, 100.0)
    assert a["uops"] == pytest.approx(2 + 1 + 0.5 + 2)
    assert a["read_bytes"] == 800 and a["write_footprint"] == 400
    v = cpu_stream_args(op, dtype_bytes=4, simd_lanes=8)
    assert v["loads"] == 0.25


def test_cpu_stream_args_feed_stream_pass():
    from sim.engines.base import engine_for
    from sim.hwconfig import load_hwconfig
    e = engine_for(load_hwconfig("xeon-e5-2680v4"))
    ops = step_ops(tiny(), N, profile=load_framework("caffe"), dtype_bytes=4)
    for op in ops:
        k = e.stream(op)
        assert k.seconds > 0 and sum(k.bytes.values()) == pytest.approx(op.bytes, abs=2)
        assert k.category == "step-op"
    # Caffe runs kernels synchronously: dispatch adds to the loop's time
    assert e.stream(ops[0], dispatch_s=1e-6).seconds == pytest.approx(
        e.stream(ops[0]).seconds + 1e-6 * max(1, ops[0].launches))
