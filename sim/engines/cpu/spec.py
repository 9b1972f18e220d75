"""The CPU hwconfig as plain numbers (`Cpu`), and the KernelResult the CPU family emits.

`cpu_spec(hw, threads)` builds a `Cpu` by keyword from spec_values(hw, HW_FIELDS) (every field's
SI value under its `attr`) plus the values the models use in their own units: cache levels as
(size, ways, latency, bandwidth) tuples, the DRAM bandwidth in bytes per cycle and its latency in
cycles (the hwconfig holds a time; cycles are what the core waits).
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.engines.base import CATEGORIES, KernelResult
from sim.engines.cpu.params import HW_FIELDS
from sim.errors import ConfigError
from sim.hwconfig import HwConfig, spec_values

ENGINE = "cpu"
F32 = 4


@dataclass(frozen=True)
class Cpu:
    """The hwconfig for `threads` threads of one socket: the declared fields (SI units, names of
    their `attr`) and the derived values below them (cycles and bytes)."""

    name: str
    threads: int
    # declared (params.HW_FIELDS)
    isa: str
    cores: int
    clock: float                            # Hz
    simd: int
    vregs: int
    fma_units: int
    fma_lat: float
    issue: int
    ld_ports: int
    st_ports: int
    mispredict: float
    line_size: float
    l1_size: float
    l1_ways: int
    l1_latency: float
    l1_bandwidth: float
    l2_size: float
    l2_ways: int
    l2_latency: float
    l2_bandwidth: float
    l2_shared_by: int
    l3_size: float
    l3_ways: int
    l3_latency: float
    l3_bandwidth: float
    pf_streams: int
    pf_dist: int
    pf_degree: int
    dram_bandwidth: float                   # B/s, whole socket
    dram_latency: float                     # s
    mlp: int
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    gemm_eff: float
    spmm_style: str
    spmm_simd: int
    spmm_eff: float
    # derived
    line: int                               # bytes, a power of two
    l1: tuple[int, int, float, float]       # size, ways, latency, bandwidth (B/cycle)
    l2: tuple[int, int, float, float]
    l3: tuple[int, int, float, float]
    dram_bw: float                          # B/cycle, whole socket
    dram_lat: float                         # cycles

    @property
    def core_dram_bw(self) -> float:
        """One core's DRAM bandwidth: the socket's, or what its fill buffers sustain (Little's law)."""
        return min(self.dram_bw, self.mlp * self.line / self.dram_lat)

    @property
    def l2_private(self) -> bool:
        return self.l2_shared_by == 1

    def l2_share(self) -> float:
        """L2 capacity one thread can count on (a shared L2 is split among the threads on it)."""
        return self.l2[0] / (1 if self.l2_private else min(self.threads, self.l2_shared_by))

    def level_of(self, footprint: float) -> tuple[str, float]:
        """(level, bytes per cycle per thread) that serves data of this footprint."""
        if footprint <= self.l1[0]:
            return "l1", self.l1[3]
        if footprint <= self.l2_share():
            return "l2", self.l2[3]
        if self.l3[0] > 0 and footprint <= self.l3[0]:
            return "l3", self.l3[3]
        return "dram", min(self.core_dram_bw, self.dram_bw / self.threads)


def cpu_spec(hw: HwConfig, threads: int = 1) -> Cpu:
    """The `Cpu` of a loaded CPU hwconfig for `threads` threads (1 .. cores)."""
    v = spec_values(hw, HW_FIELDS)
    if threads < 1:
        raise ConfigError(hw.path, "threads", f"must be >= 1, got {threads}")
    if threads > v["cores"]:
        raise ConfigError(hw.path, "params.cores", f"{threads} threads asked, the config has "
                          f"{v['cores']} cores")
    line = int(v["line_size"])
    if line & (line - 1):
        raise ConfigError(hw.path, "params.line_size.value", f"must be a power of two, got {line}")
    level = lambda p: (int(v[f"{p}_size"]), v[f"{p}_ways"], v[f"{p}_latency"],   # noqa: E731
                       v[f"{p}_bandwidth"])
    return Cpu(name=hw.name, threads=threads, **v, line=line, l1=level("l1"), l2=level("l2"),
               l3=level("l3"), dram_bw=v["dram_bandwidth"] / v["clock"],
               dram_lat=v["dram_latency"] * v["clock"])


def kernel_result(cpu: Cpu, layer: str, phase: str, kernel: str, cycles: float, flops: int,
                  breakdown_cycles: dict[str, float], bytes_: dict[str, int] | None = None,
                  details: dict | None = None, *, category: str = "math") -> KernelResult:
    """A CPU kernel's result: the breakdown, given in cycles, in seconds scaled to sum to the time."""
    assert category in CATEGORIES, category
    total = max(cycles, 0.0)
    s = sum(breakdown_cycles.values()) or 1.0
    bd = {k: total * v / s / cpu.clock for k, v in breakdown_cycles.items()}
    return KernelResult(ENGINE, cpu.name, layer, phase, kernel, float(total), cpu.clock, int(flops),
                        bd, {k: int(b) for k, b in (bytes_ or {}).items()}, details or {},
                        category=category)
