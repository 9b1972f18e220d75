"""`prunesim capture`: train a workload's network on a real offline dataset (CPU, deterministic)
and record a trace (`sim.capture.hooks.Capture`) plus the per-epoch training log."""
from __future__ import annotations

import math
import os
import platform
import shlex
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sim.errors import CaptureError
from sim.methods.info import method_info
from sim.methods.prunetrain import authors_macs
from sim.workload import Workload, load_workload

from .datasets import known_datasets, load_dataset
from .hooks import Capture
from .methods import PruneTrain, as_spec, install_method
from .torchnet import _torch, build_model

MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
EVAL_BATCH = 256


def record_points(total: int, fraction: float) -> list[int]:
    """Iterations round(k * fraction * total), k = 0, 1, ..., clamped to the last one (total - 1)."""
    k_max = int(math.floor(1 / fraction + 1e-9))
    return sorted({min(total - 1, int(round(k * fraction * total))) for k in range(k_max + 1)})


def parse_tensors(spec: str | Iterable[str]) -> tuple[str, ...]:
    """'dO,I' -> ('dO', 'I'); dO is always recorded, first."""
    from sim.traces.format import KINDS
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    bad = [s for s in items if s not in KINDS]
    if bad:
        raise CaptureError(None, "--tensors", f"unknown tensor kind {bad[0]!r} (known: {', '.join(KINDS)})")
    return tuple(dict.fromkeys(["dO"] + items))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from sim.traces.format import software_versions
    out = software_versions()
    for pkg in ("scikit-learn", "mlxtend"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    out["platform"] = platform.platform()
    return out


def _evaluate(model, x, y) -> float:
    torch, _ = _torch()
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), EVAL_BATCH):
            out = model(x[i:i + EVAL_BATCH]).flatten(1)
            correct += int((out.argmax(1) == y[i:i + EVAL_BATCH]).sum())
    model.train()
    return correct / len(y)


@dataclass
class _Loop:
    """The training loop's state, which PruneTrain's reconfigurations replace mid-run."""

    model: Any
    opt: Any
    sched: Any
    run: Any                  # MethodRun, or None (dense)
    pt: PruneTrain | None
    lr: float
    batch: int                # the initial per-step batch
    per_epoch: int
    max_iterations: int | None
    total: int
    cur_batch: int = 0
    seen: int = 0
    recorded: list[int] = field(default_factory=list)

    def cosine(self, it: float) -> float:
        return 0.5 * (1 + math.cos(math.pi * min(it, self.total) / self.total))


def _check_arguments(epochs, batch, subsample, lr, record_every, train_samples) -> None:
    if epochs < 1:
        raise CaptureError(None, "--epochs", f"must be >= 1, got {epochs}")
    if batch < 1:
        raise CaptureError(None, "--batch", f"must be >= 1, got {batch}")
    if subsample is not None and not 1 <= subsample <= batch:
        raise CaptureError(None, "--subsample", f"must be in 1..--batch ({batch}), got {subsample}")
    if not (lr > 0 and math.isfinite(lr)):
        raise CaptureError(None, "--lr", f"must be a positive number, got {lr}")
    if record_every is not None and not (0 < record_every <= 1 and math.isfinite(record_every)):
        raise CaptureError(None, "--record-every", f"must be a fraction of the schedule in (0, 1], "
                           f"got {record_every}")
    if train_samples is not None and train_samples < 1:
        raise CaptureError(None, "--train-samples", f"must be >= 1, got {train_samples}")


def _load_data(model, wl: Workload, dataset: str, train_samples: int | None):
    """The dataset at the model's input shape and class count, cut to train_samples."""
    torch, _ = _torch()
    model.eval()
    with torch.no_grad():
        n_out = model(torch.zeros((1, *wl.input_shape))).numel()
    model.train()
    ds = load_dataset(dataset, wl.input_shape, classes_available=n_out)
    if train_samples is not None:
        if train_samples > len(ds.y_train):
            raise CaptureError(None, "--train-samples", f"{train_samples} exceeds the "
                               f"{len(ds.y_train)} training samples of {dataset}")
        ds.x_train, ds.y_train = ds.x_train[:train_samples], ds.y_train[:train_samples]
        ds.info = dict(ds.info, train_samples=int(train_samples),
                       subset="first train_samples of the seeded training split")
    return ds


def _record_at(lp: _Loop, epochs: int, every: int, record_every: float | None):
    """The iterations to record (None: every `every`-th)."""
    record_at = None
    if record_every is not None:
        if lp.pt is not None:
            raise CaptureError(None, "--record-every", "not supported with prunetrain (its "
                               "layer shapes change during the run); use --every")
        record_at = record_points(lp.total, record_every)
    if lp.pt is not None and lp.pt.interval < epochs:
        # after the first reconfiguration the layers no longer have the trace workload's shapes
        record_at = range(0, lp.pt.interval * lp.per_epoch, every)
    return record_at


def _provenance(wl: Workload, lp: _Loop, ds, spec, grad_transform, *, seed, threads, epochs,
                record_every, record_at, command) -> dict[str, Any]:
    provenance = {
        "model": {"workload": wl.name, "origin": os.path.basename(wl.origin),
                  "workload_sha256": wl.checksum, "builder": "sim.capture.torchnet.build_model",
                  "parameters": int(sum(p.numel() for p in lp.model.parameters()))},
        "dataset": ds.info,
        "method": {"id": "dense", "params": {}} if grad_transform is None else
                  {"id": str(getattr(grad_transform, "id", "custom")),
                   "params": dict(getattr(grad_transform, "params", {}) or {})},
        "seed": seed,
        "training": {"device": "cpu", "threads": threads, "deterministic_algorithms": True,
                     "optimizer": "SGD", "lr": lp.lr, "momentum": MOMENTUM,
                     "weight_decay": lp.opt.param_groups[0]["weight_decay"],
                     "lr_schedule": "cosine per iteration",
                     "loss": "cross-entropy (batch mean)", "batch": lp.batch, "epochs": epochs,
                     "iterations_per_epoch": lp.per_epoch, "drop_last": True,
                     "max_iterations": lp.max_iterations, "total_iterations": lp.total,
                     "record_every": record_every,
                     "progress": None if record_at is None or record_every is None else
                     {str(i): i / lp.total for i in record_at},
                     "train_acc": []},
        "command": command or "sim.capture.trainer.train_and_capture(...)",
        "software": _versions(),
    }
    if spec is not None:
        provenance["method"] = {**spec.as_dict(), "label": spec.label,
                                "implementation": "sim.capture.methods.install_method",
                                "recorded_dO": "dense gradient at each conv module's output "
                                               "(the method's input)"}
        if lp.pt is not None:
            provenance["training"]["lr_schedule"] = ("cosine over samples seen, times the "
                                                     "PruneTrain batch growth ratio")
    return provenance


def _train_epoch(lp: _Loop, cap, bar, epoch: int, epochs: int, xt, yt, gen) -> tuple[dict, float, int]:
    """One epoch of SGD steps: (its log row, summed loss, samples seen)."""
    torch, _ = _torch()
    perm = torch.randperm(len(yt), generator=gen)
    loss_sum = 0.0
    epoch_seen = 0
    correct = 0
    for i in range(lp.per_epoch):
        bar.update(1, note=f"epoch {epoch + 1}/{epochs}")
        idx = perm[i * lp.cur_batch:(i + 1) * lp.cur_batch]
        if lp.pt is not None:  # cosine over samples seen, scaled with the grown batch
            for g in lp.opt.param_groups:
                g["lr"] = lp.lr * lp.pt.lr_scale * lp.cosine(lp.seen / lp.batch)
        with cap.iteration(epoch) as it, \
                (lp.run.iteration(epoch, len(idx)) if lp.run is not None else nullcontext()):
            logits = lp.model(xt[idx]).flatten(1)
            loss = torch.nn.functional.cross_entropy(logits, yt[idx])
            objective = lp.pt.loss(loss, lp.model) if lp.pt is not None else loss
            lp.opt.zero_grad(set_to_none=True)
            objective.backward()
        if it.recording:
            lp.recorded.append(it.index)
        if not math.isfinite(loss.item()):
            raise CaptureError(None, "--lr", f"training diverged (loss {loss.item()}) at "
                               f"iteration {it.index}; lower the learning rate")
        lp.opt.step()
        if lp.sched is not None:
            lp.sched.step()
        loss_sum += loss.item()
        correct += int((logits.detach().argmax(1) == yt[idx]).sum())
        lp.seen += len(idx)
        epoch_seen += len(idx)
    row: dict[str, Any] = {"epoch": epoch, "batch": lp.cur_batch, "iterations": lp.per_epoch,
                           "train_acc": correct / max(epoch_seen, 1)}
    return row, loss_sum, epoch_seen


def _prunetrain_epoch_end(lp: _Loop, row: dict, epoch: int, epochs: int, epoch_seen: int,
                          n_train: int, say) -> None:
    """PruneTrain after an epoch: its counters in the row, zeroing, and maybe a rebuilt model."""
    pt = lp.pt
    cur_wl = pt.workload
    row.update({"authors_macs": authors_macs(cur_wl, 1) * epoch_seen,
                "weights": sum(l.weight_count for l in cur_wl.layers),
                "conv_channels": sum(l.c_out for l in cur_wl.layers if l.op == "conv"),
                "lambda": pt.lam, "lr_scale": pt.lr_scale})
    row["zeroed_groups"] = pt.zero_small(lp.model, lp.opt)
    new_model = lp.model
    if epoch < epochs - 1:  # a rebuild after the last epoch would never train
        new_model, lp.opt = pt.maybe_reconfigure(epoch, lp.model, lp.opt, n_train=n_train)
    if new_model is not lp.model:
        lp.model = new_model
        lp.run.install(lp.model, pt.workload)
        lp.cur_batch = pt.batch
        lp.per_epoch = n_train // lp.cur_batch
        if lp.max_iterations is not None:
            lp.per_epoch = min(lp.per_epoch, lp.max_iterations)
        say(f"prunetrain: epoch {epoch + 1}: rebuilt with "
            f"{sum(l.c_out for l in pt.workload.layers if l.op == 'conv')} conv "
            f"channels (was {row['conv_channels']}), batch {lp.cur_batch}, lr x "
            f"{pt.lr_scale:.2f}")


def _run_epochs(lp: _Loop, cap, wl: Workload, epochs: int, ds, gen, method_id: str, say,
                start: float) -> tuple:
    """Every epoch: train, evaluate, log. Returns (per-epoch rows, final validation accuracy)."""
    from sim.progress import Progress
    torch, _ = _torch()
    xt, yt = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    xv, yv = torch.from_numpy(ds.x_val), torch.from_numpy(ds.y_val)
    acc = None
    epoch_rows: list[dict[str, Any]] = []
    # one bar over the whole run, with rate and ETA, on a terminal (silent in logs; the epoch
    # lines remain)
    bar = Progress(lp.total, f"capture {wl.name}", "it")
    for epoch in range(epochs):
        row, loss_sum, epoch_seen = _train_epoch(lp, cap, bar, epoch, epochs, xt, yt, gen)
        if lp.run is not None:
            row.update({f"{k}_density": v for k, v in lp.run.end_epoch().items()})
        if lp.pt is not None:
            _prunetrain_epoch_end(lp, row, epoch, epochs, epoch_seen, len(yt), say)
        acc = _evaluate(lp.model, xv, yv)
        wall = time.perf_counter() - start
        row.update({"train_loss": loss_sum / row["iterations"], "val_acc": acc,
                    "wall_time_s": wall})
        epoch_rows.append(row)
        if lp.run is not None:
            cap.writer.provenance["method"]["epochs"] = epoch_rows
        cap.writer.provenance["training"]["train_acc"].append(row["train_acc"])
        cap.log_epoch(epoch, row["train_loss"], acc, lp.seen, wall, method_id)
        if bar.enabled:
            bar._clear()  # the epoch line goes above the bar, which redraws on update
        say(f"epoch {epoch + 1}/{epochs}: train loss {row['train_loss']:.4f}, "
            f"train acc {100 * row['train_acc']:.2f} % (running), val acc {100 * acc:.2f} %, "
            f"{lp.seen} samples, {wall:.1f} s")
    bar.close()
    return epoch_rows, acc


def train_and_capture(workload: Workload | str, dataset: str, epochs: int, out: str | os.PathLike, *,
                      batch: int = 32, every: int = 50, subsample: int | None = None,
                      tensors: str | Iterable[str] = ("dO",), fp16: bool = False, lr: float = 0.05,
                      seed: int = 0, max_iterations: int | None = None, force: bool = False,
                      threads: int = 2, command: str | None = None,
                      grad_transform: Callable | None = None, method: str | None = None,
                      progress: Callable[[str], None] | None = print,
                      record_every: float | None = None,
                      train_samples: int | None = None) -> dict[str, Any]:
    """Train `workload` on `dataset` with SGD (momentum 0.9, weight decay 5e-4 or prunetrain's
    `wd`, cosine learning rate), recording every `every`-th iteration into the trace directory
    `out`.

    `method` (a spec such as ``dbtd:p=0.9`` or ``prunetrain:rho=0.2,interval=2``; see
    docs/reference/methods.md) trains with that method installed (sim/capture/methods.py); the log's method
    column and provenance.method carry its label, and the summary's ``epochs`` its per-epoch
    operand densities (and for PruneTrain channels, batch and FLOPs). Recorded dO is what each
    conv module receives at its output, i.e. the dense gradient the method then acts on.
    PruneTrain rebuilds the model at reconfigurations, so its trace records only iterations
    before the first one (later shapes differ from the trace's workload); the channel trajectory
    is in provenance.method.epochs.

    `record_every` (a fraction F of the schedule, 0 < F <= 1) replaces `every`: iterations
    round(k F T) for k = 0, 1, ... (T the run's iterations; the last point is clamped to T - 1)
    are recorded, so a trace covers the whole run; the manifest's provenance.training carries
    T and each recorded iteration's progress (its index / T), which `trace fit` reads.
    `train_samples` trains on the first N samples of the (fixed, seeded) training split.

    Deterministic for a given seed and thread count (torch.manual_seed, deterministic algorithms,
    a fixed shuffling generator). Returns a summary: iterations, recorded iterations, final
    validation accuracy, wall time, and the trace path.
    """
    torch, _ = _torch()
    wl = workload if isinstance(workload, Workload) else load_workload(workload)
    tensors = parse_tensors(tensors)
    _check_arguments(epochs, batch, subsample, lr, record_every, train_samples)
    spec = as_spec(method) if method is not None else None
    if dataset not in known_datasets():
        raise CaptureError(None, "--dataset", f"unknown dataset {dataset!r} (known: "
                           f"{', '.join(known_datasets())})")

    prev_threads = torch.get_num_threads()
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(seed)
        model = build_model(wl)
        ds = _load_data(model, wl, dataset, train_samples)
        n_train = len(ds.y_train)
        per_epoch = n_train // batch
        if per_epoch < 1:
            raise CaptureError(None, "--batch", f"batch {batch} exceeds the {n_train} training samples")
        if max_iterations is not None:
            per_epoch = min(per_epoch, max_iterations)
        run = install_method(model, wl, spec, seed=seed, batch=batch) if spec is not None else None
        pt = None
        if spec is not None and method_info(spec).is_channel_plan:
            pt = PruneTrain(wl, rho=spec.get("rho"), interval=spec.get("interval"), batch=batch,
                            max_batch=n_train)
        # prunetrain's wd is the run's decay (the lasso model's input); otherwise capture's own
        wd = spec.get("wd") if pt is not None and spec.get("wd") is not None else WEIGHT_DECAY
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=wd)
        lp = _Loop(model, opt, None, run, pt, lr, batch, per_epoch, max_iterations,
                   per_epoch * epochs, cur_batch=batch)
        lp.sched = torch.optim.lr_scheduler.LambdaLR(opt, lp.cosine) if pt is None else None
        record_at = _record_at(lp, epochs, every, record_every)
        gen = torch.Generator().manual_seed(seed)
        provenance = _provenance(wl, lp, ds, spec, grad_transform, seed=seed, threads=threads,
                                 epochs=epochs, record_every=record_every, record_at=record_at,
                                 command=command)
        method_id = spec.label if spec is not None else provenance["method"]["id"]
        say = progress or (lambda s: None)
        say(f"capture: {wl.name} on {dataset} ({n_train} train / {len(ds.y_val)} val, input "
            f"{'x'.join(map(str, wl.input_shape))}), {epochs} epoch(s) x {per_epoch} iterations, "
            f"batch {batch}, recording "
            + (f"at fractions {record_every} of the run" if record_every else f"every {every}")
            + f" -> {out}")
        start = time.perf_counter()
        with Capture(model, out, wl, every=every, iterations=record_at, subsample=subsample,
                     fp16=fp16, tensors=tensors, batch=batch, provenance=provenance,
                     grad_transform=grad_transform, overwrite=force) as cap:
            epoch_rows, acc = _run_epochs(lp, cap, wl, epochs, ds, gen, method_id, say, start)
        wall = time.perf_counter() - start
        for kind, (flushed, nonzero) in sorted(cap._flushed.items()):
            if nonzero and flushed / nonzero > 0.01:
                say(f"capture: note: float16 storage flushed {100 * flushed / nonzero:.1f} % of the "
                    f"nonzero {kind} values to zero (magnitudes below 6e-8); recorded in the "
                    "manifest (provenance.capture.storage); drop --fp16 to keep them")
        say(f"capture: recorded iterations {lp.recorded}, final val acc {100 * acc:.2f} %, "
            f"{wall:.1f} s -> {out}")
        return {"trace": str(out), "iterations": lp.total if pt is None else lp.seen // batch,
                "recorded": lp.recorded, "val_acc": acc, "wall_time_s": wall,
                "classes": ds.classes, "method": method_id, "epochs": epoch_rows}
    finally:
        torch.set_num_threads(prev_threads)
        torch.use_deterministic_algorithms(prev_det)


def cmd_capture(args) -> int:
    command = shlex.join(["prunesim"] + sys.argv[1:]) if sys.argv[1:2] == ["capture"] else None
    train_and_capture(args.workload, args.dataset, args.epochs, args.out, batch=args.batch,
                      every=args.every, subsample=args.subsample, tensors=args.tensors,
                      fp16=args.fp16, lr=args.lr, seed=args.seed,
                      max_iterations=args.max_iterations, force=args.force,
                      threads=getattr(args, "threads", 2), command=command,
                      method=getattr(args, "method", None),
                      record_every=getattr(args, "record_every", None),
                      train_samples=getattr(args, "train_samples", None))
    return 0
