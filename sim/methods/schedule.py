"""Approximation schedules (Wang et al. 2019): which (conv layer, batch) pairs get approximated.

A schedule is a boolean table over (conv layer index, batch index mod period). The paper's three
schedules each touch 25% of pairs:
  1. every 4th conv layer starting from the 2nd, every batch;
  2. every other layer, every other batch;
  3. every layer, every 4th batch.
For the 2-layer CNN the paper approximates the 2nd conv layer every other batch.
"""
from __future__ import annotations

import numpy as np

PAPER_SCHEDULES = (1, 2, 3)


def paper_schedule(number: int, n_conv: int) -> np.ndarray:
    """The paper's schedule `number` as a (n_conv, period) boolean table."""
    if n_conv < 1:
        raise ValueError("a schedule needs at least one conv layer")
    if n_conv == 2:
        # the 2-layer CNN: its 2nd conv every other batch, whatever the schedule number
        t = np.zeros((2, 2), bool)
        t[1, 0] = True
        return t
    layers = np.arange(n_conv)
    if number == 1:
        return ((layers % 4) == 1)[:, None]
    if number == 2:
        t = np.zeros((n_conv, 2), bool)
        t[layers % 2 == 1, 0] = True
        return t
    if number == 3:
        t = np.zeros((n_conv, 4), bool)
        t[:, 0] = True
        return t
    raise ValueError(f"paper schedules are 1, 2 and 3, got {number}")


def applies(table: np.ndarray, conv_index: int, batch_index: int) -> bool:
    """Whether the method applies to this conv layer at this batch (the table repeats in batches)."""
    return bool(table[conv_index, batch_index % table.shape[1]])


def coverage(table: np.ndarray) -> float:
    """Fraction of (layer, batch) pairs touched."""
    return float(np.mean(table))


def from_rows(rows: list[list[int]] | list[str]) -> np.ndarray:
    """A user table: one row per conv layer, one 0/1 per batch of the period ("0101" or [0,1,0,1])."""
    out = [[int(ch) for ch in r] if isinstance(r, str) else [int(v) for v in r] for r in rows]
    if not out or len({len(r) for r in out}) != 1 or not all(v in (0, 1) for r in out for v in r):
        raise ValueError("schedule rows must all have the same length and hold only 0 and 1")
    return np.array(out, bool)
