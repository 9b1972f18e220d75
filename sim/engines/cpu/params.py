"""The CPU hwconfig's parameters: what a `kind: cpu` file may hold, declared once.

Imported by sim.hwconfig to validate CPU configs, so it imports nothing heavy (no NumPy, no Numba).
Each field's `attr` is the attribute of sim.engines.cpu.spec.Cpu its SI value is passed to.
"""
from __future__ import annotations

from sim.hwconfig import Field

HW_FIELDS: dict[str, Field] = {
    "isa": Field("text", "instruction set family: x86 broadcasts A from memory, arm multiplies by "
                 "vector lane", choices=("x86", "arm"), attr="isa"),
    "cores": Field("count", "cores per socket", minimum=1, attr="cores"),
    "clock": Field("frequency", "core clock the kernels run at", minimum=1e6, attr="clock"),
    "simd_width": Field("count", "fp32 lanes per SIMD register", minimum=1, attr="simd"),
    "vector_registers": Field("count", "architectural SIMD registers", minimum=4, attr="vregs"),
    "fma_units": Field("count", "SIMD FMA pipes per core", minimum=1, attr="fma_units"),
    "fma_latency": Field("cycles", "FMA latency", minimum=1, attr="fma_lat"),
    "issue_width": Field("count", "uops issued per cycle", minimum=1, attr="issue"),
    "load_ports": Field("count", "SIMD loads per cycle", minimum=1, attr="ld_ports"),
    "store_ports": Field("count", "SIMD stores per cycle", minimum=1, attr="st_ports"),
    "branch_mispredict_penalty": Field("cycles", "cycles lost per mispredicted branch", minimum=0,
                                       attr="mispredict"),
    "line_size": Field("size", "cache line", minimum=16, attr="line_size"),
    "l1_size": Field("size", "L1 data cache per core", minimum=1024, attr="l1_size"),
    "l1_ways": Field("count", "L1 associativity", minimum=1, attr="l1_ways"),
    "l1_latency": Field("cycles", "L1 load-to-use latency", minimum=1, attr="l1_latency"),
    "l1_bandwidth": Field("bytes_per_cycle", "L1 load bandwidth per core", minimum=1,
                          attr="l1_bandwidth"),
    "l2_size": Field("size", "L2 size (per L2 instance)", minimum=1024, attr="l2_size"),
    "l2_ways": Field("count", "L2 associativity", minimum=1, attr="l2_ways"),
    "l2_latency": Field("cycles", "L2 hit latency", minimum=1, attr="l2_latency"),
    "l2_bandwidth": Field("bytes_per_cycle", "L2 to L1 bandwidth per core", minimum=0.1,
                          attr="l2_bandwidth"),
    "l2_shared_by": Field("count", "cores sharing one L2 (1: private)", minimum=1,
                          attr="l2_shared_by"),
    "l3_size": Field("size", "last-level cache (0 B: none)", minimum=0, attr="l3_size"),
    "l3_ways": Field("count", "L3 associativity", minimum=1, attr="l3_ways"),
    "l3_latency": Field("cycles", "L3 hit latency", minimum=1, attr="l3_latency"),
    "l3_bandwidth": Field("bytes_per_cycle", "L3 to L2 bandwidth per core", minimum=0.1,
                          attr="l3_bandwidth"),
    "prefetch_streams": Field("count", "streams the L2 prefetcher tracks per core", minimum=0,
                              attr="pf_streams"),
    "prefetch_distance": Field("count", "lines the prefetcher runs ahead of a stream", minimum=0,
                               attr="pf_dist"),
    "prefetch_degree": Field("count", "prefetches issued per stream access", minimum=0,
                             attr="pf_degree"),
    "dram_bandwidth": Field("bandwidth", "peak DRAM bandwidth of the socket", minimum=1e6,
                            attr="dram_bandwidth"),
    "dram_latency": Field("time", "DRAM load latency", minimum=1e-9, attr="dram_latency"),
    "mlp": Field("count", "outstanding L1 misses per core (fill buffers)", minimum=1, attr="mlp"),
    "gemm_mr": Field("count", "BLAS micro-kernel rows (broadcast operand)", minimum=1, attr="mr"),
    "gemm_nr": Field("count", "BLAS micro-kernel columns (vector operand)", minimum=1, attr="nr"),
    "gemm_mc": Field("count", "BLAS L2 block rows", minimum=1, attr="mc"),
    "gemm_kc": Field("count", "BLAS depth block", minimum=1, attr="kc"),
    "gemm_nc": Field("count", "BLAS L3 block columns", minimum=1, attr="nc"),
    "gemm_library_efficiency": Field("fraction", "measured fraction of the modeled GEMM speed the "
                                     "BLAS reaches (1: model alone)", minimum=0.01, maximum=1.5,
                                     attr="gemm_eff"),
    "spmm_style": Field("text", "CSR x dense inner loop: register (MKL: C row chunk in registers) "
                        "or axpy (Eigen, SciPy: C row streamed per nonzero)",
                        choices=("register", "axpy"), attr="spmm_style"),
    "spmm_simd_width": Field("count", "fp32 lanes the CSR x dense kernel vectorizes over", minimum=1,
                             attr="spmm_simd"),
    "spmm_library_efficiency": Field("fraction", "measured fraction of the modeled SpMM speed the "
                                     "library reaches (1: model alone)", minimum=0.01, maximum=1.5,
                                     attr="spmm_eff"),
}
