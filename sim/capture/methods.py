"""Install a gradient method into a network built by `build_model`, and PruneTrain's training-loop
pieces (group lasso, zeroing, reconfiguration with channel union, dynamic mini-batch growth).

    run = install_method(model, workload, "sdgp-resmag:nm=2:4", seed=0, batch=64)
    for epoch ...:
        for x, y in batches:
            with run.iteration(epoch, batch=len(y)):
                loss = F.cross_entropy(model(x), y)
                loss.backward()
            opt.step()
        stats = run.end_epoch()          # operand densities of this epoch

Every conv of the workload becomes a `MethodConv2d` (sim/methods/torch_ops.py) in place, so a
running `Capture`, the optimizer and state_dict keys are unaffected. Per layer and iteration the
random stream is `stream_key(seed, layer.index, iteration)`, as the offline kernels use; `iteration`
counts every training step from 0 across epochs and is also the "batch" of Wang's schedules (the
schedule table repeats in iterations). Outside `iteration()` blocks (evaluation) the convs are
plain convs.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sim.errors import CaptureError
from sim.methods import MethodSpec, method_for, method_info, parse_method, refuse_unused
from sim.methods.prunetrain import ZERO_THRESHOLD, channel_plan, lasso_lambda
from sim.methods.rng import stream_key
from sim.methods.schedule import applies, paper_schedule
from sim.workload import Workload, workload_from_dict

from .torchnet import _torch, build_model

def as_spec(method: str | MethodSpec | None) -> MethodSpec:
    """A MethodSpec from a spec string (CaptureError naming --method when it is malformed)."""
    if isinstance(method, MethodSpec):
        return method
    try:
        spec = parse_method(method or "dense")
        refuse_unused(spec, "capture")   # fused=true: time only, capture records values
    except ValueError as e:
        raise CaptureError(None, "--method", str(e)) from None
    if not method_info(spec).torch_twin:
        # training would run dense and the trace would claim the method: refuse instead
        raise CaptureError(None, "--method", f"{spec.id} has no PyTorch twin to train with (its "
                           "effect is on time, not on the recorded gradients): capture with dense "
                           f"and replay the trace with --method {spec.label}")
    return spec


@dataclass
class Step:
    """One conv layer in one training step: what the ConvMethod plans with."""

    key: int
    iteration: int
    epoch: int
    batch: int
    scheduled: bool
    layer: str
    stat: Callable


@dataclass
class _Iter:
    index: int
    epoch: int
    batch: int


def _conv_method(spec: MethodSpec, layer):
    """The method's PyTorch twin on this conv (dense and prunetrain, which acts on weights, leave
    its gradients alone)."""
    return method_for(spec).torch_twin(spec, layer)


class MethodRun:
    """A method installed in a model: iteration bookkeeping, keys, schedule and density counters."""

    def __init__(self, model, workload: Workload, spec: MethodSpec, *, seed: int = 0, batch: int,
                 schedule_table: np.ndarray | None = None):
        self.spec, self.seed, self.batch = spec, int(seed), int(batch)
        self.label = spec.label
        self.id, self.params = spec.id, dict(spec.params)
        self.method = method_for(spec)
        self.info = self.method.info
        convs = [l for l in workload.layers if l.op == "conv"]
        self.conv_index = {l.name: i for i, l in enumerate(convs)}
        if schedule_table is not None:
            table = np.asarray(schedule_table, bool)
            if table.ndim != 2 or table.shape[0] != len(convs):
                raise CaptureError(None, "schedule", f"table has shape {table.shape}, needs one row "
                                   f"per conv layer ({len(convs)})")
            self.table = table
        elif self.info.scheduled:
            self.table = paper_schedule(self.params["schedule"], len(convs))
        else:
            self.table = None
        self._cur: _Iter | None = None
        self._next = 0
        self._stats: dict[str, list[float]] = {}
        self.history: list[dict[str, Any]] = []
        self.model = None
        self.install(model, workload)

    # -- installation -----------------------------------------------------------------------------
    def install(self, model, workload: Workload) -> None:
        """(Re)install into `model` (PruneTrain calls this again on each rebuilt model)."""
        from sim.methods.torch_ops import MethodConv2d
        torch, nn = _torch()
        mods = model.prunesim_layer_modules
        for h in getattr(self, "_fc_handles", []):
            h.remove()
        self._fc_handles = []
        for layer in workload.layers:
            mod = mods[layer.name]
            fc_prune = self.method.torch_fc_prune(self.spec, layer) if layer.op == "fc" else None
            if fc_prune is not None:
                self._fc_handles.append(mod.register_forward_hook(self._fc_hook(layer, fc_prune)))
            if layer.op != "conv":
                continue
            if type(mod) is not nn.Conv2d and not isinstance(mod, MethodConv2d):
                raise CaptureError(None, layer.name, f"expected an nn.Conv2d, got {type(mod).__name__}")
            MethodConv2d.adopt(mod, _conv_method(self.spec, layer), self._stepper(layer))
        self.model, self.workload = model, workload

    def _fc_hook(self, layer, fc_prune):
        """fc=prune: prune the Linear output's gradient with the method's twin of the offline
        kernel on an FC dO (Method.torch_fc_prune)."""
        torch, _ = _torch()
        step_of = self._stepper(layer)

        def prune(g, step):
            out = fc_prune(g, step.key)
            step.stat("agbp", out)
            step.stat("wgc", out)
            return out

        def hook(mod, inp, out):
            step = step_of()
            if step is None or not torch.is_grad_enabled() or not out.requires_grad:
                return None
            out.register_hook(lambda g: prune(g, step))
            return None
        return hook

    def uninstall(self) -> None:
        from sim.methods.torch_ops import MethodConv2d
        for h in getattr(self, "_fc_handles", []):
            h.remove()
        self._fc_handles = []
        for mod in self.model.prunesim_layer_modules.values():
            if isinstance(mod, MethodConv2d):
                mod.release()

    def _stepper(self, layer) -> Callable[[], Step | None]:
        index, name = layer.index, layer.name
        ci = self.conv_index.get(name, 0)

        def step() -> Step | None:
            it = self._cur
            if it is None:
                return None
            sched = True if self.table is None else applies(self.table, ci, it.index)
            return Step(stream_key(self.seed, index, it.index), it.index, it.epoch, it.batch,
                        sched, name, self._stat)
        return step

    # -- iterations -------------------------------------------------------------------------------
    @contextmanager
    def iteration(self, epoch: int, batch: int | None = None):
        """One training step (forward + backward); numbered 0, 1, ... across epochs."""
        if self._cur is not None:
            raise CaptureError(None, "MethodRun.iteration", "iteration blocks cannot nest")
        self._cur = _Iter(self._next, int(epoch), int(batch or self.batch))
        try:
            yield self._cur
        finally:
            self._cur = None
            self._next += 1

    @property
    def iteration_index(self) -> int:
        return self._next

    def _stat(self, kind: str, t, nnz: int | None = None, numel: int | None = None) -> None:
        # Counting costs one pass over the operand; it is what Table 1's densities are made of.
        acc = self._stats.setdefault(kind, [0, 0])
        if t is not None:
            nnz, numel = int(t.count_nonzero()), t.numel()
        acc[0] += nnz
        acc[1] += numel

    def end_epoch(self) -> dict[str, float]:
        """Element-weighted operand densities since the last call (agbp, wgc, dI where pruned)."""
        out = {k: (v[0] / v[1] if v[1] else float("nan")) for k, v in sorted(self._stats.items())}
        self._stats = {}
        self.history.append(out)
        return out


def install_method(model, workload: Workload, method: str | MethodSpec | None, *, seed: int = 0,
                   batch: int, schedule_table: np.ndarray | None = None) -> MethodRun:
    """Install `method` into a model built by build_model(workload); see the module docstring."""
    return MethodRun(model, workload, as_spec(method), seed=seed, batch=batch,
                     schedule_table=schedule_table)


# ---- PruneTrain ----------------------------------------------------------------------------------


def group_lasso_torch(model, workload: Workload):
    """R(W) as a differentiable torch scalar, over the groups of prunetrain.group_lasso_norm:
    output channels of every conv, input channels of every conv but the first, FC input columns.
    vector_norm's gradient at a zero group is 0 (a subgradient), so zeroed channels stay finite."""
    torch, _ = _torch()
    mods = model.prunesim_layer_modules
    first = workload.layers[0].name
    terms = []
    for l in workload.layers:
        if l.depthwise:
            continue        # the authors leave depthwise convs out of the lasso
        w = mods[l.name].weight
        if l.op == "conv":
            terms.append(torch.linalg.vector_norm(w.flatten(1), dim=1).sum())
            if l.name != first:
                terms.append(torch.linalg.vector_norm(w.transpose(0, 1).flatten(1), dim=1).sum())
        else:
            terms.append(torch.linalg.vector_norm(w, dim=0).sum())
    return torch.stack(terms).sum()


def activation_elems_per_sample(workload: Workload) -> int:
    """Activations a training step keeps per sample (estimate): every conv/FC input, its output,
    the BN output and the ReLU output where present."""
    total = 0
    for l in workload.layers:
        out = l.c_out * l.p * l.q
        total += l.c_in * l.h * l.w + out * (1 + int(l.bn) + int(l.relu))
    return total


def training_bytes(workload: Workload, batch: int, bytes_per_value: int = 4) -> int:
    """Training memory footprint estimate: weights, their gradients and momentum (3x parameters)
    plus the stored activations of `batch` samples."""
    return bytes_per_value * (3 * workload.params() + batch * activation_elems_per_sample(workload))


def shrink_workload(workload: Workload, c_out: dict[str, int]) -> Workload:
    """The workload with conv/FC output widths replaced (input widths follow from the graph)."""
    doc = workload.to_dict()
    ops = []
    for op in doc["layers"]:
        op = dict(op)
        if op.get("op") in ("conv", "fc") and op["name"] in c_out:
            if workload.layer(op["name"]).depthwise:
                op["groups"] = int(c_out[op["name"]])     # one group per kept channel
            op["c_out"] = int(c_out[op["name"]])
        ops.append(op)
    doc["layers"] = ops
    return workload_from_dict(doc, origin=workload.origin)


@dataclass
class Reconfiguration:
    epoch: int
    channels_before: dict[str, int]
    channels_after: dict[str, int]
    weight_density: float          # remaining conv+FC weights, fraction of the previous model
    batch: int
    lr_scale: float


@dataclass
class PruneTrain:
    """PruneTrain's training-loop state. Use: `loss = pt.loss(ce, model)` each step (sets lambda at
    the first call), `pt.zero_small(model, opt)` after steps you choose (the trainer: every epoch
    end), and `pt.maybe_reconfigure(epoch, model, opt)` at epoch ends."""

    workload: Workload
    rho: float = 0.2
    interval: int = 10
    batch: int = 64
    batch_step: int = 32
    max_batch: int | None = None
    mem_budget: int | None = None    # bytes; default: the initial model's footprint at `batch`
    threshold: float = ZERO_THRESHOLD
    lam: float | None = None
    first_ce: float | None = None
    first_norm: float | None = None
    base_batch: int = 0
    reconfigurations: list[Reconfiguration] = field(default_factory=list)

    def __post_init__(self):
        deconv = next((l.name for l in self.workload.layers if l.transposed), None)
        if deconv is not None:
            # channel removal slices a conv weight C_out-first; a deconv's is C_in-first
            raise CaptureError(self.workload.origin, deconv, "PruneTrain's channel removal is "
                               "modeled for convs and FC layers, not transposed convs")
        grouped = next((l.name for l in self.workload.layers
                        if l.groups > 1 and not l.depthwise), None)
        if grouped is not None:
            # refused before training, not at the first reconfiguration
            raise CaptureError(self.workload.origin, grouped, "PruneTrain's channel removal is "
                               "modeled for depthwise convs, not for grouped convs that mix "
                               "channels")
        self.base_batch = self.batch
        if self.mem_budget is None:
            self.mem_budget = training_bytes(self.workload, self.batch)

    @property
    def lr_scale(self) -> float:
        """Linear learning-rate scaling with the mini-batch (PruneTrain's dynamic batch)."""
        return self.batch / self.base_batch

    def loss(self, ce, model):
        """CE + lambda * R(W); lambda from the penalty ratio rho at the first call (iteration 0)."""
        r = group_lasso_torch(model, self.workload)
        if self.lam is None:
            self.first_ce, self.first_norm = float(ce.detach()), float(r.detach())
            self.lam = lasso_lambda(self.rho, self.first_ce, self.first_norm)
        return ce + self.lam * r

    def zero_small(self, model, opt=None) -> int:
        """Zero every group (conv output/input channel, FC column) whose |weights| are all below the
        threshold, and its momentum, so a zeroed channel is exactly zero when the plan is made.
        Returns the number of groups zeroed."""
        torch, _ = _torch()
        mods = model.prunesim_layer_modules
        first = self.workload.layers[0].name
        count = 0
        with torch.no_grad():
            for l in self.workload.layers:
                if l.depthwise:
                    continue    # no lasso group; its space follows the pointwise convs around it
                w = mods[l.name].weight
                buf = opt.state.get(w, {}).get("momentum_buffer") if opt is not None else None
                masks = []
                if l.op == "conv":
                    small = w.abs().flatten(1).amax(1) < self.threshold
                    masks.append(small[:, None, None, None])
                    if l.name != first:
                        small_in = w.abs().transpose(0, 1).flatten(1).amax(1) < self.threshold
                        masks.append(small_in[None, :, None, None])
                else:
                    masks.append((w.abs().amax(0) < self.threshold)[None, :])
                for m in masks:
                    count += int(m.sum())
                    w.masked_fill_(m, 0.0)
                    if buf is not None:
                        buf.masked_fill_(m, 0.0)
        return count

    def plan(self, model):
        weights = {l.name: model.prunesim_layer_modules[l.name].weight.detach().cpu().numpy()
                   for l in self.workload.layers}
        return channel_plan(self.workload, weights, self.threshold)

    def maybe_reconfigure(self, epoch: int, model, opt, n_train: int | None = None):
        """At the end of epoch `epoch` (0-based): every `interval` epochs rebuild the model without
        the channels the plan drops and grow the mini-batch. Returns (model, opt) (new objects when
        reconfigured, else the same)."""
        if (epoch + 1) % self.interval:
            return model, opt
        self.zero_small(model, opt)
        plan = self.plan(model)
        before = {l.name: l.c_out for l in self.workload.layers}
        if all(plan.layer_c_out[n] == c for n, c in before.items()):
            self.reconfigurations.append(Reconfiguration(epoch, before, before, 1.0, self.batch,
                                                         self.lr_scale))
            return model, opt
        new_wl = shrink_workload(self.workload, plan.layer_c_out)
        new_model, new_opt = rebuild(model, self.workload, new_wl, plan, opt)
        density = plan.density(self.workload)
        self.workload = new_wl
        self.grow_batch(n_train)
        self.reconfigurations.append(Reconfiguration(epoch, before, dict(plan.layer_c_out), density,
                                                     self.batch, self.lr_scale))
        return new_model, new_opt

    def grow_batch(self, n_train: int | None = None) -> int:
        """Grow the mini-batch in steps of batch_step while the footprint fits mem_budget."""
        cap = min(v for v in (self.max_batch, n_train) if v) if (self.max_batch or n_train) else None
        while (training_bytes(self.workload, self.batch + self.batch_step) <= self.mem_budget
               and (cap is None or self.batch + self.batch_step <= cap)):
            self.batch += self.batch_step
        return self.batch


def rebuild(model, old_wl: Workload, new_wl: Workload, plan, opt=None):
    """A new model for new_wl holding the kept slices of model's weights, biases and BN parameters
    and buffers; and a new SGD optimizer with the same hyper-parameters whose momentum buffers are
    the kept slices of the old ones. Training mode and dtype/device follow the old model."""
    torch, nn = _torch()
    old_mods = model.prunesim_layer_modules
    new_model = build_model(new_wl)
    p0 = next(model.parameters())
    new_model.to(device=p0.device, dtype=p0.dtype)
    new_model.train(model.training)
    new_mods = new_model.prunesim_layer_modules
    chans = {}
    for l in old_wl.layers:
        chans[l.in_space] = len(plan.space_keep[l.in_space])
    pairs = []  # (old tensor, new tensor, index function)

    def dev(mask):
        return torch.as_tensor(np.flatnonzero(mask), device=p0.device)

    for l in old_wl.layers:
        ko = dev(plan.space_keep[l.out_space])
        if l.depthwise:
            ki = dev(np.ones(1, bool))      # its weight is (C, 1, R, S): one input a group
        elif l.op == "fc":
            per = l.c_in // chans[l.in_space]
            ki = dev(np.repeat(plan.space_keep[l.in_space], per))
        else:
            ki = dev(plan.space_keep[l.in_space])
        om, nm_ = old_mods[l.name], new_mods[l.name]
        pairs.append((om.weight, nm_.weight, lambda t, ko=ko, ki=ki: t.index_select(0, ko).index_select(1, ki)))
        if om.bias is not None:
            pairs.append((om.bias, nm_.bias, lambda t, ko=ko: t.index_select(0, ko)))
        key = model._keys[l.name]
        if key in model.bns:
            ob, nb = model.bns[key], new_model.bns[key]
            for attr in ("weight", "bias"):
                pairs.append((getattr(ob, attr), getattr(nb, attr), lambda t, ko=ko: t.index_select(0, ko)))
            with torch.no_grad():
                nb.running_mean.copy_(ob.running_mean.index_select(0, ko))
                nb.running_var.copy_(ob.running_var.index_select(0, ko))
                nb.num_batches_tracked.copy_(ob.num_batches_tracked)
    with torch.no_grad():
        for old, new, f in pairs:
            new.copy_(f(old))
    new_opt = None
    if opt is not None:
        new_opt = type(opt)(new_model.parameters(), **opt.defaults)
        for g_new, g_old in zip(new_opt.param_groups, opt.param_groups):
            g_new.update({k: v for k, v in g_old.items() if k != "params"})
        for old, new, f in pairs:
            st = opt.state.get(old)
            if st and st.get("momentum_buffer") is not None:
                new_opt.state[new]["momentum_buffer"] = f(st["momentum_buffer"]).clone()
    return new_model, new_opt
