"""Section D: SDGP (McDanel et al. 2022) on A100: tensor-core AGBP, the whole step, and the
published accuracies that feed TTA studies."""
from __future__ import annotations

from typing import Iterator

from .report import Row, _fail

# ---------------------------------------------------------------------------------------------
# published figures (comparison targets only)

# VALIDATION.md D
PUB_D_AGBP_SHARE = [("resnet18-imagenet", 256, 33.17), ("resnet9", 512, 33.31)]
PUB_D_SDGP_IDEAL = 16.6
PUB_D_ACCURACY = {  # Table I, 2:4: dense / random / magnitude / rescaled magnitude
    "CIFAR-10 ResNet-9": (95.3, 94.5, 95.2, 95.2), "ImageNet ResNet-18": (71.4, 67.8, 70.9, 71.2),
    "ImageNet RegNetX-400MF": (73.3, 64.3, 72.1, 72.4), "ImageNet ResNet-50": (78.1, 70.3, 77.7, 77.6)}
PUB_D_NM_ACCURACY = {"1:4": 95.1, "2:4": 95.2, "1:8": 94.7, "2:8": 95.1, "4:8": 95.2, "2:16": 95.1,
                     "4:16": 95.2, "8:16": 95.2, "4:32": 94.9, "8:32": 95.3, "16:32": 95.3}


# ---- D (tensor cores) ---------------------------------------------------------------------


def _conv_phase_seconds(hw, wl, batch, method=None, layers=None):
    """Conv-layer seconds per phase, and AGBP split into its GEMMs, col2im, the method's separate
    passes ("pass"), its fused producer-epilogue share ("epilogue") and the bytes the method
    writes as compressed values ("values_b") and metadata ("meta_b")."""
    from sim.driver import simulate_workload
    rows = simulate_workload(hw, wl, batch, method=method, layers=layers or wl.convs)
    tot = {"fwd": 0.0, "agbp": 0.0, "wgc": 0.0}
    agbp = {"gemm": 0.0, "col2im": 0.0, "pass": 0.0, "epilogue": 0.0, "values_b": 0.0,
            "meta_b": 0.0}
    for row in rows:
        for ph, krs in row["phases"].items():
            for k in krs:
                tot[ph] += k.seconds
                if ph != "agbp":
                    continue
                kind = ("gemm" if k.category == "math" else "col2im" if k.category == "memory"
                        else "epilogue" if k.details.get("fused") else "pass")
                agbp[kind] += k.seconds
                w = k.details.get("work") if k.category == "method-overhead" else None
                if w and kind == "epilogue" or w and kind == "pass" and w["passes"] == 1:
                    # the selection/compression (a resmag rescale pass rewrites kept values)
                    agbp["values_b"] += w["elems_written"] * 2
                    agbp["meta_b"] += w["bytes_metadata"]
    return tot, agbp


def _d_sdgp_row(hw, name: str, batch: int, fused: bool, dense, dk) -> Row:
    """One SDGP 2:4 conv-time reduction row (fused or not) beside the paper's ideal 16.6 %, with
    the breakdown: AGBP GEMM saving, the method's separate pass, its fused epilogue share and the
    compressed bytes (values + metadata) it writes."""
    from sim.methods import parse_method
    from sim.workload import load_workload
    spec = parse_method("sdgp-mag:nm=2:4" + (",fused=true" if fused else ""))
    sparse, sk = _conv_phase_seconds(hw, load_workload(name), batch, spec)
    td, ts = sum(dense.values()), sum(sparse.values())
    ms = lambda v: f"{v * 1e3:.2f}"  # noqa: E731
    how = ("prune+compress in the epilogue of dO's producer (no launch, no re-read of dO): "
           f"{ms(sk['epilogue'])} ms, separate passes {ms(sk['pass'])} ms" if fused else
           f"a separate prune+compress pass: {ms(sk['pass'])} ms")
    return Row("D", f"2:4 SDGP conv-time reduction, {'fused' if fused else 'unfused'} "
               f"(paper: ideal estimate), {name} b{batch}",
               PUB_D_SDGP_IDEAL, 100 * (1 - ts / td), "%", f"{hw.name} / {name} / {spec.label}",
               note=(f"the paper's figure is an ideal (AGBP share / 2; the model's own split gives "
                     f"{100 * dense['agbp'] / td / 2:.1f} %); GEMM saving: 2:4 AGBP GEMMs run "
                     f"{dk['gemm'] / sk['gemm']:.2f}x faster, not 2x ({ms(dk['gemm'])} -> "
                     f"{ms(sk['gemm'])} ms), col2im of strided layers stays {ms(sk['col2im'])} ms; "
                     f"{how}; compression writes {sk['values_b'] / 1e6:.1f} MB values + "
                     f"{sk['meta_b'] / 1e6:.1f} MB metadata; of {ms(td)} ms dense conv time"))


def rows_d_tensorcore(quick: bool = False) -> Iterator[Row]:
    from sim.hwconfig import load_hwconfig
    from sim.workload import load_workload
    a100 = load_hwconfig("a100-sxm4-40gb")
    for name, batch, pub in PUB_D_AGBP_SHARE:
        tot, agbp = _conv_phase_seconds(a100, load_workload(name), batch)
        share = 100 * tot["agbp"] / sum(tot.values())
        yield Row("D", f"AGBP share of conv time, {name} b{batch}", pub, share, "%",
                  f"{a100.name} / {name} / dense fp16",
                  note="conv ms FWD {fwd:.2f}, AGBP {agbp:.2f}, WGC {wgc:.2f}".format(
                      **{k: v * 1e3 for k, v in tot.items()}))
        # SDGP's conv-time reduction on the same two networks, with a separate prune+compress
        # pass (unfused) and with it in the epilogue of dO's producer (fused)
        for fused in (False, True):
            try:
                yield _d_sdgp_row(a100, name, batch, fused, tot, agbp)
            except Exception as e:  # noqa: BLE001 - one failed row must not hide the others
                yield _fail("D", f"2:4 SDGP conv-time reduction, {name} b{batch}", e)


def rows_d_whole_step(quick: bool = False) -> Iterator[Row]:
    """SDGP 2:4 on the whole training step (pytorch-eager, one A100): VALIDATION.md states only
    the ideal conv-time reduction (16.6 %) and publishes no whole-step figure, so these rows
    compare with the conv ideal, qualitatively."""
    from sim.methods import parse_method
    from sim.system.cluster import load_cluster
    from sim.system.timeline import layer_times
    from sim.workload import load_workload
    cl = load_cluster("dgx-a100-hdr")
    spec = parse_method("sdgp-mag:nm=2:4")
    for name, batch in (("resnet18-imagenet", 256), ("resnet9", 512)):
        wl = load_workload(name)
        d = layer_times(wl, batch, cl.device, cl.training)
        s = layer_times(wl, batch, cl.device, cl.training, method=spec)
        tot = lambda t: t.gemm_seconds + t.ops_seconds + t.optimizer + t.step_overhead  # noqa
        red = 100 * (1 - tot(s) / tot(d))
        yield Row("D", f"2:4 SDGP whole-step time reduction, {name} b{batch}",
                  f"ideal {PUB_D_SDGP_IDEAL} % of conv time (no whole-step figure in the spec)",
                  red, "%", f"a100-sxm4-40gb / {name} / {spec.label} / pytorch-eager",
                  status="qualitative",
                  note=f"step {tot(d) * 1e3:.2f} -> {tot(s) * 1e3:.2f} ms; GEMMs "
                       f"{d.gemm_seconds * 1e3:.2f} -> {s.gemm_seconds * 1e3:.2f} ms, non-GEMM "
                       f"kernels {d.ops_seconds * 1e3:.2f} ms and optimizer "
                       f"{d.optimizer * 1e3:.2f} ms unchanged; data loading and the 0.2 output "
                       "scaling are not modeled")


# ---- D accuracy (inputs of TTA studies, not model outputs) ---------------------------------


def rows_d_accuracy(quick: bool = False) -> Iterator[Row]:
    names = ("dense", "random", "magnitude", "rescaled magnitude")
    for net, accs in PUB_D_ACCURACY.items():
        for n, a in zip(names, accs):
            yield Row("D", f"top-1 accuracy, {net}, 2:4 {n}", a, None, "%", status="input",
                      note="training accuracy is an input of TTA studies (sim/system/tta.py), "
                           "not something a performance model computes")
    for nm, a in PUB_D_NM_ACCURACY.items():
        yield Row("D", f"top-1 accuracy, CIFAR-10 ResNet-9, resmag {nm}", a, None, "%",
                  status="input", note="as above (authors' README)")
