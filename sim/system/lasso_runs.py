"""Real PruneTrain runs on CPU: group lasso from rho, zeroing, reconfiguration, dynamic mini-batch.

Each run trains a workload's network (sim.capture.torchnet) on an offline dataset
(sim.capture.datasets) with the PruneTrain loop state of sim.capture.methods.PruneTrain and writes
the channel trajectory in the trajectory file format of sim.system.prunetrain (`points`: widths
from each reconfiguration epoch on), plus what the trajectory model is fitted to:

  run:       the settings (rho, interval, lr, momentum, weight decay, batch, epochs, lambda, ...)
  per_epoch: per epoch the learning rate, batch, steps, the lasso dose lr*lambda*steps and the
             channels of every channel space that still hold a weight >= 1e-4 (the plan made at
             that epoch end, whether or not the network is rebuilt then)

The images are resized to `size` x `size` (not the workload's 32 x 32): channel widths do not
depend on the spatial size of networks that end in a global pool, and the runs are 16x cheaper.
Used by `tools/prunetrain_runs.py`; needs the capture extra (torch, scikit-learn).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from sim.methods.prunetrain import space_channels


@dataclass(frozen=True)
class RunConfig:
    workload: str
    rho: float
    interval: int
    dataset: str = "digits"
    size: int = 8
    epochs: int = 40
    batch: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    seed: int = 0
    decay_at: tuple[float, ...] = (0.5, 0.75)   # x0.1 at these fractions of the epochs

    @property
    def name(self) -> str:
        return (f"{self.workload}-{self.dataset}{self.size}-rho{self.rho:g}-i{self.interval}"
                f"-e{self.epochs}-b{self.batch}-lr{self.lr:g}"
                + ("" if self.decay_at == (0.5, 0.75) else "-d" + "_".join(f"{f:g}" for f in self.decay_at)))


def lr_at(cfg: RunConfig, epoch: int) -> float:
    """Step decay x0.1 at the fractions decay_at of the epochs (CIFAR ResNets: 0.5, 0.75)."""
    return cfg.lr * 0.1 ** sum(epoch >= round(f * cfg.epochs) for f in cfg.decay_at)


def run_one(cfg: RunConfig, progress=None) -> dict:
    """Train one configuration; returns the trajectory document."""
    import torch
    from sim.capture.datasets import load_dataset
    from sim.capture.methods import PruneTrain
    from sim.capture.torchnet import build_model
    from sim.workload import load_workload

    torch.manual_seed(cfg.seed)
    wl0 = load_workload(cfg.workload)
    chans0 = space_channels(wl0)
    ds = load_dataset(cfg.dataset, (wl0.layers[0].c_in, cfg.size, cfg.size))
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    n = len(y)
    model = build_model(wl0)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    pt = PruneTrain(wl0, rho=cfg.rho, interval=cfg.interval, batch=cfg.batch)
    gen = torch.Generator().manual_seed(cfg.seed)
    points = {0: {}}
    per_epoch = []
    dose = 0.0
    t0 = time.time()
    for e in range(cfg.epochs):
        model.train()
        lr = lr_at(cfg, e) * pt.lr_scale
        for g in opt.param_groups:
            g["lr"] = lr
        perm = torch.randperm(n, generator=gen)
        steps, ce_sum = 0, 0.0
        for i in range(0, n - pt.batch + 1, pt.batch):
            idx = perm[i:i + pt.batch]
            ce = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss = pt.loss(ce, model)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            ce_sum += float(ce.detach())
        dose += lr * pt.lam * steps
        pt.zero_small(model, opt)
        plan = pt.plan(model)
        # alive channels per space of the ORIGINAL network (rebuilt nets have fewer spaces' channels)
        kept = {s: int(m.sum()) for s, m in plan.space_keep.items()}
        batch_before = pt.batch
        model, opt = pt.maybe_reconfigure(e, model, opt, n_train=n)
        if pt.reconfigurations and pt.reconfigurations[-1].epoch == e:
            points[e + 1] = {l.name: [l.c_in, l.c_out] for l in pt.workload.layers}
        norms = _out_group_norms(model, pt.workload)
        per_epoch.append({"epoch": e, "lr": lr, "batch": batch_before, "steps": steps,
                          "ce": round(ce_sum / max(steps, 1), 5), "dose": dose,
                          "kept": kept, "out_norm_quantiles": {
                              q: float(np.quantile(norms, q / 100)) if len(norms) else 0.0
                              for q in (0, 10, 25, 50)}})
        if progress:
            progress(e + 1, cfg.epochs, time.time() - t0)
    with torch.no_grad():
        model.eval()
        acc = float((model(torch.from_numpy(ds.x_val)).argmax(1).numpy() == ds.y_val).mean())
    # points only at epochs < epochs; drop widths equal to the previous point
    return {"schema": 1, "workload": cfg.workload,
            "description": f"real PruneTrain run ({cfg.name}); sim.system.lasso_runs",
            "points": {e: p for e, p in points.items() if e < cfg.epochs},
            "run": {"rho": cfg.rho, "interval": cfg.interval, "dataset": cfg.dataset,
                    "input_size": cfg.size, "train_samples": n, "epochs": cfg.epochs,
                    "batch": cfg.batch, "lr": cfg.lr, "lr_decay_at": list(cfg.decay_at),
                    "momentum": cfg.momentum, "weight_decay": cfg.weight_decay, "seed": cfg.seed,
                    "lambda": pt.lam, "first_ce": pt.first_ce, "first_group_norm": pt.first_norm,
                    "val_accuracy": acc, "seconds": round(time.time() - t0, 1),
                    "space_channels": chans0, "torch": str(torch.__version__)},
            "per_epoch": per_epoch}


def _out_group_norms(model, workload) -> np.ndarray:
    """L2 norms of every conv output-channel group still in the network (progress to zero)."""
    mods = model.prunesim_layer_modules
    out = [mods[l.name].weight.detach().flatten(1).norm(dim=1).numpy()
           for l in workload.layers if l.op == "conv"]
    return np.concatenate(out) if out else np.zeros(0)


def bar(label: str):
    """A one-line progress bar on stderr."""
    def show(done: int, total: int, secs: float) -> None:
        w = 30
        k = int(w * done / total)
        eta = secs / done * (total - done) if done else 0.0
        sys.stderr.write(f"\r{label} [{'#' * k}{'.' * (w - k)}] {done}/{total} "
                         f"{secs:5.0f}s eta {eta:4.0f}s")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return show


def write_run(doc: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120))
    tmp.replace(out)
