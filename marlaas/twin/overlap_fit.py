"""How much generation and training slow each other on a processor where they overlap
(cluster.shared_compute: overlap).

The simulator runs a training step ``overlap_train_slowdown`` (s_t) times slower while any
engine decodes, and engines ``overlap_decode_slowdown`` (s_d) times slower while a step runs.
A piece of work that the other kind covered for a fraction f of its span did (1 - f) + f / s
of its work alone in that time: it took its alone time times :func:`stretch`, 1 / (1 - f +
f / s). Each factor is fitted with the terms of its stage: for each s of a grid, the stage's
own fit (training: overhead and rate; decode: the engine's regression) on the durations
divided by the stretch, keeping the s whose predictions, stretched again, leave the least
squared error on the durations themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from marlaas.metrics.intervals import merge_intervals

GRID = np.round(np.arange(1.0, 4.0 + 1e-9, 0.02), 2)
"""The slowdowns tried (1: no cost to overlapping, 4: each a quarter of its speed)."""
MIN_ALONE_ROWS = 30
"""Rows of work the other stage never covered that pin a stage's own speed before its overlap
slowdown is fitted (fewer: both are fitted together)."""
MIN_COVER_SPREAD = 0.1
"""Standard deviation of the covered fractions below which a factor is confounded with the
stage's rate (every piece of work overlapped about as much): a warning."""


@dataclass(frozen=True)
class OverlapFit:
    """A fitted slowdown, the rows it came from and how much their overlap varied."""

    slowdown: float
    rows: int
    overlapped: int
    """Rows the other stage covered at all."""
    covered_mean: float
    """The mean share of those rows' spans it covered."""
    covered_spread: float
    """The standard deviation of the covered share over every row."""

    @property
    def quality(self) -> str:
        """What the calibration table shows for it."""
        return (f"{self.overlapped} of the rows overlapped, {self.covered_mean:.0%} of their "
                f"spans on average")  # fmt: skip

    def warning(self, name: str) -> str | None:
        """A line when the rows' overlap hardly varied (the factor is then unreliable)."""
        if self.covered_spread >= MIN_COVER_SPREAD:
            return None
        return (f"{name}: the other stage covered the rows' spans alike (spread "
                f"{self.covered_spread:.0%}): too alike to tell the slowdown from the stage's "
                "own speed; calibrate from runs that also took turns")  # fmt: skip


def stretch(slowdown: float, covered: np.ndarray | pd.Series) -> np.ndarray | pd.Series:
    """How many times its alone time a piece of work took when the other kind covered the
    fraction ``covered`` of its span and slowed it ``slowdown`` times meanwhile."""
    return 1.0 / (1.0 - covered * (1.0 - 1.0 / slowdown))


def covered_fraction(
    starts: np.ndarray, ends: np.ndarray, other_starts: np.ndarray, other_ends: np.ndarray
) -> np.ndarray:
    """For each interval [start, end): the fraction of it covered by the union of the other
    intervals (0 for an empty interval)."""
    starts, ends = np.asarray(starts, float), np.asarray(ends, float)
    _, lo, hi = merge_intervals(np.zeros(len(other_starts), int), other_starts, other_ends)
    covered = np.clip(
        np.minimum(ends[:, None], hi[None, :]) - np.maximum(starts[:, None], lo[None, :]), 0, None
    ).sum(axis=1) if len(lo) else np.zeros(len(starts))  # fmt: skip
    span = ends - starts
    return np.where(span > 0, covered / np.where(span > 0, span, 1.0), 0.0)


def fit_slowdown(
    durations: np.ndarray,
    covered: np.ndarray,
    fit_alone: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> OverlapFit:
    """The grid's slowdown that best explains ``durations`` given each one's ``covered``
    fraction. ``fit_alone(durations, rows)`` fits the stage's own terms to those ``rows``
    (a boolean mask) of ``durations`` taken as alone and predicts every row: fitted once on
    the rows the other stage never covered when there are :data:`MIN_ALONE_ROWS` of them
    (they pin the stage's own speed), else on every row again for each candidate."""
    y, f = np.asarray(durations, float), np.asarray(covered, float)
    apart = f == 0
    if apart.sum() >= MIN_ALONE_ROWS:
        pinned = fit_alone(y, apart)

        def alone(_durations: np.ndarray) -> np.ndarray:
            return pinned
    else:
        every = np.ones(len(y), dtype=bool)

        def alone(durations_alone: np.ndarray) -> np.ndarray:
            return fit_alone(durations_alone, every)

    best, best_error = 1.0, np.inf
    for slowdown in GRID:
        factor = stretch(slowdown, f)
        error = float(((alone(y / factor) * factor - y) ** 2).sum())
        if error < best_error - 1e-15:
            best, best_error = float(slowdown), error
    touched = f > 0
    mean = float(f[touched].mean()) if touched.any() else 0.0
    return OverlapFit(best, len(y), int(touched.sum()), mean, float(f.std()))


def spans(events: pd.DataFrame, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the rows of ``kind``, failed ones too (they ran) [s]."""
    rows = events[events["kind"] == kind]
    return rows["start_s"].to_numpy(float), rows["end_s"].to_numpy(float)
