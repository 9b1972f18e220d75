"""Capture: train real networks on real offline data with PyTorch (CPU) and record traces.

PyTorch is optional (``pip install prunesim[capture]``); importing this package does not import it.
Public API (imported lazily): `build_model`, `workload_from_model` (torchnet), `Capture`,
`GradContext`, `TransformChain` (hooks), `load_dataset`, `known_datasets` (datasets),
`train_and_capture` (trainer), `transformer_workload_from_model`,
`TransformerCapture` (transformer), `capture_transformer` (transformer_zoo). See docs/how-to/capture.md.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "build_model": "torchnet", "workload_from_model": "torchnet",
    "Capture": "hooks", "GradContext": "hooks", "TransformChain": "hooks",
    "load_dataset": "datasets", "known_datasets": "datasets",
    "train_and_capture": "trainer",
    "transformer_workload_from_model": "transformer", "TransformerCapture": "transformer",
    "capture_transformer": "transformer_zoo",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
