#!/usr/bin/env python
"""Rerun the bundled real PruneTrain (group lasso) runs that the trajectory model is fitted to.

    python -m research.prunetrain.grids                 # every bundled run, skipping existing files
    python -m research.prunetrain.grids --force --only resnet20   # rerun a subset
    python -m research.prunetrain.grids --list
    python -m research.prunetrain.grids --grid gpu --device cuda --jobs 8   # Fashion-MNIST, paper schedule
    python -m research.prunetrain.grids --grid cifar --device cuda --jobs 8 # CIFAR-10 (fetch_cifar10.py)
    python -m research.prunetrain.grids --grid wd      # the CPU CIFAR-10 run at the authors' weight decay
    python -m research.prunetrain.grids --grid lr      # CPU CIFAR-10 at the paper's per-sample lr (hours)
    python -m research.prunetrain.grids --grid psl     # per-sample lr vs passes over the data (CPU, ~2 h)
    python -m research.prunetrain.grids --grid paper1x # the paper's setting at rho 0.1 / at wd 5e-4 (CPU, 2-5 h each)
    python -m research.prunetrain.grids --grid labels20 # 20 classes (CIFAR-10 + Fashion-MNIST) and its 10-label control
    python -m research.prunetrain.grids --grid bottleneck --jobs 2   # bottleneck ResNet-29 (CPU, ~80 min)
    python -m research.prunetrain.grids --grid bottleneck-wide --device cuda   # at 4x width (GPU)
    python -m research.prunetrain.grids --grid table1 --device cuda --jobs 4   # Table 1's CIFAR-10 nets, 32 x 32
    python -m research.prunetrain.grids --grid resnet50 --device cuda --jobs 2 # ResNet-50's four stages, 16 x 16
    python -m research.prunetrain.grids --grid cap-check   # ResNet-20 at rho 0.03 / 0.05: weak lassos (CPU, ~35 min each)
    python -m research.prunetrain.grids --grid clock   # ResNet-20 at 1/4 and 2x lr x steps an epoch (~6 / ~45 min)
    python -m research.prunetrain.grids --grid vgg-wd --device cuda --jobs 2  # VGG-11 32x32, wd 5e-4
    ... --stop-after 500 --log-dir L   # each run stops itself and is written from its log (device calls)
    python -m research.prunetrain.grids --third-party  # records of the third-party CIFAR-100 reruns
    python -m research.prunetrain.grids --grid labels20-wd --jobs 2 --out DIR  # the 20-label pair at wd 5e-4 (~16 min)
    python -m research.prunetrain.grids --grid chain-wd --jobs 2 ...     # VGG-11 decay twins at 16 x 16 (CPU)
    python -m research.prunetrain.grids --grid labels40 --jobs 2 ...     # 40 quarter-turn labels, control (CPU)
    python -m research.prunetrain.grids --grid labels40-noflip ... # ... CIFAR-10 without flips; -seed: seed 1
    python -m research.prunetrain.grids --grid labels40-weak --jobs 2 ... # the pair at rho 0.05 (CPU)
    python -m research.prunetrain.grids --predict --grid vgg-wd   # the stored fit's prediction, before a run
    python -m research.prunetrain.grids --write-fit   # refit: the stored fit and the held-out fits

Writes research/prunetrain/data/fitted/<run name>.yaml (the trajectory file format plus `run` and
`per_epoch`; the held-out grids go to a folder of research/prunetrain/data/held-out with --out),
single-threaded torch, one progress bar per run. Needs the capture extra (torch, scikit-learn).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

if __name__ == "__main__" and "--write-fit" in sys.argv:
    # the fits' grid search sums in BLAS matrix products, whose last bits (and on some training
    # sets the grid point chosen) depend on the thread count: the stored fits are made with one
    # thread, set before NumPy loads
    for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")

from research.prunetrain.fitting import HELD_OUT_DIR, RUNS_DIR
from research.prunetrain.runs import (PAPER_CIFAR, PAPER_CIFAR_GPU, RunConfig, bar, planned_run,
                                      run_one, write_run)

ROOT = Path(__file__).resolve().parents[2]
OUT = RUNS_DIR

# the bundled grid: ResNet-20 on digits at rho 0.3 / 0.25 / 0.2 / 0.1 (interval 5), two rho again at
# interval 10, then the same dose reached two other ways (half the lr; twice the batch = half the
# steps), then ResNet-32. VGG-11 needs 32 x 32 inputs (five 2x2 pools), ~50 min a run on one
# core: not bundled. Batch 16 and a late lr decay (80 %, 90 %) buy lasso dose lr*lambda*steps on a
# CPU budget: what sets the pruning speed (docs/explanation/system.md).
_R20 = dict(epochs=60, batch=16, decay_at=(0.8, 0.9))
_C16 = dict(PAPER_CIFAR, dataset="cifar10", size=16, shift=2, flip=True)
_C16P = dict(PAPER_CIFAR_GPU, dataset="cifar10", size=16, shift=2, flip=True)
GRID = ([RunConfig("resnet20", r, 5, **_R20) for r in (0.3, 0.25)]
        + [RunConfig("resnet20", 0.25, 5, **{**_R20, "lr": 0.05}),
           RunConfig("resnet20", 0.25, 5, **{**_R20, "batch": 32})]
        + [RunConfig("resnet20", r, 5, **_R20) for r in (0.2, 0.1)]
        + [RunConfig("resnet20", r, 10, **_R20) for r in (0.25, 0.2)]
        + [RunConfig("resnet32", r, 5, **_R20) for r in (0.3, 0.1)]
        # the paper's CIFAR schedule step for step (182 virtual epochs; lasso dose per epoch as in
        # the paper): what sets the trajectory's shape. On clean digits the lasso ends at ~10 % of
        # the channels with 99 % accuracy: the data is easy. Pixel noise (a difficulty dial, CE in
        # the high-lr phase ~0.1 / ~0.5 / ~1.5 at noise 0 / 1 / 2) gives the equilibrium's
        # dependence on how hard the data is to fit.
        + [RunConfig("resnet20", r, 10, **PAPER_CIFAR) for r in (0.2, 0.25)]
        + [RunConfig("resnet32", r, 10, **PAPER_CIFAR) for r in (0.2, 0.25)]
        + [RunConfig("resnet20", r, 10, **{**PAPER_CIFAR, "noise": 1.0}) for r in (0.2, 0.25, 0.1, 0.3)]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 2.0}),
           RunConfig("resnet32", 0.2, 10, **{**PAPER_CIFAR, "noise": 1.0})]
        # does the end point depend on the training-set size (360 / 720 of digits' 1437 images;
        # MNIST's 4000 at 8 x 8), or on the per-sample lr (lr / batch 1/2 and 1/4 of PAPER_CIFAR's,
        # the paper's lr 0.1 at batch 128 step for step: 391 steps a virtual epoch)?
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "subset": n})
           for n in (360, 720)]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "dataset": "mnist5k"})]
        + [RunConfig("resnet20", 0.25, 10, **{**PAPER_CIFAR, "noise": 1.0, "batch": b, "lr": 0.1,
                                              "epoch_steps": 391}) for b in (64, 128)]
        # the real CIFAR-10 (tools/fetch_cifar10.py) at 16 x 16 (CIFAR's 4-pixel crops and flips
        # at half the size), the same schedule and init as the clean-digits run above: what the
        # data alone changes at the paper's dose
        + [RunConfig("resnet20", 0.25, 10, **_C16)]
        + [RunConfig("resnet20", r, 10, **_C16, init="he_fan_out") for r in (0.25, 0.2, 0.1)])


# The paper's CIFAR schedule at its per-sample lr (PAPER_CIFAR_GPU: batch 512, lr 0.4, 98 steps an
# epoch, 182 epochs, 4-pixel shifts at 32 x 32) on Fashion-MNIST, a set whose dense error (~5-8 %)
# is CIFAR-10's rather than the digits' (~1 %). Too slow for a CPU (~18,000 steps of batch 512 a
# run): run on a GPU (`--device cuda`; the steps are replayed as CUDA graphs).
# The ResNets (global pool: widths do not depend on the image size) see 16 x 16 images, 4x cheaper
# than 32 x 32 on a memory-bound GPU step (~0.7 s an epoch on an H100); VGG-11's five 2 x 2 pools
# need 32 x 32.
_F = dict(PAPER_CIFAR_GPU, dataset="fashion", size=16, shift=2)   # CIFAR's 4 px at half the size
GPU_GRID = ([RunConfig("resnet32", r, 10, **_F) for r in (0.1, 0.2, 0.25, 0.3)]
            + [RunConfig("resnet20", 0.25, 10, **_F),
               RunConfig("resnet32", 0.25, 5, **_F)]
            + [RunConfig("vgg11-cifar", r, 10, **{**_F, "size": 32, "shift": 4}) for r in (0.25, 0.2)]
            # the authors' init (He normal, fan out): 2.3x larger group norms, lambda 2.3x smaller
            + [RunConfig("resnet32", 0.25, 10, **_F, init="he_fan_out")])
# CIFAR-10 itself at 32 x 32 with the paper's augmentation and the authors' init: the runs that
# replace the stand-in data (for a GPU; each ~18,000 steps of batch 512)
_C = dict(PAPER_CIFAR_GPU, dataset="cifar10", size=32, shift=4, flip=True, init="he_fan_out")
CIFAR_GRID = ([RunConfig("resnet32", r, 10, **_C) for r in (0.2, 0.25, 0.1, 0.3)]
              + [RunConfig("vgg11-cifar", r, 10, **_C) for r in (0.2, 0.25)]
              + [RunConfig("resnet20", 0.25, 10, **_C),
                 RunConfig("resnet32", 0.25, 10, **{**_C, "init": "torch"})])
# ... and with the authors' CIFAR weight decay (5e-4: their cifar.py's default, which their
# run-script leaves in place; most bundled runs have 1e-4): the model's weight-decay exponent
# omega is fitted to such runs and their 1e-4 twins (sim.system.prunetrain_model.REF_WEIGHT_DECAY).
CIFAR_GRID += [RunConfig("resnet32", r, 10, **_C, weight_decay=5e-4) for r in (0.2, 0.25)]
# the same question on the CPU: the he_fan_out ResNet-20 CIFAR-10 16 x 16 run of GRID at 5e-4
WD_GRID = [RunConfig("resnet20", 0.25, 10, **_C16, init="he_fan_out", weight_decay=5e-4)]
# the _C16 he_fan_out run at the paper's per-sample lr (PAPER_CIFAR_GPU's batch 512 and lr 0.4:
# 8x the samples, 3-5 h on one core; not bundled yet): does the 8x per-sample lr of the CPU runs
# prune deeper than the paper's would? With the authors' weight decay too.
LR_GRID = [RunConfig("resnet20", 0.25, 10, **_C16P, init="he_fan_out", weight_decay=wd)
           for wd in (1e-4, 5e-4)]
# the _C16 he_fan_out rho 0.25 run on CIFAR-10's two super-classes (vehicles / animals) with the
# same 10-way classifier, so the same lambda: fewer distinctions prune far deeper (fitted: with
# LABELS20_GRID's pair, the model's task exponent kappa rests on this run)
COARSE_GRID = [RunConfig("resnet20", 0.25, 10, **_C16, init="he_fan_out", coarse=True)]
# ... and the other way, more distinctions than ten (no registry reachable from here ships
# CIFAR-100): the same run on the CIFAR-10 + Fashion-MNIST union with its 20 labels (a 20-way
# head, ResNet-20's workload otherwise), and its control on the same images with the labels folded
# to 10. The pair is what the task exponent kappa meets beyond ten classes (~25 min a run).
_U16 = dict(_C16, dataset="cifar10fashion")
LABELS20_GRID = [RunConfig("resnet20-c20", 0.25, 10, **_U16, init="he_fan_out"),
             RunConfig("resnet20", 0.25, 10, **_U16, init="he_fan_out", fold=True)]
# The 20-class run again at another seed (init and batch order; the data split is fixed): is
# its gap to the folded control larger than a run's own noise? Held out (not fitted):
# `--grid labels20-seed --out research/prunetrain/data/held-out`
LABELS20_SEED_GRID = [dataclasses.replace(LABELS20_GRID[0], seed=1)]
# ... and the pair at rho 0.1 (also held out): does the direction hold at a lower pressure?
LABELS20_RHO_GRID = [dataclasses.replace(c, rho=0.1) for c in LABELS20_GRID]
# Per-sample lr or passes over the data? At the paper's lr x steps an epoch, the per-sample lr
# fixes the samples an epoch (lr x steps / (lr / batch)), so the two are confounded in LR_GRID's
# pair. Three runs split them: 4x the paper's per-sample lr (batch 128, lr 0.4: 2x the samples of
# the 8x runs), and 8x on a 6272-image subset of CIFAR-10 (one virtual epoch = one pass, so the
# paper's 182 passes at 8x its per-sample lr); then the paper's own batch 128, lr 0.1 and 391
# steps an epoch (its per-sample lr at a quarter of LR_GRID's batch: BN's batch statistics and
# the gradient noise per step as in the paper; ~2 h on one core), and 2x (batch 256, ~1 h).
PSL_GRID = [RunConfig("resnet20", 0.25, 10, **_C16, init="he_fan_out", subset=6272),
            RunConfig("resnet20", 0.25, 10, **{**_C16P, "batch": 128}, init="he_fan_out"),
            RunConfig("resnet20", 0.25, 10, **{**_C16P, "batch": 128, "lr": 0.1,
                                               "epoch_steps": 391}, init="he_fan_out"),
            RunConfig("resnet20", 0.25, 10, **{**_C16P, "batch": 256}, init="he_fan_out")]
# Twins of the paper's own setting (PSL_GRID's batch 128, lr 0.1, 391 steps an epoch; 39-100 s an
# epoch on one core of the machines seen, 2-5 h a run, where batch 512 takes ~3x as long per
# image on a CPU): at rho 0.1 (every other CIFAR-10
# rho comparison is at 8x, so the model's rho slope on natural images came from 8x runs alone),
# and at the authors' CIFAR weight decay 5e-4.
_C16PAPER = dict(_C16P, batch=128, lr=0.1, epoch_steps=391)
PAPER1X_GRID = [RunConfig("resnet20", 0.1, 10, **_C16PAPER, init="he_fan_out"),
                RunConfig("resnet20", 0.25, 10, **_C16PAPER, init="he_fan_out", weight_decay=5e-4)]
# A bottleneck ResNet (ResNet-29: ResNet-20's nine blocks and about its MACs, residual nodes 4x
# the width of the convs inside a block, as in ResNet-50) on the _C16 he_fan_out setting, at the
# two rho of the ResNet-20 runs there: do a bottleneck's residual nodes prune as ResNet-20's do?
# The authors' own ImageNet ResNet-50s keep ~65 % of their residual channels, the model ~95 %.
# ~80 min a run on one core; fitted (residual kind).
BOTTLENECK_GRID = [RunConfig("resnet29-bottleneck", r, 10, **_C16, init="he_fan_out")
                   for r in (0.25, 0.1)]
# The same runs at 4x width (inner convs 64-256, ResNet-50's): the CPU runs' nodes pruned deeper
# and their 16-64-wide inner spaces less than ResNet-20's; is the latter the expansion or a narrow
# block's capacity? ~16x the MACs: a GPU grid (`--grid bottleneck-wide --device cuda`), same
# setting step for step, so the two widths compare at the same dose schedule. On an
# H200: ~5 min a run, two at once. The inner spaces kept more still: the expansion, not a narrow
# block (docs/explanation/system.md). The narrow grid's H200 repeats are in held-out/h200/ (a device control).
BOTTLENECK_WIDE_GRID = [dataclasses.replace(c, workload="resnet29-bottleneck-w4")
                        for c in BOTTLENECK_GRID]
# Table 1's own CIFAR-10 networks at 32 x 32 on CIFAR-10 itself (CIFAR_GRID's setting: the
# paper's per-sample lr at batch 512, 4-pixel crops, flips, the authors' init), the subset one GPU
# runs at once: ResNet-32 and VGG-11 at rho 0.2 (Table 1's rows) and 0.25, VGG-13 at 0.2.
# The trajectory model was fitted to 16 x 16 runs alone; these are the validation's input rows
# (measured trajectory -> engine) and a held-out check of the model at the paper's image size.
# The data reaches a device machine in three calls (tools/pack_cifar10.py). One H200,
# --jobs 4 for 520 s (~3.6 s an epoch for VGG-11, ~9.8 s for ResNet-32 with four sharing it):
# VGG-11 to epoch 142-144 of 182 (past both lr decays), ResNet-32 to 52-54; VGG-13 started when
# the others were interrupted and ran 45 epochs alone (~1.8 s each). Rebuilt with --from-log into
# research/prunetrain/data/fitted/. A whole grid needs
# ~10 min of one GPU per run at four at once.
TABLE1_GRID = [RunConfig(w, r, 10, **_C) for w, r in
               (("resnet32", 0.2), ("vgg11-cifar", 0.2), ("resnet32", 0.25),
                ("vgg11-cifar", 0.25), ("vgg13-cifar", 0.2))]
# VGG-11 at 32 x 32 on CIFAR-10 at the authors' weight decay 5e-4: the twins of TABLE1_GRID's
# VGG-11 runs at 1e-4 (same data, schedule, init, rho). The third-party CIFAR-100 runs of the
# authors' code (5e-4, runs.third_party_record) start cutting at epoch ~10-20 and approach
# slowly; the bundled 1e-4 VGG runs start at ~27 and cut fast; the ResNet-20 decay twins at 16 x
# 16 start 2-3x sooner at 5e-4. One decay exponent of the clock cannot serve both (with
# the CIFAR-100 runs joined to the fit, an experiment, omega_clock 0.75 -> 0.5 and the task
# term kappa 0.25 -> 0.75). These runs tell the decay's share (chains respond less?) from the
# classes' (CIFAR-100 slower?). Not run yet: one GPU, ~1.8 s an epoch alone (TABLE1_GRID's
# VGG-13), both in ~10 min at --jobs 2 with --stop-after 540 --log-dir L.
VGG_WD_GRID = [RunConfig("vgg11-cifar", r, 10, **_C, weight_decay=5e-4) for r in (0.2, 0.25)]
# ImageNet ResNet-50's four stages (3/4/6/3 bottleneck blocks, inner 64-512, nodes 256-2048) on
# 16 x 16 CIFAR-10 (stages at 16/8/4/2), the bottleneck-wide grid's setting step for step: the
# spread was learnt over three stages, and the authors' ImageNet ResNet-50s prune the first stage
# and the middle stages' inner spaces and keep the last stage's inner spaces, the reverse of the
# model's spread there (docs/explanation/system.md). One H200: rho 0.25 / 0.1 two at once for 485 s
# (~3.2 s an epoch each: epochs 145 / 153 of 182), rho 0.2 alone for 225 s (~1.9 s an epoch: 118),
# written from their logs (--stop-after); fitted since. A whole run alone needs ~6 min.
RESNET50_GRID = [RunConfig("resnet50-cifar-gap", r, 10, **_C16, init="he_fan_out")
                 for r in (0.25, 0.1, 0.2)]
# The PruneTrain authors' own CIFAR "ResNet-50" (resnet50-bt-cifar: their resnet50_bt_flat, 3 stages
# of 8 bottleneck blocks, 16-64 inside), the network of Table 1's CIFAR ResNet-50 rows: on 16 x 16
# CIFAR-10 at the bundled bottleneck runs' setting (CPU: ~77 s a virtual epoch on one core, ~4 h a
# run; rho 0.25 for a rho pair on Table 1's own network), and at 32 x 32 at the
# paper's per-sample lr (the table1 grid's setting: a GPU's).
AUTHORS_R50_GRID = ([RunConfig("resnet50-bt-cifar", r, 10, **_C16, init="he_fan_out")
                     for r in (0.2, 0.25, 0.1)]
                    + [RunConfig("resnet50-bt-cifar", r, 10, **_C) for r in (0.2, 0.25)])
# The narrow bottleneck at rho 0.2, with the per-epoch `dead` records: the death model
# (sim.system.prunetrain_model.death_probability), fitted mostly on basic blocks, predicts ~7x
# the dead inner spaces the two narrow-bottleneck runs show; this run, held out, is a third point with the records
# (`--grid bottleneck-dead --out research/prunetrain/data/held-out/bottleneck-dead`, ~80 min on
# one core).
BOTTLENECK_DEAD_GRID = [dataclasses.replace(BOTTLENECK_GRID[0], rho=0.2)]
# A basic-block run below the plain kind's lambda / n0 cap: ResNet-20 on 16 x 16
# CIFAR-10 at rho 0.03, lambda / n0 3.1e-5 (the fitted basic-block runs reach down to 1.1e-4 on
# CIFAR-10). Does the lasso dose delay its first dead channel as it delays the bottleneck runs'?
# (`--grid cap-check`, ~35 min a run on one core.) rho 0.05 is the second weak-lasso
# point: rho 0.03 kept 0.94 of the plain channels against 0.42 at rho 0.1, so the level's rho law
# between them needed a point inside. Both were held out until each had been
# predicted; now they are fitted (the pressure threshold, fitting.P0S).
CAP_CHECK_GRID = [RunConfig("resnet20", r, 10, **_C16, init="he_fan_out") for r in (0.03, 0.05)]
# lr x steps an epoch, on natural images. Every natural-image run replays CIFAR's
# lr x steps an epoch (0.2 x 196 = 0.1 x 391 = 0.4 x 98), so nothing in them tells a clock of
# lr-weighted steps from one of epochs; ImageNet's schedule has 12.8x CIFAR's, and the model,
# whose clock is lr x steps, cuts ImageNet at once where the paper's FLOPs columns say it cut over
# tens of epochs. The bundled ResNet-20 rho 0.25 run (_C16, the authors' init) at a quarter and at
# twice its steps an epoch (same lr, batch, decays at the same epochs): the lr-step clock puts
# the first dead channel at ~4x / ~0.5x the epoch of the 196-step run, an epoch clock at the same
# epoch. 6 / ~45 min on one core; predicted by the fit without them before they were fitted
# (docs/explanation/system.md).
CLOCK_GRID = [RunConfig("resnet20", 0.25, 10, **{**_C16, "epoch_steps": s}, init="he_fan_out")
              for s in (49, 392)]
# A check of the lag (KindFit.lag), held out (`--grid clock-check --out
# research/prunetrain/data/held-out/clock-check`, ~6 min): the rho 0.1 run of the same family at 49
# steps an epoch, whose first dead channel the lr-step clock puts near the first lr decay (its
# 196-step twin's at epoch 24 x 4), so the decay's release decides its cut.
CLOCK_CHECK_GRID = [dataclasses.replace(CLOCK_GRID[0], rho=0.1)]
# The 20-label pair again at the authors' CIFAR weight decay 5e-4 (held out,
# held-out/labels20-wd): the third-party CIFAR-100 runs (5e-4) start cutting later and approach
# slower than the model, which has more classes keep more (kappa) and 5e-4 start sooner (omega_clock, fitted on
# the ResNet-20 decay twins at 10 labels). Do more labels slow the course at 5e-4? At 1e-4 the
# 20-label run started cutting sooner than its folded control (epoch 12 against 16). ~16 min a
# run on one core, two at once: `--grid labels20-wd --jobs 2 --out
# research/prunetrain/data/held-out/labels20-wd`
LABELS20_WD_GRID = [dataclasses.replace(c, weight_decay=5e-4) for c in LABELS20_GRID]
# The decay twins of a chain on the CPU: VGG-11 with its last max-pool global
# (vgg11-cifar-gp: the same channels; at 16 x 16 the fifth 2 x 2 pool would have nothing to pool)
# on the ResNet-20 decay twins' setting (_C16, the authors' init, rho 0.25), at 1e-4 and 5e-4.
# The model's clock runs 5^0.75 = 3.3x faster at 5e-4 (omega_clock, fitted on the ResNet-20
# twins); the third-party CIFAR-100 VGG-11 runs at 5e-4 start later and cut slower than that
# says. Does a chain's cut speed up with the decay as ResNet-20's does? 79 / 48 min (1e-4 / 5e-4)
# on one core, two at once: `--grid chain-wd --jobs 2 --out
# research/prunetrain/data/held-out/chain-wd` (half the cut 3.0x sooner at 5e-4, the model's 3.3x;
# docs/explanation/system.md).
CHAIN_WD_GRID = [RunConfig("vgg11-cifar-gp", 0.25, 10, **_C16, init="he_fan_out",
                           weight_decay=wd) for wd in (1e-4, 5e-4)]
# A second label-count pair beyond ten labels (held out, held-out/labels40): the task term
# T^kappa (prunetrain_model.task_information) rests on the coarse run (2 labels) and the
# 20-label pair, and carries to CIFAR-100 and ImageNet (T 2 and 3) untested. CIFAR-10 at 16 x 16 with quarter-turn
# labels (cifar10rot: 40 labels, T 1.6) and its control on the same turned images with the class
# alone; shifts, no flips (a flip changes a turn's label); otherwise the 20-label pair's setting.
# Predicted first: `--predict --grid labels40`; `--grid labels40 --jobs 2 --out
# research/prunetrain/data/held-out/labels40`.
_R16 = dict(_C16, dataset="cifar10rot", flip=False)
LABELS40_GRID = [RunConfig("resnet20-c40", 0.25, 10, **_R16, init="he_fan_out"),
               RunConfig("resnet20", 0.25, 10, **_R16, init="he_fan_out", fold=True)]
# ... and the control's control: CIFAR-10 itself on the same setting without flips (the bundled
# twin has flips). Separates the turned images' deep cut from the flips' absence.
# `--grid labels40-noflip --out research/prunetrain/data/held-out/labels40` (~20 min on one core)
LABELS40_NOFLIP_GRID = [RunConfig("resnet20", 0.25, 10, **dict(_C16, flip=False),
                                init="he_fan_out")]
# ... and the pair at another seed (init and batch order): is its node gap (+0.16) larger than a
# run's own noise? `--grid labels40-seed --jobs 2 --out research/prunetrain/data/held-out/labels40`
LABELS40_SEED_GRID = [dataclasses.replace(c, seed=1) for c in LABELS40_GRID]
# ... and the pair at a weak lasso, rho 0.05 (held out, held-out/labels40-weak). The
# lasso threshold (KindFit.p0) acts on P alone, fitted on the 10-label weak runs. Table 1's
# ImageNet rho 0.1 (training 97 %, inference 88 %, the cut late: time course 0.75) looks like a
# lasso at its threshold, at a P (0.111) far above the 10-label one: does the threshold rise with
# the labels? If it did (as T^0.6 would put ImageNet's at rho 0.1), the 40-label run would keep
# ~0.88 of its plain channels where its folded control keeps ~0.73, and start later. Measured:
# 0.70 and 0.73, first cut at epoch 31 and 34 (docs/explanation/system.md). Predicted first (`--predict --grid
# labels40-weak`); `--grid labels40-weak --jobs 2 --out
# research/prunetrain/data/held-out/labels40-weak` (~55 min for both on two cores).
LABELS40_WEAK_GRID = [dataclasses.replace(c, rho=0.05) for c in LABELS40_GRID]
GRIDS = {"cpu": GRID, "gpu": GPU_GRID, "cifar": CIFAR_GRID, "wd": WD_GRID, "lr": LR_GRID,
         "psl": PSL_GRID, "coarse": COARSE_GRID, "paper1x": PAPER1X_GRID,
         "labels20": LABELS20_GRID, "labels20-seed": LABELS20_SEED_GRID,
         "labels20-rho": LABELS20_RHO_GRID,
         "bottleneck": BOTTLENECK_GRID, "bottleneck-wide": BOTTLENECK_WIDE_GRID,
         "table1": TABLE1_GRID, "resnet50": RESNET50_GRID, "authors-r50": AUTHORS_R50_GRID,
         "bottleneck-dead": BOTTLENECK_DEAD_GRID, "cap-check": CAP_CHECK_GRID,
         "clock": CLOCK_GRID, "clock-check": CLOCK_CHECK_GRID, "vgg-wd": VGG_WD_GRID,
         "labels20-wd": LABELS20_WD_GRID, "chain-wd": CHAIN_WD_GRID, "labels40": LABELS40_GRID,
         "labels40-noflip": LABELS40_NOFLIP_GRID, "labels40-seed": LABELS40_SEED_GRID,
         "labels40-weak": LABELS40_WEAK_GRID}


class _Deadline(Exception):
    """Raised from the per-epoch log callback once --stop-after's wall-clock deadline passed."""


def _run_to_file(c: RunConfig, out: Path, log_dir: Path | None, progress=None,
                 threads: int | None = None, deadline: float | None = None) -> str:
    """One run; per-epoch records streamed to <log_dir>/<name>.jsonl (a run stopped early keeps
    its trajectory so far). threads: torch's intra-op threads in this process (a spawned job does
    not inherit the parent's setting; two jobs of two threads on two cores spend their time
    yielding to each other, ~20x slower). deadline (time.time(), needs log_dir): the run stops at
    the first epoch end past it and its file is written from its log (doc_from_log); a run not
    started by then is skipped. Each run stops itself, so the time limit of a device call can
    end a pool of runs cleanly (a signal to the pool starts the next queued run instead)."""
    import json
    import time
    if deadline is not None and time.time() >= deadline:
        return f"{c.name}: not started, past the --stop-after deadline"
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    log = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        logf = log_dir / f"{c.name}.jsonl"
        fh = open(logf, "w")

        def log(rec):
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            if deadline is not None and "epoch" in rec and time.time() >= deadline:
                raise _Deadline(rec["epoch"])
    f = out / f"{c.name}.yaml"
    try:
        doc = run_one(c, progress=progress, log=log)
    except _Deadline as stop:
        fh.close()
        ran = int(stop.args[0]) + 1
        write_run(doc_from_log(logf, c, f"stopped by --stop-after at the end of epoch {ran} of "
                                        f"{c.epochs}"), f)
        return f"{c.name} -> {f}: stopped by --stop-after after {ran} of {c.epochs} epochs"
    write_run(doc, f)
    return (f"{c.name} -> {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}: "
            f"{doc['run']['seconds']} s, val acc {doc['run']['val_accuracy']:.3f}")


def doc_from_log(log: Path, c: RunConfig, note: str) -> dict:
    """The trajectory document of a run whose process ended before writing it, from its per-epoch
    log: the widths at each reconfiguration are the plan's kept channels then (per_epoch `kept`);
    lambda is the first epoch's dose / (lr x steps); the initial group-norm sum is recomputed
    from the seeded init (the same on CPU and GPU); the validation accuracy is not known."""
    import json

    import torch

    from sim.capture.methods import group_lasso_torch
    from sim.capture.torchnet import build_model
    from sim.methods.prunetrain import space_channels
    from research.prunetrain.runs import _he_fan_out
    from sim.workload import load_workload
    recs = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    per = [r for r in recs if "header" not in r]
    wl = load_workload(c.workload)
    torch.manual_seed(c.seed)
    model = build_model(wl)
    if c.init == "he_fan_out":
        _he_fan_out(model)
    with torch.no_grad():
        r0 = float(group_lasso_torch(model, wl))
    lam = per[0]["dose"] / (per[0]["lr"] * per[0]["steps"])
    chans = space_channels(wl)
    points = {0: {}}
    for r in per:
        e = r["epoch"]
        if (e + 1) % c.interval == 0 and e + 1 < c.epochs:
            k = r["kept"]
            # an FC layer's inputs are its input space's channels x the flattened positions
            points[e + 1] = {l.name: [k[l.in_space] * (l.c_in // chans[l.in_space]
                                                        if l.op == "fc" else 1), k[l.out_space]]
                             for l in wl.layers}
    return {"schema": 1, "workload": c.workload,
            "description": f"real PruneTrain run ({c.name}); research.prunetrain.runs; {note}",
            "points": points,
            "run": {**c.settings(), "train_samples": None, "epochs_logged": len(per),
                    "classes": 2 if c.coarse else 10 if c.fold else wl.layers[-1].c_out,
                    "lambda": lam,
                    "first_ce": lam * (1 - c.rho) * r0 / c.rho, "first_group_norm": r0,
                    "val_accuracy": None, "seconds": None,
                    "space_channels": chans, "torch": None},
            "per_epoch": per}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--force", action="store_true", help="rerun existing files")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="cpu",
                    help="cpu: the digits runs (default); gpu: the Fashion-MNIST runs at the "
                         "paper's own batch and lr")
    ap.add_argument("--device", default=None, help="torch device of the runs (default: the "
                    "grid's: cpu)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs (with --write-fit: held-out fits) at once, each in its own "
                         "process (per-epoch logs in --log-dir)")
    ap.add_argument("--log-dir", type=Path, default=None,
                    help="stream each run's per-epoch records to <dir>/<run>.jsonl")
    ap.add_argument("--write-fit", action="store_true",
                    help="fit the trajectory model to the fitted run files and store the fit that "
                         "`prunesim train` loads (sim/data/prunetrain-fit.json) and the held-out "
                         "fits that `prunesim validate` reads (data/held-out-fits.json; 15 fits "
                         "of a few CPU-minutes each, --jobs at once)")
    ap.add_argument("--report", action="store_true",
                    help="print the bundled runs (epoch and dose of the first zeroed channel, final "
                         "kept fractions), the model fit and the leave-one-rho-out check")
    ap.add_argument("--check", type=Path, metavar="RUN_YAML",
                    help="print one run file (e.g. a held-out one, fitted to nothing) against "
                         "the stored fit: kept fractions, the per-stage spread, dead spaces")
    ap.add_argument("--predict", action="store_true",
                    help="print what the stored fit predicts for each run of --grid (--only), "
                         "before it is run: the clock from its schedule, lambda at its analytic "
                         "value (runs.planned_run); needs no torch")
    ap.add_argument("--from-log", type=Path, metavar="JSONL",
                    help="write the run file of a grid run from its per-epoch log (a run stopped "
                         "before writing it); the note says why")
    ap.add_argument("--note", default="rebuilt from its per-epoch log")
    ap.add_argument("--third-party", action="store_true",
                    help="write the run records of the third-party runs of the authors' code "
                         "(data/reruns: CIFAR-100 VGG-11, widths at reconfigurations only) into "
                         "data/held-out/third-party (with --out: into OUT), fitted to nothing "
                         "(docs/explanation/system.md: joined to the fit, they cost Table 1's agreement)")
    ap.add_argument("--stop-after", type=float, metavar="SECONDS", default=None,
                    help="wall-clock budget from now: each run stops at its first epoch end past "
                         "it and is written from its log (needs --log-dir); runs not started by "
                         "then are skipped")
    a = ap.parse_args(argv)
    _refuse_unused(ap, a)
    if a.from_log:
        name = a.from_log.name.removesuffix(".jsonl")
        c = next((c for c in GRIDS[a.grid] if c.name == name), None)
        if c is None:
            ap.error(f"{a.from_log}: no run of the {a.grid} grid is named {name!r}")
        f = a.out / f"{name}.yaml"
        write_run(doc_from_log(a.from_log, c, a.note), f)
        print(f"wrote {f}")
        return 0
    if a.third_party:
        for f in third_party_records(HELD_OUT_DIR / "third-party" if a.out == OUT else a.out):
            print(f"wrote {f}")
        return 0
    if a.write_fit:
        return write_fits(a.jobs)
    if a.report:
        return report(a.out)
    if a.check:
        return check(a.check, a.out)
    if a.predict:
        return predict([c for c in GRIDS[a.grid] if not a.only or a.only in c.name], a.out)
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    deadline = None
    if a.stop_after is not None:
        import math
        import time
        if not (math.isfinite(a.stop_after) and a.stop_after > 0):
            ap.error(f"--stop-after must be a number of seconds > 0, got {a.stop_after}")
        if a.log_dir is None:
            ap.error("--stop-after needs --log-dir (a stopped run's file is rebuilt from its log)")
        deadline = time.time() + a.stop_after
    from dataclasses import replace
    todo = [replace(c, device=a.device) if a.device else c
            for c in GRIDS[a.grid] if not a.only or a.only in c.name]
    if a.list:
        for c in todo:
            print(c.name, "(exists)" if (a.out / f"{c.name}.yaml").exists() else "")
        return 0
    import torch
    torch.set_num_threads(a.threads)
    if a.jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        todo = [c for c in todo if a.force or not (a.out / f"{c.name}.yaml").exists()]
        with ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as ex:
            futs = {ex.submit(_run_to_file, c, a.out, a.log_dir, None, a.threads, deadline): c
                    for c in todo}
            for k, fu in enumerate(as_completed(futs), 1):
                try:
                    print(f"[{k}/{len(todo)}] {fu.result()}", flush=True)
                except Exception as exc:  # one failed run must not lose the others
                    print(f"[{k}/{len(todo)}] {futs[fu].name}: failed: {exc!r}", flush=True)
        return 0
    for k, c in enumerate(todo, 1):
        f = a.out / f"{c.name}.yaml"
        if f.exists() and not a.force:
            print(f"[{k}/{len(todo)}] {c.name}: exists, skipped")
            continue
        print("  " + _run_to_file(c, a.out, a.log_dir, bar(f"[{k}/{len(todo)}] {c.name}"),
                                  deadline=deadline))
    return 0


# What each job reads besides its own flag; any other option given with it would change nothing
JOB_OPTIONS = {"from_log": {"grid", "out", "note"}, "third_party": {"out"}, "write_fit": {"jobs"},
               "report": {"out"}, "check": {"out"}, "predict": {"grid", "only", "out"},
               "list": {"grid", "only", "out"}}


def _refuse_unused(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """One job a call, and no option the job would ignore (a one-line usage error)."""
    given = [d for d in vars(a) if getattr(a, d) != ap.get_default(d)]
    jobs = [d for d in given if d in JOB_OPTIONS]
    flag = lambda d: "--" + d.replace("_", "-")   # noqa: E731
    if len(jobs) > 1:
        ap.error(f"{flag(jobs[0])} and {flag(jobs[1])} are different jobs: give one")
    allowed = JOB_OPTIONS[jobs[0]] if jobs else set(vars(a)) - set(JOB_OPTIONS) - {"note"}
    unused = [d for d in given if d not in allowed and d not in jobs]
    if unused:
        what = flag(jobs[0]) if jobs else "a training run"
        ap.error(f"{flag(unused[0])} changes nothing for {what}")


def third_party_records(out: Path) -> list[Path]:
    """The run records of the third-party reruns (runs.THIRD_PARTY) in `out`."""
    from research.prunetrain.fitting import DATA_DIR
    from research.prunetrain.runs import THIRD_PARTY, third_party_record
    reruns = DATA_DIR / "reruns"
    written = []
    for traj, key in THIRD_PARTY.items():
        doc = third_party_record(reruns / traj, reruns / "vgg11-cifar100-v100-times.yaml", key)
        r = doc["run"]
        f = out / (f"vgg11-cifar-cifar100-32-rho{r['rho']:g}-i{r['interval']}-e{r['epochs']}"
                   f"-b{r['batch']}-lr{r['lr']:g}-s{r['epoch_steps']}-thirdparty-{key}.yaml")
        write_run(doc, f)
        written.append(f)
    return written


def check(path: Path, directory: Path) -> int:
    """A run against the model fitted to the runs of `directory` (held out when the run is not
    among them): the kept fraction of each kind every 10th epoch with the run's own inputs
    (Fit.keep_run), each feature-map size's kept fraction at the last epoch against the fitted
    spread of the run's own mean (stage_spread), and the dead inner spaces at the last epoch
    against the death model's expectation on that spread (death_rows)."""
    from sim.errors import ConfigError
    from research.prunetrain.fitting import (death_rows, directory_fit, read_run, run_epochs,
                                             stage_spread)
    from sim.system.prunetrain_model import death_probability
    try:
        r = read_run(path)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fit = directory_fit(directory)
    held = "in the fit" if r.name in fit.runs else "held out"
    ep = run_epochs(r)
    print(f"{r.name}: widths at {len(ep)} epochs (last {int(ep[-1])}), rho {r.rho:g}; model "
          f"fitted to {len(fit.runs)} runs ({held})")
    kp, kr = fit.keep_run(r, False), fit.keep_run(r, True)
    for i in sorted({i for i, e in enumerate(ep) if e % 10 == 9} | {len(ep) - 1}):
        line = f"  epoch {int(ep[i]):3d}: plain {r.keep_plain[i]:.3f} (model {kp[i]:.3f})"
        if r.has_residual:
            line += f", residual nodes {r.keep_residual[i]:.3f} (model {kr[i]:.3f})"
        print(line)
    for kind, rows in stage_spread(r, fit).items():
        print(f"  last epoch, {kind} by map depth z (measured / spread of the run's own mean): "
              + ", ".join(f"z{z} {m:.2f} / {p:.2f}" for z, m, p in rows))
    d = r.plain_spaces
    if r.has_residual and d is not None and fit.death:
        x, _, ex = death_rows([r], fit, last_only=True)
        expect = float(death_probability(fit.death, x, ex).sum()) if len(x) else 0.0
        print(f"  dead inner spaces at the last epoch: {int(d.dead_or_one()[-1].sum())} of "
              f"{len(d.c)} (death model: {expect:.1f} expected)")
    return 0


def predict(configs, directory: Path) -> int:
    """What the fit of the runs in `directory` predicts for runs not made yet (runs.planned_run):
    each kind's first cut and its kept fraction every 10th epoch and at the last, so that a run
    can be checked against a prediction written down before it (later: `--check` on its file,
    with its logged lambda)."""
    from research.prunetrain.fitting import directory_fit, first_cut
    fit = directory_fit(directory)
    print(f"predicted by the fit of {len(fit.runs)} runs ({directory})")
    for c in configs:
        try:
            r = planned_run(c)
        except ValueError as e:
            print(f"{c.name}: not predicted: {e}")
            continue
        kinds = (("plain", fit.keep_run(r, False)),) + (
            (("residual nodes", fit.keep_run(r, True)),) if r.has_residual else ())
        print(f"{c.name}: lambda / n0 {r.lam_n:.3g} (analytic), {r.classes} classes, weight "
              f"decay {r.weight_decay:g}")
        for kind, k in kinds:
            cut = first_cut(k)
            print(f"  {kind}: first cut at epoch {'never' if cut is None else cut}; kept "
                  + " / ".join(f"{k[e]:.3f}" for e in range(9, c.epochs, 10))
                  + f" at epochs 9, 19, ..., last {k[-1]:.3f}")
    return 0


def report(directory: Path) -> int:
    import numpy as np
    from research.prunetrain.fitting import (bundled_runs, directory_fit, leave_bottleneck_out,
                                             leave_one_out, leave_paper_psl_out, run_epochs)
    # as bundled_runs reads them: the held-out fits of the fitted folder are then the stored ones
    runs = list(bundled_runs(str(directory)))
    print(f"{'run':64s} {'D':>6s} {'P':>6s} {'psl':>5s} {'first zero':>10s} {'u':>6s}   "
          "final kept plain / residual")
    for r in runs:
        k = np.minimum(r.keep_plain, r.keep_residual)
        i = int(np.argmax(k < 1.0)) if (k < 1.0).any() else None
        print(f"{r.name:64s} {r.difficulty:6.3f} {r.pressure:6.2f} {r.temperature:5.2g} "
              f"{('-' if i is None else str(run_epochs(r)[i])):>10s} "
              f"{('-' if i is None else f'{r.u(1.0)[i]:.2f}'):>6s}   {r.keep_plain[-1]:.3f} / "
              f"{r.keep_residual[-1]:.3f}"
              + (f"   (weight decay {r.weight_decay:g})" if r.decay != 1.0 else "")
              + ("   (coarse labels)" if r.coarse else "")
              + (f"   ({r.classes} labels)" if r.classes != 10 and not r.coarse else "")
              + (f"   (expansion {r.expansion:g})" if r.expansion != 1.0 else ""))
    print("(D: training CE in the high-lr phase / ln classes, reported, not a model input; P = rho / "
          "(1 - rho); psl: per-sample lr / the paper's 0.1 / 128; first zero: "
          "epoch; u: lasso dose, beta = 1, there)")
    f = directory_fit(directory)     # the stored fit where it is these runs'
    print(f"fit over {len(f.runs)} runs, RMS {f.rms:.3f}; a prediction's lambda takes CE0 = "
          f"ln(classes) + {f.ce0_offset:.3f} (the runs' median first CE less ln(outputs)):")
    for name, k in (("plain spaces", f.plain), ("residual nodes", f.residual)):
        print(f"  {name:14s}: a {k.a:.3f}, pressure exponent {k.gamma:g}, clock beta {k.beta:g}"
              + (f" below a lambda / n0 cap of {k.cap:.3g}" if k.cap else "") + ", "
              f"u_on {k.u_on:.4g}, u_scale {k.u_scale:.4g}, shape {k.shape:g}, hovering share "
              f"{k.hover:g}, init exponent delta {k.delta:g}, task exponent kappa {k.kappa:g}, "
              f"natural-image level nu {k.nu:g}, temperature exponent eta {k.eta:g}, "
              f"weight-decay exponents omega {k.omega:g} (level) / {k.omega_clock:g} (clock), "
              f"expansion exponents xi {k.xi:g} (level) / {k.xi_clock:g} (clock), "
              f"pressure threshold p0 {k.p0:g} with its clock drift z {k.drift:g}, "
              f"RMS {k.rms:.3f}; depth tilt "
              f"{k.tilt:g}, later-block exponent {k.block:g} (per-space RMS {k.tilt_rms:.3f} "
              f"given each run's mean)")
    for by in ("rho", "noise"):
        for row in leave_one_out(tuple(runs), by):
            print(f"leave {by}={row[by]:g} out ({row['runs']} runs): RMS {row['rms']:.3f}; final "
                  f"kept (plain) measured {row['final_measured']}, predicted "
                  f"{row['final_predicted']}")
    for what, row in (("the natural-image runs at the paper's per-sample lr",
                       leave_paper_psl_out(tuple(runs))),
                      ("the bottleneck runs", leave_bottleneck_out(tuple(runs)))):
        if row:
            print(f"leave {what} out ({row['runs']} runs): RMS {row['rms']:.3f}; final kept "
                  f"plain measured {row['final_measured']}, predicted {row['final_predicted']}; "
                  f"residual measured {row['final_measured_residual']}, predicted "
                  f"{row['final_predicted_residual']}")
    return 0


def write_fits(jobs: int = 1) -> int:
    """--write-fit: fit_runs over every fitted run, stored where `prunesim train` loads it, then
    every held-out fit the validation predicts from (fitting.write_held_out_fits; --jobs of them
    at once)."""
    import time
    from research.prunetrain.fitting import (HELD_OUT_FITS, bundled_runs, fit_runs,
                                             write_fit, write_held_out_fits)
    t0 = time.time()
    f = fit_runs(bundled_runs())
    print(f"wrote {write_fit(f)} (RMS {f.rms:.3f} over {len(f.runs)} runs)", flush=True)

    def progress(what):
        print(f"  held-out fit without {what} ({time.time() - t0:.0f} s)", flush=True)
    write_held_out_fits(HELD_OUT_FITS, progress, max(1, jobs))
    print(f"wrote {HELD_OUT_FITS} ({time.time() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
