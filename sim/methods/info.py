"""What each method is: the facts other layers ask about a method, so that no code outside
sim/methods compares method ids.

    info = method_info("sdgp-mag")        # or method_info(spec)
    info.family                           # "sdgp"
    info.system_effect                    # "nm-agbp"
    info.kernel_gap("cpu")                # "no n:m sparse kernel on CPUs"

Each Method (sim/methods/registry.py) declares its MethodInfo in its family's module; INFO is the
registry's id -> MethodInfo table.
"""
from __future__ import annotations

from dataclasses import dataclass

# What a method's effect is when a whole training run is estimated (sim.system):
#   "none"          dense: the baseline
#   "nm-agbp"       AGBP on the engine's n:m sparse tensor cores (nominal density n/m)
#   "skip-wgc"      Wang's zero: scheduled layers skip WGC and their all-reduce
#   "wgc-kernels"   Wang's random / approx: a scheduled layer's WGC is the engine's kernels for
#                   the method's shape-only result (Method.system_result); dW all-reduced as dense
#   "channels"      PruneTrain: a channel trajectory narrows the layers over epochs
#   "not-modelled"  a per-layer compute effect the system level does not wire (dense times)
SYSTEM_EFFECTS = ("none", "nm-agbp", "skip-wgc", "wgc-kernels", "channels", "not-modelled")


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


# shared kernel gaps: no n:m kernel on CPUs; GPUs need sparse tensor cores (hwconfig
# sparse_patterns)
NM_CPU = (("cpu", "no n:m sparse kernel on CPUs"),)
SPARSE_TC = ("sparse_patterns", "no sparse tensor cores")

# id -> MethodInfo, filled by the registry (sim.methods.registry) as it registers each Method
INFO: dict[str, MethodInfo] = {}


def method_info(method) -> MethodInfo:
    """The MethodInfo of a method id or of a parsed MethodSpec (anything with an `.id`)."""
    mid = getattr(method, "id", method)
    try:
        return INFO[mid]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {mid!r} (known: {', '.join(INFO)})") from None
