"""Lowering of a training step's non-GEMM work into streaming kernels.

The engines time a workload's conv and FC GEMMs (sim/workload.py `lower`). A training step also runs
batch norm forward and backward, ReLU, pooling, residual adds and the gradient sums at their forks,
bias adds, the loss, and the optimizer update. `step_ops` walks a workload's op list and returns
each of those kernels, in execution order, as a `StreamOp`: the bytes it really moves (reads and
writes of whole tensors, per pass), its arithmetic, and its launches. What a framework fuses, which
optimizer it runs and how, come from a framework profile (sim/frameworks.py); methods that add
such work (PruneTrain's group lasso) add theirs. docs/explanation/whole-step.md explains every count.

Byte conventions: activations and their gradients are `dtype_bytes` per element (2: FP16/BF16
mixed precision; 4 for FP32, e.g. CPUs); BN statistics and every parameter-sized tensor
(weights, their gradients, optimizer state) are FP32 (`PARAM_BYTES`), as PyTorch AMP and TF keep
master weights. Byte counts are compulsory traffic: each pass reads each operand tensor once and
writes each result once (no cache reuse across kernels: the activations of a real layer at
training batch sizes exceed the L2; the CPU engine's cache model decides for itself from the
footprints, see `cpu_stream_args`).

Timing is the engines': each times a StreamOp with its own streaming model (`Engine.stream`:
sim/engines/gpu/stream.py `step_op_kernel`, the CPU's `stream_pass` fed by `cpu_stream_args`
here), and sim/driver.py `step_kernels` collects them per phase.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from sim.errors import WorkloadError
from sim.workload import TOKEN_OPS, Workload, tensor_chw

PHASES = ("fwd-ops", "bwd-ops", "optimizer")
PARAM_BYTES = 4      # FP32 master weights, gradients, momentum / Adam state, BN statistics
LABEL_BYTES = 8      # PyTorch class targets are int64 (TF's int32/int64 labels: same order)
_MASK_BYTES = {"int64-indices": 8, "int32-indices": 4, "recompute": 0}
# PyTorch multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): a launch carries at
# most depth_to_max_tensors[depth-1] tensors and 320 blocks of kChunkSize = 65536 elements
_MTA_MAX_TENSORS = (110, 64, 48, 36, 30)
_MTA_MAX_BLOCKS = 320
_MTA_CHUNK = 65536


@dataclass(frozen=True)
class StreamOp:
    """One non-GEMM kernel (or a group of identical launches) of a training step.

    read_footprint / write_footprint are the distinct bytes the kernel touches (what a cache sees);
    0 means "the same as read_bytes / write_bytes" (a single pass over each operand).
    """

    layer: str
    op: str            # bn | relu | bias | pool | add | grad-sum | loss | optimizer | ...
    phase: str         # one of PHASES
    kernel: str
    read_bytes: int
    write_bytes: int
    flops: int         # floating-point operations, an FMA counting 2
    launches: int
    elems: int         # elements the kernel's loop runs over (the CPU model's scalar loop count)
    note: str
    read_footprint: int = 0
    write_footprint: int = 0

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def read_distinct(self) -> int:
        return self.read_footprint or self.read_bytes

    @property
    def write_distinct(self) -> int:
        return self.write_footprint or self.write_bytes


class _Emit:
    """Collects StreamOps; `db` is the activation element size."""

    def __init__(self, db: int):
        self.db = db
        self.fwd: list[StreamOp] = []
        self.bwd: list[list[StreamOp]] = []   # one list per op, reversed at the end
        self.opt: list[StreamOp] = []

    def k(self, into: list, layer: str, op: str, phase: str, kernel: str, *, r: float, w: float,
          flops: float, elems: float, note: str, launches: int = 1, rfp: float = 0,
          wfp: float = 0) -> None:
        into.append(StreamOp(layer, op, phase, kernel, int(math.ceil(r)), int(math.ceil(w)),
                             int(flops), int(launches), int(elems), note, int(math.ceil(rfp)),
                             int(math.ceil(wfp))))


def _numel(shape: tuple[int, int, int], batch: int) -> int:
    return batch * shape[0] * shape[1] * shape[2]


def _consumers(wl: Workload) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in wl.ops:
        for t in (op["in"] if isinstance(op["in"], list) else [op["in"]]):
            # the slices of one tensor are one consumer: their backward is a single concatenation
            # (unbind / split backward), not a gradient sum per slice
            if op.get("op") == "slice" and any(c.endswith("#slices") for c in out.get(t, [])):
                continue
            out.setdefault(t, []).append(op["name"] + ("#slices" if op.get("op") == "slice" else ""))
    return out


def _bn_add_relu_pairs(wl: Workload, profile, consumers) -> dict[str, tuple[str, str]]:
    """conv name -> (add name, shortcut tensor z) where cuDNN's BN+add+ReLU kernel applies: an add
    with ReLU one of whose inputs is a BN conv without ReLU feeding nothing but that add."""
    if not profile.fused("bn-add-relu"):
        return {}
    by_out = {l.out_tensor: l for l in wl.layers}
    pairs: dict[str, tuple[str, str]] = {}
    for op in wl.ops:
        if op.get("op") != "add" or not op.get("relu", False):
            continue
        a, b = op["in"]
        for t, z in ((a, b), (b, a)):
            l = by_out.get(t)
            if (l is not None and l.bn and not l.relu and consumers.get(t) == [op["name"]]
                    and l.name not in pairs):
                pairs[l.name] = (op["name"], z)
                break
    return pairs


def step_ops(workload: Workload, batch: int, *, profile, dtype_bytes: int = 2,
             method: Any = None) -> list[StreamOp]:
    """Every non-GEMM kernel of one training step, in execution order: forward ops, the loss,
    backward ops (reverse op order), then the optimizer. `profile` is a FrameworkProfile;
    `method` a MethodSpec, several (a combination), or None."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not profile.step_ops:
        return []     # gemm-only: the engines' GEMMs are the whole step (today's numbers)
    e = _Emit(dtype_bytes)
    shapes = tensor_chw(workload)
    consumers = _consumers(workload)
    layers = {l.name: l for l in workload.layers}
    pairs = _bn_add_relu_pairs(workload, profile, consumers)
    absorbed_adds = {add for add, _ in pairs.values()}
    for i, op in enumerate(workload.ops):
        kind = op.get("op")
        bwd: list[StreamOp] = []
        name = op["name"]
        if kind == "conv" or kind == "fc":
            _layer_ops(e, layers[name], batch, profile, pairs.get(name), shapes, bwd)
        elif kind == "linear":
            _linear_ops(e, layers[name], batch, profile, bwd)
        elif kind == "matmul":
            _matmul_ops(e, layers[name], batch, shapes, bwd)
        elif kind in _TOKEN_OPS:
            _token_ops(e, op, batch, shapes, bwd)
        elif kind == "pool":
            _pool_ops(e, op, batch, profile, shapes, bwd)
        elif kind == "add":
            _add_ops(e, op, batch, profile, shapes, bwd, name in absorbed_adds)
        else:
            raise WorkloadError(workload.origin, f"layers[{i}] ({name}).op",
                                f"unknown op {kind!r}: no non-GEMM lowering for it (known: conv, "
                                "fc, pool, add, linear, matmul, " + ", ".join(_TOKEN_OPS) + ")")
        # the gradient of this op's output is complete once all its consumers have sent theirs:
        # autograd sums k contributions with k - 1 out-of-place adds (read 2, write 1) before the
        # op's own backward (torch/csrc/autograd/input_buffer.cpp; Caffe's SplitLayer does the same)
        k = len(consumers.get(op["out"], []))
        if k > 1:
            n = _numel(shapes[op["out"]], batch) * e.db
            e.k(bwd, name, "grad-sum", "bwd-ops", "grad-fan-in-add", r=2 * n * (k - 1),
                w=n * (k - 1), flops=(k - 1) * n // e.db, elems=(k - 1) * n // e.db,
                launches=k - 1, rfp=2 * n, wfp=n,
                note=f"{k} consumers of {op['out']}: {k - 1} gradient sum(s) at the fork")
            bwd.insert(0, bwd.pop())
        e.bwd.append(bwd)
    loss_fwd, loss_bwd = _loss_ops(e, workload, batch, profile, shapes)
    out = e.fwd + loss_fwd + loss_bwd + [k for ops in reversed(e.bwd) for k in ops]
    out += _method_ops(e, workload, batch, method)
    out += _optimizer_ops(e, workload, profile)
    return out


def _bn_ops(e: _Emit, layer, n: int, profile, relu_fused: bool, pair, fwd: list, bwd: list) -> None:
    """BN training forward and backward over the conv's output (n elements, c channels)."""
    c, db, pb = layer.c_out, e.db, PARAM_BYTES
    x = n * db
    mask = (n + 7) // 8 if (relu_fused or pair) else 0   # cuDNN's reserve space: 1 bit per element
    if profile.batch_norm == "caffe":
        _caffe_bn_ops(e, layer, n, fwd, bwd)
        return
    # forward, two passes (PyTorch batch_norm_cuda: batch_norm_stats then batch_norm_elemt, in
    # aten/src/ATen/native/cuda/Normalization.cuh; cuDNN's cudnnBatchNormalizationForwardTraining
    # also reduces before it normalizes): pass 1 reads x once (Welford mean/var) and writes mean,
    # invstd and the running statistics (read + write), all FP32 per channel
    e.k(fwd, layer.name, "bn", "fwd-ops", "bn-fwd-stats", r=x + 2 * c * pb, w=4 * c * pb,
        flops=3 * n, elems=n, note="Welford statistics: read x once; per-channel mean/invstd")
    z = x if pair else 0
    what = ("normalize + add shortcut + ReLU (cuDNN BN_ADD_ACTIVATION: reads z, writes y and the "
            "ReLU bit mask)" if pair else "normalize + ReLU (cuDNN BN_ACTIVATION: writes y and the "
            "ReLU bit mask)" if relu_fused else "normalize: read x, write y")
    # pass 2 reads x (and the shortcut z when fused with the add), mean, invstd, gamma, beta
    e.k(fwd, layer.name, "bn", "fwd-ops", "bn-fwd-normalize", r=x + z + 4 * c * pb, w=x + mask,
        flops=2 * n + (2 * n if pair else n if relu_fused else 0), elems=n, note=what)
    # backward, two passes (batch_norm_backward_reduce, batch_norm_backward_elemt): pass 1 reads
    # dy and x for sum(dy) and sum(dy * (x - mean)) = dbeta, dgamma (FP32 per channel)
    e.k(bwd, layer.name, "bn", "bwd-ops", "bn-bwd-reduce", r=2 * x + mask + 2 * c * pb,
        w=2 * c * pb, flops=3 * n, elems=n,
        note="dgamma/dbeta reductions: read dy and x" + (" and the ReLU mask" if mask else ""))
    # pass 2 reads dy, x and per-channel terms, writes dx; with BN+add+ReLU fused it also writes
    # dz, the ReLU-masked gradient that flows to the shortcut branch
    e.k(bwd, layer.name, "bn", "bwd-ops", "bn-bwd-dx", r=2 * x + mask + 6 * c * pb,
        w=x + (x if pair else 0), flops=5 * n, elems=n,
        note="dx = gamma*invstd*(dy - mean(dy) - xhat*mean(dy*xhat))"
        + ("; also writes dz for the shortcut" if pair else ""))


def _caffe_bn_ops(e: _Emit, layer, n: int, fwd: list, bwd: list) -> None:
    """Caffe's BatchNorm layer (statistics and normalization only, in place) followed by a Scale
    layer (gamma, beta), counted call by call from BVLC caffe src/caffe/layers/batch_norm_layer.cpp
    and scale_layer.cpp (CPU path): every caffe_cpu_gemm/gemv/axpby/div/powx call is one pass."""
    x = n * e.db
    # mean: gemv over space (read x); subtract mean: gemm broadcast into top (read, write);
    # variance: powx into temp (read, write) + gemv (read); std broadcast into temp (write);
    # divide top by temp (read 2, write); copy top into x_norm_ for backward (read, write)
    e.k(fwd, layer.name, "bn", "fwd-ops", "caffe-batchnorm-fwd", r=7 * x, w=5 * x, flops=6 * n,
        elems=n, launches=7, rfp=2 * x, wfp=2 * x,
        note="Caffe BatchNorm forward: mean, subtract, square, variance, broadcast, divide, copy")
    # Scale in place keeps a copy of its input (read, write), scales (read, write), BiasLayer adds
    # beta (read, write)
    e.k(fwd, layer.name, "bn", "fwd-ops", "caffe-scale-fwd", r=3 * x, w=3 * x, flops=2 * n, elems=n,
        launches=3, rfp=x, wfp=2 * x, note="Caffe Scale + Bias forward (in place, copies its input)")
    # Scale backward: dgamma = sum(dy * x) (read 2, write product; sum: read), dx = dy * gamma
    # (read, write), dbeta = sum(dy) (read)
    e.k(bwd, layer.name, "bn", "bwd-ops", "caffe-scale-bwd", r=5 * x, w=2 * x, flops=4 * n, elems=n,
        launches=4, rfp=2 * x, wfp=2 * x, note="Caffe Scale + Bias backward")
    # BatchNorm backward: dy*x_norm (read 2, write), gemv sum (read), broadcast (write), *x_norm
    # (read 2, write), gemv on dy (read), broadcast-add (read, write), axpby (read 2, write),
    # divide by std (read 2, write)
    e.k(bwd, layer.name, "bn", "bwd-ops", "caffe-batchnorm-bwd", r=11 * x, w=6 * x, flops=8 * n,
        elems=n, launches=8, rfp=3 * x, wfp=2 * x, note="Caffe BatchNorm backward (8 BLAS-1/2 calls)")


def _relu_fwd(e: _Emit, into: list, name: str, n: int, note: str = "") -> None:
    # read x, write y: in place (torchvision's inplace=True, Caffe's in-place ReLU) saves memory,
    # not traffic
    e.k(into, name, "relu", "fwd-ops", "relu-fwd", r=n * e.db, w=n * e.db, flops=n, elems=n,
        note=note or "read x, write y")


def _relu_bwd(e: _Emit, into: list, name: str, n: int) -> None:
    # threshold_backward / TF ReluGrad / Caffe ReLU backward: read the output (or input) and dy,
    # write dx
    e.k(into, name, "relu", "bwd-ops", "relu-bwd", r=2 * n * e.db, w=n * e.db, flops=n, elems=n,
        note="read y and dy, write dx")


def _layer_ops(e: _Emit, l, batch: int, profile, pair, shapes, bwd: list) -> None:
    """A conv's or FC's bias, BN and ReLU (the GEMMs themselves are the engines')."""
    n = batch * l.c_out * l.p * l.q
    fwd = e.fwd
    relu_bwd: list[StreamOp] = []
    rest_bwd: list[StreamOp] = []
    epi_relu = l.relu and l.bias and not l.bn and profile.fused(f"{l.op}-bias-relu")
    if l.bias and not l.bn:
        if not (profile.fused(f"{l.op}-bias") or profile.fused(f"{l.op}-bias-relu")):
            # a separate bias add (PyTorch's cudnn_convolution path adds the bias with add_; TF's
            # BiasAdd): read y and the bias, write y
            e.k(fwd, l.name, "bias", "fwd-ops", "bias-add", r=n * e.db + l.c_out * PARAM_BYTES,
                w=n * e.db, flops=n, elems=n, note="bias add outside the GEMM")
        # the bias gradient is a reduction of dO over batch and positions (conv_backward_bias /
        # BiasAddGrad / sum over dim 0): read dO, write c_out FP32
        e.k(rest_bwd, l.name, "bias", "bwd-ops", "bias-grad", r=n * e.db, w=l.c_out * PARAM_BYTES,
            flops=n, elems=n, note="reduce dO to the bias gradient")
    if l.bn:
        relu_fused = l.relu and profile.fused("bn-relu")
        bn_bwd: list[StreamOp] = []
        _bn_ops(e, l, n, profile, relu_fused, pair, fwd, bn_bwd)
        rest_bwd = bn_bwd + rest_bwd
        if l.relu and not relu_fused:
            _relu_fwd(e, fwd, l.name, n)
            _relu_bwd(e, relu_bwd, l.name, n)
    elif l.relu:
        if not epi_relu:
            _relu_fwd(e, fwd, l.name, n)
        _relu_bwd(e, relu_bwd, l.name, n)   # an epilogue ReLU still needs its backward
    if profile.zero_grad == "memset-add":
        p = l.param_count * PARAM_BYTES
        tensors = 1 + int(l.bias) + 2 * int(l.bn)
        # PyTorch's AccumulateGrad into an existing (zeroed) .grad: grad += new (read 2, write 1)
        e.k(rest_bwd, l.name, "grad-accumulate", "bwd-ops", "accumulate-grad", r=2 * p, w=p,
            flops=l.param_count, elems=l.param_count, launches=tensors,
            note="AccumulateGrad adds into the zeroed .grad (zero_grad(set_to_none=False))")
    bwd.extend(relu_bwd + rest_bwd)


def _pool_ops(e: _Emit, op: dict, batch: int, profile, shapes, bwd: list) -> None:
    name, db = op["name"], e.db
    ni, no = _numel(shapes[op["in"]], batch), _numel(shapes[op["out"]], batch)
    c, h, w = shapes[op["in"]]
    kk = h * w if op.get("global") else op["kernel"] ** 2
    if op["kind"] == "max":
        mb = _MASK_BYTES[profile.maxpool_mask]
        # forward: read the input once (windows overlap in cache), write y and, unless the backward
        # recomputes the argmax (cuDNN, used by TF), the index per output (PyTorch int64, Caffe int)
        e.k(e.fwd, name, "pool", "fwd-ops", "maxpool-fwd", r=ni * db, w=no * db + no * mb,
            flops=no * kk, elems=no, note=f"max pool, {profile.maxpool_mask}")
        if mb:
            extra = ni * db if mb == 4 else 0
            # backward with indices: read dy and the indices, write dx (PyTorch gathers per input
            # element); Caffe first zero-fills bottom_diff (caffe_set), then scatters
            e.k(bwd, name, "pool", "bwd-ops", "maxpool-bwd", r=no * db + no * mb,
                w=ni * db + extra, flops=no, elems=ni, wfp=ni * db,
                note="route dy through the stored indices" + ("; zero-fill dx first" if extra else ""))
        else:
            # cudnnPoolingBackward recomputes the argmax: reads x, y and dy, writes dx
            e.k(bwd, name, "pool", "bwd-ops", "maxpool-bwd", r=ni * db + 2 * no * db, w=ni * db,
                flops=no * kk, elems=ni, note="recompute argmax from x and y (cuDNN)")
    else:
        e.k(e.fwd, name, "pool", "fwd-ops", "avgpool-fwd", r=ni * db, w=no * db, flops=no * kk,
            elems=no, note="average pool: read x, write y" + (" (global)" if op.get("global") else ""))
        e.k(bwd, name, "pool", "bwd-ops", "avgpool-bwd", r=no * db, w=ni * db, flops=ni, elems=ni,
            note="spread dy / window over dx")


def _add_ops(e: _Emit, op: dict, batch: int, profile, shapes, bwd: list, absorbed: bool) -> None:
    name, n = op["name"], _numel(shapes[op["out"]], batch)
    relu = op.get("relu", False)
    if absorbed:
        return   # the block's last BN kernel adds the shortcut, applies ReLU and writes dz
    if relu and profile.fused("add-relu"):
        e.k(e.fwd, name, "add", "fwd-ops", "add-relu-fwd", r=2 * n * e.db, w=n * e.db, flops=2 * n,
            elems=n, note="residual add + ReLU, one kernel: read a, b; write y")
    else:
        e.k(e.fwd, name, "add", "fwd-ops", "add-fwd", r=2 * n * e.db, w=n * e.db, flops=n, elems=n,
            note="residual add: read a, b; write y")
        if relu:
            _relu_fwd(e, e.fwd, name, n, "ReLU after the residual add: read, write")
    if relu:
        _relu_bwd(e, bwd, name, n)
    # the add's own backward launches nothing: autograd hands the same dy to both inputs; their
    # sum at the fork is the grad-sum of the tensor both branches read


# ----------------------------------------------------------------------------------------------
# Transformer ops (docs/explanation/transformers.md). Counts follow PyTorch eager's CUDA kernels, each reading
# and writing whole tensors once per pass as above; FLOP counts of the transcendental ops are
# estimates (an exp or tanh counted as a few FLOPs).

_TOKEN_OPS = TOKEN_OPS


def _linear_ops(e: _Emit, l, batch: int, profile, bwd: list) -> None:
    """A linear's bias (the GEMMs are the engines'): F.linear on a 3-D input runs addmm, whose
    bias the cuBLASLt epilogue adds when the profile fuses fc-bias; its gradient reduces dO over
    batch and tokens."""
    n = batch * l.c_out * l.p * l.q
    if l.bias:
        if not profile.fused("fc-bias"):
            e.k(e.fwd, l.name, "bias", "fwd-ops", "bias-add", r=n * e.db + l.c_out * PARAM_BYTES,
                w=n * e.db, flops=n, elems=n, note="bias add outside the GEMM")
        e.k(bwd, l.name, "bias", "bwd-ops", "bias-grad", r=n * e.db, w=l.c_out * PARAM_BYTES,
            flops=n, elems=n, note="reduce dO over batch and tokens to the bias gradient")
    if profile.zero_grad == "memset-add":
        p = (l.weight_count + (l.c_out if l.bias else 0)) * PARAM_BYTES
        e.k(bwd, l.name, "grad-accumulate", "bwd-ops", "accumulate-grad", r=2 * p, w=p,
            flops=p // PARAM_BYTES, elems=p // PARAM_BYTES, launches=1 + int(l.bias),
            note="AccumulateGrad adds into the zeroed .grad"
            + (" (the tied embedding table's)" if l.tied else ""))


def _matmul_ops(e: _Emit, l, batch: int, shapes, bwd: list) -> None:
    """Head-layout copies around attention's batched GEMMs. Q, K and V are permuted views
    (B, T, H, d_h) -> (B, H, T, d_h) of the projection's output; torch.matmul reshapes them to
    (B*H, T, d_h) for bmm, which is a copy because B and H cannot merge in the permuted strides,
    and the context is made contiguous again as (B, T, H*d_h) (Hugging Face's .contiguous(),
    timm's reshape). The backward copies each gradient back the other way. Q K^T copies Q and K;
    A V copies V and the output. (scaled_dot_product_attention's fused kernels avoid these.)"""
    a_or_out = shapes[l.in_tensor] if l.kind == "qk" else shapes[l.out_tensor]
    n = batch * (a_or_out[0] * a_or_out[1] * a_or_out[2] + _numel(shapes[l.in2_tensor], 1))
    what = "Q and K" if l.kind == "qk" else "V and the merged context"
    e.k(e.fwd, l.name, "head-copy", "fwd-ops", "head-layout-copy", r=n * e.db, w=n * e.db,
        flops=0, elems=n, launches=2, note=f"copy {what} between token and head layouts")
    e.k(bwd, l.name, "head-copy", "bwd-ops", "head-layout-copy", r=n * e.db, w=n * e.db,
        flops=0, elems=n, launches=2, note=f"copy the gradients of {what} back")


def _token_ops(e: _Emit, op: dict, batch: int, shapes, bwd: list) -> None:
    """Layer norm, GELU, softmax, dropout, embeddings, ViT's token assembly, token select and the
    slices of a fused QKV projection."""
    kind, name, db, pb = op["op"], op["name"], e.db, PARAM_BYTES
    c, h, w = shapes[op["in"]]
    n = batch * c * h * w
    x = n * db
    if kind == "layernorm":
        rows = batch * h * w
        # vectorized_layer_norm_kernel: one pass (a row fits a block): read x, gamma, beta; write
        # y and the FP32 mean and rstd per row that the backward reads
        e.k(e.fwd, name, "layernorm", "fwd-ops", "layernorm-fwd", r=x + 2 * c * pb,
            w=x + 2 * rows * pb, flops=8 * n, elems=n, note="mean, variance, normalize, affine")
        # layer_norm_backward: one kernel for dx (reads dy, x, mean, rstd, gamma), one for
        # dgamma/dbeta (reads dy, x, mean, rstd again; column reductions)
        e.k(bwd, name, "layernorm", "bwd-ops", "layernorm-bwd", r=4 * x + 4 * rows * pb + c * pb,
            w=x + 2 * c * pb, flops=14 * n, elems=n, launches=2, rfp=2 * x + 2 * rows * pb,
            note="dx; then dgamma, dbeta (reads dy and x twice)")
    elif kind == "gelu":
        e.k(e.fwd, name, "gelu", "fwd-ops", "gelu-fwd", r=x, w=x, flops=8 * n, elems=n,
            note="read x, write gelu(x)")
        # GeluBackward recomputes from the saved input: read x and dy, write dx
        e.k(bwd, name, "gelu", "bwd-ops", "gelu-bwd", r=2 * x, w=x, flops=12 * n, elems=n,
            note="read x and dy, write dx")
    elif kind == "softmax":
        if op.get("causal"):
            # Hugging Face GPT-2: torch.where(causal_mask, scores, min): reads the scores and the
            # bool T x T mask (shared by the batch and heads: cached), writes the scores
            e.k(e.fwd, name, "mask", "fwd-ops", "causal-mask", r=x + h * w, w=x, flops=n,
                elems=n, rfp=x + h * w, note="causal mask (torch.where)")
            e.k(bwd, name, "mask", "bwd-ops", "causal-mask-bwd", r=x + h * w, w=x, flops=n,
                elems=n, note="zero the masked gradients (where backward)")
        e.k(e.fwd, name, "softmax", "fwd-ops", "softmax-fwd", r=x, w=x, flops=5 * n, elems=n,
            note="softmax over the keys: read the scores, write the probabilities")
        # _softmax_backward_data: dS = P * (dP - sum(dP * P)): read P and dP, write dS
        e.k(bwd, name, "softmax", "bwd-ops", "softmax-bwd", r=2 * x, w=x, flops=3 * n, elems=n,
            note="read P and dP, write dS")
    elif kind == "dropout":
        if op.get("p", 0.1) == 0:
            return
        # fused_dropout: read x, write y and a bool mask (1 byte per element)
        e.k(e.fwd, name, "dropout", "fwd-ops", "dropout-fwd", r=x, w=x + n, flops=2 * n, elems=n,
            note="random mask, scale: writes y and a 1-byte mask")
        e.k(bwd, name, "dropout", "bwd-ops", "dropout-bwd", r=x + n, w=x, flops=n, elems=n,
            note="masked scale: read dy and the mask, write dx")
    elif kind == "embedding":
        _embedding_ops(e, op, batch, h, bwd)
    elif kind == "tokens":
        co, t, _ = shapes[op["out"]]
        no = batch * co * t * db
        if op.get("cls"):
            # torch.cat((cls_token.expand(B, -1, -1), x.flatten(2).transpose(1, 2)), dim=1)
            e.k(e.fwd, name, "tokens", "fwd-ops", "cls-cat", r=x + c * pb, w=no, flops=0,
                elems=n, note="prepend the class token (copy into the token layout)")
        if op.get("positions"):
            e.k(e.fwd, name, "tokens", "fwd-ops", "pos-embed-add", r=no + co * t * pb, w=no,
                flops=n, elems=n, note="add the position embeddings")
            e.k(bwd, name, "tokens", "bwd-ops", "pos-embed-grad", r=no, w=co * t * pb, flops=n,
                elems=n, note="reduce dy over the batch to the position embeddings' gradient")
        # dx: the patch tokens' slice of dy, made contiguous in the conv's N x C x H x W layout
        # (cudnn needs it); the class token's gradient is a reduction of dy[:, 0] over the batch
        e.k(bwd, name, "tokens", "bwd-ops", "tokens-bwd", r=x + batch * c * db, w=x + c * pb,
            flops=batch * c, elems=n, launches=1 + int(bool(op.get("cls"))),
            note="dy to the patch map's layout; class token gradient")
    elif kind == "select":
        # forward: x[:, i] is a view. select_backward zero-fills the full gradient, then copies
        # the selected token's rows
        e.k(bwd, name, "select", "bwd-ops", "select-bwd", r=batch * c * db,
            w=x + batch * c * db, flops=0, elems=n, launches=2,
            note="zero-fill dx, copy the selected token's gradient")
    elif kind == "slice" and op["part"] == 0:
        # the parts are views; their gradients are concatenated into one tensor by one kernel
        # (unbind / split backward), counted once, at the first part
        e.k(bwd, name, "slice", "bwd-ops", "slice-cat-bwd", r=x, w=x, flops=0, elems=n,
            note="concatenate the parts' gradients (the fused projection's dO)")


def _embedding_ops(e: _Emit, op: dict, batch: int, t: int, bwd: list) -> None:
    """Token (+ position, + token-type) embedding lookups, their sum, and the tables' gradients."""
    name, db, pb, d = op["name"], e.db, PARAM_BYTES, op["dim"]
    rows = batch * t
    y = rows * d * db
    tables = [("token", op["vocab"])] + [(k, op[k]) for k in ("positions", "types") if op.get(k)]
    for what, v in tables:
        # embedding forward: index_select of one FP32 row per token (read the ids and the rows,
        # write the activations)
        e.k(e.fwd, name, "embedding", "fwd-ops", f"embedding-{what}", r=rows * LABEL_BYTES
            + rows * d * pb, w=y, flops=0, elems=rows * d, rfp=rows * LABEL_BYTES
            + min(rows, v) * d * pb, note=f"gather the {what} embedding rows")
        # embedding_dense_backward: sort the ids (read, write), zero-fill the whole FP32 table
        # gradient, then sum dy's rows into it (read dy, read-modify-write the touched rows)
        touched = min(rows, v) * d * pb
        e.k(bwd, name, "embedding", "bwd-ops", f"embedding-{what}-bwd",
            r=2 * rows * LABEL_BYTES + y + touched, w=2 * rows * LABEL_BYTES + v * d * pb + touched,
            flops=rows * d, elems=rows * d, launches=4,
            note=f"sort ids, zero-fill the {v} x {d} table gradient, segment-sum dy")
    if len(tables) > 1:
        k = len(tables) - 1
        e.k(e.fwd, name, "embedding", "fwd-ops", "embedding-sum", r=2 * y * k, w=y * k,
            flops=k * rows * d, elems=rows * d, launches=k, rfp=2 * y, wfp=y,
            note=f"add the {k + 1} embeddings")


def _loss_ops(e: _Emit, wl: Workload, batch: int, profile, shapes) -> tuple[list, list]:
    """Softmax cross-entropy over the last op's output."""
    out = wl.ops[-1]["out"]
    k = shapes[out][0] * shapes[out][1] * shapes[out][2]
    nk, db = batch * k, e.db
    # one label per position: per sample for a classifier (1 x 1 output), per token for a language
    # model's C x T x 1 logits (then the softmax runs over each token's C classes)
    labels = batch * shapes[out][1] * shapes[out][2]
    fwd: list[StreamOp] = []
    bwd: list[StreamOp] = []
    if profile.fused("softmax-xent"):
        # TF SparseSoftmaxCrossEntropyWithLogits: one kernel reads logits and labels, writes the
        # loss per sample and the logits' gradient (softmax - onehot) already in the forward
        e.k(fwd, "loss", "loss", "fwd-ops", "softmax-xent-fwd", r=nk * db + labels * LABEL_BYTES,
            w=nk * db + labels * PARAM_BYTES, flops=5 * nk, elems=nk,
            note="fused softmax cross-entropy (writes the gradient too)")
        e.k(bwd, "loss", "loss", "bwd-ops", "xent-grad-scale", r=nk * db, w=nk * db, flops=nk,
            elems=nk, note="scale the stored gradient by the upstream loss gradient")
        return fwd, bwd
    # PyTorch cross_entropy = log_softmax (read logits, write log-probs) + nll_loss (gather one
    # log-prob per sample: read labels and N values, write the mean)
    e.k(fwd, "loss", "loss", "fwd-ops", "log-softmax-fwd", r=nk * db, w=nk * db, flops=4 * nk,
        elems=nk, note="log_softmax over classes")
    e.k(fwd, "loss", "loss", "fwd-ops", "nll-fwd", r=labels * (LABEL_BYTES + db), w=PARAM_BYTES,
        flops=labels, elems=labels, note="nll_loss: gather the target log-prob")
    # nll_loss_backward zero-fills the N x K gradient and scatters -1/N at the targets (2 launches);
    # log_softmax_backward reads it and the log-probs, writes dlogits
    e.k(bwd, "loss", "loss", "bwd-ops", "nll-bwd", r=labels * LABEL_BYTES, w=nk * db, flops=labels,
        elems=nk, launches=2, note="zero-fill, scatter at the targets")
    e.k(bwd, "loss", "loss", "bwd-ops", "log-softmax-bwd", r=2 * nk * db, w=nk * db, flops=3 * nk,
        elems=nk, note="dlogits = g - exp(logp) * sum(g)")
    return fwd, bwd


def method_parts(method: Any) -> list:
    """The MethodSpecs of a spec, a tuple of them, or a replay column that combines some
    (sim.replay.Combined: its parts)."""
    if method is None:
        return []
    if isinstance(method, (list, tuple)):
        return [p for m in method for p in method_parts(m)]
    return list(method.parts) if hasattr(method, "parts") else [method]


def _method_ops(e: _Emit, wl: Workload, batch: int, method: Any) -> list[StreamOp]:
    """Non-GEMM work a method adds to the step. Only PruneTrain's group lasso does:
    - sdgp-*: none here. AGBP reads the compressed dO (values + metadata), WGC the dense dO that
      the BN/ReLU backward wrote anyway; the compress pass itself is the method's own overhead
      kernel, which the engines already time (tensorcore.py, category method_overhead). The
      compressed copy costs memory (n/m of dO plus its metadata), not extra traffic here.
    - zero / random / approx: the WGC GEMM changes, the BN and ReLU backward do not (dO is still
      needed for AGBP and for BN's own gradients): nothing changes here.
    - prunetrain: narrower BN, ReLU, pools and adds follow from the narrowed workload's widths; the
      group-lasso penalty it trains with adds the passes below.
    """
    out: list[StreamOp] = []
    from sim.methods import find_method
    pt = next((m for m in method_parts(method)
               if (f := find_method(m)) is not None and f.info.is_channel_plan), None)
    if pt is None:
        return out
    # timing=authors: the step as PruneTrain's scripts time it, less the penalty's forward
    # (their train() takes batch_time = wall - lasso_time - data_load_time, lasso_time spanning
    # the penalty's computation); its backward, inside loss.backward(), stays in
    fwd = pt.get("timing") != "authors"
    first = wl.layers[0].name
    for l in wl.layers:
        # groups: output channels of every conv, input channels of every conv but the first, FC
        # input columns (sim/methods/prunetrain.py group_lasso_norm)
        g = 1 if (l.op == "fc" or l.name == first) else 2
        wb = l.weight_count * PARAM_BYTES
        # forward per grouping, as the authors' _get_group_lasso runs it: w.pow(2) (read w, write
        # w**2), .sum(dim) (read w**2): 2 launches
        if fwd:
            out.append(StreamOp(l.name, "group-lasso", "fwd-ops", "group-lasso-fwd", 2 * g * wb,
                                g * wb, 2 * g * l.weight_count, 2 * g, l.weight_count,
                                "PruneTrain group-lasso norms: pow, sum per grouping (the "
                                "authors' _get_group_lasso)", wb, wb))
        # backward per grouping, autograd of w.pow(2).sum(dim): the sum's backward expands a
        # view (no kernel); pow_backward is grad * (2 * w.pow(1)), 3 kernels over w's size
        # (read 3, write 3); then one add of the result into the layer's other gradient (read 2,
        # write 1): the other grouping's, or the WGC's dW
        out.append(StreamOp(l.name, "group-lasso", "bwd-ops", "group-lasso-bwd", 5 * g * wb,
                            4 * g * wb, 4 * g * l.weight_count, 4 * g, l.weight_count,
                            "PruneTrain group-lasso gradient added to dW (PyTorch's pow_backward "
                            "per grouping, then an add)", 2 * wb, wb))
    if fwd:
        # then over all groups at once: two cat, add(1e-8), sqrt, sum, the in + out sum and the
        # product with lambda: 9 launches over one value per group (bytes negligible)
        n = sum(l.c_in if l.op == "fc" else l.c_out + (l.c_in if l.name != first else 0)
                for l in wl.layers)
        out.append(StreamOp(wl.layers[-1].name, "group-lasso", "fwd-ops", "group-lasso-norms",
                            3 * 4 * n, 2 * 4 * n, 3 * n, 9, n, "PruneTrain group-lasso: the "
                            "square roots of the group sums and their total (cat, add, sqrt, "
                            "sum, add, mul)"))
    return out


def param_tensors(wl: Workload) -> list[int]:
    """Element counts of every learnable tensor: weight, bias, BN gamma and beta per layer."""
    out: list[int] = []
    for l in wl.layers:
        if l.weight_count and not l.tied:   # a tied weight is its embedding's table (below)
            out.append(l.weight_count)
        if l.bias:
            out.append(l.c_out)
        if l.bn:
            out += [l.c_out, l.c_out]
    # layer norms' scales and shifts, embedding tables, class tokens and position embeddings
    out += [n for _, n in wl.extra_params]
    return out


def mta_launches(depth: int, sizes: Iterable[int]) -> int:
    """Kernel launches of one PyTorch _foreach_/fused call over tensors of `sizes` elements with
    `depth` tensor lists: multi_tensor_apply packs tensors into a launch until it holds
    depth_to_max_tensors[depth-1] tensors or 320 chunks of 65536 elements."""
    max_t = _MTA_MAX_TENSORS[min(depth, len(_MTA_MAX_TENSORS)) - 1]
    launches = tensors = blocks = 0
    for n in sizes:
        if n <= 0:
            continue
        tensors += 1
        chunks = -(-n // _MTA_CHUNK)
        while chunks:
            take = min(chunks, _MTA_MAX_BLOCKS - blocks)
            blocks += take
            chunks -= take
            if blocks == _MTA_MAX_BLOCKS or (chunks == 0 and tensors == max_t):
                launches += 1
                blocks = 0
                tensors = 0 if chunks == 0 else 1   # a split tensor continues in the next launch
    return launches + (1 if blocks else 0)


# optimizer -> impl -> (FP32 words read per parameter, written, [(tensor lists, count) per kernel])
# SGD with momentum and weight decay (torch/optim/sgd.py): per-param and foreach run
#   d = g + wd*p (R2 W1); buf *= m (R1 W1); buf += d (R2 W1); p -= lr*buf (R2 W1)
# fused (_fused_sgd_): one kernel reads p, g, buf and writes p, buf.
# per-param-fused (TF ApplyMomentum per variable; weight decay through the loss's L2 term:
#   L2Loss reads p, its gradient p*wd (R1 W1), AddN with g (R2 W1), ApplyMomentum R3 W2).
# Adam with L2 weight decay (torch/optim/adam.py): g + wd*p (R2 W1), lerp m (R2 W1), v *= b2
#   (R1 W1), v += (1-b2) g*g (R2 W1), sqrt(v) (R1 W1), / bc2 (R1 W1), + eps (R1 W1), p addcdiv
#   (R3 W1); fused (_fused_adam_): reads p, g, m, v, writes p, m, v; TF ApplyAdam R4 W3 plus the
#   L2 term's R4 W2.
_OPT = {
    "sgd-momentum": {
        "per-param": (7, 4, [(2, 1), (1, 1), (2, 1), (2, 1)]),
        "foreach": (7, 4, [(3, 1), (1, 1), (2, 1), (2, 1)]),
        "fused": (3, 2, [(3, 1)]),
        "per-param-fused": (7, 4, [(1, 1), (1, 1), (2, 1), (3, 1)]),
    },
    "adam": {
        "per-param": (13, 8, [(2, 1), (2, 1), (1, 1), (3, 1), (2, 1), (1, 1), (1, 1), (3, 1)]),
        "foreach": (13, 8, [(3, 1), (2, 1), (1, 1), (2, 1), (2, 1), (1, 1), (1, 1), (3, 1)]),
        "fused": (4, 3, [(4, 1)]),
        "per-param-fused": (8, 5, [(1, 1), (1, 1), (2, 1), (4, 1)]),
    },
}
_OPT_FLOPS = {"sgd-momentum": 6, "adam": 15}


def _optimizer_ops(e: _Emit, wl: Workload, profile) -> list[StreamOp]:
    sizes = param_tensors(wl)
    p = sum(sizes)
    t = len(sizes)
    rd, wr, kernels = _OPT[profile.optimizer][profile.optimizer_impl]
    if profile.optimizer_impl in ("foreach", "fused"):
        launches = sum(mta_launches(depth, sizes) for depth, _ in kernels)
    else:
        launches = len(kernels) * t
    # distinct state: params, grads, and one (SGD momentum) or two (Adam m, v) state tensors
    state = 3 if profile.optimizer == "sgd-momentum" else 4
    out = [StreamOp("optimizer", "optimizer", "optimizer",
                    f"{profile.optimizer}-{profile.optimizer_impl}", rd * p * PARAM_BYTES,
                    wr * p * PARAM_BYTES, _OPT_FLOPS[profile.optimizer] * p, launches, p,
                    f"{len(kernels)} kernel(s) per step over {t} parameter tensors, {rd} FP32 words "
                    f"read and {wr} written per parameter", state * p * PARAM_BYTES,
                    (state - 1) * p * PARAM_BYTES)]
    if profile.zero_grad in ("memset", "memset-add"):
        # zero_grad(set_to_none=False) / Caffe's ClearParamDiffs: write every gradient once
        ml = mta_launches(1, sizes) if profile.optimizer_impl in ("foreach", "fused") else t
        out.append(StreamOp("optimizer", "zero-grad", "optimizer", "zero-grad-memset", 0,
                            p * PARAM_BYTES, 0, ml, p, "gradients zeroed before the next backward"))
    return out


# ----------------------------------------------------------------------------------------------
# Timing


def cpu_stream_args(op: StreamOp, *, dtype_bytes: int = 4, simd_lanes: int = 1) -> dict:
    """Keyword arguments of sim/engines/cpu/passes.py `stream_pass(cpu, **args)` for a StreamOp.

    The CPU model is a loop over `elems` elements with per-element loads, stores and uops. A
    StreamOp's bytes divided by the element size give words moved per loop element; a vectorized
    loop (Caffe's BLAS-1 calls, compiled elementwise loops) moves `simd_lanes` words per load.
    uops: the loads and stores, the arithmetic (flops per element, an FMA being one uop per
    2 flops), and 2 for the loop counter and branch (estimate: one add and one compare-branch).
    Footprints are the distinct bytes (StreamOp.read_distinct / write_distinct), which place the
    data in the cache level that holds them; bytes are all passes' traffic.
    """
    elems = max(1, op.elems)
    words_r = op.read_bytes / dtype_bytes / elems
    words_w = op.write_bytes / dtype_bytes / elems
    loads, stores = words_r / simd_lanes, words_w / simd_lanes
    uops = loads + stores + (op.flops / elems) / (2 * simd_lanes) + 2
    return {"elems": float(elems), "loads": loads, "stores": stores, "uops": uops,
            "read_footprint": float(op.read_distinct), "read_bytes": float(op.read_bytes),
            "write_footprint": float(op.write_distinct), "write_bytes": float(op.write_bytes)}


def phase_totals(ops: Iterable[StreamOp]) -> dict[str, dict[str, int]]:
    """{phase: {read_bytes, write_bytes, flops, launches}} summed over a step's StreamOps."""
    out: dict[str, dict[str, int]] = {ph: {"read_bytes": 0, "write_bytes": 0, "flops": 0,
                                           "launches": 0} for ph in PHASES}
    for o in ops:
        d = out[o.phase]
        d["read_bytes"] += o.read_bytes
        d["write_bytes"] += o.write_bytes
        d["flops"] += o.flops
        d["launches"] += o.launches
    return out
