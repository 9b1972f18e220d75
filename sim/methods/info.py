"""What each method id is, in one table: the facts other layers ask about a method, so that no code
outside sim/methods tests `method.id == ...` or `.startswith("sdgp-")`.

    info = method_info("sdgp-mag")        # or method_info(spec)
    info.family                           # "sdgp"
    info.system_effect                    # "nm-agbp"
    info.kernel_gap("cpu")                # "no n:m sparse kernel on CPUs"

The parameters of each id stay in sim.methods.PARAMS (the parser's table); a test checks that both
tables name the same ids.
"""
from __future__ import annotations

from dataclasses import dataclass

# What a method's effect is when a whole training run is estimated (sim.system):
#   "none"          dense: the baseline
#   "nm-agbp"       AGBP on the engine's n:m sparse tensor cores (nominal density n/m)
#   "skip-wgc"      Wang's schedules: scheduled layers skip WGC (zero also skips their all-reduce)
#   "channels"      PruneTrain: a channel trajectory narrows the layers over epochs
#   "not-modelled"  a per-layer compute effect the system level does not wire (dense times)
SYSTEM_EFFECTS = ("none", "nm-agbp", "skip-wgc", "channels", "not-modelled")


@dataclass(frozen=True)
class MethodInfo:
    """The facts about one method id that the engines, the system model, capture and analysis use."""

    id: str
    # "dense" | "dbtd" | "topk" | "sdgp" | "wang" | "channels" | "w24": which kernel (offline) and which
    # PyTorch twin (capture, sim.methods.torch_ops) implement it
    family: str
    # the operand it rewrites: "" (none), "dO" (AGBP's and WGC's gradient operand), "dW" (WGC's
    # output, Wang's schedules), "weights" (PruneTrain's channels)
    acts_on: str
    # the GEMM phases whose work it changes
    phases: tuple[str, ...]
    system_effect: str
    # Wang et al.'s per-(layer, batch) approximation schedules apply
    scheduled: bool = False
    # scheduled layers also skip their gradient all-reduce (zero: nothing to send)
    skips_allreduce: bool = False
    # `prunesim prune` can apply it to one gradient tensor (random replaces dW, prunetrain acts on
    # weights: neither transforms a given tensor)
    transforms_tensor: bool = True
    # has the fc=dense|prune option (FC layers left dense by default)
    fc_option: bool = False
    # SDGP's n:m selection rule ("random" | "mag" | "resmag"); None for every other family
    nm_selection: str | None = None
    # hardware kind -> why the method has no kernel there (the engines would model it dense)
    no_kernel: tuple[tuple[str, str], ...] = ()
    # a GPU hwconfig value the kernel needs (a falsy value: no kernel), with why
    gpu_feature: tuple[str, str] | None = None
    # the capture trainer's PyTorch twin exists (sim.capture.methods installs it in training)
    torch_twin: bool = True

    @property
    def is_dense(self) -> bool:
        return self.family == "dense"

    @property
    def is_channel_plan(self) -> bool:
        """PruneTrain: acts on weights over epochs through a channel trajectory."""
        return self.family == "channels"

    def kernel_gap(self, hw_kind: str, hw_value=None) -> str | None:
        """None if the method has a kernel on this kind of hardware, else why not. hw_value(name):
        the hwconfig's value of a parameter (GPUs: sparse tensor-core support)."""
        why = dict(self.no_kernel).get(hw_kind)
        if why:
            return why
        if hw_kind == "gpu" and self.gpu_feature and hw_value is not None \
                and not hw_value(self.gpu_feature[0]):
            return self.gpu_feature[1]
        return None


_WANG_CPU = (("cpu", "Wang et al.'s kernels are GPU kernels (patch engine)"),)
_NM_CPU = (("cpu", "no n:m sparse kernel on CPUs"),)
_SPARSE_TC = ("sparse_patterns", "no sparse tensor cores")


def _sdgp(sel: str) -> MethodInfo:
    return MethodInfo(f"sdgp-{sel}", "sdgp", "dO", ("agbp",), "nm-agbp", nm_selection=sel,
                      no_kernel=_NM_CPU, gpu_feature=_SPARSE_TC)


def _wang(mid: str, **kw) -> MethodInfo:
    return MethodInfo(mid, "wang", "dW", ("wgc",), kw.pop("system_effect", "not-modelled"),
                      scheduled=True, no_kernel=_WANG_CPU, **kw)


INFO: dict[str, MethodInfo] = {m.id: m for m in (
    MethodInfo("dense", "dense", "", (), "none"),
    MethodInfo("dbtd", "dbtd", "dO", ("agbp", "wgc"), "not-modelled", fc_option=True),
    MethodInfo("topk", "topk", "dO", ("agbp", "wgc"), "not-modelled", fc_option=True),
    _wang("zero", system_effect="skip-wgc", skips_allreduce=True),
    _wang("random", system_effect="skip-wgc", transforms_tensor=False),
    _wang("approx"),
    _wang("approx-topk"),
    _sdgp("random"),
    _sdgp("mag"),
    _sdgp("resmag"),
    MethodInfo("prunetrain", "channels", "weights", ("fwd", "agbp", "wgc"), "channels",
               transforms_tensor=False),
    # 2:4 weights (sim/methods/weight24.py): the FWD GEMM's weight operand, run transposed so it
    # is the engine's sparse A; w24t's transposable mask also makes AGBP sparse. No dO involved,
    # no PyTorch twin (capture records dense gradients)
    MethodInfo("w24", "w24", "weights", ("fwd",), "not-modelled", transforms_tensor=False,
               no_kernel=_NM_CPU, gpu_feature=_SPARSE_TC, torch_twin=False),
    MethodInfo("w24t", "w24", "weights", ("fwd", "agbp"), "not-modelled",
               transforms_tensor=False, no_kernel=_NM_CPU, gpu_feature=_SPARSE_TC,
               torch_twin=False),
)}


def method_info(method) -> MethodInfo:
    """The MethodInfo of a method id or of a parsed MethodSpec (anything with an `.id`)."""
    mid = getattr(method, "id", method)
    try:
        return INFO[mid]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {mid!r} (known: {', '.join(INFO)})") from None
