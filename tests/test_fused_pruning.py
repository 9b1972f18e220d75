"""fused=true: SDGP's and DBTD's prune/compress in the epilogue of the kernel
that produces dO. Moves time, never values; refused where it would change nothing."""
from __future__ import annotations

import numpy as np
import pytest

from sim.driver import simulate_layer
from sim.errors import PrunesimError
from sim.hwconfig import load_hwconfig
from sim.methods import apply_method, parse_method
from sim.workload import Layer, load_workload

A100 = "a100-sxm4-40gb"


def _layer():
    return next(l for l in load_workload("resnet18-imagenet").convs if l.c_in == 256)


def _overhead(spec: str, batch: int = 64):
    ks = simulate_layer(load_hwconfig(A100), _layer(), batch, method=parse_method(spec))
    return [k for kl in ks.values() for k in kl if k.category == "method-overhead"]


def test_default_unfused_and_label_unchanged():
    s = parse_method("sdgp-mag:nm=2:4")
    assert s.get("fused") is False and s.label == "sdgp-mag:nm=2:4"
    assert s == parse_method("sdgp-mag:nm=2:4,fused=false")
    assert "fused" not in dict(s.params)          # stored keys of earlier points stay the same
    assert parse_method("dbtd:fused=true").label == "dbtd:fused=true,p=0.99,sigma=paper"
    with pytest.raises(ValueError, match="true or false"):
        parse_method("sdgp-mag:fused=yes")
    with pytest.raises(ValueError, match="no parameter 'fused'"):
        parse_method("topk:fused=true")


@pytest.mark.parametrize("mid", ["sdgp-mag", "sdgp-random", "sdgp-resmag", "dbtd"])
def test_fused_moves_time_not_values(mid):
    g = np.random.default_rng(1).standard_normal((4, 16, 6, 6)).astype(np.float32)
    lay = _layer()
    a = apply_method(parse_method(mid), lay, g, key=7, batch=4)
    b = apply_method(parse_method(f"{mid}:fused=true"), lay, g, key=7, batch=4)
    assert b.fused and not a.fused
    assert np.array_equal(a.pruned, b.pruned) and a.work == b.work
    un, fu = _overhead(mid), _overhead(f"{mid}:fused=true")
    assert sum(k.seconds for k in fu) < sum(k.seconds for k in un)


def test_sdgp_fused_epilogue_terms():
    """No launch and no read of dO: the epilogue costs the extra bytes it writes (values and
    metadata beyond the dense store) or its ops, whichever outlasts the store."""
    from sim.engines.gpu.spec import gpu_spec
    (k,) = _overhead("sdgp-mag:fused=true")
    assert k.kernel.endswith("fused-epilogue") and k.details["launches"] == 0
    w = k.details["work"]
    s = gpu_spec(load_hwconfig(A100))
    extra = w["elems_written"] * 2 + w["bytes_metadata"]
    assert k.bytes["dram"] == extra
    if k.details["bound"] == "memory":
        assert k.cycles == pytest.approx(extra / s.stream_bpc, rel=1e-9)
    (u,) = _overhead("sdgp-mag")
    assert u.bytes["dram"] == w["elems_read"] * 2 + extra       # the separate pass re-reads dO


@pytest.mark.parametrize("mid", ["dbtd", "sdgp-resmag"])
def test_work_after_a_reduction_stays_a_pass(mid):
    ks = _overhead(f"{mid}:fused=true")
    assert [k.kernel.split("-")[-1] for k in ks] == ["epilogue", "overhead"]
    assert ks[1].details["launches"] == 1


def test_fused_with_nominal_sdgp_results():
    """Large layers use SDGP's nominal result (no data): it carries fused too."""
    from sim.methods.synthetic import method_result_for
    lay = _layer()
    r = method_result_for(parse_method("sdgp-resmag:fused=true"), lay, 256)
    assert r.fused and r.extra.get("nominal") and r.after_reduction.passes == 1


def test_cpu_refuses_fused(capsys):
    from sim.cli import main
    with pytest.raises(PrunesimError, match="GPUs only"):
        simulate_layer(load_hwconfig("xeon-e5-2680v4"), _layer(), 2,
                       method=parse_method("dbtd:fused=true"))
    rc = main(["layer", "--hw", "xeon-e5-2680v4", "--conv", "1,16,16,8,8,3,3,1,1", "--batch", "2",
               "--method", "dbtd:fused=true"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "fused=true is modeled on GPUs only" in err[0]


def test_capture_and_prune_refuse_fused(tmp_path, capsys):
    from sim.capture.methods import as_spec
    from sim.cli import main
    from sim.errors import CaptureError
    with pytest.raises(CaptureError, match="fused"):
        as_spec("sdgp-mag:fused=true")
    np.save(tmp_path / "g.npy", np.ones((2, 8, 4, 4), np.float32))
    rc = main(["prune", str(tmp_path / "g.npy"), str(tmp_path / "o.npy"), "--method",
               "sdgp-mag:fused=true"])
    assert rc == 2 and "moves time, not values" in capsys.readouterr().err
