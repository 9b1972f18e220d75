"""Record a trace from any PyTorch training loop, and the hook point through which gradient-
modifying methods (DBTD, SDGP, Wang's WGC approximation, ...) act on training.

Usage::

    with Capture(model, "out/trace", workload=wl, every=50, batch=32, subsample=4, fp16=True,
                 provenance={...}) as cap:
        for epoch in range(epochs):
            for x, y in batches:
                with cap.iteration(epoch):          # one training step: forward + backward
                    loss = loss_fn(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                opt.step()
            cap.log_epoch(epoch, train_loss, val_acc, samples_seen, wall_time_s)

Every `cap.iteration()` block is one iteration (numbered 0, 1, 2, ... across epochs); iterations
0, K, 2K, ... (or the explicit `iterations=` set) are recorded. Forward passes outside an
`iteration()` block (evaluation) are ignored. Per recorded layer (every Conv2d / Conv1d /
ConvTranspose2d / Linear that is a workload layer; a Conv1d's N x C x L tensors are stored as
N x C x 1 x L; a ConvTranspose2d's dO has its (larger) output's shape; any other
module with parameters or a GEMM is named in one warning line, never dropped silently):

- ``dO``: gradient w.r.t. the layer module's OUTPUT, i.e. pre-BN for Conv-BN (a tensor hook on the
  module's output, registered in a forward hook; a later in-place op on that tensor does not change
  which gradient the hook sees).
- ``I``: the module's input activation (written during the forward pass).
- ``W``: the weight the forward pass used.
- ``dI``: gradient w.r.t. the layer input produced by this layer alone (its AGBP result), through an
  identity autograd node inserted in front of the module; only when that input requires grad (the
  first layer's usually does not).

Tensors go to `TraceWriter` one at a time, as float32 or float16, optionally only the first S
samples of the batch; nothing is kept past the current tensor.

Hook point for methods (`grad_transform`)
-----------------------------------------
``grad_transform(layer, kind, grad, ctx) -> tensor | None`` is called in EVERY iteration (recorded
or not) for kind ``"dO"`` (before the layer's backward: the value feeds both AGBP and WGC) and, if
the callable has ``kinds`` containing ``"dI"`` (default ``("dO",)``), for kind ``"dI"`` (the
layer's AGBP output, before it flows to earlier layers). It returns the replacement gradient (same
shape, dtype and device) or None to keep it. `ctx` is a `GradContext` (iteration, epoch, whether
it is recorded, the workload Layer, the module). ``record="post"`` (default) stores the gradient
the method produced, ``record="pre"`` the dense one it received; the manifest provenance says
which (``capture.recorded``). `TransformChain` composes several transforms. Methods that need a
different dO for AGBP than for WGC (SDGP, Wang) will add kinds here (``"dO.agbp"``, ``"dW"``).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from sim.errors import CaptureError
from sim.traces.format import KINDS, TraceWriter
from sim.workload import Layer, Workload

from .torchnet import _torch, workload_from_model

TRANSFORM_KINDS = ("dO", "dI")


@dataclass(frozen=True)
class GradContext:
    """What a gradient transform knows about the gradient it is handed."""

    iteration: int
    epoch: int
    recording: bool
    layer: Layer
    module: Any


class GradientTransform(Protocol):
    """The method hook: ``__call__(layer_name, kind, grad, ctx) -> grad | None``.

    Optional attributes: ``kinds`` (which of "dO", "dI" to receive; default ("dO",)),
    ``id`` and ``params`` (recorded in the manifest provenance).
    """

    def __call__(self, layer: str, kind: str, grad: Any, ctx: GradContext) -> Any: ...


class TransformChain:
    """Apply several gradient transforms in order (e.g. PruneTrain then SDGP)."""

    def __init__(self, *transforms: Callable):
        self.transforms = transforms
        self.kinds = tuple(sorted({k for t in transforms for k in getattr(t, "kinds", ("dO",))}))
        self.id = "+".join(_transform_id(t) for t in transforms)
        self.params = {_transform_id(t): dict(getattr(t, "params", {}) or {}) for t in transforms}

    def __call__(self, layer, kind, grad, ctx):
        for t in self.transforms:
            if kind in getattr(t, "kinds", ("dO",)):
                g = t(layer, kind, grad, ctx)
                grad = grad if g is None else g
        return grad


def _transform_id(t) -> str:
    return str(getattr(t, "id", None) or getattr(t, "__name__", None) or type(t).__name__)


def _tap_class():
    # the same straight-through Function the methods use (imported lazily: it needs torch)
    from sim.methods.torch_ops import GradTap
    return GradTap


@dataclass
class _IterState:
    index: int
    epoch: int
    recording: bool
    seen: set = field(default_factory=set)
    skipped: set = field(default_factory=set)  # (layer, kind) that cannot exist this step


class Capture:
    """Wrap a model and a training loop; record a prunesim trace. See the module docstring."""

    def __init__(self, model, out_dir, workload: Workload | None = None, *, every: int = 1,
                 iterations: Iterable[int] | None = None, subsample: int | None = None,
                 fp16: bool = False, tensors: Iterable[str] = ("dO",), batch: int,
                 provenance: dict | None = None, layer_names: Iterable[str] | None = None,
                 grad_transform: Callable | None = None, record: str = "post",
                 example_input=None, overwrite: bool = False, dataset=None):
        torch, nn = _torch()
        self._torch = torch
        if not isinstance(model, nn.Module):
            raise CaptureError(None, "model", f"expected a torch.nn.Module, got {type(model).__name__}")
        derived = workload is None   # workload_from_model already warned about left-out modules
        if workload is None:
            if example_input is None:
                raise CaptureError(None, "workload", "give a workload, or an example_input to "
                                   "derive one from the model")
            workload = workload_from_model(model, example_input, name=type(model).__name__.lower())
        self.model, self.workload = model, workload
        self.tensors = tuple(dict.fromkeys(tensors))
        for k in self.tensors:
            if k not in KINDS:
                raise CaptureError(None, "tensors", f"unknown tensor kind {k!r} (known: {', '.join(KINDS)})")
        if int(every) < 1:
            raise CaptureError(None, "every", f"must be >= 1, got {every}")
        self.every = int(every)
        self.iterations = None if iterations is None else {int(i) for i in iterations}
        self.batch = int(batch)
        if subsample is not None and not 1 <= int(subsample) <= self.batch:
            raise CaptureError(None, "subsample", f"must be in 1..batch ({self.batch}), got {subsample}")
        self.subsample = None if subsample is None or int(subsample) == self.batch else int(subsample)
        self.fp16 = bool(fp16)
        if record not in ("pre", "post"):
            raise CaptureError(None, "record", f"expected 'pre' or 'post', got {record!r}")
        self.record = record
        self.grad_transform = grad_transform
        self.transform_kinds = tuple(getattr(grad_transform, "kinds", ("dO",))) if grad_transform else ()
        for k in self.transform_kinds:
            if k not in TRANSFORM_KINDS:
                raise CaptureError(None, "grad_transform.kinds", f"unknown kind {k!r} "
                                   f"(supported: {', '.join(TRANSFORM_KINDS)})")
        self.modules = self._resolve_modules(model, workload, layer_names, warn=not derived)
        self.layers = {l.name: l for l in workload.layers}
        prov = dict(provenance or {})
        # what `replay` prints as "captured under METHOD, dataset DATASET": never left unknown
        if "method" not in prov:
            prov["method"] = ({"id": "dense", "params": {}} if grad_transform is None else
                              {"id": _transform_id(grad_transform),
                               "params": dict(getattr(grad_transform, "params", {}) or {})})
        if "dataset" not in prov:
            if dataset is not None:   # a sim.capture.datasets.Dataset, or a name
                prov["dataset"] = (dict(dataset.info) if hasattr(dataset, "info") else
                                   {"name": str(dataset)})
            elif workload.dataset:
                prov["dataset"] = {"name": workload.dataset, "note": "the workload's dataset field"}
            else:
                prov["dataset"] = {"name": "unrecorded", "note": "Python API capture without "
                                   "dataset= or provenance['dataset']"}
        prov.setdefault("model", {"workload": workload.name, "class": type(model).__name__,
                                  "parameters": int(sum(p.numel() for p in model.parameters()))})
        prov.setdefault("command", "sim.capture.hooks.Capture (Python API)")
        cap = dict(prov.get("capture", {}))
        cap.update({"every": self.every, "iterations": sorted(self.iterations) if self.iterations
                    is not None else None, "subsample": self.subsample, "fp16": self.fp16,
                    "tensors": list(self.tensors), "layers": list(self.modules),
                    "dO_definition": "gradient w.r.t. the conv/fc module output (pre-BN)",
                    "dI_definition": "this layer's own AGBP output (not summed over consumers)",
                    "recorded": ("dense (no gradient transform)" if grad_transform is None else
                                 f"{record}-transform")})
        if grad_transform is not None:
            cap["grad_transform"] = {"id": _transform_id(grad_transform),
                                     "kinds": list(self.transform_kinds),
                                     "params": dict(getattr(grad_transform, "params", {}) or {})}
        prov["capture"] = cap
        self.out_dir, self.provenance, self.overwrite = out_dir, prov, overwrite
        self.writer: TraceWriter | None = None
        self._handles: list = []
        self._state: _IterState | None = None
        self._next = 0
        self._flushed: dict[str, list[int]] = {}  # kind -> [flushed-to-zero count, nonzero count]
        self._tap = _tap_class()

    # -- set-up -----------------------------------------------------------------------------------
    def _resolve_modules(self, model, workload, layer_names, warn: bool = True):
        _, nn = self._torch, self._torch.nn
        mapping = getattr(model, "prunesim_layer_modules", None)
        if mapping is None:
            mapping = {n: m for n, m in model.named_modules()
                       if isinstance(m, (nn.Conv2d, nn.Conv1d, nn.ConvTranspose2d, nn.Linear))}
        wanted = [l.name for l in workload.layers]
        if layer_names is not None:
            layer_names = list(layer_names)
            bad = [n for n in layer_names if n not in wanted]
            if bad:
                raise CaptureError(None, "layer_names", f"not layers of workload {workload.name}: "
                                   + ", ".join(bad))
            wanted = [n for n in wanted if n in set(layer_names)]
        missing = [n for n in wanted if n not in mapping]
        if missing:
            raise CaptureError(None, "workload", f"workload {workload.name} layers not found as "
                               f"Conv2d/Conv1d/ConvTranspose2d/Linear modules of the model: "
                               f"{', '.join(missing[:5])}"
                               + (" ..." if len(missing) > 5 else ""))
        if layer_names is None and warn:
            # a GEMM module of the model that no workload layer names is not recorded: say so once
            from .torchnet import _gemm_module_types
            gemm = _gemm_module_types(nn)
            chosen = {id(mapping[n]) for n in wanted}
            left = [f"{n} ({type(m).__name__})" for n, m in model.named_modules()
                    if isinstance(m, gemm) and id(m) not in chosen]
            if left:
                warnings.warn(f"Capture: {len(left)} GEMM module(s) of the model are not layers of "
                              f"workload {workload.name} and are not recorded: {', '.join(left)}",
                              stacklevel=3)
        for n in wanted:
            # a deconv's tensors lower transposed: a conv module in its place would be timed wrongly
            if workload.layer(n).transposed != isinstance(mapping[n], nn.ConvTranspose2d):
                raise CaptureError(None, n, f"module {type(mapping[n]).__name__} does not match "
                                   "the workload layer's transposed flag")
        return {n: mapping[n] for n in wanted}

    def __enter__(self) -> "Capture":
        self.writer = TraceWriter(self.out_dir, self.workload, batch=self.batch,
                                  provenance=self.provenance, batch_subsample=self.subsample,
                                  overwrite=self.overwrite)
        self.writer.__enter__()
        need_tap = "dI" in self.tensors or "dI" in self.transform_kinds
        for name, mod in self.modules.items():
            if need_tap:
                self._handles.append(mod.register_forward_pre_hook(self._pre_hook(name)))
            self._handles.append(mod.register_forward_hook(self._fwd_hook(name)))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.writer is not None:
            self._update_storage_provenance()
            self.writer.__exit__(exc_type, exc, tb)

    # -- iterations -------------------------------------------------------------------------------
    def is_recorded(self, iteration: int) -> bool:
        if self.iterations is not None:
            return iteration in self.iterations
        return iteration % self.every == 0

    @property
    def iteration_index(self) -> int:
        """The index the next `iteration()` block gets."""
        return self._next

    @contextmanager
    def iteration(self, epoch: int):
        """One training step (forward + backward) of `epoch`; records it if it is due."""
        if self.writer is None:
            raise CaptureError(None, "Capture", "use Capture as a context manager (with ... as cap)")
        if self._state is not None:
            raise CaptureError(None, "Capture.iteration", "iteration blocks cannot nest")
        st = _IterState(self._next, int(epoch), self.is_recorded(self._next))
        self._state = st
        try:
            yield st
        finally:
            self._state = None
            self._next += 1
        if st.recording:
            want = {(n, k) for n in self.modules for k in self.tensors}
            missing = sorted(want - st.seen - st.skipped)
            if missing:
                warnings.warn(f"iteration {st.index}: {len(missing)} tensor(s) not recorded (e.g. "
                              f"{missing[0][0]}.{missing[0][1]}): no backward pass, or the input "
                              "does not require grad", stacklevel=3)
            self._update_storage_provenance()
            self.writer.end_iteration()

    def log_epoch(self, epoch: int, train_loss: float, val_acc: float | None, samples_seen: int,
                  wall_time_s: float, method: str = "dense") -> None:
        self.writer.log_epoch(epoch, train_loss, val_acc, samples_seen, wall_time_s, method)

    # -- recording --------------------------------------------------------------------------------
    def _save(self, st: _IterState, name: str, kind: str, t) -> None:
        if (name, kind) in st.seen:
            raise CaptureError(None, name, f"{kind} seen twice in iteration {st.index}: the module "
                               "is called more than once per step (shared weights are unsupported)")
        torch = self._torch
        x = t.detach()
        if kind != "W":
            rb = self.subsample or self.batch
            if x.shape[0] != self.batch:
                raise CaptureError(None, "batch", f"layer {name}: batch of {x.shape[0]} samples in "
                                   f"recorded iteration {st.index}, capture expects {self.batch} "
                                   "(drop the last partial batch)")
            x = x[:rb]
        if self.layers[name].op == "fc" and kind in ("I", "dI"):
            x = x.reshape(x.shape[0], -1)
        elif self.layers[name].op == "conv" and x.dim() == 3:
            x = x.unsqueeze(2)   # Conv1d: N x C x L (and its C_out x C_in x k weight) as a 1 x L map
        x32 = x.to(torch.float32)
        if not bool(torch.isfinite(x32).all()):
            raise CaptureError(None, name, f"non-finite {kind} at iteration {st.index}: training "
                               "diverged (lower the learning rate)")
        if self.fp16:
            x16 = x32.to(torch.float16)
            if not bool(torch.isfinite(x16).all()):
                raise CaptureError(None, name, f"{kind} at iteration {st.index} exceeds the float16 "
                                   "range; capture without fp16")
            c = self._flushed.setdefault(kind, [0, 0])
            nz = x32 != 0
            c[0] += int((nz & (x16 == 0)).sum())
            c[1] += int(nz.sum())
            arr = x16.cpu().numpy()
        else:
            arr = x32.cpu().numpy()
        self.writer.add(st.index, st.epoch, name, kind, np.ascontiguousarray(arr))
        st.seen.add((name, kind))

    def _update_storage_provenance(self) -> None:
        if self.writer is None:
            return
        store = {"dtype": "float16" if self.fp16 else "float32"}
        if self.fp16:
            store["flushed_to_zero"] = {k: {"count": v[0], "fraction_of_nonzero":
                                            (v[0] / v[1]) if v[1] else 0.0}
                                        for k, v in sorted(self._flushed.items())}
        self.writer.provenance.setdefault("capture", {})["storage"] = store

    def _apply(self, st: _IterState, name: str, kind: str, grad, record: bool):
        """Record (pre or post) and transform one gradient; returns the gradient to propagate."""
        if record and self.record == "pre":
            self._save(st, name, kind, grad)
        new = None
        if kind in self.transform_kinds:
            ctx = GradContext(st.index, st.epoch, st.recording, self.layers[name], self.modules[name])
            new = self.grad_transform(name, kind, grad, ctx)
            if new is not None and (tuple(new.shape) != tuple(grad.shape) or new.dtype != grad.dtype):
                raise CaptureError(None, "grad_transform", f"{name}.{kind}: returned "
                                   f"{new.dtype}{list(new.shape)}, expected {grad.dtype}{list(grad.shape)}")
        if record and self.record == "post":
            self._save(st, name, kind, grad if new is None else new)
        return new

    def _fwd_hook(self, name: str):
        def hook(mod, inp, out):
            st = self._state
            if st is None or not self._torch.is_grad_enabled():
                return None
            if st.recording:
                if "I" in self.tensors:
                    self._save(st, name, "I", inp[0])
                if "W" in self.tensors:
                    self._save(st, name, "W", mod.weight)
            rec = st.recording and "dO" in self.tensors
            if out.requires_grad and (rec or "dO" in self.transform_kinds):
                out.register_hook(lambda g: self._apply(st, name, "dO", g, rec))
            return None
        return hook

    def _pre_hook(self, name: str):
        def hook(mod, inp):
            st = self._state
            if st is None or not self._torch.is_grad_enabled():
                return None
            if not inp[0].requires_grad:
                st.skipped.add((name, "dI"))  # e.g. the first layer: no gradient w.r.t. the data
                return None
            rec = st.recording and "dI" in self.tensors
            if not (rec or "dI" in self.transform_kinds):
                return None
            x = self._tap.apply(inp[0], lambda g: self._apply(st, name, "dI", g, rec))
            return (x,) + tuple(inp[1:])
        return hook
