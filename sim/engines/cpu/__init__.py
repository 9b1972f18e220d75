"""The CPU engine family: Caffe's dense backward pass and Ye et al.'s CSR sparse path on x86 and ARM.

Modules (imported where used; this package imports nothing so `params` stays light):
params (the hwconfig fields), spec (the `Cpu` view of a hwconfig), passes (element-wise streaming
passes), gemm (the BLAS model), spmm (the cycle-level CSR x dense product), cache and reuse (the
exact LRU and reuse-profile cache models), engine (`CpuEngine`), calibrate (`prunesim calibrate`).
"""
