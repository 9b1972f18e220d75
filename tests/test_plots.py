"""Plots render from synthetic records: files exist and are non-empty, every axis is labeled, and
numeric axes carry a unit (checked on the matplotlib objects, not on pixels)."""
from __future__ import annotations

import re
from types import SimpleNamespace

import matplotlib
import pytest

from analysis import plots
from sim.errors import ConfigError
from sim.system.tta import Curve

matplotlib.use("Agg")
UNIT = re.compile(r"\((×|x|ms|µs|s|min|h|%|MB/device|epoch index)\)")


def net_records():
    out = []
    for hw, kind, scale in (("gpu-a", "gpu", 1e-3), ("cpu-b", "cpu", 1.0)):
        for wl in ("net1", "net2"):
            for i, (m, mid) in enumerate((("dense", "dense"), ("dbtd:p=0.99,sigma=paper", "dbtd"),
                                          ("sdgp-mag:nm=2:4", "sdgp-mag"))):
                f = 1.0 - 0.2 * i
                rec = {"hw": hw, "hw_kind": kind, "workload": wl, "batch": 64, "method": m,
                       "method_id": mid, "trace": "", "density": f, "fwd_s": scale,
                       "agbp_s": scale * f, "wgc_s": scale * f, "overhead_s": 0.0,
                       "backprop_s": 2 * scale * f, "step_s": scale * (1 + 2 * f)}
                rec["backprop_speedup"] = 1 / f
                rec["step_speedup"] = 3 / (1 + 2 * f)
                out.append(rec)
    return out


def layer_recs():
    return [{"hw": hw, "hw_kind": k, "workload": "net1", "batch": 64, "method": m,
             "iteration": it, "layer": f"conv{j}", "fwd_s": 1e-5 * s, "agbp_s": 2e-5 * s,
             "wgc_s": 3e-5 * s}
            for hw, k, s in (("gpu-a", "gpu", 1), ("cpu-b", "cpu", 1000))
            for m in ("dense", "dbtd:p=0.99,sigma=paper") for it in (0, 5) for j in range(4)]


def check_axes(fig):
    axes = [a for a in fig.axes if a.get_visible()]
    assert axes
    for ax in axes:
        for label, numeric in ((ax.get_ylabel(), True), (ax.get_xlabel(), False)):
            if not label:
                continue
            if numeric or "epoch" in label or "time" in label:
                assert UNIT.search(label), f"no unit in axis label {label!r}"
    assert any(a.get_ylabel() for a in axes) and any(a.get_xlabel() for a in axes)
    title = fig._suptitle.get_text() if fig._suptitle else axes[0].get_title()
    assert "batch" in title


def check_files(paths, formats=("png", "svg")):
    assert {p.suffix[1:] for p in paths} == set(formats)
    for p in paths:
        assert p.is_file() and p.stat().st_size > 1000


def test_speedup(tmp_path):
    check_axes(plots.fig_speedup(net_records()))
    check_files(plots.plot_speedup(net_records(), tmp_path, ("png", "pdf")), ("png", "pdf"))


def test_speedups_conv_backprop_and_whole_step(tmp_path):
    recs = net_records()
    # stores from before the whole step: the conv back-prop plot only
    assert {p.name for p in plots.plot_speedups(recs, tmp_path, ("png",))} == \
        {"speedup-backprop.png"}
    for r in recs:   # the step's other phases: the same time for every method
        r["whole_step_speedup"] = (r["step_s"] / r["step_speedup"] + 1.0) / (r["step_s"] + 1.0)
    fig = plots.fig_speedup(recs, "whole_step_speedup")
    check_axes(fig)
    assert "whole step" in fig._suptitle.get_text().lower()
    assert {p.name for p in plots.plot_speedups(recs, tmp_path, ("png",))} == \
        {"speedup-backprop.png", "speedup-whole.png"}


def test_layers(tmp_path):
    fig = plots.fig_layers(layer_recs())
    check_axes(fig)
    # one unit in every panel (the CPU's ~1000x longer times set it), each panel its own range
    assert fig.axes[0].get_ylabel() == fig.axes[1].get_ylabel() == "time / iteration (ms)"
    assert fig.axes[0].get_ylim()[1] < fig.axes[1].get_ylim()[1] / 100
    assert min(t.get_fontsize() for t in fig.axes[1].get_xticklabels()) >= 7
    check_files(plots.plot_layers(layer_recs(), tmp_path))


def test_layers_one_workload_at_a_time(tmp_path, capsys):
    two = layer_recs() + [{**r, "workload": "net2", "layer": "other" + r["layer"]}
                          for r in layer_recs()]
    with pytest.raises(ValueError, match="one workload at a time"):
        plots.fig_layers(two)
    store = pytest.importorskip("sim.results.store")
    db = tmp_path / "r.sqlite"
    with store.ResultStore(db) as st:
        for r in net_records():
            mine = [l for l in two if l["workload"] == r["workload"] and l["hw"] == r["hw"]
                    and l["method"] == r["method"] and l["iteration"] == 0]
            st.put({**r, "prunesim": "test", "hw_checksum": r["hw"], "trace_checksum": "t",
                    "iterations": 1, "seed": 0, "method_params": "{}"}, mine)
    args = SimpleNamespace(db=str(db), kind="layers", out=str(tmp_path / "o"), format="png",
                           methods=None, workload="net2")
    assert plots.cmd_plot(args) == 0
    assert "also holds net1" in capsys.readouterr().err


def tta_pts():
    curves = [Curve(None, ((0, 0.5), (1, 0.8), (2, 0.9))),
              Curve("dbtd:p=0.99,sigma=paper", ((0, 0.4), (1, 0.85), (2, 0.88)))]
    return plots.tta_points(net_records(), curves, iters_per_epoch=100, target=0.85)


def test_tta_and_pareto(tmp_path):
    pts = tta_pts()
    by = {(p["hw"], p["workload"], p["method"]): p for p in pts}
    d = by[("gpu-a", "net1", "dense")]
    assert d["epoch"] == 2 and d["tta_s"] == pytest.approx(3 * 100 * d["epoch_s"] / 100)
    # a method without its own curve gets no number (never dense's accuracy by assumption)
    assert by[("gpu-a", "net1", "sdgp-mag:nm=2:4")]["tta_s"] is None
    pts = [p for p in pts if p["workload"] == "net1"]
    for p in pts:
        p["target_rule"] = plots.TTA_RULE
    assert plots.TTA_RULE in plots.fig_tta(pts)._suptitle.get_text()
    assert plots.TTA_RULE in plots.fig_pareto(pts).axes[0].get_title()
    check_axes(plots.fig_tta(pts))
    check_axes(plots.fig_pareto(pts))
    check_files(plots.plot_tta(pts, tmp_path) + plots.plot_pareto(pts, tmp_path))


def test_comm(tmp_path):
    def run(method, scale):
        return {"method": method, "workload": "net1", "devices": 16, "cluster": "c", "batch": 64,
                "timing_source": "test",
                "per_epoch": [{"epoch": e, "iterations": 10, "comm_bytes": int(1e7 * scale / (1 + e)),
                               "comm_seconds": 0.01 * scale, "exposed_comm_seconds": 0.002}
                              for e in range(5)]}
    runs = [run("dense", 1.0), run("prunetrain:interval=10,rho=0.2", 0.5)]
    check_axes(plots.fig_comm(runs))
    check_files(plots.plot_comm(runs, tmp_path))
    # the exposed-communication lines are drawn thick enough to see
    fig = plots.fig_comm(runs)
    exposed = [l for l in fig.axes[1].get_lines() if "exposed" in l.get_label()]
    assert exposed and all(l.get_linewidth() >= 2 for l in exposed)


def test_comm_runs_only_methods_that_were_run_with_the_trace_setup():
    sample = plots.REPO / "traces/sample-resnet20-mnist5k"
    runs = plots.comm_runs("resnet20", "dgx-a100-hdr", methods=["dense", "zero:schedule=1",
                                                                "dbtd:p=0.99"], trace=sample)
    assert [r["method"] for r in runs] == ["dense", "zero:schedule=1"]   # no prunetrain
    # DBTD's compute effect is not modeled at system level: left out, and named
    assert runs[0]["left_out"] == ["dbtd p=0.99"]
    # the trace's run: 10 epochs at batch 64 on 4000 samples, 16 devices (as replay --cluster)
    assert all(len(r["per_epoch"]) == 10 and r["batch"] == 64 and r["devices"] == 16
               for r in runs)
    assert "not modeled at system level, left out: dbtd" in plots.fig_comm(runs)._suptitle.get_text()


def test_formats_and_store_errors(tmp_path):
    assert plots.parse_formats("svg") == ("png", "svg")
    with pytest.raises(ConfigError, match="--format"):
        plots.parse_formats("png,gif")
    args = SimpleNamespace(db=str(tmp_path / "none.sqlite"), kind="speedup", out=str(tmp_path),
                           format="png")
    with pytest.raises(ConfigError) as e:
        plots.cmd_plot(args)
    assert "\n" not in str(e.value) and ("none.sqlite" in str(e.value) or "store" in str(e.value))


def test_cmd_plot_from_store(tmp_path):
    store = pytest.importorskip("sim.results.store")
    db = tmp_path / "r.sqlite"
    st = store.ResultStore(db)
    try:
        for r in net_records():  # the key inputs a real record (sim.replay.Totals) carries
            st.put({**r, "prunesim": "test", "hw_checksum": r["hw"], "trace_checksum": "t",
                    "iterations": 1, "seed": 0, "method_params": "{}"})
    finally:
        st.close()
    args = SimpleNamespace(db=str(db), kind="speedup", out=str(tmp_path / "o"), format="png,svg")
    assert plots.cmd_plot(args) == 0
    check_files(sorted((tmp_path / "o").glob("[!.]*")))   # not the outputs manifest


def test_one_tta_rule_for_the_demo_and_plot(tmp_path):
    """`prunesim plot --kind tta` on the bundled trace's records uses the demo's curves and
    target (the same methods reach it in both)."""
    sample = plots.REPO / "traces/sample-resnet20-mnist5k"
    curves, src = plots.default_curves(sample)
    assert "docs/data/accuracy" in src and len({c.method for c in curves}) > 2
    # a trace of another setup falls back to its own log
    other, src2 = plots.default_curves(plots.REPO / "traces/sample-cnn2-mnist5k")
    assert "trace's log" in src2
    store = pytest.importorskip("sim.results.store")
    from sim.results import api
    db = tmp_path / "r.sqlite"
    api.replay(str(sample), hw=["a100-sxm4-40gb"], methods=["dbtd:p=0.99"], db=str(db))
    args = SimpleNamespace(db=str(db), kind="tta", out=str(tmp_path / "o"), format="png",
                           accuracy=None, target=None, iterations_per_epoch=None)
    import matplotlib.pyplot as plt
    seen = {}
    real = plots.fig_tta

    def spy(points):
        seen["target"] = points[0]["target"]
        seen["rule"] = points[0]["target_rule"]
        return real(points)
    plots.fig_tta = spy
    try:
        assert plots.cmd_plot(args) == 0
    finally:
        plots.fig_tta = real
        plt.close("all")
    assert seen["target"] == plots._default_target(curves)
    assert seen["rule"].startswith(plots.TTA_RULE) and "docs/data/accuracy" in seen["rule"]
    assert store  # the store module was importable


def test_speedup_value_labels_sit_above_the_1x_line():
    fig = plots.fig_speedup(net_records())
    ax = fig.axes[0]
    line = next(l for l in ax.get_lines() if list(l.get_ydata()) == [1.0, 1.0])
    labels = [t for t in ax.texts if t.get_text()]
    assert labels and all(t.get_zorder() > line.get_zorder() for t in labels)
    # an opaque box: where a bar ends near 1x, the label hides the line, not the other way round
    assert all(t.get_bbox_patch() is not None and t.get_bbox_patch().get_facecolor()[:3] == (1, 1, 1)
               for t in labels)


def test_roofline_points_stay_under_the_roofs(tmp_path):
    from sim.engines.gpu import spec as tc
    from sim.hwconfig import load_hwconfig
    from sim.workload import load_workload
    hw = load_hwconfig("a100-sxm4-40gb")
    w = load_workload("resnet20")
    pts = plots.roofline_points(w, 128, hw)
    n_phases = sum(3 if l.needs_agbp else 2 for l in w.layers)
    assert len(pts) == n_phases
    s = tc.gpu_spec(hw)
    peak = 2 * s.sm * s.fma_rate(s.default_dtype()) * s.clock
    bw = s.dram_bpc * s.clock
    for p in pts:
        ai = p["flops"] / p["dram_bytes"]
        assert p["flops"] / p["seconds"] <= min(peak, ai * bw) * 1.0001, p
    fig = plots.fig_roofline(pts, hw)
    ax = fig.axes[0]
    assert "(FLOP/byte" in ax.get_xlabel() and "(TFLOP/s)" in ax.get_ylabel()
    assert ax.get_xscale() == "log" and "312 TFLOP/s" in ax.get_legend().get_texts()[0].get_text()
    with pytest.raises(ConfigError, match="GPU"):
        plots.roofline_points(w, 128, load_hwconfig("xeon-e5-2680v4"))


def test_cmd_plot_roofline_one_file_per_gpu(tmp_path, cnn2_trace):
    from sim.results import api
    db = tmp_path / "r.sqlite"
    api.replay(str(cnn2_trace), hw=["a100-sxm4-40gb", "v100-sxm2", "xeon-e5-2680v4"],
               methods=["dense"], db=str(db), iteration=0)
    args = SimpleNamespace(db=str(db), kind="roofline", out=str(tmp_path / "o"), format="png",
                           workload=None)
    assert plots.cmd_plot(args) == 0
    assert sorted(p.name for p in (tmp_path / "o").glob("[!.]*")) == [
        "roofline-a100-sxm4-40gb.png", "roofline-v100-sxm2.png"]
