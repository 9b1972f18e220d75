"""The README's first command in small: the demo driver replays a bundled trace on a GPU and a CPU
model, stores the records and writes every plot."""
from __future__ import annotations

from analysis import report


def test_demo_driver_end_to_end(tmp_path):
    lines = []
    res = report.run(tmp_path, traces=("traces/sample-cnn2-mnist5k",),
                     hardware=("a100-sxm4-40gb", "xeon-e5-2680v4"),
                     methods=("dense", "dbtd:p=0.99", "sdgp-mag:nm=2:4"), log=lines.append)
    recs = res["records"]
    # sdgp has no CPU kernel: it runs on the A100 only (and the demo says so)
    assert {(r["hw"], r["method_id"]) for r in recs} == {
        ("a100-sxm4-40gb", "dense"), ("a100-sxm4-40gb", "dbtd"), ("a100-sxm4-40gb", "sdgp-mag"),
        ("xeon-e5-2680v4", "dense"), ("xeon-e5-2680v4", "dbtd")}
    assert any("not run: sdgp-mag on xeon-e5-2680v4" in str(l) for l in lines)
    assert all(r["step_s"] > 0 for r in recs)
    pngs = {p.name for p in res["paths"] if p.suffix == ".png"}
    # conv back-prop and whole step, side by side (#13)
    assert all(r["whole_step_s"] > r["step_s"] for r in recs)
    assert any("whole step speedup" in str(l) and "conv back-prop speedup" in str(l) for l in lines)
    assert {"speedup-backprop.png", "speedup-whole.png", "layers.png", "tta.png", "pareto.png", "comm.png"} <= pngs
    assert all((tmp_path / n).stat().st_size > 1000 for n in pngs)
    assert (tmp_path / "demo.sqlite").exists()
