"""The driver (sim/driver.py): one loop, method work charged once, AGBP skipped where not needed,
"not run" rows with their reason, aggregate() sums; `prunesim layer` alike on every engine; the
system timeline raises instead of falling back."""
import json

import pytest

from sim.driver import (PhaseRow, aggregate, charge_phase, engines_for, phase_kernels,
                        phase_rows, run_workload)
from sim.engines.base import PhaseJob, Unsupported
from sim.hwconfig import load_hwconfig
from sim.methods import parse_method
from sim.methods.synthetic import method_result_for
from sim.workload import load_workload


@pytest.fixture(scope="module")
def a100():
    return load_hwconfig("a100-sxm4-40gb")


class Recording:
    """An Engine that records the jobs it is given (no model behind it)."""

    kind = "gpu"

    def __init__(self, hw, refuse=None):
        self.hw, self.jobs, self.refuse = hw, [], refuse

    def supports(self, job: PhaseJob):
        return self.refuse if job.phase == "wgc" else None

    def simulate(self, job: PhaseJob):
        from sim.engines.base import KernelResult
        self.jobs.append(job)
        ks = [KernelResult("rec", self.hw.name, job.layer.name, job.phase, "gemm", 1.0, 1.0, 2, {})]
        if job.charge_method:
            ks.append(KernelResult("rec", self.hw.name, job.layer.name, job.phase, "x", 0.5, 1.0,
                                   0, {}, category="method-overhead"))
        return ks


def test_method_work_charged_exactly_once_per_layer(a100):
    wl = load_workload("resnet20")
    spec = parse_method("dbtd:p=0.99")
    for layer in wl.layers[:3]:
        mr = method_result_for(spec, layer, 8)
        eng = Recording(a100)
        phase_kernels(eng, layer, 8, mr)
        charged = [j.phase for j in eng.jobs if j.charge_method]
        assert charged == [charge_phase(mr, [j.phase for j in eng.jobs])]
        assert len(charged) == 1
    # on the real engine: exactly one method-overhead kernel per layer
    mr = method_result_for(spec, wl.layers[2], 8)
    ks = phase_kernels(engines_for([a100])[0], wl.layers[2], 8, mr)
    assert sum(k.category == "method-overhead" for kl in ks.values() for k in kl) == 1


def test_agbp_skipped_where_not_needed(a100):
    wl = load_workload("resnet20")
    eng = Recording(a100)
    ks = phase_kernels(eng, wl.layers[0], 4, None)      # reads the network input
    assert list(ks) == ["fwd", "wgc"]
    assert list(phase_kernels(eng, wl.layers[1], 4, None)) == ["fwd", "agbp", "wgc"]


def test_unsupported_before_any_work_and_not_run_row(a100):
    layer = load_workload("resnet20").layers[1]
    eng = Recording(a100, refuse="no wgc here")
    with pytest.raises(Unsupported) as ei:
        phase_kernels(eng, layer, 4, None)
    assert ei.value.field == "wgc" and eng.jobs == []
    rows = phase_rows(eng, layer, 4, None, method="dense")
    assert len(rows) == 1 and rows[0].status == "not run" and rows[0].reason == "no wgc here"


def test_overhead_from_category_and_aggregate_sums(a100):
    wl = load_workload("resnet20")
    eng = Recording(a100)
    mr = method_result_for(parse_method("dbtd:p=0.99"), wl.layers[1], 4)
    rows = phase_rows(eng, wl.layers[1], 4, mr, method="m")
    assert sum(r.overhead_s for r in rows) == 0.5
    rows += phase_rows(eng, wl.layers[2], 4, None, method="dense")
    agg = aggregate(rows, ("hw", "method"))
    assert agg[(a100.name, "m")]["seconds"] == 3 * 1.0 + 0.5
    assert agg[(a100.name, "m")]["overhead_s"] == 0.5
    assert agg[(a100.name, "dense")]["fwd"] == 1.0 and agg[(a100.name, "dense")]["reason"] is None
    nr = PhaseRow(None, None, "l", "conv", None, "dense", a100.name, "gpu", "", status="not run",
                  reason="why")
    assert aggregate(rows + [nr], ("method",))[("dense",)]["reason"] == "why"


def test_run_workload_same_gradients_for_every_engine(a100):
    wl = load_workload("cnn2")
    hws = engines_for([a100, "xeon-e5-2680v4"])
    (step,) = list(run_workload(wl, 8, [parse_method("dbtd:p=0.99")], hws, layers=wl.layers[1:2]))
    assert len(step.methods) == 1            # applied once, seen by both engines
    assert {r.hw for r in step.phases} == {a100.name, "xeon-e5-2680v4"}


def _layer_json(capsys, hw):
    from sim.cli import main
    assert main(["layer", "--hw", hw, "--workload", "cnn2", "--method", "dbtd:p=0.99",
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_layer_command_alike_on_gpu_and_cpu(capsys):
    g, c = _layer_json(capsys, "a100-sxm4-40gb"), _layer_json(capsys, "rpi4b")
    assert set(g) == set(c) and g["batch"] == c["batch"] == 128
    assert g["phases"] == c["phases"] == ["fwd", "agbp", "wgc"]
    assert g["gradients"] == c["gradients"]
    assert [(r["layer"], r["phase"]) for r in g["layers"]] == \
        [(r["layer"], r["phase"]) for r in c["layers"]]
    assert [r["density"] for r in g["layers"]] == [r["density"] for r in c["layers"]]
    from sim.cli import main
    for hw in ("a100-sxm4-40gb", "rpi4b"):
        assert main(["layer", "--hw", hw, "--workload", "cnn2", "--layer", "1"]) == 0
        head = capsys.readouterr().out.splitlines()
        assert any(l.split()[:2] == ["layer", "density"] and "FWD us (tile)" in l for l in head)


def test_timeline_raises_instead_of_falling_back(monkeypatch):
    from sim.errors import PrunesimError
    from sim.system import timeline
    from sim.system.cluster import load_cluster
    cl = load_cluster("dgx-a100-hdr")
    wl = load_workload("cnn2")
    t = timeline.layer_times(wl, 4, cl.device, cl.training)
    assert t.source.startswith("engine:") and not t.fallback

    def broken(*a, **k):
        raise PrunesimError("hw.yaml", "params.clock", "broken engine")
    monkeypatch.setattr("sim.driver.phase_kernels", broken)
    timeline._engine_layer_seconds.cache_clear()
    with pytest.raises(PrunesimError, match="broken engine"):
        timeline.layer_times(wl, 4, cl.device, cl.training)
    timeline._engine_layer_seconds.cache_clear()
    asked = timeline.layer_times(wl, 4, cl.device, cl.training, engine="roofline")
    assert asked.source == timeline.ROOFLINE_ASKED


def _trace_rows(threads, hws=("xeon-e5-2680v4", "rpi4b", "a100-sxm4-40gb")):
    from pathlib import Path
    from sim.driver import run_trace
    from sim.replay import parse_methods
    from sim.traces.format import open_trace
    tr = open_trace(Path(__file__).resolve().parent.parent / "traces" / "sample-cnn2-mnist5k")
    specs = parse_methods(["dense", "dbtd:p=0.99", "topk:keep=0.1"])
    return [(run.methods, run.phases, [repr(r.kernels) for r in run.phases])
            for run in run_trace(tr, specs, engines_for(list(hws)), iteration=0, threads=threads)]


def test_cpu_hwconfigs_side_by_side_give_the_same_rows(monkeypatch):
    import threading
    from sim.engines.cpu.engine import CpuEngine
    seen = set()
    sim0 = CpuEngine.simulate

    def simulate(self, job):
        seen.add(threading.current_thread().name.split("_")[0])
        return sim0(self, job)

    monkeypatch.setattr(CpuEngine, "simulate", simulate)
    one = _trace_rows(1)
    assert seen == {"MainThread"}
    seen.clear()
    two = _trace_rows(2)
    assert seen == {"prunesim-cpu"}                # both CPU hwconfigs ran on the workers
    assert one == two                              # rows, kernels and their order unchanged


def test_workers_see_the_callers_cache_model():
    from sim.engines.cpu.spmm import cache_model
    with cache_model("profile"):
        rows = _trace_rows(2, hws=("xeon-e5-2680v4", "rpi4b"))
    models = {k.details.get("cache_model") for _, phases, _ in rows for r in phases
              for k in r.kernels if k.kernel == "spmm"}
    assert models == {"profile"}


def test_the_calling_thread_runs_ahead_of_the_cpu_workers(monkeypatch):
    # a CPU worker held on the first layer until the methods have been applied to the third: with
    # a barrier per layer the calling thread would wait for the worker and the event never be set
    import threading
    import sim.methods
    from sim.engines.cpu.engine import CpuEngine
    layers_seen, third = [], threading.Event()
    apply0, sim0 = sim.methods.apply_method, CpuEngine.simulate

    def apply_method(spec, layer, *a, **kw):
        if layer.name not in layers_seen:
            layers_seen.append(layer.name)
        if len(layers_seen) >= 3:
            third.set()
        return apply0(spec, layer, *a, **kw)

    def simulate(self, job):
        if not third.is_set():
            waited.append(third.wait(timeout=20))
            third.set()                            # on a failure, wait once, not per product
        return sim0(self, job)

    waited: list[bool] = []
    monkeypatch.setattr(sim.methods, "apply_method", apply_method)
    monkeypatch.setattr(CpuEngine, "simulate", simulate)
    rows = _trace_rows(2)
    assert waited and all(waited)
    order = [methods[0].layer for methods, _, _ in rows]
    assert order == layers_seen[:len(order)] and len(set(order)) == len(order)
