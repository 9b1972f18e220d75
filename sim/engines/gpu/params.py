"""The GPU hwconfig parameters: what a `kind: gpu` file may hold, its units, bounds and spec attrs.

sim/hwconfig.py imports this module to validate GPU files, so it imports nothing heavy (no Numba,
no NumPy). Each Field's `attr` is the GpuSpec attribute its SI value is passed to by keyword
(sim/engines/gpu/spec.py); fields without one (the energy table) are read by sim/engines/energy.py.
"""
from __future__ import annotations

from sim.hwconfig import Field

HW_FIELDS: dict[str, Field] = {
    "sm_count": Field("count", "streaming multiprocessors", minimum=1, attr="sm"),
    "clock": Field("frequency", "clock at which the tensor cores reach peak math (boost)",
                   minimum=1e6, attr="clock"),
    "cuda_core_clock": Field("frequency", "clock for CUDA-core FP32 peak, if it differs from clock",
                             required=False, minimum=1e6, attr="cuda_clock"),
    "tc_fma_per_clk_fp16": Field("ops_per_cycle", "dense FP16 tensor-core FMA per clock per SM "
                                 "(absent: no tensor cores; every GEMM runs on the CUDA cores)",
                                 required=False, minimum=1, attr="tc_fp16"),
    "tc_fma_per_clk_bf16": Field("ops_per_cycle", "dense BF16 tensor-core FMA per clock per SM "
                                 "(absent: no BF16 tensor cores)", required=False, minimum=1,
                                 attr="tc_bf16"),
    "tc_fma_per_clk_tf32": Field("ops_per_cycle", "dense TF32 tensor-core FMA per clock per SM "
                                 "(absent: no TF32 tensor cores)", required=False, minimum=1,
                                 attr="tc_tf32"),
    "cuda_fma_per_clk_fp32": Field("ops_per_cycle", "FP32 CUDA-core FMA per clock per SM", minimum=1,
                                   attr="cuda_rate"),
    "sparse_patterns": Field("list", "n:m patterns the sparse tensor cores run for FP16/BF16, "
                             "e.g. [\"2:4\"]; empty: none", attr="sparse"),
    "sparse_patterns_tf32": Field("list", "n:m patterns for TF32 (A100/H100: 1:2)", required=False,
                                  attr="sparse_tf32", default=()),
    "sparse_rate": Field("text", "speed of a supported n:m MMA: 'm/n' = m/n times the dense rate "
                         "(dense-equivalent), 'dense' = dense rate, only traffic shrinks",
                         choices=("m/n", "dense"), attr="sparse_rate"),
    "hbm_bandwidth": Field("bandwidth", "peak DRAM bandwidth", minimum=1e6, attr="hbm_bandwidth"),
    # a time, as on every engine (the spec converts it to cycles of `clock`)
    "dram_latency": Field("time", "global-memory load latency (L2 miss)", minimum=0,
                          attr="dram_latency"),
    "l2_size": Field("size", "L2 cache capacity", minimum=1, attr="l2_size"),
    "l2_bandwidth": Field("bytes_per_cycle", "L2 -> SM read bandwidth, whole GPU", minimum=1,
                          attr="l2_bpc"),
    # per-instruction latencies are genuinely cycle counts of the SM clock: kept in cycles
    "l2_latency": Field("cycles", "L2 hit latency", minimum=0, attr="l2_lat"),
    "smem_per_sm": Field("size", "largest shared-memory carve-out per SM", minimum=1024,
                         attr="smem"),
    "smem_bandwidth": Field("bytes_per_cycle", "shared-memory bandwidth per SM", minimum=1,
                            attr="smem_bpc"),
    "registers_per_sm": Field("count", "32-bit registers per SM", minimum=1024, attr="regs"),
    "max_registers_per_thread": Field("count", "registers one thread may use", minimum=16,
                                      attr="max_regs"),
    "max_threads_per_sm": Field("count", "resident threads per SM", minimum=32, attr="max_threads"),
    "max_blocks_per_sm": Field("count", "resident thread blocks per SM", minimum=1,
                               attr="max_blocks"),
    "max_pipeline_stages": Field("count", "shared-memory stages a GEMM main loop can keep in "
                                 "flight (2 without asynchronous copies)", minimum=2,
                                 attr="max_stages"),
    "mma_latency": Field("cycles", "latency of one tensor-core MMA instruction (of one FFMA on a "
                         "GPU without tensor cores)", minimum=0, attr="mma_lat"),
    "smem_latency": Field("cycles", "shared-memory load / warp-shuffle latency (used by the patch "
                          "engine's reductions)", required=False, minimum=0, attr="smem_lat"),
    "launch_overhead": Field("time", "gap a dependent kernel launch adds on the GPU timeline",
                             minimum=0, attr="launch_overhead"),
    # ---- what makes real kernels slower than the ideal machine (all optional; absent:
    # the ideal machine of the older model, so GPUs without measurements stay as they were)
    "sustained_clock": Field("frequency", "tensor-core clock sustained under the board power "
                             "limit at full tensor-core load; a GEMM whose tensor cores are busy a "
                             "fraction u of its time runs at min(clock, sustained_clock u^-1/3) "
                             "(absent: clock, no power limit)", required=False, minimum=1e6,
                             attr="sustained_clock"),
    "block_prologue": Field("cycles", "per thread block, before its first k-tile load is issued: "
                            "parameter loads, address and predicate setup (the pipeline fill that "
                            "follows is simulated)", required=False, minimum=0, default=0.0,
                            attr="prologue"),
    "epilogue_latency": Field("cycles", "per output tile, fixed latency of the epilogue: "
                              "accumulator conversion and the shared-memory round trip before the "
                              "C stores (the staging and store bandwidth is modeled on top)",
                              required=False, minimum=0, default=0.0, attr="epi_lat"),
    "sparse_meta_load": Field("size", "shared-memory bytes a warp loads for the metadata of one "
                              "sparse MMA (16 rows of A, one k-step), in place of the index bits "
                              "(absent: the metadata bits only)", required=False, minimum=0,
                              attr="meta_load"),
    "smem_bandwidth_sustained": Field("bytes_per_cycle", "shared-memory bandwidth per SM that an "
                                      "mma.sync GEMM mainloop sustains (ldmatrix fragment loads, "
                                      "cp.async fills and sparse metadata sharing the pipe); "
                                      "wgmma and CUDA-core kernels keep smem_bandwidth (absent: "
                                      "smem_bandwidth)", required=False, minimum=1,
                                      attr="smem_sus"),
    "mma_path": Field("text", "instruction path of the GEMM library: 'mma.sync' (Ampere-style, "
                      "warp fragments from shared memory), 'wgmma' (Hopper: warpgroup MMA reads "
                      "its operands from shared memory once per warpgroup, dense and 2:4), "
                      "'mma.sp-ampere' (wgmma dense, but 2:4 through an Ampere mma.sp kernel "
                      "recompiled for Hopper)", required=False,
                      choices=("mma.sync", "wgmma", "mma.sp-ampere"), default="mma.sync",
                      attr="mma_path"),
    "mma_sync_fraction": Field("fraction", "share of the tensor-core rate the Ampere mma.sync / "
                               "mma.sp instructions reach on a GPU whose native path is wgmma",
                               required=False, minimum=0.01, maximum=1.0, default=1.0,
                               attr="sync_frac"),
    # optional per-op energy table (sim/engines/energy.py); absent: energy reads n/a
    **{f"energy_fma_tc_{d}": Field("energy_per_op", f"energy of one {d.upper()} tensor-core FMA",
                                   required=False, minimum=0) for d in ("fp16", "bf16", "tf32")},
    "energy_fma_cuda_fp32": Field("energy_per_op", "energy of one FP32 CUDA-core FMA",
                                  required=False, minimum=0),
    **{f"energy_{lv}": Field("energy_per_byte", f"energy of one byte moved at {lv}",
                             required=False, minimum=0) for lv in ("dram", "l2", "smem")},
}
