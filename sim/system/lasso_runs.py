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
    # steps of one (virtual) epoch at the initial batch; None: one pass over the data. A virtual
    # epoch lets a small dataset follow another dataset's schedule step for step (PAPER_CIFAR).
    epoch_steps: int | None = None
    dynamic_batch: bool = True     # grow the mini-batch after reconfigurations (lr scaled with it)
    shift: int = 0                 # random-translation augmentation, +-shift pixels (0: none)
    # additive Gaussian pixel noise (std in units of the normalised data), fresh every step: a dial
    # of task difficulty (the lasso's equilibrium depends on how hard the data is to fit)
    noise: float = 0.0
    subset: int | None = None      # train on the first `subset` images of the training split only

    @property
    def name(self) -> str:
        return (f"{self.workload}-{self.dataset}{self.size}-rho{self.rho:g}-i{self.interval}"
                f"-e{self.epochs}-b{self.batch}-lr{self.lr:g}"
                + ("" if self.decay_at == (0.5, 0.75) else "-d" + "_".join(f"{f:g}" for f in self.decay_at))
                + (f"-s{self.epoch_steps}" if self.epoch_steps else "")
                + ("" if self.dynamic_batch else "-fixedb")
                + (f"-aug{self.shift}" if self.shift else "")
                + (f"-n{self.noise:g}" if self.noise else "")
                + (f"-sub{self.subset}" if self.subset else ""))


# PruneTrain's CIFAR schedule (VALIDATION.md C: 182 epochs, batch 128, 391 steps an epoch; lr 0.1,
# x0.1 at 50 % / 75 %) replayed on a small dataset at batch 32 and lr 0.2: a virtual epoch of 196
# steps gives every epoch the paper's lr x steps (0.2 x 196 = 0.1 x 391 + 0.3 %), so the lasso dose
# of epoch e is the paper's epoch e for the same network and rho (same lambda / n0: CE0 = ln 10 on
# both 10-class sets). Per-sample lr (lr / batch) is 8x the paper's: the price of a CPU budget.
PAPER_CIFAR = dict(epochs=182, batch=32, lr=0.2, decay_at=(0.5, 0.75), epoch_steps=196,
                   dynamic_batch=False, shift=1)


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
    if cfg.subset:
        x, y = x[:cfg.subset], y[:cfg.subset]
    n = len(y)
    model = build_model(wl0)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    pt = PruneTrain(wl0, rho=cfg.rho, interval=cfg.interval, batch=cfg.batch,
                    max_batch=None if cfg.dynamic_batch else cfg.batch)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = _batches(n, cfg, gen)
    points = {0: {}}
    per_epoch = []
    dose = 0.0
    t0 = time.time()
    for e in range(cfg.epochs):
        model.train()
        lr = lr_at(cfg, e) * pt.lr_scale
        for g in opt.param_groups:
            g["lr"] = lr
        steps, ce_sum = 0, 0.0
        for idx in batches(pt.batch):
            xb = _shifted(x[idx], cfg.shift, gen) if cfg.shift else x[idx]
            if cfg.noise:
                xb = xb + cfg.noise * torch.randn(xb.shape, generator=gen)
            ce = torch.nn.functional.cross_entropy(model(xb), y[idx])
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
                    "epoch_steps": cfg.epoch_steps, "dynamic_batch": cfg.dynamic_batch,
                    "shift": cfg.shift, "noise": cfg.noise, "subset": cfg.subset,
                    "momentum": cfg.momentum, "weight_decay": cfg.weight_decay, "seed": cfg.seed,
                    "lambda": pt.lam, "first_ce": pt.first_ce, "first_group_norm": pt.first_norm,
                    "val_accuracy": acc, "seconds": round(time.time() - t0, 1),
                    "space_channels": chans0, "torch": str(torch.__version__)},
            "per_epoch": per_epoch}


def _batches(n: int, cfg: RunConfig, gen):
    """batches(batch) -> the index tensors of one epoch. Without epoch_steps: one shuffled pass
    (the last partial batch dropped). With it: epoch_steps * initial batch samples drawn from a
    running sequence of shuffled passes, so a grown batch takes fewer steps per epoch."""
    import torch
    state = {"perm": torch.randperm(n, generator=gen), "at": 0}

    def take(b: int):
        if state["at"] + b > n:
            state["perm"], state["at"] = torch.randperm(n, generator=gen), 0
        state["at"] += b
        return state["perm"][state["at"] - b:state["at"]]

    def epoch(b: int):
        if cfg.epoch_steps is None:
            perm = torch.randperm(n, generator=gen)
            return [perm[i:i + b] for i in range(0, n - b + 1, b)]
        return [take(b) for _ in range(max(1, round(cfg.epoch_steps * cfg.batch / b)))]
    return epoch


def _shifted(xb, shift: int, gen):
    """Random translation by up to +-shift pixels (zero padding), one offset per sample: CIFAR's
    pad-and-crop augmentation at the run's image size."""
    import torch
    h, w = xb.shape[-2:]
    pad = torch.nn.functional.pad(xb, (shift, shift, shift, shift))
    off = torch.randint(0, 2 * shift + 1, (2, xb.shape[0]), generator=gen)
    out = torch.empty_like(xb)
    for dy in range(2 * shift + 1):
        for dx in range(2 * shift + 1):
            sel = ((off[0] == dy) & (off[1] == dx)).nonzero(as_tuple=True)[0]
            if len(sel):
                out[sel] = pad[sel, :, dy:dy + h, dx:dx + w]
    return out


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
