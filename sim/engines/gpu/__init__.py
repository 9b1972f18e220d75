"""The GPU engine family: tensor-core GEMM pipeline, streaming kernels and Wang's patch kernels.

One package behind the Engine interface (sim/engines/base.py): `params` declares the hwconfig
fields (imported by sim/hwconfig.py, so it stays free of Numba), `spec` turns a hwconfig into the
model's units, `gemm`, `stream` and `patch` are the kernel models, `kernels` / `patch_kernels`
their Numba cores, and `engine.GpuEngine` routes a PhaseJob to them.
"""
