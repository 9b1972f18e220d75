"""The `prunesim` command: parses arguments and dispatches to the module that does the work.

Handlers are imported lazily so `prunesim --help` and commands without PyTorch never import it.
Bad input surfaces as one line `prunesim: error: FILE: FIELD: message` and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from sim import __version__
from sim.errors import PrunesimError


# `validate --only` row groups; analysis.validation.GROUPS holds them (sim/ does not import
# analysis/: tests/test_validation.py keeps the two equal)
VALIDATION_GROUPS = ("hw3", "d", "d-step", "b", "c", "a", "d-accuracy", "t", "s")

def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _ranged(name: str):
    """argparse type: an integer inside sim.limits.RANGES[name] (the one table of physical ranges)."""
    def parse(text: str) -> int:
        from sim.limits import LimitError, check_range
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        try:
            return check_range(name, v)
        except LimitError as e:
            raise argparse.ArgumentTypeError(e.message) from None
    parse.__name__ = name  # argparse names the type in its messages
    return parse


def _accuracy(text: str) -> float:
    """argparse type: an accuracy target, a fraction in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < v <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"an accuracy target is a fraction in (0, 1], got {text}")
    return v


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (`prunesim CMD: error: argument --x: ...`), exit status 2, like
    every other bad input; --help still shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _handler(parser: argparse.ArgumentParser, target: str) -> None:
    parser.set_defaults(_handler=target)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="prunesim",
        description="Simulate CNN training with pruned or approximated gradients: replay captured "
                    "activation-gradient traces on modeled hardware.")
    ap.add_argument("--version", action="version", version=f"prunesim {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_workload_commands(sub)
    _add_trace_commands(sub)
    _add_capture_command(sub)
    _add_prune_command(sub)
    _add_engine_commands(sub)
    _add_train_command(sub)
    _add_replay_command(sub)
    _add_result_commands(sub)
    return ap


def _add_workload_commands(sub) -> None:
    """`prunesim workload list|show|export`."""
    wl = sub.add_parser("workload", help="list the workload zoo, show a network's layers and GEMMs")
    wls = wl.add_subparsers(dest="workload_command", metavar="SUBCOMMAND", required=True)
    p = wls.add_parser("list", help="list workloads on the search path")
    _handler(p, "sim.cli:cmd_workload_list")
    p = wls.add_parser("show", help="layer table, lowered GEMM shapes and totals")
    p.add_argument("name", help="zoo name (e.g. resnet50-imagenet) or path to a workload YAML")
    p.add_argument("--batch", type=_ranged("batch"), default=1, help="batch size (default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.cli:cmd_workload_show")
    p = wls.add_parser("export", help="write a workload for another simulator (SCALE-Sim v3: "
                                      "topology CSVs and a 128x128 scale.cfg)")
    p.add_argument("name", help="zoo name (e.g. resnet50-imagenet) or path to a workload YAML")
    p.add_argument("--format", choices=["scalesim"], required=True, help="target simulator")
    p.add_argument("--out", required=True, help="directory to write (created if missing)")
    p.add_argument("--batch", type=_ranged("batch"), default=1,
                   help="batch of the FWD/AGBP/WGC GEMM topology (default 1; SCALE-Sim's conv "
                        "topology is always batch 1)")
    p.add_argument("--convs-only", action="store_true", help="leave out the FC layers")
    p.add_argument("--force", action="store_true",
                   help="replace files in --out that an earlier export did not write")
    _handler(p, "sim.workload_export:cmd_workload_export")


def _add_trace_commands(sub) -> None:
    """`prunesim trace info|check|fit|synth`."""
    tr = sub.add_parser("trace", help="inspect, check, fit and synthesize gradient traces")
    trs = tr.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    p = trs.add_parser("info", help="per-layer shape, density and |g| statistics")
    p.add_argument("trace", help="trace directory")
    p.add_argument("--iteration", type=int, default=None, help="only this captured iteration")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.traces.inspect:cmd_info")
    p = trs.add_parser("check", help="verify checksums, shapes against the workload, dtypes, "
                                     "finiteness")
    p.add_argument("trace", help="trace directory")
    p.add_argument("--workload", default=None,
                   help="also check shapes against this workload (name or YAML)")
    _handler(p, "sim.traces.inspect:cmd_check")
    p = trs.add_parser("fit", help="fit per-layer gradient statistics to captured traces")
    p.add_argument("trace", nargs="+", help="trace directories (several: their layers are pooled)")
    p.add_argument("--out", default=None, help="statistics YAML to write")
    p.add_argument("--force", action="store_true", help="replace an existing statistics file")
    p.add_argument("--check", action="store_true",
                   help="leave-one-network-out check: fit without each network, synthesize it, "
                        "compare DBTD densities, SDGP kept-L1 and approx argmax spread with its "
                        "capture (prints the table; --out is then optional)")
    _handler(p, "sim.traces.loo:cmd_fit")
    p = trs.add_parser("synth", help="write a full-size synthetic trace of any zoo workload")
    p.add_argument("--workload", required=True, help="zoo name or workload YAML")
    p.add_argument("--batch", type=_ranged("batch"), required=True)
    p.add_argument("--out", required=True, help="trace directory to create")
    p.add_argument("--stats", default=None,
                   help="fitted statistics YAML (default: the ones shipped with prunesim)")
    p.add_argument("--iterations", type=_ranged("iterations"), default=1)
    p.add_argument("--seed", type=_ranged("seed"), default=0)
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--subsample", type=_ranged("batch"), default=None,
                   help="record only the first S samples of each batch (the scale follows --batch)")
    p.add_argument("--progress", type=float, default=None, metavar="F",
                   help="training progress in [0, 1] (fraction of the schedule) the gradients stand "
                        "for (default: averaged over the whole run)")
    p.add_argument("--force", action="store_true", help="replace an existing trace directory")
    p.add_argument("--yes-large", action="store_true",
                   help="run work above a budget of sim/limits.py (docs/reference/limits.md)")
    _handler(p, "sim.traces.synth:cmd_synth")


def _add_capture_command(sub) -> None:
    """`prunesim capture`: train on CPU and record a trace."""
    p = sub.add_parser("capture", help="train a zoo network on real data (CPU) and record a trace")
    p.add_argument("--workload", required=True, help="zoo name or workload YAML")
    p.add_argument("--dataset", required=True,
                   help="offline real dataset: digits, mnist5k, fashion or cifar10 (the last "
                        "two fetched once by tools/fetch_*.py; see docs/how-to/capture.md)")
    p.add_argument("--epochs", type=_ranged("epochs"), required=True)
    p.add_argument("--out", required=True, help="trace directory to create")
    p.add_argument("--batch", type=_ranged("batch"), default=32)
    p.add_argument("--every", type=_positive_int, default=50,
                   help="record tensors every K iterations (default 50)")
    p.add_argument("--record-every", type=float, default=None, metavar="F",
                   help="instead of --every: record at fractions 0, F, 2F, ... 1 of the whole "
                        "schedule (e.g. 0.1)")
    p.add_argument("--train-samples", type=_ranged("train_samples"), default=None, metavar="N",
                   help="train on the first N samples of the training split")
    p.add_argument("--subsample", type=_ranged("batch"), default=None,
                   help="keep only the first S samples of each recorded batch")
    p.add_argument("--tensors", default="dO", help="comma list from dO,I,W,dI (dO always)")
    p.add_argument("--fp16", action="store_true", help="store tensors as float16")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=_ranged("seed"), default=0)
    p.add_argument("--max-iterations", type=_positive_int, default=None,
                   help="stop each epoch after this many iterations (quick runs)")
    p.add_argument("--threads", type=_ranged("threads"), default=2,
                   help="CPU threads for PyTorch (default 2; results are deterministic per count)")
    p.add_argument("--method", default=None, metavar="SPEC",
                   help="train with a gradient method, e.g. dbtd:p=0.9, sdgp-resmag:nm=2:4, "
                        "approx:schedule=1, prunetrain:rho=0.2,interval=2 (docs/reference/methods.md)")
    p.add_argument("--force", action="store_true", help="replace an existing trace directory")
    _handler(p, "sim.capture.trainer:cmd_capture")


def _add_prune_command(sub) -> None:
    """`prunesim prune`: one method on one tensor."""
    p = sub.add_parser("prune", help="apply a pruning method to one tensor (.npy) and report its work")
    p.add_argument("input", help="input tensor (.npy, float, 4-D or 2-D)")
    p.add_argument("output", help="pruned tensor to write (.npy)")
    p.add_argument("--method", required=True,
                   help="method id with optional parameters, e.g. dbtd or sdgp-mag:nm=2:8")
    p.add_argument("--layout", choices=("nchw", "nhwc"), default="nchw")
    p.add_argument("--p", default=None, help="dbtd pruning rate (default 0.99)")
    p.add_argument("--sigma", default=None, help="dbtd sigma estimator: paper|unbiased|meanabs")
    p.add_argument("--nm", default=None, help="sdgp n:m pattern (default 2:4)")
    p.add_argument("--rescale", default=None, help="sdgp-resmag: sample-channel|channel")
    p.add_argument("--keep", default=None, help="topk: fraction kept (default 0.01)")
    p.add_argument("--k", default=None, help="approx-topk: values kept per (sample, channel)")
    p.add_argument("--seed", type=_ranged("seed"), default=0)
    p.add_argument("--keep-dtype", action="store_true", help="write the input's dtype, not float32")
    p.add_argument("--force", action="store_true", help="replace an existing OUTPUT file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.methods.tensor_cli:cmd_prune")


def _add_engine_commands(sub) -> None:
    """`prunesim gemm`, `layer`, `calibrate` and `compile`: the engines directly."""
    p = sub.add_parser("compile", help="compile the simulator's Numba kernels into the on-disk "
                                       "cache ahead of a first run (make install does it)")
    _handler(p, "sim.jit:cmd_compile")
    p = sub.add_parser("gemm", help="predict one GEMM (dense or sparse) on a hardware config")
    p.add_argument("--hw", required=True, help="hwconfig YAML or bundled name")
    p.add_argument("--m", type=_ranged("gemm_dim"), required=True)
    p.add_argument("--n", type=_ranged("gemm_dim"), required=True)
    p.add_argument("--k", type=_ranged("gemm_dim"), required=True)
    p.add_argument("--sparse", default=None, metavar="N:M",
                   help="GPU: N:M structured sparsity of the A operand (e.g. 2:4)")
    p.add_argument("--density", type=float, default=None,
                   help="CPU: CSR density of the A operand (M x K); omit for dense")
    p.add_argument("--cache", dest="cache_model", choices=("exact", "profile"), default=None,
                   help="CPU cache misses: exact LRU simulation (default) or reuse-distance profile")
    p.add_argument("--threads", type=_ranged("threads"), default=1, help="CPU threads")
    p.add_argument("--dtype", default="fp16", help="fp16|bf16|tf32|fp32 (GPU), fp32|fp64 (CPU)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.engines.cli:cmd_gemm")
    p = sub.add_parser("layer", help="simulate layers of a workload, per phase, with a method")
    p.add_argument("--hw", required=True, help="hwconfig YAML or bundled name")
    p.add_argument("--workload", default=None, help="zoo name or workload YAML")
    p.add_argument("--conv", default=None, metavar="N,C_in,C_out,H,W,R,S,stride,pad",
                   help="a one-off conv layer instead of a workload")
    p.add_argument("--layer", default="all", help="layer index or name, or all")
    p.add_argument("--phase", default="all", choices=("fwd", "agbp", "wgc", "all"))
    p.add_argument("--batch", type=_ranged("batch"), default=None)
    p.add_argument("--method", action="append", default=[], help="method spec (repeatable)")
    p.add_argument("--dtype", default=None, help="data type (default: the engine's)")
    p.add_argument("--threads", type=_ranged("threads"), default=1, help="CPU threads")
    p.add_argument("--seed", type=_ranged("seed"), default=0)
    p.add_argument("--trace", default=None,
                   help="CPU: take dO from this trace's first iteration (default: synthetic dO)")
    p.add_argument("--cache", dest="cache_model", choices=("exact", "profile"), default=None,
                   help="CPU cache misses: exact LRU simulation (default) or reuse-distance profile")
    p.add_argument("--samples", type=_ranged("samples"), default=None,
                   help="CPU: synthetic dO samples standing for the batch (default 2)")
    p.add_argument("--yes-large", action="store_true",
                   help="run work above a budget of sim/limits.py (docs/reference/limits.md)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.engines.cli:cmd_layer")

    p = sub.add_parser("calibrate", help="measure this machine and write a CPU hwconfig (--gpu: "
                       "its NVIDIA GPU, or a recorded measurement file, into a GPU hwconfig)")
    p.add_argument("--out", default=None,
                   help="hwconfig YAML to write (default hwconfigs/host.yaml; an existing file is "
                        "replaced only if calibrate wrote it, else with --force)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out that calibrate did not write")
    p.add_argument("--check", action="store_true",
                   help="measure real dense GEMM and CSR SpMM on held-out layer shapes and compare "
                        "with the engine's prediction on --hw")
    p.add_argument("--hw", default=None, help="hwconfig to check (with --check; CPU default "
                   "hwconfigs/host.yaml); --gpu without --check: the bundled base config")
    p.add_argument("--gpu", action="store_true", help="calibrate the GPU model (PyTorch CUDA)")
    p.add_argument("--from-measurements", default=None, metavar="FILE",
                   help="--gpu: fit a recorded measurement file (no GPU needed)")
    p.add_argument("--measurements-out", default=None, metavar="FILE",
                   help="--gpu: where the measurements go (default out/gpu-measurements-GPU.json)")
    p.add_argument("--quick", action="store_true", help="fewer, shorter measurements")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.engines.gpu.calibrate:cmd_calibrate")


def _add_train_command(sub) -> None:
    """`prunesim train`: the whole-training estimate."""
    p = sub.add_parser("train", help="whole-training estimate: iterations, all-reduce, epochs, TTA")
    p.add_argument("--workload", required=True,
                   help="zoo name, workload YAML, or a trace directory (its provenance gives the "
                        "dataset, training-set size, epochs and batch)")
    p.add_argument("--cluster", required=True, help="cluster YAML or bundled name")
    p.add_argument("--hw", default=None, help="device hwconfig (default: the cluster's)")
    p.add_argument("--gpus", type=_ranged("devices"), default=None,
                   help="use this many devices (the outermost dimension grows or shrinks; a count "
                        "that does not fit the cluster's dimensions is one error line)")
    p.add_argument("--method", default="dense", help="method spec")
    p.add_argument("--trajectory", default=None,
                   help="PruneTrain channels: a trajectory file, 'model' (default: the lasso-dose "
                        "model fitted to real runs) or 'model:keep=K,residual_keep=R,tau_frac=T'")
    p.add_argument("--batch", type=_ranged("batch"), default=None, help="per-device mini-batch")
    p.add_argument("--epochs", type=_ranged("epochs"), default=None)
    p.add_argument("--train-samples", type=_ranged("train_samples"), default=None,
                   help="training-set size (default: the trace's provenance, else the dataset's)")
    p.add_argument("--batch-steps", default=None, metavar="EPOCH:BATCH,...",
                   help="a given per-device batch schedule for the method's run, e.g. "
                        "10:96,30:128 (a published one; --batch before the first step); with "
                        "prunetrain it replaces the dynamic mini-batch's rule")
    p.add_argument("--batch-rule", choices=("device", "relative", "compute"), default=None,
                   help="prunetrain: the dynamic mini-batch's capacity rule: device (default; "
                        "the memory model within the device memory), relative (within the dense "
                        "footprint at --batch) or compute (the iteration's MACs within the "
                        "dense iteration's at --batch; docs/explanation/system.md)")
    p.add_argument("--max-global-batch", type=_ranged("global_batch"), default=None,
                   help="prunetrain: cap of the dynamic mini-batch's global batch (default 8192; "
                        "larger caps warn)")
    p.add_argument("--accuracy", default=None,
                   help="accuracy curves (training log CSV or trace dir) for time-to-accuracy")
    p.add_argument("--target", type=_accuracy, default=None, help="target validation accuracy")
    p.add_argument("--roofline", action="store_true",
                   help="time layers with the roofline model of the cluster's device (peak_math, "
                        "mem_bandwidth) instead of the cycle-level engine; without it a device "
                        "hwconfig that does not load is an error")
    p.add_argument("--framework", default=None, metavar="NAME|PATH",
                   help="framework profile: the step's non-GEMM kernels, optimizer and overhead "
                        "(hwconfigs/frameworks/; default pytorch-eager; gemm-only: GEMMs alone)")
    p.add_argument("--yes-large", action="store_true",
                   help="run work above a budget of sim/limits.py (docs/reference/limits.md)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.system.cli:cmd_train")


def _add_replay_command(sub) -> None:
    """`prunesim replay`: the main job."""
    p = sub.add_parser("replay", help="replay a trace on hardware models (the main job)")
    p.add_argument("trace", help="trace directory")
    p.add_argument("--hw", action="append", default=[], metavar="HW.yaml",
                   help="hardware config (repeatable)")
    p.add_argument("--iteration", type=int, default=None, help="only this captured iteration")
    p.add_argument("--method", action="append", default=[], metavar="SPEC",
                   help="method spec, repeatable (default: dense, dbtd:p=0.99, sdgp-mag:nm=2:4, "
                        "approx:schedule=1)")
    p.add_argument("--seed", type=_ranged("seed"), default=0, help="seed of the methods' random streams")
    p.add_argument("--cluster", default=None, help="cluster YAML: add the training-level estimate")
    p.add_argument("--gpus", type=_ranged("devices"), default=None,
                   help="with --cluster: devices (default 16, or the cluster's size if smaller)")
    p.add_argument("--epochs", type=_ranged("epochs"), default=None,
                   help="with --cluster, and prunetrain's model trajectory: training epochs "
                        "(default: the trace's own, from its provenance)")
    p.add_argument("--train-samples", type=_ranged("train_samples"), default=None,
                   help="with --cluster, and prunetrain's model trajectory: training-set size "
                        "(default: the trace's provenance, else the dataset's)")
    p.add_argument("--trajectory", default=None, metavar="FILE|model",
                   help="prunetrain methods: channel trajectory file (default: the lasso-dose "
                        "model on the trace's training; --epochs/--train-samples change it)")
    p.add_argument("--layers", action="store_true", help="per-layer timing table too")
    p.add_argument("--cache", dest="cache_model", choices=("exact", "profile"), default=None,
                   help="CPU cache misses: exact LRU simulation (default) or reuse-distance profile")
    p.add_argument("--energy", action="store_true", help="energy per step table too (hwconfig "
                   "energy table x FMAs and bytes; 'n/a (no energy table)' where it has none)")
    p.add_argument("--framework", default=None, metavar="NAME|PATH", help=FRAMEWORK_HELP)
    p.add_argument("--db", default=None, help="result store (SQLite) to append the results to")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _handler(p, "sim.replay:cmd_replay")


FRAMEWORK_HELP = ("framework profile of the whole step (hwconfigs/frameworks: pytorch-eager, "
                  "tensorflow-1, caffe, gemm-only, or a profile YAML): the non-GEMM kernels it "
                  "runs and fuses, its launch overhead and optimizer; default: pytorch-eager on "
                  "GPUs, caffe on CPUs; gemm-only times the GEMM phases only")


def _add_result_commands(sub) -> None:
    """`prunesim sweep`, `export`, `plot` and `validate`: results and analysis."""
    p = sub.add_parser("sweep", help="run the cartesian product of hardware, workloads/traces, methods")
    p.add_argument("--hw", action="append", default=[], metavar="FILE_OR_GLOB", required=True,
                   help="hwconfig files, bundled names or globs (repeatable)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", action="append", default=None,
                     help="zoo workloads (synthetic trace from fitted statistics; repeatable)")
    src.add_argument("--trace", action="append", default=None, help="trace directories (repeatable)")
    p.add_argument("--method", action="append", default=[], help="method specs (repeatable)")
    p.add_argument("--batch", type=_ranged("batch"), default=None,
                   help="batch for workloads (default: 64; traces keep theirs)")
    p.add_argument("--grid", default=None, help="YAML of hwconfig parameter grids")
    p.add_argument("--db", required=True, help="result store (SQLite), resumable")
    p.add_argument("--jobs", type=_ranged("threads"), default=None, help="local worker processes")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask distributed scheduler")
    p.add_argument("--seed", type=_ranged("seed"), default=0)
    p.add_argument("--cache", default=None, help="synthetic-trace cache directory "
                                                 "(default $PRUNESIM_CACHE or ~/.cache/prunesim)")
    p.add_argument("--stats", default=None,
                   help="fitted statistics YAML for workloads (default: the ones shipped)")
    p.add_argument("--cache-model", choices=("exact", "profile"), default=None,
                   help="CPU cache misses: exact LRU simulation (default) or reuse-distance "
                        "profile (replay's --cache; part of each stored point's key)")
    p.add_argument("--framework", default=None, metavar="NAME|PATH",
                   help=FRAMEWORK_HELP + " (part of each stored point's key)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--yes-large", action="store_true",
                   help="run work above a budget of sim/limits.py (docs/reference/limits.md)")
    _handler(p, "sim.results.sweep:cmd_sweep")
    p = sub.add_parser("export", help="export a result store to CSV (or Parquet)")
    p.add_argument("db", help="result store (SQLite)")
    p.add_argument("--csv", default=None, help="CSV file to write")
    p.add_argument("--parquet", default=None, help="Parquet file to write (needs pyarrow)")
    p.add_argument("--kind", default="network", choices=("network", "layer"),
                   help="network-level rows (default) or per-layer rows")
    p.add_argument("--force", action="store_true", help="replace existing output files")
    _handler(p, "sim.results.store:cmd_export")
    p = sub.add_parser("plot", help="plots from a result store")
    p.add_argument("db", help="result store (SQLite)")
    p.add_argument("--kind", required=True,
                   choices=("speedup", "layers", "tta", "comm", "pareto", "roofline"))
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--force", action="store_true",
                   help="replace files in --out that an earlier plot did not write (or that "
                        "were edited since)")
    p.add_argument("--format", default="png,svg", help="comma list of png, svg, pdf")
    p.add_argument("--methods", action="append", default=None, metavar="LABEL",
                   help="layers: methods to show (repeatable; default the first three stored)")
    p.add_argument("--accuracy", action="append", default=None, metavar="CSV_OR_TRACE",
                   help="tta/pareto: accuracy curves (training log CSV or trace dir; repeatable; "
                        "default the stored trace's log.csv)")
    p.add_argument("--target", type=_accuracy, default=None,
                   help="tta/pareto: target accuracy (default 0.99 x dense's best)")
    p.add_argument("--iterations-per-epoch", type=_positive_int, default=None,
                   help="tta/pareto: default from the trace's provenance")
    p.add_argument("--cluster", default=None, help="comm: cluster YAML (default dgx-a100-hdr)")
    p.add_argument("--gpus", type=_ranged("devices"), default=None, help="comm: devices used")
    p.add_argument("--workload", default=None,
                   help="comm/layers/roofline: workload (default the first stored)")
    p.add_argument("--epochs", type=_ranged("epochs"), default=None, help="comm: training epochs")
    _handler(p, "analysis.plots:cmd_plot")
    p = sub.add_parser("validate", help="compute every published result from the models; compare")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", default="out/validation.md",
                   help="report to write (default out/validation.md; `make docs` refreshes the "
                        "committed docs/validation.md); an existing file is replaced only if "
                        "validate wrote it, else with --force")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out that validate did not write")
    p.add_argument("--quick", action="store_true", help="skip the slowest rows")
    p.add_argument("--only", action="append", default=None,
                   choices=VALIDATION_GROUPS,
                   help="only these row groups (repeatable; default all)")
    p.add_argument("--jobs", type=_positive_int, default=None,
                   help="worker processes, one group each (default: the CPUs, at most one per "
                        "group; 1: in this process, one group after another)")
    _handler(p, "analysis.validation:cmd_validate")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module, func = args._handler.split(":")
    try:
        from sim.jit import announce_compiles
        announce_compiles()      # on a terminal: say so while Numba compiles (a cold cache)
        from sim.limits import check_cli_inputs
        check_cli_inputs(args)   # a device, FIFO or directory given as an input file: refused
        return int(getattr(importlib.import_module(module), func)(args) or 0)
    except PrunesimError as e:
        print(f"prunesim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prunesim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


# ----------------------------------------------------------------------------------------------
# workload commands (small enough to live here)


def cmd_workload_list(args) -> int:
    from sim.workload import load_workload, zoo_names
    from sim.results.tables import format_table
    rows = []
    for name in zoo_names():
        w = load_workload(name)
        rows.append([name, len(w.convs), len(w.layers) - len(w.convs), "x".join(map(str, w.input_shape)),
                     f"{w.params() / 1e6:.2f}", f"{w.macs() / 1e6:.1f}", w.description])
    print(format_table(["name", "convs", "fc", "input", "params (M)", "MACs/sample (M)",
                        "description"], rows))
    return 0


def _phase_flops(w, batch: int) -> dict[str, int]:
    """FLOPs per GEMM phase of one iteration (AGBP only where a layer needs it)."""
    from sim.workload import lower
    tot = {ph: 0 for ph in ("fwd", "agbp", "wgc")}
    for l in w.layers:
        for ph, g in lower(l, batch).items():
            if ph != "agbp" or l.needs_agbp:
                tot[ph] += g.flops
    return tot


def cmd_workload_show(args) -> int:
    import json

    from sim.results.tables import format_table
    from sim.workload import lower, load_workload
    w = load_workload(args.name)
    b = args.batch
    if args.json:
        out = {"name": w.name, "batch": b, "params": w.params(), "macs": w.macs(b), "layers": []}
        if w.parameters:
            out["workload_params"] = dict(w.parameters)
            out["flops"] = _phase_flops(w, b)
        for l in w.layers:
            g = lower(l, b)
            out["layers"].append({
                "name": l.name, "op": l.op, "block": l.block, "c_in": l.c_in, "c_out": l.c_out,
                "h": l.h, "w": l.w, "p": l.p, "q": l.q, "r": l.r, "s": l.s, "stride": l.stride,
                "pad": l.pad, "groups": l.groups, "transposed": l.transposed,
                "residual_node": l.residual_node,
                "params": l.param_count, "macs": l.macs(b),
                "gemms": {ph: {"m": x.m, "n": x.n, "k": x.k, "groups": x.groups, "flops": x.flops}
                          for ph, x in g.items()}})
        print(json.dumps(out, indent=1))
        return 0
    print(f"{w.name}: {w.description}  (from {w.origin})")
    print(f"input {'x'.join(map(str, w.input_shape))}, batch {b}"
          + "".join(f", {k} {v}" for k, v in w.parameters))
    rows = []
    tot = {ph: 0 for ph in ("fwd", "agbp", "wgc")}
    for l in w.layers:
        g = lower(l, b)
        for ph in tot:
            if ph != "agbp" or l.needs_agbp:
                tot[ph] += g[ph].flops
        geo = (f"{l.c_in}x{l.h}x{l.w} -> {l.c_out}x{l.p}x{l.q}" if l.op in ("conv", "matmul")
               else f"{l.c_in} -> {l.c_out}" + (f" x{l.h * l.w} tokens" if l.op == "linear" else ""))
        if l.op == "matmul":
            geo += f" {l.kind} h{l.groups}"
        ker = f"{l.r}x{l.s}/{l.stride}p{l.pad_h}" + ("" if l.pad_h == l.pad_w else f"x{l.pad_w}") \
            + (f" g{l.groups}" if l.groups > 1 else "") + (" transposed" if l.transposed else "") \
            if l.op == "conv" else ""
        rows.append([l.index, l.name, l.block, geo, ker, l.residual_node or "",
                     *(f"{x.m}x{x.n}x{x.k}" + ("" if x.phase != "agbp" or l.needs_agbp else " (unused)")
                       + (" scatter" if x.form == "scatter" else "") for x in g.values()),
                     f"{l.macs(b) / 1e6:.2f}"])
    print(format_table(["#", "layer", "block", "C x H x W -> K x P x Q", "RxS/str pad",
                        "residual", "FWD MxNxK", "AGBP MxNxK", "WGC MxNxK", "MACs (M)"], rows))
    print(f"params {w.params():,} ({w.params() / 1e6:.3f} M); forward MACs {w.macs(b):,} "
          f"({w.macs(b) / 1e9:.3f} G) at batch {b}")
    print("AGBP of a layer reading the input image is never needed; strided AGBP is a scatter GEMM "
          "(into im2col space) plus col2im")
    if any(l.op in ("linear", "matmul") for l in w.layers):
        print("linear: M = batch*tokens; matmul: one GEMM per (sample, head), its AGBP the first "
              "operand's gradient (dQ, dP), its WGC the second's (dK, dV^T)")
    print("GFLOP per iteration: " + ", ".join(f"{ph.upper()} {v / 1e9:.3f}" for ph, v in tot.items())
          + f", total {sum(tot.values()) / 1e9:.3f}")
    return 0
