"""The hwconfig loader on GPU configs: units, sources, base chains, and every bad-input path as one
ConfigError naming the file and the field (and, through the CLI, one line and exit status 2)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.hwconfig import load_hwconfig

BUNDLED = ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "v100-sxm2", "a100-nm-hypothetical")


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def variant(tmp_path: Path, params: str, name: str = "v.yaml", extra: str = "") -> Path:
    """A config based on the bundled A100 with some params overridden."""
    return write(tmp_path, name, f"schema: 1\nname: v\nbase: a100-sxm4-40gb\n{extra}params:\n{params}")


def raises(path, field: str, words: str) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load_hwconfig(path)
    e = ei.value
    assert e.file is not None and Path(e.file).name == Path(path).name, e
    assert e.field is not None and e.field.startswith(field), e
    assert words in e.message, e
    return e


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_configs_load_with_sources(name):
    hw = load_hwconfig(name)
    assert hw.kind == "gpu"
    for q in hw.params.values():
        assert q.source.strip()


def test_units_convert_to_si():
    hw = load_hwconfig("a100-sxm4-40gb")
    assert hw.value("clock") == pytest.approx(1.41e9)
    assert hw.value("hbm_bandwidth") == pytest.approx(1.555e12)
    assert hw.value("smem_per_sm") == 164 * 1024
    assert hw.value("l2_size") == 40e6
    assert hw.value("launch_overhead") == pytest.approx(4e-6)
    assert hw.value("sparse_patterns") == ("2:4",)


def test_base_chain_overrides_one_by_one(tmp_path):
    b = variant(tmp_path, "  sm_count: {value: 120, source: test}\n", "b.yaml")
    c = write(tmp_path, "c.yaml", f"name: c\nbase: {b}\nparams:\n"
              "  hbm_bandwidth: {value: 2 TB/s, source: test}\n")
    hw = load_hwconfig(c)
    assert hw.value("sm_count") == 120 and hw.value("hbm_bandwidth") == 2e12
    assert hw.value("clock") == pytest.approx(1.41e9)     # from the bundled root
    assert load_hwconfig("a100-sxm4-80gb").value("hbm_bandwidth") == pytest.approx(2.039e12)


def test_missing_unit(tmp_path):
    raises(variant(tmp_path, "  clock: {value: 1410, source: test}\n"), "params.clock", "missing unit")


def test_wrong_unit(tmp_path):
    raises(variant(tmp_path, "  clock: {value: 1410 GB/s, source: test}\n"), "params.clock",
           "is not a frequency")


def test_unknown_top_level_key(tmp_path):
    raises(variant(tmp_path, "  clock: {value: 1 GHz, source: t}\n", extra="colour: red\n"), "colour",
           "unknown key")


def test_unknown_param(tmp_path):
    raises(variant(tmp_path, "  warp_drive: {value: 9, source: test}\n"), "params.warp_drive",
           "unknown parameter")


def test_missing_source(tmp_path):
    raises(variant(tmp_path, "  clock: {value: 1 GHz}\n"), "params.clock.source", "needs a source")


def test_missing_required_param(tmp_path):
    text = Path(load_hwconfig("v100-sxm2").path).read_text()
    text = "\n".join(l for l in text.splitlines() if not l.strip().startswith("mma_latency:"))
    raises(write(tmp_path, "v.yaml", text), "params.mma_latency", "missing")


def test_out_of_range_and_bad_choice(tmp_path):
    raises(variant(tmp_path, "  sm_count: {value: 0, source: t}\n"), "params.sm_count", "minimum")
    raises(variant(tmp_path, "  sparse_rate: {value: fast, source: t}\n"), "params.sparse_rate",
           "expected text")


def test_bad_sparse_pattern_named_by_the_engine(tmp_path):
    from sim.engines.gpu.spec import gpu_spec
    hw = load_hwconfig(variant(tmp_path, "  sparse_patterns: {value: ['4:2'], source: t}\n"))
    with pytest.raises(ConfigError) as ei:
        gpu_spec(hw)
    assert ei.value.field == "params.sparse_patterns.value" and Path(ei.value.file).name == "v.yaml"


def test_circular_base(tmp_path):
    write(tmp_path, "a.yaml", "name: a\nkind: gpu\nbase: b.yaml\nparams: {}\n")
    write(tmp_path, "b.yaml", "name: b\nkind: gpu\nbase: a.yaml\nparams: {}\n")
    raises(tmp_path / "a.yaml", "base", "circular")


def test_malformed_yaml(tmp_path):
    raises(write(tmp_path, "m.yaml", "name: m\nparams: {clock: [1,\n"), "line", "malformed YAML")


def test_duplicate_key(tmp_path):
    raises(variant(tmp_path, "  clock: {value: 1 GHz, source: t}\n  clock: {value: 2 GHz, source: t}\n"),
           "line", "duplicate key")


def test_python_object_tag_refused(tmp_path):
    p = write(tmp_path, "evil.yaml", "name: !!python/object/apply:os.system ['true']\nkind: gpu\n")
    raises(p, "line", "malformed YAML")


def test_unknown_kind_and_missing_file(tmp_path):
    raises(write(tmp_path, "k.yaml", "name: k\nkind: fpga\nparams: {}\n"), "kind", "unknown kind")
    with pytest.raises(ConfigError):
        load_hwconfig(tmp_path / "nope.yaml")


def test_cli_bad_config_is_one_line_exit_2(tmp_path, capsys):
    p = variant(tmp_path, "  clock: {value: 1410 GB/s, source: test}\n")
    rc = main(["gemm", "--hw", str(p), "--m", "64", "--n", "64", "--k", "64"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert err.startswith("prunesim: error:") and "v.yaml" in err and "params.clock" in err
