"""Synthetic traces: the statistical model, its fit, and the streaming, deterministic generator."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main as cli_main
from sim.errors import TraceError
from sim.traces import gradmodel as gm
from sim.traces import synth as sy
from sim.traces.format import open_trace, verify_record
from sim.workload import load_workload, zoo_names

SMALL_WL = """\
schema: 1
name: synth-test
input: {channels: 3, height: 32, width: 32}
layers:
  - {name: c1, op: conv, in: x, out: a1, c_out: 32, kernel: 3, pad: 1, relu: true}
  - {name: c2, op: conv, in: a1, out: a2, c_out: 32, kernel: 3, pad: 1, stride: 2, bn: true, relu: true}
  - {name: pool, op: pool, in: a2, out: p, kind: avg, global: true}
  - {name: fc, op: fc, in: p, out: y, c_out: 10}
"""


def _logq(lo: float, hi: float) -> tuple:
    z = np.asarray(gm.ZKNOTS)
    return tuple(float(v) for v in np.where(z < 0, lo, hi) * z)


def _params(**over) -> dict:
    base = dict(scale_per_sample=0.05, logq=_logq(2.0, 1.4), sigma_n=0.5, sigma_c=0.7, sigma_nc=0.4,
                shape_n=gm.NORMAL_SHAPE, shape_c=gm.NORMAL_SHAPE, shape_nc=gm.NORMAL_SHAPE,
                dead_fraction=0.0, zero_fraction=0.0, zero_kappa=None, pos_fraction=0.5, density=1.0)
    base.update(over)
    return base


def _stats() -> sy.Stats:
    relu = _params(dead_fraction=0.1, zero_fraction=0.55, zero_kappa=4.0, density=0.4)
    layers = [
        gm.LayerParams(name="c1", op="conv", block="conv-relu", masked=True, depth=0.0, plane=1024, **relu),
        gm.LayerParams(name="c2", op="conv", block="conv-bn-relu", masked=False, depth=1.0, plane=256,
                       **_params(logq=_logq(2.5, 1.1), sigma_nc=0.3)),
        gm.LayerParams(name="fc", op="fc", block="fc", masked=False, depth=0.0, plane=1,
                       **_params(sigma_nc=0.0, pos_fraction=0.9)),
    ]
    return sy.Stats(layers=layers, provenance={"test": "hand-set parameters for round trips"})


@pytest.fixture
def small_wl(tmp_path):
    f = tmp_path / "synth-test.yaml"
    f.write_text(SMALL_WL)
    return load_workload(f)


def _shas(path: Path) -> list[str]:
    return [r.sha256 for r in open_trace(path).records]


def test_synth_writes_a_valid_trace_with_workload_shapes(small_wl, tmp_path):
    out = sy.synth(small_wl, 6, tmp_path / "t", _stats(), iterations=2, seed=3)
    tr = open_trace(out)
    assert tr.complete and tr.iterations == [0, 1]
    assert tr.layer_names("dO") == [l.name for l in small_wl.layers]
    for r in tr.records:
        verify_record(tr.path, r)
        assert r.shape == small_wl.layer(r.layer).tensor_shapes(6)["dO"]
    prov = tr.provenance
    assert prov["synthetic"] is True and prov["method"] == "dense"
    assert prov["generator"]["seed"] == 3 and "stats" in prov
    x = tr.tensor(0, "c2")
    assert np.isfinite(x).all() and float(np.abs(x).mean()) > 0


def test_float16_and_subsample(small_wl, tmp_path):
    full = sy.synth(small_wl, 6, tmp_path / "full", _stats(), seed=5)
    sub = sy.synth(small_wl, 6, tmp_path / "sub", _stats(), seed=5, subsample=2)
    half = sy.synth(small_wl, 6, tmp_path / "half", _stats(), seed=5, dtype="float16")
    t_full, t_sub, t_half = open_trace(full), open_trace(sub), open_trace(half)
    assert t_sub.recorded_batch == 2 and t_sub.batch == 6
    # a sub-sampled trace holds exactly the first samples of the full one
    np.testing.assert_array_equal(t_sub.tensor(0, "c1"), t_full.tensor(0, "c1")[:2])
    assert t_half.tensor(0, "c1").dtype == np.float16


def test_deterministic_for_a_seed_and_independent_of_block_size(small_wl, tmp_path, monkeypatch):
    a = sy.synth(small_wl, 4, tmp_path / "a", _stats(), iterations=2, seed=11)
    b = sy.synth(small_wl, 4, tmp_path / "b", _stats(), iterations=2, seed=11)
    c = sy.synth(small_wl, 4, tmp_path / "c", _stats(), iterations=2, seed=12)
    monkeypatch.setattr(sy, "_BLOCK_ELEMS", 1000)   # splits planes across blocks
    d = sy.synth(small_wl, 4, tmp_path / "d", _stats(), iterations=2, seed=11)
    assert _shas(a) == _shas(b) == _shas(d)
    assert all(x != y for x, y in zip(_shas(a), _shas(c)))
    # iterations differ from each other too
    tr = open_trace(a)
    assert tr.record(0, "c1").sha256 != tr.record(1, "c1").sha256


def test_generation_memory_is_bounded(tmp_path):
    shape = (8, 64, 128, 128)                      # 8 Mi elements, 32 MiB float32
    mm = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype="float32", shape=shape)
    prm = _params(dead_fraction=0.1, zero_fraction=0.5, zero_kappa=2.0)
    tracemalloc.start()
    try:
        sy.generate_layer(mm, prm, batch=8, seed=0, iteration=0, layer_index=0, block_elems=1 << 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    nbytes = int(np.prod(shape)) * 4
    assert peak < nbytes / 8, f"peak {peak / 2**20:.1f} MiB for a {nbytes / 2**20:.0f} MiB tensor"
    mm.flush()
    assert float(np.abs(mm[-1]).sum()) > 0          # the last sample was written


def test_fit_synth_fit_recovers_parameters(small_wl, tmp_path):
    st = _stats()
    out = sy.synth(small_wl, 64, tmp_path / "t", st, iterations=3, seed=1)
    fitted = {p.name: p for p in sy.fit(out).layers}
    truth = {p.name: p for p in st.layers}
    mid = [gm.LEVELS.index(v) for v in (0.1, 0.3, 0.7, 0.9)]
    for name in ("c1", "c2"):
        f, t = fitted[name], truth[name]
        assert f.scale_per_sample == pytest.approx(t.scale_per_sample, rel=0.15), name
        assert abs(f.sigma_n - t.sigma_n) < 0.15, (name, f.sigma_n)
        assert abs(f.sigma_c - t.sigma_c) < 0.2, (name, f.sigma_c)
        assert abs(f.sigma_nc - t.sigma_nc) < 0.1, (name, f.sigma_nc)
        for i in mid:
            assert abs(f.logq[i] - t.logq[i]) < 0.2, (name, gm.LEVELS[i], f.logq[i], t.logq[i])
        assert abs(f.pos_fraction - t.pos_fraction) < 0.02
        assert abs(f.dead_fraction - t.dead_fraction) < 0.03
        assert abs(f.zero_fraction - t.zero_fraction) < 0.03
    assert 2.0 < fitted["c1"].zero_kappa < 8.0
    assert fitted["c2"].zero_fraction == 0.0 and fitted["c2"].dead_fraction == 0.0
    assert abs(fitted["fc"].pos_fraction - 0.9) < 0.05
    # a wrong parameter would be detected: the fit tells the two conv layers apart
    # (c2's lower tail is set 0.6 lower than c1's at the 10% level)
    assert fitted["c2"].logq[mid[0]] < fitted["c1"].logq[mid[0]] - 0.4


def test_conv_relu_zero_fraction_is_reproduced(small_wl, tmp_path):
    out = sy.synth(small_wl, 32, tmp_path / "t", _stats(), seed=2)
    x = open_trace(out).tensor(0, "c1")
    want = (1 - 0.1) * (1 - 0.55)
    assert abs(float((x != 0).mean()) - want) < 0.02
    planes = (x.reshape(32, 32, -1) != 0).sum(axis=2)
    assert abs(float((planes == 0).mean()) - 0.1) < 0.04          # dead (n, c) planes
    dense = open_trace(out).tensor(0, "c2")
    assert float((dense != 0).mean()) > 0.999                      # Conv-BN-ReLU: dense


def test_mapping_covers_every_zoo_workload():
    st = sy.load_stats()                                  # the shipped default
    sources = st.provenance.get("sources", [st.provenance])
    assert sources and all(s.get("trace") and s.get("trace_manifest_sha256") for s in sources)
    # both a Conv-BN-ReLU and a Conv-ReLU network were fitted, so masked blocks have real data
    assert {p.block for p in st.layers} >= {"conv-bn-relu", "conv-relu"}
    for name in zoo_names():
        wl = load_workload(name)
        mapped, _ = gm.map_params(st.layers, wl)
        assert set(mapped) == {l.name for l in wl.layers}
        for d in mapped.values():
            assert d["scale_per_sample"] > 0 and len(d["logq"]) == len(gm.LEVELS)


def test_mapping_interpolates_by_depth_and_block():
    st = _stats()
    wl_text = SMALL_WL.replace("name: synth-test", "name: deeper").replace(
        "  - {name: pool,", "  - {name: c3, op: conv, in: a2, out: a3, c_out: 32, kernel: 3, pad: 1, "
        "bn: true, relu: true}\n  - {name: pool,").replace("in: a2, out: p", "in: a3, out: p")
    from sim.workload import workload_from_dict
    import yaml
    wl = workload_from_dict(yaml.safe_load(wl_text))
    mapped, warnings = gm.map_params(st.layers, wl)
    assert mapped["c1"]["rule"] == "block" and mapped["c1"]["zero_fraction"] == 0.55
    assert mapped["c3"]["rule"] == "block" and mapped["c3"]["zero_fraction"] == 0.0
    assert not warnings


def test_fit_and_stats_yaml_round_trip(small_wl, tmp_path):
    out = sy.synth(small_wl, 8, tmp_path / "t", _stats(), seed=4)
    assert cli_main(["trace", "fit", str(out), "--out", str(tmp_path / "s.yaml")]) == 0
    st = sy.load_stats(tmp_path / "s.yaml")
    assert [p.name for p in st.layers] == ["c1", "c2", "fc"]
    assert st.provenance["workload"] == "synth-test" and len(st.provenance["trace_manifest_sha256"]) == 64
    assert st.provenance["prunesim"] and st.provenance["fitted"]


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.replace("sigma_c: ", "sigma_c: -"), "layers[0].sigma_c"),
    (lambda t: t.replace("  pos_fraction:", "  pos_fractio:"), "layers[0].pos_fractio"),
    (lambda t: t.replace("format: prunesim-gradstats", "format: nope"), "format"),
    (lambda t: t.replace("  dead_fraction:", "  dead_fraction: 0.1\n  dead_fraction:"), "line"),
])
def test_bad_stats_yaml_names_file_and_field(tmp_path, edit, field, capsys):
    good = tmp_path / "good.yaml"
    sy.write_stats(_stats(), good)
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(good.read_text()))
    with pytest.raises(TraceError) as e:
        sy.load_stats(bad)
    assert str(bad) in str(e.value) and field in str(e.value)
    rc = cli_main(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out",
                   str(tmp_path / "t"), "--stats", str(bad)])
    assert rc == 2 and field in capsys.readouterr().err


def test_cli_synth(tmp_path, capsys):
    rc = cli_main(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out", str(tmp_path / "t"),
                   "--seed", "7", "--dtype", "float16"])
    assert rc == 0
    tr = open_trace(tmp_path / "t")
    assert tr.provenance["stats"]["path"].endswith("synth-default.yaml")
    assert "layer 1/" in capsys.readouterr().err


# ---- training progress ------------------------------------------------------------------------


def _lp(name, progress, **over):
    return gm.LayerParams(name=name, op="conv", block="conv-bn-relu", masked=False, depth=0.0,
                          plane=64, **_params(**over), progress=progress, channels=16)


def test_at_progress_interpolates_and_averages_over_the_run():
    src = [_lp("n/c", 0.0, sigma_n=0.2, dead_fraction=0.0),
           _lp("n/c", 1.0, sigma_n=1.0, dead_fraction=0.4)]
    mid = gm.at_progress(src, 0.25)[0]
    assert mid.sigma_n == pytest.approx(0.4) and mid.dead_fraction == pytest.approx(0.1)
    assert mid.progress == 0.25
    run = gm.at_progress(src, None)[0]     # uniform over the run: the middle, for linear params
    assert run.sigma_n == pytest.approx(0.6) and run.progress is None
    assert gm.at_progress(src, 1.0)[0].sigma_n == pytest.approx(1.0)
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(TraceError, match="progress"):
            gm.at_progress(src, bad)


def test_mapping_weights_networks_by_plane_and_channels():
    near = gm.LayerParams(name="a/c", op="conv", block="conv-bn-relu", masked=False, depth=0.5,
                          plane=64, **_params(sigma_n=0.2), progress=None, channels=32)
    far = gm.LayerParams(name="b/c", op="conv", block="conv-bn-relu", masked=False, depth=0.5,
                         plane=1024, **_params(sigma_n=1.0), progress=None, channels=512)
    wl = load_workload("resnet20")
    tgt = next(l for l in wl.convs if l.p * l.q == 64 and l.c_out == 64)
    d, _ = gm.map_params([near, far], wl)
    # the target (8x8 plane, 64 channels) is 1 octave from `near`, 4 + 3 octaves from `far`
    assert d[tgt.name]["weights"][0] > 0.99 and d[tgt.name]["from"][0] == "a/c"
    assert d[tgt.name]["sigma_n"] == pytest.approx(0.2, abs=0.01)


def _progress_stats(tmp_path):
    st = sy.Stats(layers=[
        gm.LayerParams(name=f"n/{n}", op=op, block=b, masked=m, depth=dp, plane=pl,
                       **_params(sigma_n=sn, dead_fraction=df, zero_fraction=zf), progress=pr,
                       channels=32)
        for pr, sn, df, zf in ((0.0, 0.3, 0.0, 0.1), (1.0, 1.5, 0.3, 0.6))
        for n, op, b, m, dp, pl in (("c1", "conv", "conv-relu", True, 0.0, 1024),
                                    ("c2", "conv", "conv-bn-relu", False, 1.0, 256),
                                    ("fc", "fc", "fc", False, 0.0, 1))],
        provenance={"workload": "n"})
    sy.write_stats(st, tmp_path / "p.yaml")
    return tmp_path / "p.yaml"


def test_synth_progress_changes_the_trace_and_is_recorded(small_wl, tmp_path):
    stats = _progress_stats(tmp_path)
    dens = {}
    for tag, pr in (("early", 0.0), ("late", 1.0), ("run", None)):
        t = sy.synth(small_wl, 8, tmp_path / tag, stats, seed=1, train_progress=pr)
        tr = open_trace(t)
        assert tr.provenance["training_progress"] == ("averaged over the run" if pr is None else pr)
        dens[tag] = float(np.mean([np.count_nonzero(a) / a.size for _, a in tr.stream("dO")]))
    assert dens["late"] < dens["run"] < dens["early"]


@pytest.mark.parametrize("value", ["1.5", "-0.2", "nan"])
def test_cli_synth_progress_outside_0_1_is_one_line_error(tmp_path, capsys, value):
    rc = cli_main(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out",
                   str(tmp_path / "t"), "--stats", str(_progress_stats(tmp_path)),
                   "--progress", value])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--progress" in err
    assert not (tmp_path / "t").exists()


def test_synth_progress_refused_for_stats_without_progress(small_wl, tmp_path, capsys):
    sy.write_stats(_stats(), tmp_path / "s.yaml")
    rc = cli_main(["trace", "synth", "--workload", "cnn2", "--batch", "2", "--out",
                   str(tmp_path / "t"), "--stats", str(tmp_path / "s.yaml"), "--progress", "0.5"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "progress" in err and not (tmp_path / "t").exists()


def test_stats_progress_field_is_validated(tmp_path):
    f = _progress_stats(tmp_path)
    f.write_text(f.read_text().replace("progress: 1.0", "progress: 1.7", 1))
    with pytest.raises(TraceError, match=r"layers\[\d+\]\.progress"):
        sy.load_stats(f)


ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "traces" / "sample-cnn2-mnist5k", ROOT / "traces" / "sample-resnet20-mnist5k"]


def test_fit_bins_by_progress_from_training_provenance():
    st = sy.fit(SAMPLES[0])
    # cnn2 sample: iterations 0, 150, 300, 450, 600 of 620 -> bins {0}, (0, 1/3], (1/3, 2/3], (2/3, 1]
    prog = sorted({p.progress for p in st.layers})
    assert prog == [0.0, pytest.approx(0.2419, abs=1e-3), pytest.approx(0.4839, abs=1e-3),
                    pytest.approx((450 + 600) / 2 / 620, abs=1e-3)]
    assert all(p.channels for p in st.layers)


def test_fit_refuses_traces_of_different_schema_versions(tmp_path, capsys):
    import json
    import shutil
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(SAMPLES[0], a)
    shutil.copytree(SAMPLES[1], b)
    m = json.loads((b / "manifest.json").read_text())
    m["schema_version"] = 2
    (b / "manifest.json").write_text(json.dumps(m))
    rc = cli_main(["trace", "fit", str(a), str(b), "--out", str(tmp_path / "s.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "schema_version" in err
    assert not (tmp_path / "s.yaml").exists()


def test_fit_check_leave_one_network_out(capsys):
    from sim.traces import loo
    res = loo.loo_check([str(p) for p in SAMPLES])
    assert [r["network"] for r in res] == ["cnn2", "resnet20"]
    for r in res:
        assert len(r["points"]) == len(open_trace(r["trace"]).iterations)
        for side in ("real", "synth"):
            m = r["mean"][side]
            assert 0 < m["dbtd0.99"] <= m["dbtd0.7"] <= m["density"] <= 1
            assert 0 < m["sdgp1:4"] <= m["sdgp2:4"] <= 1 and 0 <= m["argmax_spread"] < 2
    # BN networks have dense dO, Conv-ReLU ones ReLU zeros
    assert res[1]["mean"]["real"]["density"] == 1.0 and res[0]["mean"]["real"]["density"] < 0.5
    table = loo.loo_table(res)
    assert table.count("\n") == 4 and "median abs. error" in table


def test_fit_refuses_an_interrupted_capture(tmp_path, capsys):
    import json
    import shutil
    a = tmp_path / "a"
    shutil.copytree(SAMPLES[0], a)
    m = json.loads((a / "manifest.json").read_text())
    m["complete"] = False    # what a capture killed mid-run leaves behind
    (a / "manifest.json").write_text(json.dumps(m))
    rc = cli_main(["trace", "fit", str(a), "--out", str(tmp_path / "s.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "complete" in err
    assert not (tmp_path / "s.yaml").exists()
