"""PyTorch twins of the offline method kernels, and the conv module that applies them in training.

Every function here mirrors one kernel of sim/methods (dbtd.py, nm.py, approx.py) on a torch tensor,
on any device, with torch ops only (no NumPy round trip in the training hot path). The random
stream is rng.py's counter-based hash, so a twin and its kernel draw the same uniform for the same
element and agree bit for bit where their arithmetic is the same (docs/reference/methods.md lists where it is
not: float64 reductions summed in another order, and transcendental functions).

`MethodConv2d` is an ``nn.Conv2d`` whose backward a `ConvMethod` can change: prune the gradient at
its output (DBTD's dO target, straight-through), prune the gradient it emits at its input (DBTD's
dI target for Conv-ReLU blocks), hand AGBP a pruned dO while WGC keeps the dense one (SDGP), or
replace dW (Wang's zero / random / approx). sim/capture/methods.py installs it into a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from sim.methods.shared import SIGMA_FACTORS, dbtd_tau, parse_nm
from sim.methods.rng import _GOLDEN, _M1, _M2, INV_2_24, MASK32, hash32_py, uniform_torch

# ---- random stream ---------------------------------------------------------------------------


def _hash_(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 in place on int64 values < 2**32 (products wrap in int64; the mask keeps the
    low 32 bits, which two's complement wrapping leaves exact)."""
    x ^= x >> 16
    x.mul_(_M1).bitwise_and_(MASK32)
    x ^= x >> 15
    x.mul_(_M2).bitwise_and_(MASK32)
    x ^= x >> 16
    return x


def uniform_flat(key: int, n: int, device: Any = None) -> torch.Tensor:
    """U[0, 1) float32 draws for elements 0..n-1 of stream `key`: equal to rng.uniform_torch(key,
    arange(n)) and to Numba's uniform_at. For n < 2**32 the high index word is 0, so the inner
    hash h(key ^ GOLDEN) is one constant computed here in Python, and the per-element work is a
    single in-place hash (uniform_torch spends two hashes and a dozen temporaries per element)."""
    if n >= 1 << 32:
        return uniform_torch(key, torch.arange(n, device=device))
    k = hash32_py((key ^ _GOLDEN) & MASK32)
    x = torch.arange(n, dtype=torch.int64, device=device)
    x ^= k
    _hash_(x)
    return (x >> 8).to(torch.float32) * float(INV_2_24)


# ---- DBTD and top-k (dbtd.py) ----------------------------------------------------------------


def mean_abs_f64(g: torch.Tensor) -> torch.Tensor:
    """mean |g| as a 0-d float64 tensor (no host sync). The offline kernel sums in float64 too, in
    16 interleaved lanes; torch's reduction order differs, so the two float64 sums can differ in
    their last bit, which moves the float32 tau only when the exact value sits on a float32
    rounding boundary (measured: tests/test_torch_methods.py, docs/reference/methods.md)."""
    return g.abs().sum(dtype=torch.float64) / g.numel()


def dbtd_tau_torch(g: torch.Tensor, p: float, sigma: str = "paper") -> torch.Tensor:
    """tau as a 0-d float32 tensor, with dbtd_tau's float64 arithmetic in its order:
    float32((Phi^-1((1+p)/2) * factor) * mean|g|)."""
    dbtd_tau(1.0, p, sigma)  # validates p and sigma with the offline messages
    c = NormalDist().inv_cdf((1.0 + p) / 2.0) * SIGMA_FACTORS[sigma]
    return (mean_abs_f64(g) * c).to(torch.float32)


def stochastic_prune_torch(g: torch.Tensor, tau: torch.Tensor | float, key: int) -> torch.Tensor:
    """Twin of dbtd.stochastic_prune: keep |g| >= tau, else sign(g)*tau if |g| > r*tau, else 0,
    with r the uniform of the element's flat (memory-order) index. Same shape as g."""
    flat = g.contiguous().view(-1)
    tau = torch.as_tensor(tau, dtype=torch.float32, device=g.device)
    a = flat.abs()
    thr = uniform_flat(key, flat.numel(), g.device).mul_(tau)  # r * tau, float32 as offline
    # copysign differs from the kernel's `tau if x > 0 else -tau` only at x = +0.0, which is never
    # promoted (0 > r*tau is false), so the result is the same bit for bit
    low = torch.copysign(tau, flat).masked_fill_(~(a > thr), 0.0)
    return torch.where(a >= tau, flat, low).view(g.shape)


def dbtd_torch(g: torch.Tensor, p: float, key: int, sigma: str = "paper"
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """DBTD threshold + stochastic pruning: (pruned float32 tensor, tau). Twin of dbtd.dbtd."""
    g32 = g.to(torch.float32)
    tau = dbtd_tau_torch(g32, p, sigma)
    return stochastic_prune_torch(g32, tau, key).to(g.dtype), tau


def topk_torch(g: torch.Tensor, keep: float) -> torch.Tensor:
    """Twin of dbtd.topk: keep ceil(keep*n) largest |g|, ties to the lower flat index."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    flat = g.contiguous().view(-1)
    n = flat.numel()
    k = max(1, int(math.ceil(keep * n)))
    if k >= n:
        return g.clone()
    a = flat.abs()
    kth = torch.topk(a, k, sorted=False).values.min()
    above = a > kth
    need_eq = k - above.sum()
    eq = a == kth
    # the first need_eq elements equal to the k-th value, in index order (as the offline scan)
    take_eq = eq & (torch.cumsum(eq, 0) <= need_eq)
    return torch.where(above | take_eq, flat, torch.zeros_like(flat)).view(g.shape)


# ---- SDGP (nm.py) ------------------------------------------------------------------------------


def _keep_top(kg: torch.Tensor, n: int) -> torch.Tensor:
    """Mask of the n largest along dim 2 (ties to the lower index) from all-pairs ranks, as the
    offline kernel counts them: rank_j = #{i < j: k_i >= k_j} + #{i > j: k_i > k_j}. m^2 compares
    of 1/m-sized slices beat a stable sort along a short dimension by 3-10x on the CPU."""
    m = kg.shape[2]
    rank = torch.zeros(kg.shape, dtype=torch.uint8, device=kg.device)
    for j in range(m):
        kj, r = kg[:, :, j], rank[:, :, j]
        for i in range(m):
            if i < j:
                r += kg[:, :, i] >= kj
            elif i > j:
                r += kg[:, :, i] > kj
    return rank < n


def nm_prune_torch(x: torch.Tensor, nm: str | tuple[int, int], mode: str, key: int = 0,
                   rescale: str = "sample-channel") -> torch.Tensor:
    """Twin of nm.sdgp's pruned tensor for NCHW x (or N x F): groups of m consecutive channels at
    each (n, h, w) keep n. `random` keeps the n largest uniform draws (element (b, c, s) draws at
    its NCHW flat index), `mag`/`resmag` the n largest |x|; ties to the lower channel. `resmag` rescales per (sample, channel) (or per channel: rescale=channel)."""
    n, m = parse_nm(nm) if isinstance(nm, str) else nm
    if mode not in ("random", "mag", "resmag"):
        raise ValueError(f"SDGP mode must be random, mag or resmag, got {mode!r}")
    if rescale not in ("sample-channel", "channel"):
        raise ValueError(f"rescale must be sample-channel or channel, got {rescale!r}")
    shape = x.shape
    N, C = shape[0], shape[1]
    xs = x.to(torch.float32).contiguous().view(N, C, -1)
    HW = xs.shape[2]
    G = -(-C // m)
    if mode == "random":
        keys = uniform_flat(key, xs.numel(), x.device).view(N, C, HW)
    else:
        keys = xs.abs()
    if G * m != C:  # padding ranks below every real key (draws and |x| are >= 0)
        keys = F.pad(keys, (0, 0, 0, G * m - C), value=-1.0)
    mask = _keep_top(keys.view(N, G, m, HW), n).view(N, G * m, HW)[:, :C]
    out = xs.masked_fill(~mask, 0.0)
    if mode == "resmag":
        l1_in = xs.abs().sum(2, dtype=torch.float64)
        l1_kept = out.abs().sum(2, dtype=torch.float64)
        if rescale == "sample-channel":
            # the float64 literal 1e-4, as nm.sdgp adds it (not the float32 RESCALE_EPS)
            scale = (l1_in / (l1_kept + 1e-4)).to(torch.float32)
        else:
            scale = (l1_in.sum(0) / (l1_kept.sum(0) + 1e-4)).to(torch.float32)[None, :]
        out = out * scale[:, :, None]
    return out.view(shape).to(x.dtype)


# ---- Wang's approximations (approx.py) -------------------------------------------------------


def channel_picks_torch(g: torch.Tensor, k: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Twin of approx.channel_picks: per (n, c) the k largest |g| positions (ties to the lower
    position: argmax returns the first maximum; k > 1 uses a stable sort) as int64 (N, C, k), and
    float32 values summing to the channel's signed sum (float64 sums, as offline)."""
    N, C = g.shape[0], g.shape[1]
    x = g.to(torch.float32).contiguous().view(N, C, -1)
    k = min(k, x.shape[2])
    total = x.sum(2, dtype=torch.float64)
    if k == 1:
        idx = x.abs().argmax(dim=2, keepdim=True)
        return idx, total.to(torch.float32)[:, :, None]
    idx = torch.sort(x.abs(), dim=2, descending=True, stable=True).indices[:, :, :k]
    kept_v = torch.gather(x, 2, idx).to(torch.float64)
    kept = kept_v.sum(2)
    safe = torch.where(kept != 0, kept, torch.ones_like(kept))
    val = torch.where(kept[:, :, None] != 0, kept_v * (total / safe)[:, :, None],
                      (total / k)[:, :, None])
    return idx, val.to(torch.float32)


def approx_dO_torch(g: torch.Tensor, k: int = 1) -> torch.Tensor:
    """The dO that `approx` (k=1) / `approx-topk` feeds WGC: k nonzeros per (n, c) standing for
    the channel's sum (approx.picks_to_dense)."""
    idx, val = channel_picks_torch(g, k)
    N, C = g.shape[0], g.shape[1]
    out = torch.zeros((N, C, g[0, 0].numel()), dtype=torch.float32, device=g.device)
    out.scatter_(2, idx, val)
    return out.view(g.shape).to(g.dtype)




def random_dw_torch(w_shape: tuple[int, ...], batch: int, key: int, device: Any = None
                    ) -> torch.Tensor:
    """Twin of approx.random_dw: N(0, (1/B)^2) by Box-Muller on the counter stream (even draws u1,
    odd draws u2), all in float64 like the offline arithmetic; float64 cos of NumPy and of torch
    may differ in the last ulp, which the float32 result almost never shows (docs/reference/methods.md)."""
    size = math.prod(w_shape)
    u = uniform_flat(key, 2 * size, device).view(size, 2)
    u1, u2 = u[:, 0], u[:, 1]
    c = torch.cos(u2.to(torch.float64) * (2 * math.pi))
    z = torch.sqrt(-2.0 * torch.log1p(-u1.to(torch.float64))) * c.to(torch.float64)
    return (z / batch).to(torch.float32).view(w_shape)


# ---- autograd pieces -----------------------------------------------------------------------------


class GradTap(torch.autograd.Function):
    """Straight-through layer: identity forward; backward returns fn(grad) (or grad if None).

    This is Ye et al.'s pruning layer: placed on a conv's output before BN it prunes dO (which
    then feeds both AGBP and WGC); placed on the conv's input it prunes the conv's own dI."""

    @staticmethod
    def forward(ctx, x, fn):
        ctx.fn = fn
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        g = ctx.fn(grad)
        return (grad if g is None else g), None


class MethodConvFn(torch.autograd.Function):
    """conv2d whose backward takes AGBP's dO and WGC's dW from a `StepPlan`.

    AGBP: dI = conv2d_input(plan.agbp(dO)); WGC: dW = conv2d_weight(I, dO) with the DENSE dO unless
    the plan replaces it (zero / random / approx); the bias gradient stays exact."""

    @staticmethod
    def forward(ctx, x, weight, bias, conv, plan):
        ctx.save_for_backward(x, weight)
        ctx.conv, ctx.plan, ctx.has_bias = conv, plan, bias is not None
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    @staticmethod
    def backward(ctx, dO):
        x, w = ctx.saved_tensors
        conv, plan = ctx.conv, ctx.plan
        args = (conv.stride, conv.padding, conv.dilation, conv.groups)
        dI = dW = db = None
        if ctx.needs_input_grad[0]:
            g = plan.agbp(dO) if plan.agbp is not None else dO
            dI = torch.nn.grad.conv2d_input(x.shape, w, g, *args)
        if ctx.needs_input_grad[1]:
            dW = plan.wgc(x, w, dO) if plan.wgc is not None else \
                torch.nn.grad.conv2d_weight(x, w.shape, dO, *args)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dO.sum(dim=(0, 2, 3))
        return dI, dW, db, None, None


@dataclass
class StepPlan:
    """What one conv does in one training step (fixed at forward time, used in backward)."""

    out_grad: Callable | None = None   # on the output gradient, before the conv's backward (dO)
    in_grad: Callable | None = None    # on the conv's own input gradient (dI)
    agbp: Callable | None = None       # dO -> the operand AGBP uses (custom backward)
    wgc: Callable | None = None        # (I, W, dO) -> dW (custom backward)

    @property
    def custom(self) -> bool:
        return self.agbp is not None or self.wgc is not None


class ConvMethod:
    """Base of the per-layer behaviour: `plan(conv, step)` -> StepPlan or None (dense).

    `step` carries key, iteration, epoch, batch size, schedule flag and a `stat(kind, tensor)`
    callback that counts the density of the operands the method produces."""

    def plan(self, conv: nn.Conv2d, step: Any) -> StepPlan | None:
        return None


class DenseMethod(ConvMethod):
    """No change; only counts dO's density so every method's table has the same columns."""

    def plan(self, conv, step):
        def out_grad(g):
            step.stat("agbp", g)
            step.stat("wgc", g)
        return StepPlan(out_grad=out_grad)


class DbtdMethod(ConvMethod):
    """Ye et al.: DBTD + stochastic pruning of dO (Conv-BN blocks) or of dI (Conv-ReLU blocks)."""

    def __init__(self, p: float, sigma: str = "paper", target: str = "dO", topk: float | None = None):
        if topk is None:
            dbtd_tau(1.0, p, sigma)
        self.p, self.sigma, self.target, self.topk = p, sigma, target, topk

    def prune(self, g, key):
        if self.topk is not None:
            return topk_torch(g, self.topk)
        return dbtd_torch(g, self.p, key, self.sigma)[0]

    def plan(self, conv, step):
        if self.target == "dI":
            def in_grad(g):
                out = self.prune(g, step.key)
                step.stat("dI", out)
                return out

            def count(g):
                step.stat("agbp", g)
                step.stat("wgc", g)
            return StepPlan(out_grad=count, in_grad=in_grad)

        def out_grad(g):
            out = self.prune(g, step.key)
            step.stat("agbp", out)
            step.stat("wgc", out)
            return out
        return StepPlan(out_grad=out_grad)


class SdgpMethod(ConvMethod):
    """McDanel et al.: n:m pruning of the dO that AGBP uses; WGC keeps the dense dO."""

    def __init__(self, nm: str, mode: str, rescale: str = "sample-channel"):
        self.nm, self.mode, self.rescale = parse_nm(nm), mode, rescale

    def plan(self, conv, step):
        def agbp(g):
            out = nm_prune_torch(g, self.nm, self.mode, step.key, self.rescale)
            step.stat("agbp", out)
            step.stat("wgc", g)
            return out
        return StepPlan(agbp=agbp)


class WangMethod(ConvMethod):
    """Wang et al.: replace dW of scheduled (conv, batch) pairs; AGBP exact; others dense."""

    def __init__(self, kind: str, k: int = 1):
        if kind not in ("zero", "random", "approx", "approx-topk"):
            raise ValueError(f"unknown WGC approximation {kind!r}")
        self.kind, self.k = kind, k

    def plan(self, conv, step):
        if not step.scheduled:
            return DenseMethod().plan(conv, step)
        args = (conv.stride, conv.padding, conv.dilation, conv.groups)

        def wgc(x, w, dO):
            step.stat("agbp", dO)
            if self.kind == "zero":
                step.stat("wgc", None, 0, dO.numel())
                return torch.zeros_like(w)
            if self.kind == "random":
                step.stat("wgc", None, 0, dO.numel())  # no dO is read: dW is generated
                return random_dw_torch(tuple(w.shape), step.batch, step.key, w.device).to(w.dtype)
            g = approx_dO_torch(dO, 1 if self.kind == "approx" else self.k)
            step.stat("wgc", g)
            return torch.nn.grad.conv2d_weight(x, w.shape, g, *args)
        return StepPlan(wgc=wgc)


class MethodConv2d(nn.Conv2d):
    """An nn.Conv2d whose backward a ConvMethod changes, step by step.

    Installed by swapping the class of an existing Conv2d (`MethodConv2d.adopt`), so parameters,
    hooks (a running Capture), optimizer references and state_dict keys all stay as they were.
    `prunesim_step()` (set by the installer) returns the current step, or None outside training
    steps (evaluation), where the module is a plain conv."""

    prunesim_method: ConvMethod
    prunesim_step: Callable[[], Any]

    @classmethod
    def adopt(cls, conv: nn.Conv2d, method: ConvMethod, step: Callable[[], Any]) -> "MethodConv2d":
        if type(conv) is not nn.Conv2d and not isinstance(conv, MethodConv2d):
            raise TypeError(f"can only adopt a plain nn.Conv2d, got {type(conv).__name__}")
        conv.__class__ = cls
        conv.prunesim_method = method
        conv.prunesim_step = step
        return conv

    def release(self) -> nn.Conv2d:
        """Back to a plain nn.Conv2d."""
        self.__class__ = nn.Conv2d
        for a in ("prunesim_method", "prunesim_step"):
            self.__dict__.pop(a, None)
        return self

    def forward(self, x):
        step = self.prunesim_step() if torch.is_grad_enabled() else None
        plan = None if step is None else self.prunesim_method.plan(self, step)
        if plan is None:
            return super().forward(x)
        if plan.in_grad is not None and x.requires_grad:
            x = GradTap.apply(x, plan.in_grad)
        if plan.custom:
            y = MethodConvFn.apply(x, self.weight, self.bias, self, plan)
        else:
            y = self._conv_forward(x, self.weight, self.bias)
        if plan.out_grad is not None:
            y = GradTap.apply(y, plan.out_grad)
        return y
