"""Fit the training step's cost to a real run's training rows, constrained as the model is.

The simulator charges a step ``train_overhead_s + work / train_tokens_per_s`` where ``work``
is :func:`marlaas.sim.cost_model.train_work` / devices (the step's tokens x (1 + rank /
train_rank_scale), and a forward pass more for a job of several minibatches). Both parameters are
non-negative, so they are fitted as such: non-negative least squares (scipy's ``nnls``) of
the durations on ``[1, work]``. A bound that binds is an active constraint of that solve, so
the other parameter is refitted with it held at 0 (a least-squares line whose intercept came
out negative, clamped to 0 afterwards, kept a slope fitted for the intercept it no longer has).

Where the rows cannot identify the rate (every step of about one size, or durations that do
not grow with the tokens) the fit keeps the base profile's rate (or, where that is slower than
the steps themselves, the rate at which they need no overhead), fits the overhead around it so
that a step of the mean size takes what it took, and says so; a poor fit (R² below
:data:`POOR_R2`) is reported the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from marlaas.sim.cost_model import MAX_RATE

POOR_R2 = 0.5
"""Below this R² a fit explains too little of its rows to be trusted (a warning)."""
MIN_SPREAD = 0.02
"""Relative spread (std / mean) of the steps' work below which tokens/s is not identifiable."""


@dataclass(frozen=True)
class TrainFit:
    """The fitted training terms, how well they explain the rows, and what they cannot say."""

    overhead_s: float
    """Fixed cost per step [s]."""
    tokens_per_s: float
    """Rate [tokens/s per device]."""
    r2: float
    """Coefficient of determination of the fitted durations (nan for fewer than 2 rows)."""
    mape: float
    """Mean absolute percentage error of the fitted durations."""
    rows: int
    spread: float
    """Relative spread of the steps' work (std / mean)."""
    warnings: list[str] = field(default_factory=list)
    """Parameters the rows could not identify or fit well, one line each."""

    @property
    def quality(self) -> str:
        """R², error and spread, as the calibration table shows them."""
        note = f"R² {self.r2:.3f}; error {self.mape:.1%}; batch tokens vary {self.spread:.0%}"
        if any("not identifiable" in w for w in self.warnings):
            note += " (rate kept from the base profile: add runs with other batch sizes)"
        return note


def r_squared(y: np.ndarray, pred: np.ndarray) -> float:
    """1 - residual / total sum of squares (nan for fewer than 2 rows; 1 for constant rows
    fitted exactly)."""
    if len(y) < 2:
        return float("nan")
    total = float(((y - y.mean()) ** 2).sum())
    residual = float(((y - pred) ** 2).sum())
    if total <= 1e-300:
        return 1.0 if residual <= 1e-300 else 0.0
    return 1.0 - residual / total


def fit_train(work: np.ndarray, durations: np.ndarray, base_rate: float) -> TrainFit:
    """Fit ``durations = overhead + work / rate`` (both >= 0); ``base_rate`` [tokens/s] is kept
    where the rows cannot identify the rate."""
    x, y = np.asarray(work, float), np.asarray(durations, float)
    spread = float(np.std(x) / max(np.mean(x), 1e-12)) if len(x) else 0.0
    warnings: list[str] = []
    slope = 0.0
    if spread > MIN_SPREAD and len(x) >= 2:
        scale = float(x.max()) or 1.0
        (overhead, slope), _ = nnls(np.column_stack([np.ones_like(x), x / scale]), y)
        slope /= scale
        if slope <= 1.0 / MAX_RATE:
            slope = 0.0
            warnings.append(
                "train_tokens_per_s: not identifiable (the steps' durations do not grow with "
                "their tokens): kept the base profile's rate"
            )
    else:
        warnings.append(
            f"train_tokens_per_s: not identifiable (the steps' tokens vary {spread:.1%}, "
            f"under {MIN_SPREAD:.0%}): kept the base profile's rate"
        )
    if slope <= 0 and len(y):  # the base rate, or the slowest that leaves no overhead < 0
        rate = max(base_rate, float(np.mean(x) / max(np.mean(y), 1e-12)))
        slope = 1.0 / min(rate, MAX_RATE)
        overhead = max(float(np.mean(y - slope * x)), 0.0)
    pred = overhead + slope * x
    r2 = r_squared(y, pred)
    mape = float(np.mean(np.abs(pred - y) / np.maximum(y, 1e-9))) if len(y) else float("nan")
    if r2 < POOR_R2 and spread > MIN_SPREAD:
        warnings.append(
            f"train_overhead_s, train_tokens_per_s: R² {r2:.3f} (under {POOR_R2}): the steps' "
            "tokens explain little of their durations"
        )
    return TrainFit(float(overhead), float(1.0 / slope), r2, mape, len(y), spread, warnings)
