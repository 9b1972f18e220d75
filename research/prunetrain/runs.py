"""Real PruneTrain runs on CPU: group lasso from rho, zeroing, reconfiguration, dynamic mini-batch.

Each run trains a workload's network (sim.capture.torchnet) on an offline dataset
(sim.capture.datasets) with the PruneTrain loop state of sim.capture.methods.PruneTrain and writes
the channel trajectory in the trajectory file format of sim.system.prunetrain (`points`: widths
from each reconfiguration epoch on), plus what the trajectory model is fitted to:

  run:       the settings (rho, interval, lr, momentum, weight decay, batch, epochs, lambda, ...)
  per_epoch: per epoch the learning rate, batch, steps, the lasso dose lr*lambda*steps and the
             channels of every channel space that still hold a weight >= 1e-4 (the plan made at
             that epoch end, whether or not the network is rebuilt then), and the spaces left
             with no channel at all ("dead": PruneTrain removes such a residual block)

The images are resized to `size` x `size` (not the workload's 32 x 32): channel widths do not
depend on the spatial size of networks that end in a global pool, and the runs are 16x cheaper.
Used by `python -m research.prunetrain.grids`; needs the capture extra (torch, scikit-learn).
"""
from __future__ import annotations

import dataclasses
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
    # 1e-4 in every bundled run; the authors' cifar.py defaults to 5e-4 (its help text says 1e-4)
    # and their run-script does not set it, their imagenet scripts use 1e-4
    weight_decay: float = 1e-4
    seed: int = 0
    decay_at: tuple[float, ...] = (0.5, 0.75)   # x0.1 at these fractions of the epochs
    # steps of one (virtual) epoch at the initial batch; None: one pass over the data. A virtual
    # epoch lets a small dataset follow another dataset's schedule step for step (PAPER_CIFAR).
    epoch_steps: int | None = None
    dynamic_batch: bool = True     # grow the mini-batch after reconfigurations (lr scaled with it)
    shift: int = 0                 # random-translation augmentation, +-shift pixels (0: none)
    flip: bool = False             # random horizontal flips (CIFAR's standard augmentation)
    # additive Gaussian pixel noise (std in units of the normalised data), fresh every step: a dial
    # of task difficulty (the lasso's equilibrium depends on how hard the data is to fit)
    noise: float = 0.0
    subset: int | None = None      # train on the first `subset` images of the training split only
    # CIFAR-10's labels merged into its two super-classes (vehicles 0 1 8 9, animals 2-7), trained
    # with the workload's own 10-way classifier: the same first CE, so the same lambda, and half a
    # bit of task instead of 3.3. A dial of how many distinctions the channels must carry (the
    # paper keeps more channels on CIFAR-100 than on CIFAR-10 at the same rho)
    coarse: bool = False
    # the CIFAR-10 + Fashion-MNIST union (dataset cifar10fashion) with its 20 labels folded to 10
    # (CIFAR-10's class k and Fashion-MNIST's class k share label k), trained with the 10-way
    # workload: the same images as the 20-class run, half the distinctions (its control); on
    # cifar10rot the 40 labels folded to CIFAR-10's ten (the turned images, the class alone)
    fold: bool = False
    # torch device of the run ("cpu", "cuda"); not part of the name: the random draws are made on
    # the CPU generator either way, only the kernels' rounding differs
    device: str = "cpu"
    # conv weight init: "torch" (PyTorch's default, kaiming_uniform a=sqrt(5): std 1/sqrt(3 fan_in))
    # or "he_fan_out" (normal, std sqrt(2 / (k*k*C_out)), BN weight 1 / bias 0: the init of the
    # PruneTrain authors' CIFAR models, 2.2-2.3x larger group norms, so lambda is that much smaller)
    init: str = "torch"
    # on CUDA, replay each training step as a captured CUDA graph (recaptured whenever the model,
    # lr or batch changes): the eager step of a CIFAR ResNet is launch-bound (~25 ms on an H100)
    graph: bool = True

    @property
    def name(self) -> str:
        sep = "-" if self.dataset[-1].isdigit() else ""   # cifar10-16, not cifar1016
        return (f"{self.workload}-{self.dataset}{sep}{self.size}-rho{self.rho:g}-i{self.interval}"
                f"-e{self.epochs}-b{self.batch}-lr{self.lr:g}"
                + ("" if self.decay_at == (0.5, 0.75) else "-d" + "_".join(f"{f:g}" for f in self.decay_at))
                + (f"-s{self.epoch_steps}" if self.epoch_steps else "")
                + ("" if self.dynamic_batch else "-fixedb")
                + (f"-aug{self.shift}" if self.shift else "")
                + ("-flip" if self.flip else "")
                + (f"-n{self.noise:g}" if self.noise else "")
                + (f"-sub{self.subset}" if self.subset else "")
                + ("-coarse2" if self.coarse else "")
                + ("-fold10" if self.fold else "")
                + ("" if self.init == "torch" else f"-{self.init.replace('_', '')}")
                + ("" if self.weight_decay == 1e-4 else f"-wd{self.weight_decay:g}")
                + (f"-seed{self.seed}" if self.seed else ""))

    def settings(self) -> dict:
        """The run record's settings (the `run` section of a run file, before what the run
        measured): one list for a finished run and one rebuilt from its log."""
        return {"rho": self.rho, "interval": self.interval, "dataset": self.dataset,
                "input_size": self.size, "epochs": self.epochs, "batch": self.batch,
                "lr": self.lr, "lr_decay_at": list(self.decay_at),
                "epoch_steps": self.epoch_steps, "dynamic_batch": self.dynamic_batch,
                "shift": self.shift, "flip": self.flip, "noise": self.noise,
                "subset": self.subset, "coarse": self.coarse, "fold": self.fold,
                "momentum": self.momentum, "weight_decay": self.weight_decay, "seed": self.seed,
                "init": self.init}


# PruneTrain's CIFAR schedule (VALIDATION.md C: 182 epochs, batch 128, 391 steps an epoch; lr 0.1,
# x0.1 at 50 % / 75 %) replayed on a small dataset at batch 32 and lr 0.2: a virtual epoch of 196
# steps gives every epoch the paper's lr x steps (0.2 x 196 = 0.1 x 391 + 0.3 %), so the lasso dose
# of epoch e is the paper's epoch e for the same network and rho (same lambda / n0: CE0 = ln 10 on
# both 10-class sets). Per-sample lr (lr / batch) is 8x the paper's: the price of a CPU budget.
PAPER_CIFAR = dict(epochs=182, batch=32, lr=0.2, decay_at=(0.5, 0.75), epoch_steps=196,
                   dynamic_batch=False, shift=1)
# ... and on a GPU at the paper's per-sample lr (lr / batch = 0.1 / 128, the linear scaling rule
# of Goyal et al. 2017) with 4x the batch: 98 steps of lr 0.4 an epoch give the paper's lr x steps
# (+0.3 %) in a quarter of the steps. CIFAR's 4-pixel pad-and-crop at 32 x 32.
PAPER_CIFAR_GPU = dict(epochs=182, batch=512, lr=0.4, decay_at=(0.5, 0.75), epoch_steps=98,
                       dynamic_batch=False, shift=4)


def lr_at(cfg: RunConfig, epoch: int) -> float:
    """Step decay x0.1 at the fractions decay_at of the epochs (CIFAR ResNets: 0.5, 0.75)."""
    return cfg.lr * 0.1 ** sum(epoch >= round(f * cfg.epochs) for f in cfg.decay_at)


def planned_run(cfg: RunConfig):
    """The trajectory model's inputs of a run not made yet (research.prunetrain.fitting.RunData, its kept
    fractions NaN): the clock from the configuration's lr and steps at every epoch; lambda / n0
    at its expected value at the configuration's init (prunetrain_model.lambda_per_norm with the
    stored fit's CE0 ratio, as the model predicts; a finished run logs lambda and R0). What the
    stored fit predicts for it is a prediction written down before the run (`python -m
    research.prunetrain.grids --predict`). Only a fixed batch and virtual epochs (epoch_steps) have a
    known clock before the run; anything else is a ValueError."""
    from research.prunetrain.fitting import RunData
    from sim.system import prunetrain_model as lm
    from sim.workload import load_workload
    if cfg.dynamic_batch or cfg.epoch_steps is None:
        raise ValueError(f"{cfg.name}: the clock depends on the run (dynamic batch, or one pass "
                         "over the data an epoch); only fixed-batch virtual epochs are predicted")
    w = load_workload(cfg.workload)
    outputs = w.layers[-1].c_out
    lr = np.array([lr_at(cfg, e) for e in range(cfg.epochs)])
    _, res = lm._kinds(w)
    nan = np.full(cfg.epochs, np.nan)
    return RunData(cfg.name, w.name, cfg.rho, cfg.interval,
                   np.cumsum(lr * cfg.epoch_steps) / (1 - cfg.momentum),
                   lm.lambda_per_norm(w, cfg.rho, cfg.init, lm.bundled_fit().ce0_offset),
                   nan, nan,
                   cfg.lr, cfg.batch, high=lr >= 0.99 * lr.max(),
                   init_scale=lm.init_scale(w, cfg.init), has_residual=bool(res),
                   weight_decay=cfg.weight_decay, coarse=cfg.coarse,
                   classes=2 if cfg.coarse else 10 if cfg.fold else outputs,
                   dataset=cfg.dataset, expansion=lm.expansion(w), head=outputs)


def run_one(cfg: RunConfig, progress=None, log=None) -> dict:
    """Train one configuration; returns the trajectory document. `log(record)` gets each epoch's
    per_epoch record as soon as it is made (a run stopped early keeps what it measured)."""
    import torch
    from sim.capture.methods import PruneTrain
    from sim.capture.torchnet import build_model
    from sim.workload import load_workload

    torch.manual_seed(cfg.seed)
    wl0 = load_workload(cfg.workload)
    chans0 = space_channels(wl0)
    ds, x, y = _training_data(cfg, wl0)
    dev = torch.device(cfg.device)
    torch.backends.cudnn.benchmark = dev.type == "cuda"
    n = len(y)
    x, y = x.to(dev), y.to(dev)
    model = build_model(wl0)
    if cfg.init == "he_fan_out":
        _he_fan_out(model)
    elif cfg.init != "torch":
        raise ValueError(f"unknown init {cfg.init!r} (torch, he_fan_out)")
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    pt = PruneTrain(wl0, rho=cfg.rho, interval=cfg.interval, batch=cfg.batch,
                    max_batch=None if cfg.dynamic_batch else cfg.batch)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = _batches(n, cfg, gen)
    points = {0: {}}
    per_epoch = []
    dose = 0.0
    graphed = _GraphedStep() if cfg.graph and dev.type == "cuda" else None
    t0 = time.time()
    for e in range(cfg.epochs):
        model.train()
        lr = lr_at(cfg, e) * pt.lr_scale
        for g in opt.param_groups:
            g["lr"] = lr
        steps, ce_sum = 0, torch.zeros((), device=dev)
        for idx in batches(pt.batch):
            idx = idx.to(dev)
            xb = _augmented(x[idx], cfg, gen)
            if graphed is not None and pt.lam is not None:
                graphed.step(model, opt, pt, xb, y[idx], ce_sum)
            else:
                ce_sum += _eager_step(model, opt, pt, xb, y[idx])
            steps += 1
        ce_total = float(ce_sum) + (graphed.take() if graphed is not None else 0.0)
        dose += lr * pt.lam * steps
        pt.zero_small(model, opt)
        plan = pt.plan(model)
        # alive channels per space of the ORIGINAL network (rebuilt nets have fewer spaces' channels)
        kept = {s: int(m.sum()) for s, m in plan.space_keep.items()}
        batch_before = pt.batch
        model_before = model
        model, opt = pt.maybe_reconfigure(e, model, opt, n_train=n)
        if graphed is not None and model is not model_before:
            graphed.key = None   # a rebuilt model may reuse a freed one's id()
        if pt.reconfigurations and pt.reconfigurations[-1].epoch == e:
            # a space left with no channel keeps one zero channel in the model; the trajectory
            # writes 0, so that replaying it removes the block's path as PruneTrain does
            points[e + 1] = {l.name: [0 if l.in_space in plan.dead else l.c_in,
                                      0 if l.out_space in plan.dead else l.c_out]
                             for l in pt.workload.layers}
        norms = _out_group_norms(model, pt.workload)
        per_epoch.append({"epoch": e, "lr": lr, "batch": batch_before, "steps": steps,
                          "ce": round(ce_total / max(steps, 1), 5), "dose": dose,
                          "kept": kept, "dead": sorted(plan.dead), "out_norm_quantiles": {
                              q: float(np.quantile(norms, q / 100)) if len(norms) else 0.0
                              for q in (0, 10, 25, 50)}})
        if log:
            if e == 0:   # what the trajectory model needs besides per_epoch, before any time limit
                log({"header": {"name": cfg.name, "lambda": pt.lam, "first_ce": pt.first_ce,
                                "first_group_norm": pt.first_norm, "train_samples": n,
                                "torch": str(torch.__version__)}})
            log(per_epoch[-1])
        if progress:
            progress(e + 1, cfg.epochs, time.time() - t0)
    with torch.no_grad():
        model.eval()
        xv = torch.from_numpy(ds.x_val)
        pred = np.concatenate([model(xv[i:i + 1024].to(dev)).argmax(1).cpu().numpy()
                               for i in range(0, len(xv), 1024)])
        acc = float((pred == ds.y_val).mean())
    # points only at epochs < epochs; drop widths equal to the previous point
    return {"schema": 1, "workload": cfg.workload,
            "description": f"real PruneTrain run ({cfg.name}); research.prunetrain.runs",
            "points": {e: p for e, p in points.items() if e < cfg.epochs},
            "run": {**cfg.settings(), "train_samples": n, "classes": int(y.max()) + 1,
                    "lambda": pt.lam, "first_ce": pt.first_ce, "first_group_norm": pt.first_norm,
                    "val_accuracy": acc, "seconds": round(time.time() - t0, 1),
                    "space_channels": chans0, "torch": str(torch.__version__)},
            "per_epoch": per_epoch}


# the data sets whose labels fold to ten (label mod 10): the union's 20, the turned CIFAR-10's 40
FOLDED = frozenset({"cifar10fashion", "cifar10rot"})


def _training_data(cfg: RunConfig, wl0):
    """(dataset, x, y): the run's training images and labels as tensors (subset and coarse
    labels applied; the dataset's validation labels coarsened alike)."""
    import torch
    from sim.capture.datasets import load_dataset
    ds = load_dataset(cfg.dataset, (wl0.layers[0].c_in, cfg.size, cfg.size))
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    if cfg.subset:
        x, y = x[:cfg.subset], y[:cfg.subset]
    if cfg.coarse:
        if cfg.dataset != "cifar10":
            raise ValueError("coarse labels are CIFAR-10's vehicles / animals split")
        vehicle = torch.zeros(10, dtype=y.dtype)
        vehicle[[0, 1, 8, 9]] = 1
        y = vehicle[y.long()].to(y.dtype)
        ds = dataclasses.replace(ds, y_val=vehicle.numpy()[ds.y_val])
    if cfg.fold:
        if cfg.dataset not in FOLDED:
            raise ValueError("folded labels are the many-label sets' labels mod 10 (datasets "
                             f"{', '.join(sorted(FOLDED))})")
        y = y % 10
        ds = dataclasses.replace(ds, y_val=ds.y_val % 10, classes=10)
    if int(y.max()) >= wl0.layers[-1].c_out:
        raise ValueError(f"{cfg.dataset} has {int(y.max()) + 1} labels, {cfg.workload} "
                         f"{wl0.layers[-1].c_out} outputs")
    return ds, x, y


def _he_fan_out(model) -> None:
    """Conv weights ~ N(0, 2 / (k_h k_w C_out)), BN weight 1 and bias 0; FC layers keep PyTorch's
    default (the authors' models re-initialise only their Conv2d and BatchNorm2d modules)."""
    import torch
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.normal_(0.0, math.sqrt(2.0 / n))
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.zero_()


def _eager_step(model, opt, pt, xb, yb):
    import torch
    ce = torch.nn.functional.cross_entropy(model(xb), yb)
    loss = pt.loss(ce, model)   # sets lambda from rho at the first call
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return ce.detach()   # summed on the device by the caller: no host sync per step


class _GraphedStep:
    """The training step (forward, CE + lambda R(W), backward, SGD) as a CUDA graph, following
    PyTorch's whole-network capture recipe (torch.cuda.graphs): three eager warm-up steps on a
    side stream with real batches, then capture; later steps copy the batch into the graph's
    static input and replay. The SGD step bakes the lr, and a reconfiguration makes a new model
    and optimizer, so the graph is rebuilt when any of (model, optimizer, lr, batch) changes.
    Zeroing small groups between epochs writes the same parameter and momentum storage in place,
    which the graph then reads."""

    WARMUP = 3

    def __init__(self):
        self.key = None
        self.graph = None
        self.warm = 0

    def step(self, model, opt, pt, xb, yb, ce_sum):
        """One step; its CE is added to ce_sum (eager warm-up) or to the graph's accumulator
        (`take` reads and clears it)."""
        import torch
        key = (id(model), id(opt), tuple(g["lr"] for g in opt.param_groups), tuple(xb.shape))
        if key != self.key:
            # the previous graph's accumulator was taken at the last epoch end
            self.key, self.graph, self.warm = key, None, 0
            self.side = torch.cuda.Stream()
        if self.graph is None and self.warm < self.WARMUP:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                ce_sum += _eager_step(model, opt, pt, xb, yb)
            torch.cuda.current_stream().wait_stream(self.side)
            self.warm += 1
            return
        if self.graph is None:
            self.x, self.y = xb.clone(), yb.clone()
            self.acc = torch.zeros((), device=xb.device)
            opt.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                ce = torch.nn.functional.cross_entropy(model(self.x), self.y)
                loss = pt.loss(ce, model)
                loss.backward()
                opt.step()
                self.acc += ce.detach()
        self.x.copy_(xb)
        self.y.copy_(yb)
        self.graph.replay()

    def take(self) -> float:
        if self.graph is None:
            return 0.0
        v = float(self.acc)
        self.acc.zero_()
        return v


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
    off = torch.randint(0, 2 * shift + 1, (2, xb.shape[0]), generator=gen).to(xb.device)
    # one gather for the whole batch (a loop over the offsets costs 9 kernel launches per step)
    rows = (off[0][:, None] + torch.arange(h, device=xb.device))[:, None, :, None]
    cols = (off[1][:, None] + torch.arange(w, device=xb.device))[:, None, None, :]
    n_idx = torch.arange(xb.shape[0], device=xb.device)[:, None, None, None]
    c_idx = torch.arange(xb.shape[1], device=xb.device)[None, :, None, None]
    return pad[n_idx, c_idx, rows, cols]


def _augmented(xb, cfg: RunConfig, gen):
    """The run's augmentation of one batch, in a fixed order of random draws: shifts, flips,
    pixel noise (each only if the run has it, so older runs' draws are unchanged)."""
    import torch
    if cfg.shift:
        xb = _shifted(xb, cfg.shift, gen)
    if cfg.flip:
        xb = _flipped(xb, gen)
    if cfg.noise:
        xb = xb + cfg.noise * torch.randn(xb.shape, generator=gen).to(xb.device)
    return xb


def _flipped(xb, gen):
    """Each sample mirrored left-right with probability 1/2 (CIFAR's random horizontal flip)."""
    import torch
    m = (torch.rand(xb.shape[0], generator=gen) < 0.5).to(xb.device)[:, None, None, None]
    return torch.where(m, xb.flip(-1), xb)


def _out_group_norms(model, workload) -> np.ndarray:
    """L2 norms of every conv output-channel group still in the network (progress to zero)."""
    mods = model.prunesim_layer_modules
    out = [mods[l.name].weight.detach().flatten(1).norm(dim=1).cpu().numpy()
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


# Third-party runs of the authors' code (research/prunetrain/data/reruns, from the console logs of
# github.com/VictorSuciu/prunetrain flop_logs/): trajectory file -> the log's run in
# vgg11-cifar100-v100-times.yaml, whose command, steps and lr schedule the record takes
THIRD_PARTY = {"vgg11-cifar100-rho0.2-391steps.yaml": "dynamic",
               "vgg11-cifar100-rho0.2-otf.yaml": "otf",
               "vgg11-cifar100-rho0.2-196steps.yaml": "dynamic-tensor"}
CIFAR100_TRAIN = 50_000


def logged_model_schedule(facts: dict, epochs: int = 180):
    """The model's Schedule of a run in the times file: its steps an epoch, the 0-based epochs
    from which its lr is x0.1 (`lr_from_epoch` is 1-based, as the logs print it), its first lr,
    and the images a step ceil(50,000 / steps) (not logged: 128 at 391 steps, 256 at 196 although
    the command says 128), so the model's steps an epoch are the run's; weight decay 5e-4
    (cifar.py's default, no flag given)."""
    from sim.system import prunetrain_model as lm
    steps = int(facts["steps"])
    decays = tuple(sorted(int(e) - 1 for e in facts["lr_from_epoch"] if int(e) > 1))
    return lm.Schedule(CIFAR100_TRAIN, epochs, math.ceil(CIFAR100_TRAIN / steps),
                       float(facts["lr_from_epoch"][1]), decays, 0.9,
                       f"logged: {facts['log']}", lm.CIFAR_WEIGHT_DECAY)


def third_party_record(traj: Path, times: Path, run_key: str) -> dict:
    """The run record (run file format) of a third-party run read from its console log: the
    trajectory's widths at every reconfiguration as the plan made at the end of the epoch before
    (point E: the plan at the end of epoch E - 1), the other epochs clock only (no `kept`).

    Facts from the logs (the times file's run): rho and interval from its command, steps an
    epoch, the lr schedule.
    The first CE where the times file gives the log's first printed loss (`first_loss`: CE +
    the lasso term, which the tuning of lambda at that step makes CE0 / (1 - rho)), and lambda
    from it.
    Not logged, so the record states what it assumes: the images a step, ceil(50,000 / steps)
    (128 at 391 steps; 256 at 196 although the command says 128); weight decay 5e-4 (cifar.py's
    default, no flag given); the authors' He fan-out init; the first group-norm sum R0 at its
    analytic value (the log does not print it); without `first_loss`, lambda at the value the
    model predicts with (lambda_per_norm with the stored fit's CE0 ratio)."""
    from sim.system import prunetrain_model as lm
    from sim.system.prunetrain import load_trajectory
    from sim.workload import load_workload, with_classes
    facts = yaml.safe_load(times.read_text())["runs"][run_key]
    w = with_classes(load_workload("vgg11-cifar"), 100)
    tr = load_trajectory(traj, w)
    flag = lambda name: facts["command"].split(f"--{name} ")[1].split()[0]   # noqa: E731
    rho, interval = float(flag("var_group_lasso_coeff")), int(flag("sparse_interval"))
    sched = logged_model_schedule(facts)
    epochs, batch, lr0, decays = sched.epochs, sched.batch, sched.lr, sched.decay_epochs
    steps, wd = sched.steps_per_epoch(), sched.weight_decay
    r0, g = lm.init_group_norms(w, lm.PAPER_INIT)
    chans = space_channels(w)
    per = []
    for e in range(epochs):
        rec = {"epoch": e, "lr": lr0 * 0.1 ** sum(e >= d for d in decays), "batch": batch,
               "steps": steps}
        if (e + 1) % interval == 0 and e + 1 < epochs:
            kept = dict(chans)
            for name, (_, c_out) in tr.widths_at(e + 1).items():
                kept[next(l.out_space for l in w.layers if l.name == name)] = int(c_out)
            rec["kept"] = kept
        per.append(rec)
    run = {"rho": rho, "interval": interval, "dataset": "cifar100", "input_size": 32,
           "epochs": epochs, "batch": batch, "lr": lr0, "lr_decay_at_epochs": list(decays),
           "epoch_steps": steps, "dynamic_batch": False, "momentum": 0.9, "weight_decay": wd,
           "init": lm.PAPER_INIT, "classes": 100, "classifier": 100}
    if "first_loss" in facts:
        run["first_ce"] = round((1 - rho) * float(facts["first_loss"]), 6)
        run["lambda"] = rho * run["first_ce"] / ((1 - rho) * r0)
    else:
        offset = lm.bundled_fit().ce0_offset
        run["lambda"] = lm.lambda_per_norm(w, rho, lm.PAPER_INIT, offset) * r0 / g
    run.update({"first_group_norm": r0,
                "third_party": {"log": facts["log"], "command": facts["command"],
                                "trajectory": traj.name}})
    return {"schema": 1, "workload": "vgg11-cifar",
            "description": (f"third-party run of the PruneTrain authors' code, read from its "
                            f"console log (github.com/VictorSuciu/prunetrain {facts['log']}; "
                            f"widths: research/prunetrain/data/reruns/{traj.name}); "
                            "research.prunetrain.runs.third_party_record, whose docstring says what "
                            "is assumed"),
           "points": {0: {}}, "run": run, "per_epoch": per}
