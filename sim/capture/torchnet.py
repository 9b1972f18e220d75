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

import operator
import warnings
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
                    conv = nn.ConvTranspose2d if l.transposed else nn.Conv2d
                    self.blocks[key] = conv(l.c_in, l.c_out, (l.r, l.s), stride=l.stride,
                                            padding=(l.pad_h, l.pad_w), groups=l.groups,
                                            bias=l.bias)
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


def _gemm_module_types(nn) -> tuple:
    # modules that do a GEMM even when they own no parameter of their own (e.g. shared weights)
    names = ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
             "Linear", "Bilinear", "MultiheadAttention", "RNN", "LSTM", "GRU")
    return tuple(getattr(nn, n) for n in names if hasattr(nn, n))


def _conv_fields(mod, qname, nn) -> dict:
    """The workload fields of a Conv1d / Conv2d / ConvTranspose2d module, or a CaptureError naming
    what the schema cannot hold. A Conv1d is a conv over a 1 x L map: kernel [1, k], pad [0, p]."""
    one_d = isinstance(mod, nn.Conv1d)
    kind = type(mod).__name__
    if isinstance(mod.padding, str) or mod.padding_mode != "zeros" or any(d != 1 for d in mod.dilation):
        raise CaptureError(None, qname, f"{kind} with dilation {tuple(mod.dilation)}, padding "
                           f"{mod.padding!r} or padding mode {mod.padding_mode!r}: the workload "
                           "schema has undilated, zero-padded convs with numeric padding")
    if isinstance(mod, nn.ConvTranspose2d) and any(o != 0 for o in mod.output_padding):
        raise CaptureError(None, qname, f"ConvTranspose2d with output_padding "
                           f"{tuple(mod.output_padding)}: the workload schema's transposed conv "
                           "has none")
    if one_d:
        (k,), (st,), (pd,) = mod.kernel_size, mod.stride, mod.padding
        r, s, ph, pw = 1, k, 0, pd
    else:
        (r, s), (ph, pw) = mod.kernel_size, mod.padding
        if mod.stride[0] != mod.stride[1]:
            raise CaptureError(None, qname, f"{kind} with stride {tuple(mod.stride)}: the workload "
                               "schema has one stride for both axes")
        st = mod.stride[0]
    op = {"c_out": mod.out_channels, "kernel": r if r == s else [r, s], "stride": st,
          "pad": ph if ph == pw else [ph, pw], "groups": mod.groups, "bias": mod.bias is not None}
    if isinstance(mod, nn.ConvTranspose2d):
        op["transposed"] = True
    return op


def _warn_dropped(model, kept: set, nn) -> list[str]:
    """ONE warning line naming every module that owns parameters or does a GEMM and is not in the
    workload (a layer, or a BatchNorm2d folded into a conv's bn flag); returns their names."""
    gemm = _gemm_module_types(nn)
    dropped = []
    for qname, mod in model.named_modules():
        if id(mod) in kept:
            continue
        if any(True for _ in mod.parameters(recurse=False)) or isinstance(mod, gemm):
            dropped.append(f"{qname or '(root)'} ({type(mod).__name__})")
    if dropped:
        warnings.warn(f"workload_from_model: {len(dropped)} module(s) with parameters or a GEMM "
                      f"are not workload layers and are left out of the workload and the trace: "
                      f"{', '.join(dropped)} (the schema has Conv2d, Conv1d, ConvTranspose2d, Linear "
                      "and a "
                      "BatchNorm2d that alone follows a conv; modules that did not run in the "
                      "forward pass are listed too)", stacklevel=3)
    return dropped


def _workload_doc(model, name: str, description: str | None, by: str, source: str, chw, ops: list,
                  dataset: str | None) -> dict[str, Any]:
    """The workload document of a derived network (workload_from_model, write_workload_yaml)."""
    c, h, w = chw
    return {"schema": 1, "name": name,
            "description": description or f"derived from {type(model).__name__} by prunesim {by}",
            "source": source, **({"dataset": dataset} if dataset else {}),
            "input": {"channels": int(c), "height": int(h), "width": int(w)}, "layers": ops}


def _record_calls(model, example_input) -> tuple[list, list, dict, list]:
    """One forward pass with hooks: the GEMM module calls in order, the BatchNorm2d / ReLU calls
    that follow tensors, follower module ids by (kind, output id), and every tensor seen (kept
    alive so identity comparisons stay valid)."""
    torch, nn = _torch()
    calls: list[dict] = []
    followers: list[tuple[str, Any, Any]] = []  # (kind, input tensor, output tensor)
    keep: list[Any] = []  # hold every tensor seen so identity comparisons stay valid
    handles = []
    seen_modules: set[int] = set()
    follower_mod: dict = {}   # (kind, id(output tensor)) -> id(module) of a bn/relu follower

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
            follower_mod[(kind, id(out))] = id(mod)   # an in-place ReLU returns the same tensor
        return hook

    for qname, mod in model.named_modules():
        if isinstance(mod, (nn.Conv2d, nn.Conv1d, nn.ConvTranspose2d, nn.Linear)):
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
    return calls, followers, follower_mod, keep


def _declared_shape(mod, qname: str, x, nn) -> list[int]:
    """The [C, H, W] a layer input not produced by an earlier layer is declared with."""
    if x.dim() == 4:
        shp = list(x.shape[1:])
    elif isinstance(mod, nn.Conv1d):   # N x C x L is a 1 x L map
        shp = [int(x.shape[1]), 1, int(x.shape[2])]
    else:
        shp = [int(x.shape[-1]), 1, 1]
    if isinstance(mod, nn.Linear) and x.dim() != 2:
        raise CaptureError(None, qname, f"Linear input of shape {list(x.shape)}: only "
                           "N x features inputs are supported")
    return [int(v) for v in shp]


def _ops_from_calls(calls: list, followers: list, follower_mod: dict, example_input, nn) -> tuple:
    """The workload ops of the recorded calls: (ops, declared tensors, folded BatchNorm ids)."""
    def is_(a, b):
        return a is b

    folded: set = set()   # ids of BatchNorm2d modules that became a conv's bn flag
    ops: list[dict] = []
    declared: dict[str, list[int]] = {}
    produced: list[tuple[Any, str]] = [(example_input, "x")]  # tensor -> workload tensor name
    for i, call in enumerate(calls):
        mod, qname, x, y = call["mod"], call["name"], call["in"], call["out"]
        src = next((tname for t, tname in produced if is_(t, x)), None)
        if src is None:
            src = f"in{i}"
            declared[src] = _declared_shape(mod, qname, x, nn)
        out_name = f"out{i}"
        tail = y
        if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
            op = {"name": qname, "op": "conv", "in": src, "out": out_name,
                  **_conv_fields(mod, qname, nn)}
            # only BatchNorm2d modules are followed, and none can take a Conv1d's 3-D output
            bn = next((o for k, t, o in followers if k == "bn" and is_(t, tail)), None)
            if bn is not None:
                op["bn"] = True
                folded.add(follower_mod.get(("bn", id(bn))))
                tail = bn
        else:
            op = {"name": qname, "op": "fc", "in": src, "out": out_name, "c_out": mod.out_features,
                  "bias": mod.bias is not None}
        relu = next((o for k, t, o in followers if k == "relu" and is_(t, tail)), None)
        if relu is not None:
            op["relu"] = True
            tail = relu
        produced.append((tail, out_name))
        ops.append(op)
    return ops, declared, folded


def workload_from_model(model, example_input, name: str, *, description: str = "",
                        dataset: str | None = None) -> Workload:
    """Derive a validated Workload from any ``nn.Module`` by forward hooks on its GEMM modules.

    One forward pass of `example_input` (N x C x H x W, or N x C x L) records every Conv2d /
    Conv1d / ConvTranspose2d / Linear call in
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
    if not (torch.is_tensor(example_input) and example_input.dim() in (3, 4)):
        raise CaptureError(None, "example_input", "expected a tensor of shape N x C x H x W "
                           "(or N x C x L for a Conv1d network: a 1 x L map)")
    calls, followers, follower_mod, _keep = _record_calls(model, example_input)
    if not calls:
        raise CaptureError(None, "model", "no Conv2d, Conv1d, ConvTranspose2d or Linear layer ran "
                           "in the forward pass")
    if example_input.dim() == 3:
        n, c, w = example_input.shape
        h = 1
    else:
        n, c, h, w = example_input.shape
    ops, declared, folded = _ops_from_calls(calls, followers, follower_mod, example_input, nn)
    _warn_dropped(model, {id(c["mod"]) for c in calls} | folded, nn)
    doc = _workload_doc(model, name, description, "workload_from_model",
                        "sim.capture.torchnet.workload_from_model", (c, h, w), ops, dataset)
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
        if isinstance(call["mod"], nn.Conv1d):
            want = (layer.c_out, layer.q)
        if tuple(y.shape[1:]) != want:
            raise CaptureError(wl.origin, layer.name, f"module output {list(y.shape[1:])} differs "
                               f"from the workload's inferred {list(want)}")
    return wl


class _FxOps:
    """The workload ops of a torch.fx graph, node by node (write_workload_yaml)."""

    def __init__(self, gm):
        self.torch, self.nn = _torch()
        self.mods = dict(gm.named_modules())
        self.users = {n: list(n.users) for n in gm.graph.nodes}
        self.tensor: dict = {}          # fx node -> workload tensor name
        self.producer: dict = {}        # workload tensor name -> its op dict (to set bn / relu)
        self.ops: list[dict] = []

    def src(self, node, where):
        if node not in self.tensor:
            raise CaptureError(None, where, f"input {node.name!r} is not a tensor the workload "
                               "knows (an op the schema cannot express came before)")
        return self.tensor[node]

    def new(self, op, node):
        op["out"] = op["name"]
        self.ops.append(op)
        self.tensor[node] = op["out"]
        self.producer[op["out"]] = op

    def fuse(self, node, flag):
        """bn / relu on the output of the op that alone produced its input: a flag on that op."""
        t = self.tensor.get(node.args[0])
        op = self.producer.get(t)
        if op is not None and len(self.users[node.args[0]]) == 1 and not op.get("relu") and \
                (flag == "relu" or (op["op"] == "conv" and not op.get("bn"))) and \
                (flag != "relu" or op["op"] in ("conv", "fc", "add")):
            op[flag] = True
            self.tensor[node] = t
            return True
        return False

    def kind_of(self, node):
        if node.op == "call_module":
            return type(self.mods[node.target])
        return node.target

    def visit(self, node) -> None:
        torch, nn = self.torch, self.nn
        F = torch.nn.functional
        k = self.kind_of(node)
        where = node.target if node.op == "call_module" else node.name
        if node.op == "placeholder":
            self.tensor[node] = "x"
        elif node.op == "output":
            return
        elif k in (nn.Conv2d, nn.ConvTranspose2d):
            self.new({"name": node.target, "op": "conv", "in": self.src(node.args[0], where),
                      **_conv_fields(self.mods[node.target], node.target, nn)}, node)
        elif k is nn.Linear:
            m = self.mods[node.target]
            self.new({"name": node.target, "op": "fc", "in": self.src(node.args[0], where),
                      "c_out": m.out_features, "bias": m.bias is not None}, node)
        elif k is nn.BatchNorm2d:
            if not self.fuse(node, "bn"):
                raise CaptureError(None, where, "a BatchNorm2d that does not alone follow a conv "
                                   "cannot be expressed in the workload schema")
        elif k in (nn.ReLU, F.relu, torch.relu, "relu", "relu_"):
            if not self.fuse(node, "relu"):
                raise CaptureError(None, where, "a ReLU that does not alone follow a conv, fc or "
                                   "add cannot be expressed in the workload schema")
        elif k in (nn.MaxPool2d, nn.AvgPool2d, F.max_pool2d, F.avg_pool2d):
            self._pool(node, k, where)
        elif k in (nn.AdaptiveAvgPool2d, F.adaptive_avg_pool2d):
            self._global_pool(node, where)
        elif k in (operator.add, operator.iadd, torch.add, "add", "add_"):
            a, b = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
            self.new({"name": node.name, "op": "add",
                      "in": [self.src(a, where), self.src(b, where)]}, node)
        elif k in (nn.Flatten, torch.flatten, "flatten", "view", "reshape", nn.Dropout,
                   nn.Identity, F.dropout):
            # fc layers flatten their input; dropout and identity change no shape
            if any(u.op == "call_module" and self.kind_of(u) is not nn.Linear
                   for u in self.users[node]) \
                    and k in (nn.Flatten, torch.flatten, "flatten", "view", "reshape"):
                raise CaptureError(None, where, "a flatten/view that feeds anything but a Linear "
                                   "cannot be expressed in the workload schema")
            self.tensor[node] = self.src(node.args[0], where)
        elif node.op == "get_attr" or (node.op == "call_function" and k is getattr):
            return   # e.g. x.size(0) feeding a view: no tensor of the workload
        elif node.op == "call_method" and k == "size":
            return
        else:
            raise CaptureError(None, where, f"{node.op} {k!r} cannot be expressed in the workload "
                               "schema (conv, fc, pool, add, bn, relu, flatten, dropout)")

    def _pool(self, node, k, where) -> None:
        nn, F = self.nn, self.torch.nn.functional
        if node.op == "call_module":
            m = self.mods[node.target]
            kern, stride, pad = m.kernel_size, m.stride, m.padding
        else:
            kw = dict(zip(("kernel_size", "stride", "padding"), node.args[1:]), **node.kwargs)
            kern, stride, pad = kw["kernel_size"], kw.get("stride") or kw["kernel_size"], \
                kw.get("padding", 0)
        one = [v if isinstance(v, int) else v[0] for v in (kern, stride, pad)]
        if any(not isinstance(v, int) and len(set(v)) > 1 for v in (kern, stride, pad)):
            raise CaptureError(None, where, "pools with per-axis kernel/stride/padding are "
                               "not in the workload schema")
        kind = "max" if k in (nn.MaxPool2d, F.max_pool2d) else "avg"
        self.new({"name": node.name, "op": "pool", "in": self.src(node.args[0], where),
                  "kind": kind, "kernel": one[0], "stride": one[1], "pad": one[2]}, node)

    def _global_pool(self, node, where) -> None:
        size = self.mods[node.target].output_size if node.op == "call_module" else \
            (node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size"))
        if size not in (1, (1, 1), [1, 1]):
            raise CaptureError(None, where, f"adaptive pooling to {size}: only 1x1 (global) "
                               "pooling is in the workload schema")
        self.new({"name": node.name, "op": "pool", "in": self.src(node.args[0], where),
                  "kind": "avg", "global": True}, node)


def write_workload_yaml(model, example_input, path, name: str, *, description: str = "",
                        dataset: str | None = None) -> Workload:
    """Write a runnable workload YAML of an ``nn.Module``, one that `prunesim capture` accepts.

    `workload_from_model` sees the layers (by forward hooks) but not the wiring between them, so
    its workloads declare `tensors:` and cannot be built into a network. Here the model is traced
    with ``torch.fx`` instead, which also records the adds, pools and flattens: Conv2d (+ a
    BatchNorm2d that alone reads it) (+ ReLU), Linear (+ ReLU), max/avg pools, adaptive average
    pooling to 1x1, residual adds (+ ReLU), flatten/view/reshape before a Linear, dropout and
    identity. Anything else raises CaptureError naming the node: the workload schema cannot
    express it. The layers are checked against `workload_from_model`'s (which checks them against
    the module's real outputs). Returns the workload; `path` gets its YAML (safe_dump).
    """
    from pathlib import Path

    import yaml
    try:
        from torch import fx
        gm = fx.symbolic_trace(model)
    except Exception as e:  # noqa: BLE001 - fx refuses data-dependent control flow etc.
        raise CaptureError(None, "model", f"torch.fx cannot trace {type(model).__name__}: "
                           f"{type(e).__name__}: {e}".splitlines()[0]) from None
    hooked = workload_from_model(model, example_input, name, description=description,
                                 dataset=dataset)
    fxops = _FxOps(gm)
    for node in gm.graph.nodes:
        fxops.visit(node)
    n, c, h, w = example_input.shape
    doc = _workload_doc(model, name, description, "write_workload_yaml",
                        "sim.capture.torchnet.write_workload_yaml (torch.fx trace)", (c, h, w),
                        fxops.ops, dataset)
    try:
        wl = workload_from_dict(doc, origin=str(path))
    except PrunesimError as e:
        raise CaptureError(e.file, e.field, f"derived workload is invalid: {e.message}") from None
    geo = lambda l: (l.name, l.op, l.c_in, l.c_out, l.h, l.w, l.p, l.q, l.r, l.s, l.stride,  # noqa: E731
                     l.pad, l.groups, l.transposed)
    if [geo(l) for l in wl.layers] != [geo(l) for l in hooked.layers]:
        bad = next((a[0] for a, b in zip(map(geo, wl.layers), map(geo, hooked.layers)) if a != b),
                   "layer count")
        raise CaptureError(str(path), bad, "the traced graph's layers differ from the module's "
                           "forward pass (workload_from_model); the wiring was not understood")
    Path(path).write_text(f"# {name}: written by sim.capture.torchnet.write_workload_yaml\n"
                          + yaml.safe_dump(wl.to_dict(), sort_keys=False), encoding="utf-8")
    return wl
