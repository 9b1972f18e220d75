"""Workload <-> PyTorch: build a runnable network from any workload op graph, and derive a workload
from any ``nn.Module`` by watching one forward pass.

`build_model(workload)` returns a `WorkloadNet`: one ``nn.Conv2d`` / ``nn.Linear`` per workload
layer (plus a separate ``nn.BatchNorm2d`` when the layer has ``bn: true``, so the conv module's
output is the pre-BN tensor whose gradient is the layer's dO). ReLU is applied out of place.
PyTorch module names cannot contain '.', so modules live in a flat ``ModuleDict`` under escaped
keys; ``WorkloadNet.prunesim_layer_modules`` maps every workload layer name to its module, and
`sim.capture.hooks.Capture` uses that mapping, so recorded tensors carry the workload's names.
"""
from __future__ import annotations

from typing import Any

from sim.errors import CaptureError, PrunesimError
from sim.workload import Workload, workload_from_dict


def _torch():
    try:
        import torch
        from torch import nn
    except ImportError:
        raise CaptureError(None, "torch", "PyTorch is not installed; capture needs it: "
                           "pip install prunesim[capture]") from None
    return torch, nn


def _escape(name: str, taken: set[str]) -> str:
    key = name.replace(".", "_") or "_"
    base, i = key, 1
    while key in taken:
        key, i = f"{base}_{i}", i + 1
    taken.add(key)
    return key


def _undeclared_inputs(workload: Workload) -> list[str]:
    produced = {"x"}
    missing = []
    for op in workload.ops:
        ins = op["in"] if isinstance(op["in"], list) else [op["in"]]
        missing += [t for t in ins if t not in produced and t not in missing]
        produced.add(op["out"])
    return missing


def build_model(workload: Workload):
    """A runnable ``nn.Module`` for `workload` (input N x C x H x W, output = the last op's tensor).

    Raises CaptureError if the workload reads tensors that no op produces (``tensors:``
    declarations, as `workload_from_model` writes for wiring it cannot see): such a graph describes
    layer geometry, not a network that can be run.
    """
    torch, nn = _torch()
    F = torch.nn.functional
    missing = _undeclared_inputs(workload)
    if missing:
        raise CaptureError(workload.origin, "tensors", f"tensor(s) {', '.join(missing)} are declared, "
                           "not produced by an op: this workload's wiring is unknown, so it cannot be "
                           "built as a runnable network")

    class WorkloadNet(nn.Module):
        """A network built from a prunesim workload; see sim.capture.torchnet."""

        def __init__(self, wl: Workload):
            super().__init__()
            self.workload_name = wl.name
            self.blocks = nn.ModuleDict()
            self.bns = nn.ModuleDict()
            self._ops = [dict(op) for op in wl.ops]
            self._keys: dict[str, str] = {}
            taken: set[str] = set()
            layers = {l.name: l for l in wl.layers}
            for op in self._ops:
                if op["op"] not in ("conv", "fc"):
                    continue
                l = layers[op["name"]]
                key = _escape(l.name, taken)
                self._keys[l.name] = key
                if l.op == "conv":
                    self.blocks[key] = nn.Conv2d(l.c_in, l.c_out, (l.r, l.s), stride=l.stride,
                                                 padding=l.pad, groups=l.groups, bias=l.bias)
                    if l.bn:
                        self.bns[key] = nn.BatchNorm2d(l.c_out)
                else:
                    self.blocks[key] = nn.Linear(l.c_in, l.c_out, bias=l.bias)

        @property
        def prunesim_layer_modules(self) -> dict[str, Any]:
            """Workload layer name -> its Conv2d / Linear module, in network order."""
            return {name: self.blocks[key] for name, key in self._keys.items()}

        def forward(self, x, return_tensors: bool = False):
            t = {"x": x}
            for op in self._ops:
                kind = op["op"]
                if kind == "conv":
                    key = self._keys[op["name"]]
                    y = self.blocks[key](t[op["in"]])
                    if key in self.bns:
                        y = self.bns[key](y)
                    if op.get("relu", False):
                        y = F.relu(y)  # never in place: the conv output keeps its own gradient
                elif kind == "fc":
                    y = self.blocks[self._keys[op["name"]]](torch.flatten(t[op["in"]], 1))
                    if op.get("relu", False):
                        y = F.relu(y)
                elif kind == "pool":
                    a = t[op["in"]]
                    if op.get("global", False):
                        y = (F.adaptive_max_pool2d(a, 1) if op["kind"] == "max"
                             else F.adaptive_avg_pool2d(a, 1))
                    else:
                        k = op["kernel"]
                        s = op.get("stride", k)
                        p = op.get("pad", 0)
                        y = (F.max_pool2d(a, k, s, p) if op["kind"] == "max"
                             else F.avg_pool2d(a, k, s, p))
                else:  # add
                    a, b = op["in"]
                    y = t[a] + t[b]
                    if op.get("relu", False):
                        y = F.relu(y)
                t[op["out"]] = y
            out = t[self._ops[-1]["out"]]
            return t if return_tensors else out

    return WorkloadNet(workload)


# ----------------------------------------------------------------------------------------------
# nn.Module -> workload


def workload_from_model(model, example_input, name: str, *, description: str = "",
                        dataset: str | None = None) -> Workload:
    """Derive a validated Workload from any ``nn.Module`` by forward hooks on Conv2d and Linear.

    One forward pass of `example_input` (N x C x H x W) records every Conv2d / Linear call in
    execution order with its input and output shape; layer names are the modules' qualified names
    (``layer1.0.conv1``). ``bn`` / ``relu`` are set when an ``nn.BatchNorm2d`` / ``nn.ReLU`` module
    consumes the conv's output tensor (functional ``F.relu`` is invisible: relu stays false).
    Wiring between layers is kept where a layer reads the network input or exactly the output of an
    earlier layer's conv(-BN)(-ReLU) chain; every other input is declared under ``tensors:`` with
    its shape (pools, adds, flattens and other ops between layers are not modelled).
    """
    torch, nn = _torch()
    if not isinstance(model, nn.Module):
        raise CaptureError(None, "model", f"expected a torch.nn.Module, got {type(model).__name__}")
    if not (torch.is_tensor(example_input) and example_input.dim() == 4):
        raise CaptureError(None, "example_input", "expected a tensor of shape N x C x H x W")
    calls: list[dict] = []
    followers: list[tuple[str, Any, Any]] = []  # (kind, input tensor, output tensor)
    keep: list[Any] = []  # hold every tensor seen so identity comparisons stay valid
    handles = []
    seen_modules: set[int] = set()

    def layer_hook(qname):
        def hook(mod, inp, out):
            if id(mod) in seen_modules:
                raise CaptureError(None, qname, "module is called more than once per forward pass "
                                   "(shared weights); workload layers must be distinct")
            seen_modules.add(id(mod))
            keep.extend([inp[0], out])
            calls.append({"name": qname, "mod": mod, "in": inp[0], "out": out})
        return hook

    def follow_hook(kind):
        def hook(mod, inp, out):
            keep.extend([inp[0], out])
            followers.append((kind, inp[0], out))
        return hook

    for qname, mod in model.named_modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            handles.append(mod.register_forward_hook(layer_hook(qname)))
        elif isinstance(mod, nn.BatchNorm2d):
            handles.append(mod.register_forward_hook(follow_hook("bn")))
        elif isinstance(mod, nn.ReLU):
            handles.append(mod.register_forward_hook(follow_hook("relu")))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(example_input)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    if not calls:
        raise CaptureError(None, "model", "no Conv2d or Linear layer ran in the forward pass")

    def is_(a, b):
        return a is b

    n, c, h, w = example_input.shape
    ops: list[dict] = []
    declared: dict[str, list[int]] = {}
    produced: list[tuple[Any, str]] = [(example_input, "x")]  # tensor -> workload tensor name
    for i, call in enumerate(calls):
        mod, qname, x, y = call["mod"], call["name"], call["in"], call["out"]
        src = next((tname for t, tname in produced if is_(t, x)), None)
        if src is None:
            src = f"in{i}"
            shp = list(x.shape[1:]) if x.dim() == 4 else [int(x.shape[-1]), 1, 1]
            if isinstance(mod, nn.Linear) and x.dim() != 2:
                raise CaptureError(None, qname, f"Linear input of shape {list(x.shape)}: only "
                                   "N x features inputs are supported")
            declared[src] = [int(v) for v in shp]
        out_name = f"out{i}"
        if isinstance(mod, nn.Conv2d):
            if mod.dilation != (1, 1) or mod.padding_mode != "zeros" or isinstance(mod.padding, str):
                raise CaptureError(None, qname, "dilated, non-zero-padded or padding='same' convs "
                                   "are not supported by the workload schema")
            if mod.stride[0] != mod.stride[1] or mod.padding[0] != mod.padding[1]:
                raise CaptureError(None, qname, f"stride {mod.stride} / padding {mod.padding} differ "
                                   "per axis; the workload schema needs them equal")
            r, s = mod.kernel_size
            op = {"name": qname, "op": "conv", "in": src, "out": out_name, "c_out": mod.out_channels,
                  "kernel": r if r == s else [r, s], "stride": mod.stride[0], "pad": mod.padding[0],
                  "groups": mod.groups, "bias": mod.bias is not None}
            tail = y
            bn = next((o for k, t, o in followers if k == "bn" and is_(t, tail)), None)
            if bn is not None:
                op["bn"] = True
                tail = bn
            relu = next((o for k, t, o in followers if k == "relu" and is_(t, tail)), None)
            if relu is not None:
                op["relu"] = True
                tail = relu
            produced.append((tail, out_name))
        else:
            op = {"name": qname, "op": "fc", "in": src, "out": out_name, "c_out": mod.out_features,
                  "bias": mod.bias is not None}
            relu = next((o for k, t, o in followers if k == "relu" and is_(t, y)), None)
            tail = y
            if relu is not None:
                op["relu"] = True
                tail = relu
            produced.append((tail, out_name))
        ops.append(op)
    doc: dict[str, Any] = {"schema": 1, "name": name,
                           "description": description or f"derived from {type(model).__name__} "
                                                         "by prunesim workload_from_model",
                           "source": "sim.capture.torchnet.workload_from_model",
                           "input": {"channels": int(c), "height": int(h), "width": int(w)},
                           "layers": ops}
    if dataset:
        doc["dataset"] = dataset
    if declared:
        doc["tensors"] = declared
    try:
        wl = workload_from_dict(doc, origin=f"<model {type(model).__name__}>")
    except PrunesimError as e:
        raise CaptureError(e.file, e.field, f"derived workload is invalid: {e.message}") from None
    # the workload's inferred geometry must reproduce what the module really computed
    for call, layer in zip(calls, wl.layers):
        y = call["out"]
        want = (layer.c_out, layer.p, layer.q) if layer.op == "conv" else (layer.c_out,)
        if tuple(y.shape[1:]) != want:
            raise CaptureError(wl.origin, layer.name, f"module output {list(y.shape[1:])} differs "
                               f"from the workload's inferred {list(want)}")
    return wl
