"""The method facts table (sim.methods.info) covers exactly the parser's method ids and answers what
the call sites used to test by id."""
from types import SimpleNamespace

import pytest

from sim.methods import METHOD_IDS, PARAMS, method_info, parse_method
from sim.methods.info import INFO, SYSTEM_EFFECTS


def test_same_ids_as_the_parser():
    assert tuple(INFO) == METHOD_IDS
    for mid, info in INFO.items():
        assert info.id == mid
        assert info.system_effect in SYSTEM_EFFECTS
        assert info.fc_option == ("fc" in PARAMS[mid])
        assert info.scheduled == ("schedule" in PARAMS[mid])
        assert (info.nm_selection is not None) == ("nm" in PARAMS[mid])


def test_queries_match_the_former_id_tests():
    assert method_info(parse_method("sdgp-resmag:nm=1:4")).nm_selection == "resmag"
    assert [m for m in METHOD_IDS if INFO[m].family == "sdgp"] == [
        m for m in METHOD_IDS if m.startswith("sdgp-")]
    assert [m for m in METHOD_IDS if INFO[m].family == "wang"] == ["zero", "random", "approx",
                                                                   "approx-topk"]
    assert [m for m in METHOD_IDS if not INFO[m].transforms_tensor] == ["random", "prunetrain",
                                                                        "w24", "w24t"]
    assert [m for m in METHOD_IDS if INFO[m].skips_allreduce] == ["zero"]
    assert [m for m in METHOD_IDS if INFO[m].is_channel_plan] == ["prunetrain"]
    assert method_info("dense").is_dense


def test_kernel_gap():
    def hw(kind, sparse):
        return SimpleNamespace(kind=kind, value=lambda name: sparse)
    from analysis.report import applies
    assert applies("sdgp-mag", hw("cpu", False)) == "no n:m sparse kernel on CPUs"
    assert applies("zero", hw("cpu", False)).startswith("Wang et al.'s kernels")
    assert applies("sdgp-mag", hw("gpu", False)) == "no sparse tensor cores"
    assert applies("sdgp-mag", hw("gpu", True)) is None
    assert applies("dbtd", hw("cpu", False)) is None and applies("approx", hw("gpu", False)) is None


def test_unknown_id():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method_info("nope")
