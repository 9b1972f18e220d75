"""Element-wise streaming passes of the CPU family: im2col, col2im, transposes, CSR construction.

Scalar loops: per element loads, stores and uops bound by the ports and the issue width,
data-dependent branches pay the misprediction penalty, and the bytes cost the bandwidth of the
level they live in. Each returns (cycles, breakdown in cycles, bytes per level); the engine wraps
them in KernelResults. They time the non-GEMM data movement around a layer's GEMM, and the
method's own passes (sim.engines.cpu.engine).
"""
from __future__ import annotations

from sim.engines.cpu.spec import F32, Cpu


def stream_pass(cpu: Cpu, elems: float, *, loads: float, stores: float, uops: float,
                read_footprint: float, read_bytes: float, write_footprint: float, write_bytes: float,
                mispredicts: float = 0.0) -> tuple[float, dict[str, float], dict[str, int]]:
    """A scalar loop over `elems` elements: per-element loads/stores/uops, plus the bytes moved.

    The core bound (ports, issue) and the memory bound (bytes over the bandwidth of the level the
    data lives in) overlap; branch mispredictions do not (they flush the pipeline).
    """
    core = elems * max(loads / cpu.ld_ports, stores / cpu.st_ports, uops / cpu.issue)
    rl, rbw = cpu.level_of(read_footprint)
    wl, wbw = cpu.level_of(write_footprint)
    mem = read_bytes / rbw + write_bytes / wbw
    flush = mispredicts * cpu.mispredict
    by: dict[str, int] = {}
    by[rl] = by.get(rl, 0) + int(read_bytes)
    by[wl] = by.get(wl, 0) + int(write_bytes)
    if core >= mem:
        bd = {"core": core, "branch-mispredict": flush}
    else:
        bd = {"memory-" + (rl if read_bytes >= write_bytes else wl): mem, "branch-mispredict": flush}
    return core if core >= mem else mem, bd, by


def im2col_pass(cpu: Cpu, src_elems: int, col_elems: int) -> tuple[float, dict, dict]:
    # Caffe's im2col: per output element an index update, a padding test, a load and a store
    return _fin(stream_pass(cpu, col_elems, loads=1, stores=1, uops=5, read_footprint=src_elems * F32,
                            read_bytes=src_elems * F32, write_footprint=col_elems * F32,
                            write_bytes=col_elems * F32))


def col2im_pass(cpu: Cpu, col_elems: int, dst_elems: int) -> tuple[float, dict, dict]:
    # col2im accumulates: load col, load dst, add, store dst, plus index and padding work
    return _fin(stream_pass(cpu, col_elems, loads=2, stores=1, uops=7, read_footprint=col_elems * F32,
                            read_bytes=col_elems * F32, write_footprint=dst_elems * F32,
                            write_bytes=2 * dst_elems * F32))


def transpose_pass(cpu: Cpu, elems: int) -> tuple[float, dict, dict]:
    return _fin(stream_pass(cpu, elems, loads=1, stores=1, uops=4, read_footprint=elems * F32,
                            read_bytes=elems * F32, write_footprint=elems * F32,
                            write_bytes=elems * F32))


def csr_build_pass(cpu: Cpu, rows: int, cols: int, nnz: int) -> tuple[float, dict, dict]:
    """Dense -> CSR in two passes (count, then fill), as MKL's dnscsr and Eigen's sparseView do.

    The count pass is branch-free; the fill pass branches on every element, and a branch taken with
    probability d is mispredicted about min(d, 1 - d) of the time by a bimodal predictor.
    """
    elems = rows * cols
    d = nnz / elems if elems else 0.0
    cyc, bd, by = stream_pass(cpu, elems, loads=2, stores=2 * d, uops=6 + 3 * d,
                              read_footprint=elems * F32, read_bytes=2 * elems * F32,
                              write_footprint=nnz * 8, write_bytes=nnz * 8 + (rows + 1) * 4,
                              mispredicts=elems * min(d, 1.0 - d))
    return _fin((cyc, bd, by))


def _fin(res):
    cyc, bd, by = res
    return cyc + bd.get("branch-mispredict", 0.0), bd, by


def method_pass(cpu: Cpu, work) -> tuple[float, dict, dict]:
    """A pruning method's own passes (DBTD's |g| sum and pruning, SDGP's selection, ...) from its
    WorkAccount, as one element-wise streaming loop over the elements it reads and writes."""
    w = work
    elems = max(w.elems_read, w.elems_written, 1)
    tensor_bytes = F32 * elems / max(1, w.passes)
    # a counter-based random draw is ~8 integer ops (two multiplies, shifts, xors, a convert)
    uops = (w.compares + w.flops + 8 * w.random_draws) / elems + 2.0
    cyc, bd, by = stream_pass(cpu, elems, loads=w.elems_read / elems, stores=w.elems_written / elems,
                              uops=uops, read_footprint=tensor_bytes, read_bytes=F32 * w.elems_read,
                              write_footprint=tensor_bytes,
                              write_bytes=F32 * w.elems_written + w.bytes_metadata)
    return cyc, {"method_overhead": sum(bd.values())}, by
