"""`prunesim capture`: train a workload's network on a real offline dataset (CPU, deterministic)
and record a trace (`sim.capture.hooks.Capture`) plus the per-epoch training log."""
from __future__ import annotations

import math
import os
import platform
import shlex
import sys
import time
from typing import Any, Callable, Iterable

from sim.errors import CaptureError
from sim.workload import Workload, load_workload

from .datasets import known_datasets, load_dataset
from .hooks import Capture
from .torchnet import _torch, build_model

MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
EVAL_BATCH = 256


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


def train_and_capture(workload: Workload | str, dataset: str, epochs: int, out: str | os.PathLike, *,
                      batch: int = 32, every: int = 50, subsample: int | None = None,
                      tensors: str | Iterable[str] = ("dO",), fp16: bool = False, lr: float = 0.05,
                      seed: int = 0, max_iterations: int | None = None, force: bool = False,
                      threads: int = 2, command: str | None = None,
                      grad_transform: Callable | None = None,
                      progress: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Train `workload` on `dataset` with SGD (momentum 0.9, weight decay 5e-4, cosine learning
    rate), recording every `every`-th iteration into the trace directory `out`.

    Deterministic for a given seed and thread count (torch.manual_seed, deterministic algorithms,
    a fixed shuffling generator). Returns a summary: iterations, recorded iterations, final
    validation accuracy, wall time, and the trace path.
    """
    torch, _ = _torch()
    wl = workload if isinstance(workload, Workload) else load_workload(workload)
    tensors = parse_tensors(tensors)
    if epochs < 1:
        raise CaptureError(None, "--epochs", f"must be >= 1, got {epochs}")
    if batch < 1:
        raise CaptureError(None, "--batch", f"must be >= 1, got {batch}")
    if subsample is not None and not 1 <= subsample <= batch:
        raise CaptureError(None, "--subsample", f"must be in 1..--batch ({batch}), got {subsample}")
    if not (lr > 0 and math.isfinite(lr)):
        raise CaptureError(None, "--lr", f"must be a positive number, got {lr}")
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
        model.eval()
        with torch.no_grad():
            n_out = model(torch.zeros((1, *wl.input_shape))).numel()
        model.train()
        ds = load_dataset(dataset, wl.input_shape, classes_available=n_out)
        xt, yt = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
        xv, yv = torch.from_numpy(ds.x_val), torch.from_numpy(ds.y_val)
        per_epoch = len(yt) // batch
        if per_epoch < 1:
            raise CaptureError(None, "--batch", f"batch {batch} exceeds the {len(yt)} training samples")
        if max_iterations is not None:
            per_epoch = min(per_epoch, max_iterations)
        total = per_epoch * epochs
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda it: 0.5 * (1 + math.cos(math.pi * min(it, total) / total)))
        gen = torch.Generator().manual_seed(seed)
        provenance = {
            "model": {"workload": wl.name, "origin": os.path.basename(wl.origin),
                      "workload_sha256": wl.checksum, "builder": "sim.capture.torchnet.build_model",
                      "parameters": int(sum(p.numel() for p in model.parameters()))},
            "dataset": ds.info,
            "method": {"id": "dense", "params": {}} if grad_transform is None else
                      {"id": str(getattr(grad_transform, "id", "custom")),
                       "params": dict(getattr(grad_transform, "params", {}) or {})},
            "seed": seed,
            "training": {"device": "cpu", "threads": threads, "deterministic_algorithms": True,
                         "optimizer": "SGD", "lr": lr, "momentum": MOMENTUM,
                         "weight_decay": WEIGHT_DECAY, "lr_schedule": "cosine per iteration",
                         "loss": "cross-entropy (batch mean)", "batch": batch, "epochs": epochs,
                         "iterations_per_epoch": per_epoch, "drop_last": True,
                         "max_iterations": max_iterations},
            "command": command or "sim.capture.trainer.train_and_capture(...)",
            "software": _versions(),
        }
        method_id = provenance["method"]["id"]
        say = progress or (lambda s: None)
        say(f"capture: {wl.name} on {dataset} ({len(yt)} train / {len(yv)} val, input "
            f"{'x'.join(map(str, wl.input_shape))}), {epochs} epoch(s) x {per_epoch} iterations, "
            f"batch {batch}, recording every {every} -> {out}")
        start = time.perf_counter()
        seen = 0
        acc = None
        recorded: list[int] = []
        with Capture(model, out, wl, every=every, subsample=subsample, fp16=fp16, tensors=tensors,
                     batch=batch, provenance=provenance, grad_transform=grad_transform,
                     overwrite=force) as cap:
            for epoch in range(epochs):
                perm = torch.randperm(len(yt), generator=gen)
                loss_sum = 0.0
                for i in range(per_epoch):
                    idx = perm[i * batch:(i + 1) * batch]
                    with cap.iteration(epoch) as it:
                        logits = model(xt[idx]).flatten(1)
                        loss = torch.nn.functional.cross_entropy(logits, yt[idx])
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                    if it.recording:
                        recorded.append(it.index)
                    if not math.isfinite(loss.item()):
                        raise CaptureError(None, "--lr", f"training diverged (loss {loss.item()}) at "
                                           f"iteration {it.index}; lower the learning rate")
                    opt.step()
                    sched.step()
                    loss_sum += loss.item()
                    seen += len(idx)
                acc = _evaluate(model, xv, yv)
                wall = time.perf_counter() - start
                cap.log_epoch(epoch, loss_sum / per_epoch, acc, seen, wall, method_id)
                say(f"epoch {epoch + 1}/{epochs}: train loss {loss_sum / per_epoch:.4f}, "
                    f"val acc {100 * acc:.2f} %, {seen} samples, {wall:.1f} s")
        wall = time.perf_counter() - start
        for kind, (flushed, nonzero) in sorted(cap._flushed.items()):
            if nonzero and flushed / nonzero > 0.01:
                say(f"capture: note: float16 storage flushed {100 * flushed / nonzero:.1f} % of the "
                    f"nonzero {kind} values to zero (magnitudes below 6e-8); recorded in the "
                    "manifest (provenance.capture.storage); drop --fp16 to keep them")
        say(f"capture: recorded iterations {recorded}, final val acc {100 * acc:.2f} %, "
            f"{wall:.1f} s -> {out}")
        return {"trace": str(out), "iterations": total, "recorded": recorded, "val_acc": acc,
                "wall_time_s": wall, "classes": ds.classes}
    finally:
        torch.set_num_threads(prev_threads)
        torch.use_deterministic_algorithms(prev_det)


def cmd_capture(args) -> int:
    command = shlex.join(["prunesim"] + sys.argv[1:]) if sys.argv[1:2] == ["capture"] else None
    train_and_capture(args.workload, args.dataset, args.epochs, args.out, batch=args.batch,
                      every=args.every, subsample=args.subsample, tensors=args.tensors,
                      fp16=args.fp16, lr=args.lr, seed=args.seed,
                      max_iterations=args.max_iterations, force=args.force,
                      threads=getattr(args, "threads", 2), command=command)
    return 0
