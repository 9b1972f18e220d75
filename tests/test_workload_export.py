"""`prunesim workload export --format scalesim`: the files SCALE-Sim v3 reads, checked for format.

These checks need no SCALE-Sim install; that SCALE-Sim's own topology and config parsers read the
exported files (and simulate them) is checked by bench/bench_scalesim.py in SCALE-Sim's venv.
"""
from __future__ import annotations

import configparser
import math

import pytest

from sim.cli import main
from sim.workload import load_workload, lower
from sim.workload_export import CONV_HEADER, GEMM_HEADER, conv_rows, export_scalesim

R50 = "resnet50-imagenet"


def _lines(path):
    return path.read_text().splitlines()


def _rows(path):
    """Rows split the way SCALE-Sim splits them: on commas, the last (empty) field dropped."""
    return [ln.split(",")[:-1] for ln in _lines(path)[1:] if ln.strip()]


@pytest.fixture(scope="module")
def r50_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("ss")
    assert main(["workload", "export", R50, "--format", "scalesim", "--out", str(out),
                 "--batch", "4"]) == 0
    return out


def test_writes_all_files(r50_export):
    names = sorted(p.name for p in r50_export.iterdir())
    # besides the files, the manifest that lets a rerun replace them (sim.outputs.OutputDir)
    assert names == [".prunesim-outputs.json", "README.txt", f"{R50}.csv", f"{R50}_gemm.csv",
                     f"{R50}_layout.csv", "scale.cfg"]
    assert not list(r50_export.glob("*.tmp*")) and not list(r50_export.glob(".*.tmp*"))


def test_header_and_trailing_comma(r50_export):
    for f, header in ((f"{R50}.csv", CONV_HEADER), (f"{R50}_gemm.csv", GEMM_HEADER)):
        lines = _lines(r50_export / f)
        assert lines[0] == ",".join(header) + ","
        assert all(ln.endswith(",") for ln in lines), f
        assert all(ln.split(",")[-1] == "" for ln in lines)
    layout = _lines(r50_export / f"{R50}_layout.csv")
    assert len(layout) == 1 and layout[0].endswith(",")


def test_one_row_per_conv_then_fc(r50_export):
    wl = load_workload(R50)
    rows = _rows(r50_export / f"{R50}.csv")
    assert len(wl.convs) == 53
    assert [r[0] for r in rows] == [l.name for l in wl.layers]   # 53 convs, then fc
    assert all(len(r) == len(CONV_HEADER) for r in rows)
    assert rows[-1] == ["fc", "1", "1", "1", "1", "2048", "1000", "1"]   # FC as a 1x1 conv
    assert not any("DP" in r[0] for r in rows)


def test_padded_sizes_give_exact_outputs(r50_export):
    """IFMAP = padded input trimmed to the rows read: SCALE-Sim's ceil formula gives P and Q."""
    wl = load_workload(R50)
    rows = {r[0]: list(map(int, r[1:])) for r in _rows(r50_export / f"{R50}.csv")}
    for l in wl.convs:
        h, w, r, s, c, k, st = rows[l.name]
        assert (r, s, c, k, st) == (l.r, l.s, l.c_in, l.c_out, l.stride)
        assert h <= l.h + 2 * l.pad and w <= l.w + 2 * l.pad
        if (l.h + 2 * l.pad - l.r) % l.stride == 0:
            assert h == l.h + 2 * l.pad and w == l.w + 2 * l.pad
        # scalesim.topology_utils.topo_calc_hyperparams
        assert math.ceil((h - r + st) / st) == l.p and math.ceil((w - s + st) / st) == l.q
        macs = math.ceil((h - r + st) / st) * math.ceil((w - s + st) / st) * r * s * c * k
        assert macs == l.macs(1)
    assert rows["conv1"][:2] == [229, 229]            # 224 + 2*3 = 230, but the 230th row is unread
    assert rows["layer1.0.conv2"][:2] == [58, 58]     # 56 + 2*1, stride 1: the full padded input


def test_convs_only(tmp_path):
    assert main(["workload", "export", R50, "--format", "scalesim", "--out", str(tmp_path),
                 "--convs-only"]) == 0
    rows = _rows(tmp_path / f"{R50}.csv")
    assert len(rows) == 53 and rows[-1][0] == "layer4.2.conv3"
    assert all(not r[0].endswith(("_fwd", "_wgc")) for r in rows)
    assert not any(r[0].startswith("fc_") for r in _rows(tmp_path / f"{R50}_gemm.csv"))


def test_gemm_topology_matches_lowering(r50_export):
    wl = load_workload(R50)
    rows = _rows(r50_export / f"{R50}_gemm.csv")
    want = [[f"{l.name}_{ph}", str(g.m), str(g.n), str(g.k)]
            for l in wl.layers for ph, g in lower(l, 4).items() if ph != "agbp" or l.needs_agbp]
    assert rows == want
    assert "conv1_agbp" not in {r[0] for r in rows}    # nothing needs the image's gradient


def test_scale_cfg_has_every_key_scalesim_reads(r50_export):
    cfg = configparser.ConfigParser()
    cfg.read(r50_export / "scale.cfg")
    # every key scalesim 3.0.0's scale_config.read_conf_file reads (configparser: case-insensitive)
    need = {"general": ["run_name"],
            "run_presets": ["InterfaceBandwidth", "UseRamulatorTrace"],
            "architecture_presets": ["ArrayHeight", "ArrayWidth", "ifmapsramszkB", "filtersramszkB",
                                     "ofmapsramszkB", "IfmapOffset", "FilterOffset", "OfmapOffset",
                                     "Dataflow", "ReadRequestBuffer", "WriteRequestBuffer"],
            "layout": ["IfmapCustomLayout", "FilterCustomLayout", "IfmapSRAMBankBandwidth",
                       "IfmapSRAMBankNum", "IfmapSRAMBankPort", "FilterSRAMBankBandwidth",
                       "FilterSRAMBankNum", "FilterSRAMBankPort"],
            "sparsity": ["SparsitySupport"]}
    for sec, keys in need.items():
        for k in keys:
            assert cfg.has_option(sec, k), (sec, k)
    a = cfg["architecture_presets"]
    assert (a["ArrayHeight"], a["ArrayWidth"], a["Dataflow"]) == ("128", "128", "ws")
    assert cfg["run_presets"]["InterfaceBandwidth"] in ("CALC", "USER")
    # scalesim reads TopologyCsvLoc from the wrong section when [network_presets] exists: leave it out
    assert not cfg.has_section("network_presets")
    assert cfg.getboolean("layout", "IfmapCustomLayout") is False


def test_grouped_and_depthwise_convs(tmp_path):
    wl = load_workload("regnetx-400mf")
    grouped = next(l for l in wl.convs if l.groups > 1)
    rows = conv_rows(wl)
    mine = [r for r in rows if r[0].startswith(grouped.name + "_g")]
    assert len(mine) == grouped.groups
    assert all(r[5] == grouped.c_in // grouped.groups and r[6] == grouped.c_out // grouped.groups
               for r in mine)
    # a depthwise conv uses SCALE-Sim's DP naming: C channels, one filter, split by SCALE-Sim
    from dataclasses import replace
    dw = replace(grouped, c_in=32, c_out=32, groups=32)
    dwl = replace(wl, layers=(dw,))
    (row,) = conv_rows(dwl)
    assert row[0] == grouped.name + "_DP" and row[5:7] == [32, 1]
    # DP elsewhere in a name would turn SCALE-Sim's depthwise split on: it is rewritten
    odd = replace(wl, layers=(replace(wl.convs[0], name="conv,DP1"),))
    assert conv_rows(odd)[0][0] == "conv_Dp1"
    export_scalesim(odd, tmp_path)
    assert _rows(tmp_path / f"{wl.name}.csv")[0][0] == "conv_Dp1"


def test_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["workload", "export", R50, "--format", "timeloop", "--out", str(tmp_path)])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["workload", "export", R50, "--format", "scalesim", "--out", str(tmp_path),
              "--batch", "0"])
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["workload", "export", R50, "--format", "scalesim", "--out", str(f)]) == 2
    assert main(["workload", "export", "no-such-net", "--format", "scalesim",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--out must be a directory" in err and "unknown workload" in err
