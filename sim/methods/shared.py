"""Formulas and parsers shared by the offline kernels and their PyTorch twins (sim.methods.torch_ops).

A leaf module: it imports nothing from sim.methods, so the twins can use it without importing
the family modules that construct them.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

SIGMA_FACTORS = {"paper": math.sqrt(2.0 / math.pi), "unbiased": math.sqrt(math.pi / 2.0), "meanabs": 1.0}


def dbtd_tau(mean_abs: float, p: float, sigma: str = "paper") -> np.float32:
    """The pruning threshold for target rate p from mean |g| (float32, as every twin uses it)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"pruning rate p must be in (0, 1), got {p}")
    if sigma not in SIGMA_FACTORS:
        raise ValueError(f"sigma must be one of {', '.join(SIGMA_FACTORS)}, got {sigma!r}")
    return np.float32(NormalDist().inv_cdf((1.0 + p) / 2.0) * SIGMA_FACTORS[sigma] * mean_abs)


def parse_nm(text: str) -> tuple[int, int]:
    """'2:4' -> (2, 4), validated: 1 <= n < m <= 32."""
    try:
        n_s, m_s = str(text).split(":")
        n, m = int(n_s), int(m_s)
    except ValueError:
        raise ValueError(f"expected n:m such as 2:4, got {text!r}") from None
    if not (1 <= n < m <= 32):
        raise ValueError(f"n:m must satisfy 1 <= n < m <= 32, got {n}:{m}")
    return n, m
