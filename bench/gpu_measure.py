"""Measure a real NVIDIA GPU: now `prunesim calibrate --gpu` (sim/engines/gpu/calibrate.py), which
times dense and 2:4 GEMMs (the ResNet-18 AGBP shapes this script used to time), convs and a copy,
writes the measurement file and fits the GPU model's free parameters. This thin caller is kept so
existing instructions still work:

    python bench/gpu_measure.py [--measurements-out FILE] [--out HW.yaml] [--hw BASE] [--quick]

Needs a CUDA build of PyTorch; never run by tests or CI.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from sim.cli import main as prunesim
    return prunesim(["calibrate", "--gpu", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
