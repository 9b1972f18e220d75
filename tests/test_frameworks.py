"""Framework profiles: bundled ones load, bad ones end in one line naming the file and field."""
from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.frameworks import FUSIONS, framework_from_dict, framework_names, load_framework


def _doc(**params):
    base = {"fusions": {"value": [], "source": "s"},
            "launch_overhead": {"value": "5 us", "source": "s"},
            "optimizer": {"value": "sgd-momentum", "source": "s"},
            "optimizer_impl": {"value": "foreach", "source": "s"},
            "zero_grad": {"value": "set-to-none", "source": "s"}}
    base.update(params)
    return {"schema": 1, "name": "t", "params": {k: v for k, v in base.items() if v is not None}}


def test_bundled_profiles_load():
    assert {"pytorch-eager", "tensorflow-1", "caffe", "gemm-only"} <= set(framework_names())
    pt = load_framework("pytorch-eager")
    assert pt.step_ops and pt.launch_overhead == pytest.approx(5e-6)
    assert not pt.fused("bn-relu")            # eager mode runs BN and ReLU separately
    assert load_framework("tensorflow-1").fused("softmax-xent")
    assert load_framework("caffe").batch_norm == "caffe"
    assert not load_framework("gemm-only").step_ops
    for name in framework_names():
        p = load_framework(name)
        assert p.fusions <= set(FUSIONS)
        assert all(s.strip() for s in p.sources.values())


def test_units_are_parsed():
    p = framework_from_dict(_doc(launch_overhead={"value": "2.5 ms", "source": "s"},
                                 step_overhead={"value": "1 s", "source": "s"}))
    assert p.launch_overhead == pytest.approx(2.5e-3) and p.step_overhead == 1.0
    assert p.activation_overhead == 0.0       # optional: no measurement, no peak extra
    q = framework_from_dict(_doc(activation_overhead={"value": "19 %", "source": "s"}))
    assert q.activation_overhead == pytest.approx(0.19)


@pytest.mark.parametrize("params, field, words", [
    ({"fusions": {"value": ["bn-gelu"], "source": "s"}}, "params.fusions.value", "bn-gelu"),
    ({"flux": {"value": 1, "source": "s"}}, "params.flux", "unknown parameter"),
    ({"launch_overhead": {"value": "5 GB", "source": "s"}}, "params.launch_overhead.value", "time"),
    ({"launch_overhead": {"value": 5, "source": "s"}}, "params.launch_overhead.value", "unit"),
    ({"launch_overhead": {"value": "5 us"}}, "params.launch_overhead.source", "source"),
    ({"optimizer": {"value": "lion", "source": "s"}}, "params.optimizer.value", "lion"),
    ({"zero_grad": None}, "params.zero_grad", "missing"),
    ({"activation_overhead": {"value": 19, "source": "s"}}, "params.activation_overhead.value",
     "outside 0 .. 2"),
    ({"activation_overhead": {"value": "0.2 s", "source": "s"}},
     "params.activation_overhead.value", "not a fraction"),
])
def test_errors_are_one_line_naming_field(params, field, words):
    with pytest.raises(ConfigError) as ei:
        framework_from_dict(_doc(**params), origin="prof.yaml")
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(f"prof.yaml: {field}: ") and words in msg


def test_unknown_top_key_and_profile(tmp_path):
    with pytest.raises(ConfigError, match="extra: unknown key"):
        framework_from_dict({**_doc(), "extra": 1}, origin="p.yaml")
    with pytest.raises(ConfigError, match="unknown framework profile 'nope'"):
        load_framework("nope")
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nparams:\n  step_ops: {value: none, source: test}\n")
    assert load_framework(str(f)).name == "mine"
