"""The method registry (sim/methods/registry.py): every registered method declares info and
parameters and applies to a small tensor, the parser's tables follow from it, and no code outside
sim/methods branches on method id strings."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

import sim.methods as M
from sim.methods import (IGNORED_BY, METHOD_IDS, METHODS, PARAMS, Method, MethodInfo, Param,
                         apply_method, find_method, is_dense_id, method_for, method_info,
                         parse_method)
from sim.methods.base import MethodResult
from sim.methods.registry import FAMILIES
from sim.workload import load_workload

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def conv():
    """A small conv of ResNet-20 (16 -> 16 channels, 32 x 32), not the stem."""
    wl = load_workload("resnet20")
    return next(l for l in wl.layers if l.op == "conv" and l.c_in > 3)


def test_the_registry_is_the_families_in_order():
    ids = [m.id for f in FAMILIES for m in importlib.import_module(f).FAMILY]
    assert tuple(ids) == METHOD_IDS == tuple(METHODS)
    for mid, m in METHODS.items():
        assert isinstance(m, Method) and method_for(mid) is m and method_for(parse_method(mid)) is m
        assert find_method(mid) is m and method_info(mid) is m.info
    assert find_method("nope") is None and find_method(None) is None
    assert find_method("prunetrain+sdgp-mag") is None
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method_for("nope")


@pytest.mark.parametrize("mid", METHOD_IDS)
def test_every_method_declares_info_and_parameters(mid):
    m = METHODS[mid]
    assert isinstance(m.info, MethodInfo) and m.info.id == mid
    assert all(isinstance(p, Param) for p in m.params.values())
    # each default is a value its parser gives back from the spec text (the label's spelling)
    for k, p in m.params.items():
        if p.default is not None:
            assert parse_method(f"{mid}:{k}={M._text(p.default)}") == parse_method(mid), k
    # a command ignores only parameters the method has
    for cmd, ign in m.ignored_by.items():
        assert set(ign) <= set(m.params) and all(ign.values()), cmd
    assert m.fusable == ("fused" in m.params)
    # the parser's plain tables are the registry's
    assert PARAMS[mid] == {k: (p.parse, p.default) for k, p in m.params.items()}
    for cmd, table in IGNORED_BY.items():
        assert table.get(mid, {}) == m.ignored_by.get(cmd, {})


@pytest.mark.parametrize("mid", METHOD_IDS)
def test_every_method_applies_to_a_small_tensor(mid, conv):
    spec = parse_method(mid)
    g = np.random.default_rng(0).laplace(size=conv.tensor_shapes(2)["dO"]).astype(np.float32)
    if method_info(spec).is_channel_plan:
        # PruneTrain acts on weights over epochs: it says so instead of transforming a tensor
        with pytest.raises(ValueError, match="channel_plan"):
            apply_method(spec, conv, g, key=1, batch=2)
        return
    r = apply_method(spec, conv, g, key=1, batch=2, scheduled=True)
    assert isinstance(r, MethodResult)
    assert 0.0 <= r.density <= 1.0
    assert set(r.phases) <= {"fwd", "agbp", "wgc"}
    if method_info(spec).is_dense:
        assert r.structure == "dense" and r.work.passes == 0
    else:
        # the method acted on this conv, on the phases its info names
        assert r.structure != "dense" and set(r.phases) <= set(method_info(spec).phases)
    assert apply_method(spec, conv, g, key=1, batch=2, scheduled=True).density == r.density


def test_nominal_and_weight_side_answers(conv):
    for mid, m in METHODS.items():
        nominal = m.nominal_result(parse_method(mid), conv, 2)
        assert (nominal is not None) == (m.info.system_effect == "nm-agbp"), mid
        assert m.reads_gradient == (m.info.family != "w24"), mid
    assert is_dense_id("dense") and not is_dense_id("dbtd") and not is_dense_id(None)
    assert not is_dense_id("prunetrain+sdgp-mag") and not is_dense_id("nope")


# ---- no string dispatch on method ids outside sim/methods ------------------------------------

# branching on a method id (or a result's method name): the registry answers these questions
DISPATCH = re.compile(r"""\.id\s*(==|!=)\s*["']|\.id\s+(not\s+)?in\s*[(\[{]|\bmid\s*(==|!=)"""
                      r"""|\bmid\s+(not\s+)?in\s*[(\[{]|startswith\(\s*["']sdgp"""
                      r"""|method_id["']\]?\)?\s*(==|!=)\s*["']|\.method\s*(==|!=)\s*["']""")
# analysis/validation is left out: its rows compare with published figures per method (Wang et
# al.'s zero / random / approx rows), so they name ids as labels of those figures
KNOWN_OUTSIDE: set[str] = set()


def _sources():
    for top in ("sim", "analysis"):
        for p in sorted((REPO / top).rglob("*.py")):
            rel = p.relative_to(REPO).as_posix()
            if rel.startswith(("sim/methods/", "analysis/validation")):
                continue
            yield rel, p


def test_no_method_id_dispatch_outside_the_registry():
    hits = []
    for rel, p in _sources():
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if DISPATCH.search(code) and rel not in KNOWN_OUTSIDE:
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "ask the registry (sim.methods.method_for / method_info) instead:\n" + \
        "\n".join(hits)


def test_the_dispatch_pattern_catches_what_it_forbids():
    for bad in ('if spec.id == "dbtd":', 'x = m.id in ("dense", "dbtd")', "if mid == 'zero':",
                'm.id.startswith("sdgp-")', 'r["method_id"] != "dense"', 'mr.method == "approx"',
                "r.get('method_id') != 'dense'", "if mid in ('zero', 'random'):"):
        assert DISPATCH.search(bad), bad
    for fine in ('"method_id": m.id,', 'parse_method("dense")', 'f"{m.id} {vals}"',
                 'labels = [m.label for m in methods]', 'mids = {r["method_id"] for r in recs}'):
        assert not DISPATCH.search(fine), fine
