"""Section B: Wang et al. 2019, approximate weight-gradient convolution on a TITAN Xp."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from .report import REPO, Row

BUNDLED_TRACE = REPO / "traces" / "sample-resnet20-mnist5k"

# ---------------------------------------------------------------------------------------------
# published figures (comparison targets only)

# VALIDATION.md B, kernel table: C_in, C_out, H=W, cuDNN, approx kernel, transposes, total, speedup
PUB_B_KERNELS = [(256, 256, 8, 0.89, 0.46, 0.05, 0.51, 1.7), (128, 128, 16, 0.89, 0.20, 0.08, 0.28, 3.2),
                 (512, 512, 4, 1.00, 1.25, 0.07, 1.32, 0.8), (512, 512, 2, 13.6, 1.22, 0.08, 1.30, 10.4)]
B_OUTLIER = (512, 512, 2)    # cuDNN's poor algorithm choice on 2x2: flagged, never fitted
PUB_B_E2E = {"zero": 7.1, "random": -1.4, "approx": 3.5}   # % end-to-end, ResNet-20, schedule 1
PUB_B_CNN2 = {"zero": -5.7, "random": -38.0, "approx": -6.6}  # % end-to-end, Table 2
PUB_B_RESNET14 = 22.0                                       # % faster training ResNet-14 instead
B_BATCH = 128


# ---- B (Wang et al., TITAN Xp, patch engine) -----------------------------------------------


def _b_layer(cin, cout, hw_):
    from sim.engines.cli import conv_workload
    _, layers, _ = conv_workload(f"{B_BATCH},{cin},{cout},{hw_},{hw_},3,3,1,1")
    return layers[0]


def _b_wgc(hw, layer, method=None):
    """(dense-or-method WGC seconds, approx kernel seconds, transpose seconds, kernels)."""
    from sim.driver import simulate_layer
    ks = simulate_layer(hw, layer, B_BATCH, method=method, phases=("wgc",))["wgc"]
    kern = sum(k.seconds for k in ks if k.kernel in ("approx-wgc", "zero-dW"))
    tr = sum(k.seconds for k in ks if k.kernel.startswith("transpose"))
    return sum(k.seconds for k in ks), kern, tr, ks


def _implied_fixed_ms(t20: float, t14: float) -> float:
    """The fixed per-step time X (ms) with (t20 + X) / (t14 + X) = 1 + PUB_B_RESNET14 / 100: the
    size of the overhead the ResNet-14 row's published figure implies (an error budget, not an
    input of the model)."""
    r = 1 + PUB_B_RESNET14 / 100
    return max(0.0, (t20 - r * t14) / (r - 1)) * 1e3


def rows_b(quick: bool = False, trace: Path = BUNDLED_TRACE) -> Iterator[Row]:
    import numpy as np

    from sim.driver import engine_for
    from sim.hwconfig import load_hwconfig
    from sim.methods import parse_method
    from sim.workload import load_workload
    hw = load_hwconfig("titan-xp")
    engine = engine_for(hw)
    approx = parse_method("approx")
    for cin, cout, hw_, p_cud, p_k, p_t, p_tot, p_sp in PUB_B_KERNELS:
        layer = _b_layer(cin, cout, hw_)
        dense, _, _, _ = _b_wgc(hw, layer)
        tot, kern, tr, _ = _b_wgc(hw, layer, approx)
        src = f"{hw.name} / conv {cin}->{cout} {hw_}x{hw_} 3x3 b{B_BATCH} / approx (synthetic dO)"
        outlier = (cin, cout, hw_) == B_OUTLIER
        yield Row("B", f"approx WGC speedup over dense wgrad, {cin}/{cout}/{hw_}x{hw_}", p_sp,
                  dense / tot, "x", src, status="outlier" if outlier else "ok",
                  note=(f"modeled dense wgrad {dense * 1e6:.1f} us vs approx total "
                        f"{tot * 1e6:.1f} us (kernel {kern * 1e6:.1f}, transposes {tr * 1e6:.1f})"
                        + ("; the published cuDNN time is its poor 2x2 algorithm choice, not "
                           "modeled by design" if outlier else "")))
        yield Row("B", f"transposes / approx kernel time, {cin}/{cout}/{hw_}x{hw_}", p_t / p_k,
                  tr / kern if kern else None, "ratio", src,
                  note="published: 'the transpose overhead is often more than half the kernel time'")
    # qualitative: the approx kernel scales with C_in, not C_in*H*W (C_in*H*W fixed below)
    t = {}
    for cin, hw_ in ((64, 16), (1024, 4)):
        _, kern, _, _ = _b_wgc(hw, _b_layer(cin, 256, hw_), approx)
        dense, _, _, _ = _b_wgc(hw, _b_layer(cin, 256, hw_))
        t[cin] = (kern, dense)
    yield Row("B", "approx kernel time ratio C_in 1024 vs 64 at fixed C_in*H*W (scales with C_in)",
              "grows with C_in", t[1024][0] / t[64][0], "ratio",
              f"{hw.name} / C_out 256, 64x16x16 vs 1024x4x4 / approx", status="qualitative",
              note=f"dense wgrad ratio on the same shapes {t[1024][1] / t[64][1]:.2f} "
                   "(constant C_in*H*W: cuDNN-class time stays roughly flat)")
    # end to end: per-layer FWD+AGBP+WGC on the TITAN Xp plus the whole step's non-GEMM kernels
    # under the tensorflow-1 profile (Wang et al. train in TensorFlow 1.x)
    from sim.traces.format import open_trace
    tr_ = open_trace(trace)
    it = tr_.iterations[len(tr_.iterations) // 2] if hasattr(tr_, "iterations") else 300
    it = it["iteration"] if isinstance(it, dict) else it
    wl = load_workload("resnet20")

    def trace_do(l):
        return np.asarray(tr_.tensor(it, l.name), np.float32)
    base = _b_dense(hw, wl)
    for mid in ("zero", "random", "approx"):
        e = _b_e2e(hw, engine, wl, mid, 1, trace_do, base)
        yield Row("B", f"end-to-end training speedup (whole step), ResNet-20 schedule 1, {mid}",
                  PUB_B_E2E[mid], e["whole"], "%", e["src"] + (
                      f"; argmax positions from {trace.name} iteration {it}" if mid == "approx"
                      else ""),
                  note=_b_note(e) + ("; the paper's random was a slow TensorFlow version (-1.4 % "
                                     "published), the model charges an efficient generation kernel"
                                     if mid == "random" else ""), points=True)
    b14 = _b_dense(hw, load_workload("resnet14"))
    whole = (base["whole"] / b14["whole"] - 1) * 100
    yield Row("B", "end-to-end training speedup (whole step), ResNet-14 instead of ResNet-20 "
              "(dense)", PUB_B_RESNET14, whole, "%", f"{hw.name} / resnet14 vs resnet20 "
              f"b{B_BATCH} / dense / tensorflow-1 profile",
              note=f"whole steps {base['whole'] * 1e3:.2f} vs {b14['whole'] * 1e3:.2f} ms "
                   f"(non-GEMM kernels {base['ops'] * 1e3:.2f} vs {b14['ops'] * 1e3:.2f} ms); "
                   f"conv/FC GEMMs alone give {(base['gemm'] / b14['gemm'] - 1) * 100:+.1f} %"
                   f"; error budget: a fixed per-step time X common to both networks (input "
                   f"pipeline, the framework's per-step overhead; no source, not modeled) would "
                   f"explain the "
                   f"published figure at X = {_implied_fixed_ms(base['whole'], b14['whole']):.2f}"
                   " ms",
              points=True)
    # Table 2: the 2-layer CNN, no trace: synthetic dO (the approx result depends on argmax
    # positions only through the kernel's work, which is per patch)
    cnn = load_workload("cnn2")
    rng = np.random.default_rng(0)

    def synth_do(l):
        return rng.standard_normal((8,) + tuple(l.tensor_shapes(1)["dO"][1:])).astype(np.float32)
    cb = _b_dense(hw, cnn)
    for sched in ((1,) if quick else (1, 2, 3)):
        for mid in ("zero", "random", "approx"):
            e = _b_e2e(hw, engine, cnn, mid, sched, synth_do, cb)
            pub = PUB_B_CNN2[mid] if sched == 1 else "not published per schedule"
            yield Row("B", f"end-to-end training speedup (whole step), 2-layer CNN schedule "
                      f"{sched}, {mid}", pub, e["whole"], "%", e["src"] + "; synthetic dO",
                      status="ok" if sched == 1 else "qualitative",
                      note=_b_note(e) + "; the published slowdown is TensorFlow's overhead of "
                      "switching the gradient computation per global step, which is not modeled: "
                      "this row is the method's own gain; the paper's schedules all approximate "
                      "the 2nd conv every other batch on this network (sim.methods.schedule), so "
                      "schedules 1-3 time alike", points=True)
    yield from _b_train_rows(quick)


def _b_train_rows(quick: bool) -> Iterator[Row]:
    """`prunesim train`'s own end-to-end speedups (sim.system.prunetrain.simulate_run: the whole
    step's SimPy timeline with the scheduled convs' WGC charged as the method's kernels), one
    TITAN Xp, batch B_BATCH, the tensorflow-1 profile: ResNet-20 (published for schedule 1) and
    VGG-19 (no published end-to-end figure: the computed rows the paper's VGG-19 runs stand for)."""
    from sim.methods import parse_method
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import simulate_run
    from sim.system.timeline import resolve_framework
    from sim.workload import load_workload
    cl = load_cluster("titan-xp-12gb").with_devices(1)
    kw = dict(epochs=1, batch=B_BATCH, framework=resolve_framework("tensorflow-1"))
    for name in (("resnet20",) if quick else ("resnet20", "vgg19-cifar")):
        w = load_workload(name)
        dense = simulate_run(w, cl, parse_method("dense"), **kw)
        for sched in ((1,) if quick else (1, 2, 3)):
            for mid in ("zero", "random", "approx"):
                run = simulate_run(w, cl, parse_method(f"{mid}:schedule={sched}"), **kw)
                gain = (dense.train_seconds / run.train_seconds - 1) * 100
                pub = PUB_B_E2E[mid] if name == "resnet20" and sched == 1 else \
                    "not published" if name == "resnet20" else "not published for VGG-19"
                charged = [n for n in run.notes if "per iteration" in n]
                yield Row("B", f"`prunesim train` end-to-end speedup, {name} schedule {sched}, "
                          f"{mid}", pub, gain, "%",
                          f"titan-xp-12gb (1 GPU) / {name} b{B_BATCH} / {mid}:schedule={sched} / "
                          "tensorflow-1 profile / one epoch",
                          status="ok" if isinstance(pub, float) else "qualitative", points=True,
                          note=f"epoch {dense.train_seconds:.3f} s dense -> "
                               f"{run.train_seconds:.3f} s; " + "; ".join(charged))


def _b_dense(hw, wl) -> dict:
    """Dense step of `wl` at B_BATCH on `hw`: GEMMs per layer and the tensorflow-1 non-GEMM
    kernels (sim.driver.step_kernels: BN, ReLU, adds, pools, the loss, the optimizer)."""
    from sim.driver import engine_for, simulate_layer, step_kernels
    from sim.frameworks import load_framework
    per = {l.name: {ph: sum(k.seconds for k in v) for ph, v in
                    simulate_layer(hw, l, B_BATCH).items()} for l in wl.layers}
    ks = step_kernels(engine_for(hw), wl, B_BATCH, load_framework("tensorflow-1"))
    ops = sum(k.seconds for kl in ks.values() for k in kl)
    gemm = sum(sum(v.values()) for v in per.values())
    return {"per": per, "gemm": gemm, "ops": ops, "whole": gemm + ops}


def _b_e2e(hw, engine, wl, mid: str, sched: int, dO_of, base: dict) -> dict:
    """Speedup in % of `mid` on schedule `sched`, averaged over the schedule's period: the
    scheduled layers' WGC replaced by the method's (zero skips it; the BN/ReLU backward stays)."""
    import numpy as np

    from sim.driver import phase_kernels
    from sim.methods import apply_method, parse_method, stream_key
    from sim.methods.schedule import paper_schedule
    table = paper_schedule(sched, len(wl.convs))
    spec = parse_method(mid)
    new_wgc = {}
    for i, l in enumerate(wl.convs):
        if not table[i].any():
            continue
        arr = dO_of(l) if mid == "approx" else \
            np.zeros((1,) + tuple(l.tensor_shapes(1)["dO"][1:]), np.float32)
        mr = apply_method(spec, l, arr, key=stream_key(0, l.index, 0), batch=B_BATCH,
                          scheduled=True)
        new_wgc[l.name] = sum(k.seconds for k in phase_kernels(engine, l, B_BATCH, mr,
                                                                phases=("wgc",))["wgc"])
    period = table.shape[1]
    delta = sum(new_wgc[l.name] - base["per"][l.name]["wgc"]
                for i, l in enumerate(wl.convs) for b in range(period) if table[i, b]) / period
    g_new, w_new = base["gemm"] + delta, base["whole"] + delta
    return {"whole": (base["whole"] / w_new - 1) * 100, "gemm": (base["gemm"] / g_new - 1) * 100,
            "base": base, "w_new": w_new, "g_new": g_new,
            "src": f"{hw.name} / {wl.name} b{B_BATCH} / {mid} schedule {sched} (mean over its "
                   f"{period}-batch period) / tensorflow-1 profile"}


def _b_note(e: dict) -> str:
    b = e["base"]
    return (f"whole step {b['whole'] * 1e3:.2f} -> {e['w_new'] * 1e3:.2f} ms, of which non-GEMM "
            f"kernels (BN, ReLU, adds, loss, optimizer) {b['ops'] * 1e3:.2f} ms; conv/FC GEMMs "
            f"alone {b['gemm'] * 1e3:.2f} -> {e['g_new'] * 1e3:.2f} ms ({e['gemm']:+.1f} %)")
