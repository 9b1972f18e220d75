"""Validate the patch-extraction engine against Wang et al. 2019 (VALIDATION.md B) on the TITAN Xp.

Everything below is computed by the engines from hwconfigs/titan-xp.yaml and the layer shapes;
the published numbers are printed next to the model's, never used by it.

    PYTHONPATH=. python tools/validate_patch.py [--hw titan-xp] [--json]

Parts:
  1. the four kernel rows (batch 128, 3x3 stride 1 pad 1): cuDNN-class dense wgrad (the tensor-core
     engine's GEMM pipeline on CUDA cores, fp32), approx kernel, transposes, total, speedup; the 2x2
     cuDNN figure is flagged as an outlier (cuDNN picked a poor algorithm) and not compared.
     Argmax positions: synthetic (seeded Laplace dO, as `prunesim layer` does), since no trace has
     these shapes.
  2. scaling: approx kernel time vs C_in (fixed C_in*H*W and fixed H*W), next to dense wgrad.
  3. transposes' share of the approx kernel.
  4. end to end: ResNet-20 (workloads/resnet20.yaml), batch 128, schedule 1 (every 4th conv from
     the 2nd), per-layer FWD + AGBP + WGC on the TITAN Xp, WGC of scheduled layers replaced by
     zero / random (efficient) / approx; argmax positions from the bundled real trace
     traces/sample-resnet20-mnist5k (MNIST resampled to 32x32, so CIFAR-10 shapes; 2 recorded
     samples per batch, cycled over 128).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sim.engines import tensorcore as tc  # noqa: E402
from sim.hwconfig import load_hwconfig  # noqa: E402
from sim.methods import apply_method, parse_method, stream_key  # noqa: E402
from sim.workload import load_workload, lower  # noqa: E402

BATCH = 128
# VALIDATION.md B, as printed (unit printed "microseconds"; the ratios are what matter)
KERNEL_ROWS = [  # C_in, C_out, H=W, cuDNN, approx kernel, transposes, approx total, speedup
    (256, 256, 8, 0.89, 0.46, 0.05, 0.51, 1.7),
    (128, 128, 16, 0.89, 0.20, 0.08, 0.28, 3.2),
    (512, 512, 4, 1.00, 1.25, 0.07, 1.32, 0.8),
    (512, 512, 2, 13.6, 1.22, 0.08, 1.30, 10.4),
]
OUTLIER = {(512, 512, 2): "cuDNN picked a poor algorithm for the 2x2 map (VALIDATION.md B): "
                          "not reproduced by design"}
E2E_PUBLISHED = {"zero": 7.1, "random": -1.4, "approx": 3.5}
CEILING_PUBLISHED = 8.0


def _err(pub: float, mod: float) -> str:
    return f"{(mod - pub) / pub * 100:+.0f} %"


def _wgc_split(ks) -> tuple[float, float, float]:
    kern = sum(k.seconds for k in ks if k.kernel in ("approx-wgc", "zero-dW"))
    tr = sum(k.seconds for k in ks if k.kernel.startswith("transpose"))
    return kern, tr, sum(k.seconds for k in ks)


def conv_layer(cin, cout, hw_, r=3):
    wl, layers, _ = tc._conv_workload(f"{BATCH},{cin},{cout},{hw_},{hw_},{r},{r},1,{r // 2}")
    return layers[0]


def kernel_rows(hw) -> list[dict]:
    out = []
    approx = parse_method("approx")
    for cin, cout, hw_, p_cud, p_k, p_t, p_tot, p_sp in KERNEL_ROWS:
        layer = conv_layer(cin, cout, hw_)
        dense = sum(k.seconds for k in tc.simulate_layer(hw, layer, BATCH, phases=("wgc",))["wgc"])
        ks = tc.simulate_layer(hw, layer, BATCH, method=approx, phases=("wgc",))["wgc"]
        kern, tr, tot = _wgc_split(ks)
        a = next(k for k in ks if k.kernel == "approx-wgc")
        out.append({"c_in": cin, "c_out": cout, "hw": hw_,
                    "published_ms": {"cudnn": p_cud, "kernel": p_k, "transposes": p_t,
                                     "total": p_tot, "speedup": p_sp},
                    "modeled_ms": {"cudnn": dense * 1e3, "kernel": kern * 1e3,
                                   "transposes": tr * 1e3, "total": tot * 1e3,
                                   "speedup": dense / tot},
                    "bound": a.details["bound"], "blocks_per_sm": a.details["blocks_per_sm"],
                    "registers": a.details["registers_per_thread"],
                    "l2_hit": a.details["l2_hit_rate"],
                    "outlier": OUTLIER.get((cin, cout, hw_))})
    return out


def scaling(hw) -> list[dict]:
    """Approx kernel vs dense wgrad as C_in grows: (a) H*W fixed at 8x8; (b) C_in*H*W fixed."""
    approx = parse_method("approx")
    rows = []
    for label, shapes in (("H=W=8, C_out=256", [(c, 256, 8) for c in (64, 128, 256, 512)]),
                          ("C_in*H*W fixed, C_out=256", [(64, 256, 16), (256, 256, 8),
                                                         (1024, 256, 4)])):
        for cin, cout, hw_ in shapes:
            layer = conv_layer(cin, cout, hw_)
            dense = sum(k.seconds for k in tc.simulate_layer(hw, layer, BATCH, phases=("wgc",))["wgc"])
            ks = tc.simulate_layer(hw, layer, BATCH, method=approx, phases=("wgc",))["wgc"]
            kern, tr, tot = _wgc_split(ks)
            rows.append({"series": label, "c_in": cin, "hw": hw_, "kernel_ms": kern * 1e3,
                         "dense_ms": dense * 1e3})
    return rows


def end_to_end(hw, trace_dir: Path, iteration: int = 300) -> dict:
    from sim.traces.format import open_trace
    wl = load_workload("resnet20")
    tr = open_trace(trace_dir)
    convs = wl.convs
    idx = {l.name: i for i, l in enumerate(convs)}
    from sim.methods.schedule import paper_schedule
    table = paper_schedule(1, len(convs))
    sched = [l.name for l in convs if table[idx[l.name], 0]]

    dense = {}
    for l in wl.layers:
        ks = tc.simulate_layer(hw, l, BATCH)
        dense[l.name] = {ph: sum(k.seconds for k in v) for ph, v in ks.items()}
    t_dense = sum(sum(v.values()) for v in dense.values())
    wgc_all = sum(v["wgc"] for v in dense.values())
    wgc_sched = sum(dense[n]["wgc"] for n in sched)
    res = {"layers": len(wl.layers), "convs": len(convs), "scheduled": sched,
           "dense_step_ms": t_dense * 1e3, "wgc_share": wgc_all / t_dense,
           "ceiling_pct": (t_dense / (t_dense - wgc_sched) - 1) * 100,
           "iteration": iteration, "methods": {}}
    for mid in ("zero", "random", "approx"):
        spec = parse_method(mid)
        wgc_new = 0.0
        detail = {}
        for name in sched:
            layer = wl.layer(name)
            g = lower(layer, BATCH)["wgc"]
            if mid == "approx":
                dO = np.asarray(tr.tensor(iteration, name), np.float32)
                mr = apply_method(spec, layer, dO, key=stream_key(0, layer.index, iteration),
                                  batch=BATCH, scheduled=True)
                mr.extra["positions_source"] = f"trace {trace_dir.name} it {iteration}"
            else:
                mr = apply_method(spec, layer, np.zeros((1,) + layer.tensor_shapes(1)["dO"][1:],
                                                        np.float32),
                                  key=stream_key(0, layer.index, iteration), batch=BATCH,
                                  scheduled=True)
            ks = tc.simulate_phase(g, mr, hw, layer=layer, batch=BATCH)
            t = sum(k.seconds for k in ks)
            wgc_new += t
            a = next((k for k in ks if k.kernel == "approx-wgc"), None)
            detail[name] = {"dense_wgc_us": dense[name]["wgc"] * 1e6, "new_wgc_us": t * 1e6,
                            **({"l2_hit": a.details["l2_hit_rate"], "bound": a.details["bound"]}
                               if a else {})}
        t_new = t_dense - wgc_sched + wgc_new
        res["methods"][mid] = {"step_ms": t_new * 1e3, "speedup_pct": (t_dense / t_new - 1) * 100,
                               "layers": detail}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hw", default="titan-xp")
    ap.add_argument("--trace", default=str(Path(__file__).resolve().parents[1] / "traces"
                                           / "sample-resnet20-mnist5k"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    hw = load_hwconfig(a.hw)
    rows = kernel_rows(hw)
    sc = scaling(hw)
    e2e = end_to_end(hw, Path(a.trace))
    if a.json:
        print(json.dumps({"hw": hw.name, "kernel_rows": rows, "scaling": sc, "end_to_end": e2e},
                         indent=1))
        return 0
    print(f"# Wang et al. 2019 on {hw.name} (batch {BATCH}, 3x3 convs; times in ms, published as "
          "printed)\n")
    print("| C_in | C_out | H=W | quantity | published | modeled | error |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for q in ("cudnn", "kernel", "transposes", "total", "speedup"):
            p, m = r["published_ms"][q], r["modeled_ms"][q]
            err = _err(p, m)
            if r["outlier"] and q in ("cudnn", "speedup"):
                err = "outlier (not fitted)"
            print(f"| {r['c_in']} | {r['c_out']} | {r['hw']} | {q} | {p:g} | {m:.3f} | {err} |")
    print()
    for r in rows:
        print(f"  {r['c_in']}/{r['c_out']}/{r['hw']}x{r['hw']}: approx kernel {r['bound']}-bound, "
              f"{r['blocks_per_sm']} block(s)/SM at {r['registers']} registers/thread, L2 hit "
              f"{r['l2_hit']:.1%}" + (f"  [{r['outlier']}]" if r["outlier"] else ""))
    print("\n## Scaling of the approx kernel (batch 128, 3x3)\n")
    print("| series | C_in | H=W | C_in*H*W | approx kernel ms | dense wgrad ms |")
    print("|---|---|---|---|---|---|")
    for r in sc:
        print(f"| {r['series']} | {r['c_in']} | {r['hw']} | {r['c_in'] * r['hw'] ** 2} | "
              f"{r['kernel_ms']:.3f} | {r['dense_ms']:.3f} |")
    print("\n## Transposes' share of the approx kernel time\n")
    for r in rows:
        p = r["published_ms"]["transposes"] / r["published_ms"]["kernel"]
        m = r["modeled_ms"]["transposes"] / r["modeled_ms"]["kernel"]
        print(f"  {r['c_in']}/{r['c_out']}/{r['hw']}: published {p:.0%}, modeled {m:.0%}")
    e = e2e
    print(f"\n## End to end: ResNet-20 CIFAR-10 shapes, batch {BATCH}, schedule 1, {hw.name}\n")
    print(f"  conv/FC layers {e['layers']} ({e['convs']} convs incl. 2 projection shortcuts); "
          f"scheduled: {', '.join(e['scheduled'])}")
    print(f"  dense step (FWD+AGBP+WGC of conv/FC layers only): {e['dense_step_ms']:.2f} ms; "
          f"WGC share {e['wgc_share']:.1%}")
    print(f"  argmax positions: real dO of {Path(a.trace).name}, iteration {e['iteration']}\n")
    print("| method | published speedup | modeled speedup | error (points) |")
    print("|---|---|---|---|")
    for mid, m in e["methods"].items():
        p = E2E_PUBLISHED[mid]
        note = " (paper: slow TF implementation; model: efficient kernel)" if mid == "random" else ""
        print(f"| {mid}{note} | {p:+.1f} % | {m['speedup_pct']:+.1f} % | "
              f"{m['speedup_pct'] - p:+.1f} |")
    print(f"| ceiling (skip scheduled WGC) | ~{CEILING_PUBLISHED:.0f} % | {e['ceiling_pct']:+.1f} % | "
          f"{e['ceiling_pct'] - CEILING_PUBLISHED:+.1f} |")
    # diagnostic, not a fit: the per-step time outside the modeled conv/FC GEMMs (BN, ReLU, adds,
    # loss, optimizer, framework) that would turn the modeled `zero` gain into the published one,
    # and what the other methods' gains become with that much extra time
    saved = e["dense_step_ms"] - e["methods"]["zero"]["step_ms"]
    extra = saved * (1 + E2E_PUBLISHED["zero"] / 100) / (E2E_PUBLISHED["zero"] / 100) \
        - e["dense_step_ms"]
    if extra > 0:
        diluted = {mid: ((e["dense_step_ms"] + extra) / (m["step_ms"] + extra) - 1) * 100
                   for mid, m in e["methods"].items()}
        print(f"\n  diagnostic: {extra:.2f} ms of un-modeled per-step time ({extra / (e['dense_step_ms'] + extra):.0%}"
              " of the step) would bring zero to the published +7.1 %; approx would then be "
              f"{diluted['approx']:+.1f} %, random (efficient) {diluted['random']:+.1f} %")
    print("\n  approx per scheduled layer (dense WGC us -> approx WGC us, L2 hit, bound):")
    for name, d in e["methods"]["approx"]["layers"].items():
        print(f"    {name}: {d['dense_wgc_us']:.1f} -> {d['new_wgc_us']:.1f}, "
              f"{d.get('l2_hit', 0):.1%}, {d.get('bound', '-')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
