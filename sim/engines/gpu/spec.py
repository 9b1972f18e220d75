"""The GPU model's view of a hwconfig: GpuSpec, in cycles of `clock` and bytes per cycle.

Built by keyword from the declared fields (`spec_values(hw, HW_FIELDS)`, sim/engines/gpu/params.py)
plus the values derived from them (rates per dtype, DRAM bytes and latency in cycles, launch gap in
cycles), once per config checksum.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from sim.engines.gpu.params import HW_FIELDS
from sim.errors import ConfigError
from sim.hwconfig import HwConfig, spec_values

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4}
# Bytes a streaming kernel keeps in flight per thread (one 16-byte vector load), for Little's law.
STREAM_BYTES_PER_THREAD = 16


@dataclass(frozen=True)
class GpuSpec:
    """The hwconfig's numbers in the units the model uses (cycles of `clock`, bytes per cycle)."""

    name: str
    path: str
    # declared fields (HW_FIELDS attrs), SI units or cycles as the field says
    sm: int
    clock: float
    cuda_clock: float | None     # Hz; None: same as clock
    tc_fp16: float | None        # tensor-core FMA/clk/SM per dtype; None: no tensor cores for it
    tc_bf16: float | None
    tc_tf32: float | None
    cuda_rate: float
    sparse: tuple                # n:m patterns for fp16/bf16, normalized "n:m"
    sparse_tf32: tuple
    sparse_rate: str
    hbm_bandwidth: float         # B/s
    dram_latency: float          # s
    l2_size: float
    l2_bpc: float
    l2_lat: float
    smem: float
    smem_bpc: float
    regs: int
    max_regs: int
    max_threads: int
    max_blocks: int
    max_stages: int
    mma_lat: float
    smem_lat: float | None       # cycles; only the patch kernels need it
    launch_overhead: float       # s
    sustained_clock: float | None  # Hz at full tensor-core load under the power limit; None: clock
    prologue: float              # cycles per block before its first load
    epi_lat: float               # cycles per output tile, fixed epilogue latency
    meta_load: float | None      # smem bytes per warp per sparse MMA k-step for metadata
    smem_sus: float | None       # smem bytes/cycle/SM an mma.sync mainloop sustains; None: smem_bpc
    mma_path: str                # "mma.sync" | "wgmma" | "mma.sp-ampere"
    sync_frac: float             # mma.sync share of the tensor-core rate on a wgmma GPU
    # derived
    cuda_ratio: float            # cuda_core_clock / clock
    tc_rate: tuple               # ((dtype, FMA/clk/SM), ...) for tensor-core dtypes
    dram_bpc: float              # DRAM bytes per cycle
    dram_lat: float              # cycles
    launch: float                # cycles

    def at_clock(self, clock: float) -> "GpuSpec":
        """The same GPU with its SM clock lowered to `clock` (the power limit): cycle-denominated
        SM and L2 rates stay (the CUDA cores and L2 throttle with the SM clock), DRAM bytes per
        cycle and the time-written latencies are rescaled (HBM keeps its own clock)."""
        return replace(self, clock=clock, sustained_clock=None,
                       dram_bpc=self.hbm_bandwidth / clock,
                       dram_lat=_cycles(self.dram_latency, clock),
                       launch=self.launch_overhead * clock)

    def mma_route(self, sparse: bool) -> str:
        """'wgmma' or 'mma.sync': the instruction path one GEMM takes on this GPU."""
        if self.mma_path == "wgmma" or (self.mma_path == "mma.sp-ampere" and not sparse):
            return "wgmma"
        return "mma.sync"

    def tc_rate_for(self, dtype: str, sparse: bool) -> float:
        """FMA/clk/SM of the path the GEMM takes: the legacy mma.sync path on a wgmma GPU reaches
        only `sync_frac` of the tensor-core rate."""
        r = self.fma_rate(dtype)
        if not self.on_cuda_cores(dtype) and self.mma_path != "mma.sync" \
                and self.mma_route(sparse) == "mma.sync":
            r *= self.sync_frac
        return r

    def on_cuda_cores(self, dtype: str) -> bool:
        """fp32, or any dtype on a GPU without tensor cores (16-bit storage with fp32 math, since
        Pascal GP102's native fp16 rate is a small fraction of its fp32 rate)."""
        return dtype == "fp32" or not self.tc_rate

    def default_dtype(self) -> str:
        return "fp16" if self.tc_rate else "fp32"

    def fma_rate(self, dtype: str) -> float:
        if self.on_cuda_cores(dtype):
            return self.cuda_rate * self.cuda_ratio
        rates = dict(self.tc_rate)
        if dtype not in rates:
            raise ConfigError(self.path, f"params.tc_fma_per_clk_{dtype}",
                              f"missing: this GPU has no {dtype} tensor cores")
        return rates[dtype]

    def patterns(self, dtype: str) -> tuple:
        if dtype in ("fp16", "bf16"):
            return self.sparse
        if dtype == "tf32":
            return self.sparse_tf32
        return ()

    @property
    def stream_bpc(self) -> float:
        """A streaming kernel's DRAM bytes per cycle: peak, unless too few bytes can be in flight
        to cover the latency (Little's law over every resident thread's 16-byte load)."""
        inflight = self.sm * self.max_threads * STREAM_BYTES_PER_THREAD
        return min(self.dram_bpc, inflight / max(self.dram_lat, 1.0))


def _check_patterns(hw: HwConfig, key: str) -> tuple:
    from sim.methods.nm import parse_nm
    out = []
    for p in hw.value(key, ()) or ():
        try:
            n, m = parse_nm(p)
        except ValueError as e:
            raise ConfigError(hw.path, f"params.{key}.value", str(e)) from None
        out.append(f"{n}:{m}")
    return tuple(out)


def _cycles(seconds: float, clock: float) -> float:
    """A latency written as a time, in cycles of `clock`, rounded to 1e-6 cycle: the block
    pipeline (kernels.py) steps whole cycles and compares arrival times with them, so a latency
    one float ulp above a whole cycle count (400 cycles written as 218.5792349726776 ns at
    1.83 GHz comes back as 400.0000000000001) would cost a whole extra cycle."""
    return round(seconds * clock, 6)


_SPECS: dict[tuple, GpuSpec] = {}


def gpu_spec(hw: HwConfig) -> GpuSpec:
    """Convert (once per config checksum) and cross-check the hwconfig's values."""
    key = (hw.checksum, hw.name, hw.path)
    s = _SPECS.get(key)
    if s is not None:
        return s
    if hw.kind != "gpu":
        raise ConfigError(hw.path, "kind",
                          f"the tensor-core engine needs a gpu config, not {hw.kind!r}")
    v = spec_values(hw, HW_FIELDS)
    v["sparse"] = _check_patterns(hw, "sparse_patterns")
    v["sparse_tf32"] = _check_patterns(hw, "sparse_patterns_tf32")
    clock = v["clock"]
    s = GpuSpec(
        name=hw.name, path=hw.path, **v,
        cuda_ratio=(v["cuda_clock"] or clock) / clock,
        tc_rate=tuple((d, v[f"tc_{d}"]) for d in ("fp16", "bf16", "tf32")
                      if v[f"tc_{d}"] is not None),
        dram_bpc=v["hbm_bandwidth"] / clock, dram_lat=_cycles(v["dram_latency"], clock),
        launch=v["launch_overhead"] * clock)
    _SPECS[key] = s
    return s
