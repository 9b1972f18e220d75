"""Export a zoo workload for other simulators: `prunesim workload export NAME --format scalesim`.

SCALE-Sim v3 (scalesim 3.0.0 on PyPI) ships neither configs nor topologies in its wheel, so this
writes everything its `scalesim.scale` entry point needs into one directory:

``<name>.csv``
    Conv topology (SCALE-Sim's ``-i conv``, the default): one row per conv layer, then the FC
    layers as 1x1 convs on a 1x1 map (SCALE-Sim's own topologies write FC layers that way), unless
    ``convs_only``. Columns: ``Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width,
    Channels, Num Filter, Strides,`` and every line ends in a comma, because SCALE-Sim's reader drops
    the last comma-separated field of every row.

    SCALE-Sim has no padding parameter: it wants the *padded* input. It also computes the output
    size as ceil((H - R + S) / S), while frameworks floor ((H + 2 pad - R) // S + 1). The two disagree
    whenever the stride does not divide H + 2 pad - R (ResNet-50's conv1: 230 padded rows give 113
    output rows in SCALE-Sim, 112 in PyTorch). So the IFMAP height written is the padded height
    trimmed to the rows some kernel window actually reads, (P - 1) * S + R, which is the full padded
    height whenever the stride divides evenly and makes SCALE-Sim's output size, MACs and cycles
    match the layer exactly in every case (width likewise with Q and the kernel width).

    SCALE-Sim batches nothing (batch 1 in conv mode). It has no grouped convolution: a depthwise
    conv (groups == C_in == C_out) becomes one row whose name contains ``DP`` (SCALE-Sim's own
    depthwise convention: it splits the row into C single-channel layers), any other grouped conv
    one row per group (``NAME_g0`` ...). ``DP`` anywhere else in a layer name is written ``Dp`` so
    SCALE-Sim does not mistake the layer for a depthwise one; commas in names become ``_``.

``<name>_gemm.csv``
    GEMM topology (SCALE-Sim's ``-i gemm``): the FWD, AGBP and WGC GEMMs of every layer at the
    requested batch, exactly as prunesim lowers them (``Layer, M, N, K,``, C[M,N] = A[M,K] B[K,N];
    one row per group). This is how SCALE-Sim can simulate the backward pass and a batch > 1.
    The AGBP of a layer reading the network input is never computed and is not written.

``<name>_layout.csv``
    A header-only layout file. scalesim.scale opens a layout file unconditionally (its default path
    is not in the wheel); with the custom layouts off in scale.cfg its rows are never read.

``scale.cfg``
    A 128x128 weight-stationary array with SCALE-Sim's usual 6 MiB ifmap / 6 MiB filter / 2 MiB
    ofmap SRAMs, CALC (ideal-interface) bandwidth, no sparsity, no Ramulator trace.

``README.txt``
    The exact commands that run SCALE-Sim on these files.
"""
from __future__ import annotations

import os
from pathlib import Path

from sim.errors import PrunesimError
from sim.workload import Workload, load_workload, lower

FORMATS = ("scalesim",)

CONV_HEADER = ("Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width",
               "Channels", "Num Filter", "Strides")
GEMM_HEADER = ("Layer", "M", "N", "K")
# scalesim.layout_utils writes this header; the rows are unused while custom layouts are off.
LAYOUT_HEADER = (
    "Layer name", "IFMAP Height Intraline Factor", "IFMAP Width Intraline Factor",
    "Filter Height Intraline Factor", "Filter Width Intraline Factor", "Channel Intraline Factor",
    "Num Filter Intraline Factor", "IFMAP Height Intraline Order", "IFMAP Width Intraline Order",
    "Channel Intraline Order", "IFMAP Height Interline Order", "IFMAP Width Interline Order",
    "Channel Interline Order", "Num Filter Intraline Order", "Channel Intraline Order",
    "Filter Height Intraline Order", "Filter Width Intraline Order", "Num Filter Interline Order",
    "Channel Interline Order", "Filter Height Interline Order", "Filter Width Interline Order")

ARRAY = 128
SRAM_KB = {"ifmap": 6144, "filter": 6144, "ofmap": 2048}


def _row(fields) -> str:
    """One CSV line the way SCALE-Sim reads it: comma-separated, trailing comma."""
    return ",".join(str(f) for f in fields) + ",\n"


def _safe_name(name: str) -> str:
    return name.replace(",", "_").replace("DP", "Dp").replace("\n", "_")


def scalesim_ifmap(layer) -> tuple[int, int]:
    """The padded IFMAP (height, width) to give SCALE-Sim: trimmed to what the kernel reads."""
    return (layer.p - 1) * layer.stride + layer.r, (layer.q - 1) * layer.stride + layer.s


def conv_rows(wl: Workload, convs_only: bool = False) -> list[list]:
    """SCALE-Sim conv-topology rows (without the trailing empty field)."""
    rows = []
    for l in wl.layers:
        if l.op == "fc":
            if not convs_only:
                rows.append([_safe_name(l.name), 1, 1, 1, 1, l.c_in, l.c_out, 1])
            continue
        if l.transposed:
            # a deconv is a conv over its zero-stuffed input: SCALE-Sim would count the stuffed zeros
            raise PrunesimError(wl.origin, l.name, "transposed conv: SCALE-Sim's conv topology has no "
                                "deconv row (it would count the zeros a stride inserts)")
        h, w = scalesim_ifmap(l)
        name = _safe_name(l.name)
        if l.groups == 1:
            rows.append([name, h, w, l.r, l.s, l.c_in, l.c_out, l.stride])
        elif l.groups == l.c_in == l.c_out:
            rows.append([name + "_DP", h, w, l.r, l.s, l.c_in, 1, l.stride])
        else:
            cin, cout = l.c_in // l.groups, l.c_out // l.groups
            rows += [[f"{name}_g{g}", h, w, l.r, l.s, cin, cout, l.stride] for g in range(l.groups)]
    return rows


def gemm_rows(wl: Workload, batch: int, convs_only: bool = False) -> list[list]:
    """SCALE-Sim GEMM-topology rows: FWD, AGBP (when needed) and WGC of every layer at `batch`."""
    rows = []
    for l in wl.layers:
        if convs_only and l.op != "conv":
            continue
        for ph, g in lower(l, batch).items():
            if ph == "agbp" and not l.needs_agbp:
                continue
            base = f"{_safe_name(l.name)}_{ph}"
            names = [base] if g.groups == 1 else [f"{base}_g{i}" for i in range(g.groups)]
            rows += [[n, g.m, g.n, g.k] for n in names]
    return rows


def scale_cfg(run_name: str, array: int = ARRAY) -> str:
    """scale.cfg text with every key scalesim.scale_config.read_conf_file reads (3.0.0)."""
    return f"""\
# SCALE-Sim v3 config written by `prunesim workload export --format scalesim`.
# {array}x{array} weight-stationary systolic array; SRAM sizes in KiB; CALC = ideal interface
# bandwidth (SCALE-Sim estimates what the array needs). No topology here: pass it with -t.
[general]
run_name = {run_name}

[architecture_presets]
ArrayHeight : {array}
ArrayWidth : {array}
IfmapSramSzkB : {SRAM_KB['ifmap']}
FilterSramSzkB : {SRAM_KB['filter']}
OfmapSramSzkB : {SRAM_KB['ofmap']}
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : 10
Dataflow : ws
ReadRequestBuffer : 32
WriteRequestBuffer : 32

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : 10
IfmapSRAMBankNum : 10
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : 10
FilterSRAMBankNum : 10
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : CALC
UseRamulatorTrace : False
"""


def export_scalesim(wl: Workload, out_dir: str | os.PathLike, batch: int = 1, *,
                    convs_only: bool = False, force: bool = False,
                    inputs: tuple = ()) -> dict[str, Path]:
    """Write the SCALE-Sim files for `wl` into `out_dir`; returns {kind: path}.

    A file already there is replaced only when an earlier export wrote it (sim.outputs.OutputDir)
    or with `force`; every name is checked before the first is written."""
    from sim.outputs import OutputDir, OutputError
    if batch < 1:
        raise PrunesimError(None, "--batch", f"must be >= 1, got {batch}")
    try:
        out = OutputDir(out_dir, inputs=inputs, force=force)
    except OutputError as e:
        raise PrunesimError(e.file, "--out", e.message + "; --out must be a directory") from None
    stem = _safe_name(wl.name).replace(".", "_").replace("/", "_")  # SCALE-Sim splits names on '.'
    names = {"topology": f"{stem}.csv", "gemm": f"{stem}_gemm.csv",
             "layout": f"{stem}_layout.csv", "config": "scale.cfg", "readme": "README.txt"}
    paths = {k: out.check(n) for k, n in names.items()}

    def _write(path: Path, text: str) -> None:
        out.write(path.name, lambda tmp: tmp.write_text(text))
    conv = conv_rows(wl, convs_only)
    gemm = gemm_rows(wl, batch, convs_only)
    _write(paths["topology"], _row(CONV_HEADER) + "".join(_row(r) for r in conv))
    _write(paths["gemm"], _row(GEMM_HEADER) + "".join(_row(r) for r in gemm))
    _write(paths["layout"], _row(LAYOUT_HEADER))
    _write(paths["config"], scale_cfg(stem))
    fc = "" if convs_only else " (FC layers as 1x1 convs on a 1x1 map)"
    _write(paths["readme"], f"""\
{wl.name}, exported by prunesim for SCALE-Sim v3 (pip install scalesim==3.0.0; numpy<2.3).

{paths['topology'].name}: {len(conv)} rows, forward pass, batch 1 (SCALE-Sim's conv mode has no batch){fc}.
  IFMAP sizes are padded (trimmed to the rows the kernel reads, so SCALE-Sim's output sizes are exact).
{paths['gemm'].name}: {len(gemm)} rows, FWD/AGBP/WGC GEMMs at batch {batch} (C[M,N] = A[M,K] B[K,N]).
scale.cfg: {ARRAY}x{ARRAY} weight-stationary array, CALC bandwidth.

Run from this directory (scalesim.scale saves full traces to disk; use the Python API with
scalesim(save_disk_space=True, ...) to skip them):

  python -m scalesim.scale -c scale.cfg -t {paths['topology'].name} -l {paths['layout'].name} -p results
  python -m scalesim.scale -c scale.cfg -t {paths['gemm'].name} -l {paths['layout'].name} -i gemm -p results
""")
    return paths


def cmd_workload_export(args) -> int:
    if args.format not in FORMATS:  # argparse's choices already reject this; kept for API callers
        raise PrunesimError(None, "--format", f"unknown format {args.format!r} "
                            f"(known: {', '.join(FORMATS)})")
    wl = load_workload(args.name)
    paths = export_scalesim(wl, args.out, args.batch, convs_only=args.convs_only,
                            force=getattr(args, "force", False),
                            inputs=(args.name,) if Path(args.name).is_file() else ())
    for kind, p in paths.items():
        print(f"{kind:9s} {p}")
    return 0
