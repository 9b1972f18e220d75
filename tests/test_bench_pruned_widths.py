"""bench/gpu_pruned_widths.py: the networks it times and its penalty (the GPU run itself is for a
lent device; `--device cpu --quick` is the slow smoke test)."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu_pruned_widths.py"


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_pruned_widths", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_networks_are_dense_each_runs_final_widths_and_those_rounded_up_to_eight():
    nets = _bench().networks()
    assert set(nets) == {"dense", "otf", "otf-rounded8", "dynamic", "dynamic-rounded8"}
    assert nets["dense"] == {}
    for run in ("otf", "dynamic"):
        final, rounded = nets[run], nets[f"{run}-rounded8"]
        assert final and set(final) == set(rounded)
        assert any(c % 8 for c in final.values())       # the runs' widths are not aligned
        assert all(r % 8 == 0 and c <= r < c + 8 for c, r in
                   ((final[n], rounded[n]) for n in final))


@pytest.mark.torch
def test_authors_penalty_matches_the_capture_group_lasso():
    """The authors' pow / sum / sqrt penalty equals sim.capture's group lasso (vector norms over
    the same groups) up to the 1e-8 inside each square root."""
    torch = pytest.importorskip("torch")
    from sim.capture.methods import group_lasso_torch
    b = _bench()
    net, convs, fc, w = b.build(torch, b.networks()["otf"], "cpu")
    got = float(b.authors_lasso(torch, convs, fc).detach())
    want = float(group_lasso_torch(net, w).detach())
    assert got == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
@pytest.mark.torch
def test_smoke_on_cpu_writes_a_record_per_network_and_mode(tmp_path):
    pytest.importorskip("torch")
    import json
    assert _bench().main([str(tmp_path), "--device", "cpu", "--quick"]) == 0
    recs = [json.loads(l) for l in (tmp_path / "widths.jsonl").read_text().splitlines()]
    assert len(recs) == 15 and all(r["step_s"] > 0 for r in recs)
