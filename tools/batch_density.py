"""DBTD density of a real trace with the threshold over the first n samples of each recorded batch.

    python tools/batch_density.py TRACE

Per recorded iteration: Ye's density (nonzeros over all conv gradients) after DBTD at p = 0.99 and
0.7 for n = 2, 8, 32 samples, and how unequal the samples' gradient scales are (max / median and
log standard deviation of the per-sample mean |g| of a middle conv layer). Shows why whole-batch
captures are needed (docs/explanation/synthetic-traces.md).
"""
import sys, numpy as np
from sim.traces.format import open_trace
from sim.traces.loo import method_metrics
from sim.traces.synth import iteration_progress
tr = open_trace(sys.argv[1])
prog = iteration_progress(tr)
for it in tr.iterations:
    g = {r.layer: np.array(a, np.float32) for r, a in tr.stream("dO", iteration=it)}
    row = [f"it {it} progress {prog[it]:.2f}"]
    for n in (2, 8, 32):
        m = method_metrics({k: v[:n] for k, v in g.items()}, tr.workload, 0, it)
        row.append(f"n={n}: p.99 {m['dbtd0.99']:.3f} p.7 {m['dbtd0.7']:.3f}")
    # per-sample mean |g| spread in one mid layer
    x = g[tr.workload.convs[len(tr.workload.convs)//2].name]
    s = np.abs(x).reshape(x.shape[0], -1).mean(1)
    row.append(f"sample mean|g| max/median {s.max()/np.median(s):.1f}, sd(log) {np.log(s).std():.2f}")
    print(" | ".join(row))
