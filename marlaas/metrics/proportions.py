"""Confidence intervals of accuracies: one model's (Wilson) and the difference between two
models scored on the same problems (Newcombe's paired interval).

Two models scored on the same held-out problems are paired data: most problems both get right
or both get wrong, and only the discordant ones carry the difference. Treating the two
accuracies as independent (two Wilson intervals side by side) overstates the uncertainty of
their difference; Newcombe's method 10 (R. G. Newcombe, "Improved confidence intervals for the
difference between binomial proportions based on paired data", Statistics in Medicine 17,
2635-2650, 1998; as Fagerland, Lydersen and Laake give it, "Statistical Analysis of Contingency
Tables", 2017, chapter 8: the square-and-add interval) combines the two Wilson intervals with
the correlation of the pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import binomtest

CONFIDENCE = 0.95


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``correct`` / ``n`` (scipy's)."""
    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class PairedDifference:
    """The difference ``second - first`` of two accuracies on the same problems, with its
    interval [fractions of 1], and the 2x2 table behind it."""

    difference: float
    low: float
    high: float
    both: int
    """Problems both got right."""
    only_first: int
    only_second: int
    neither: int

    @property
    def n(self) -> int:
        """Problems (pairs) compared."""
        return self.both + self.only_first + self.only_second + self.neither


def paired_difference(first: str, second: str, confidence: float = CONFIDENCE) -> PairedDifference:
    """Newcombe's square-and-add interval of ``second``'s accuracy minus ``first``'s, where each is
    a string of ``0``/``1`` outcomes over the same problems in the same order (eval.json's
    ``outcomes``). Strings of different lengths, empty ones or other characters are a
    ValueError."""
    if len(first) != len(second) or not first:
        raise ValueError(f"paired outcomes must cover the same problems: {len(first)} "
                         f"against {len(second)}")  # fmt: skip
    if set(first + second) - {"0", "1"}:
        raise ValueError("paired outcomes are strings of 0 and 1")
    pairs = list(zip(first, second, strict=True))
    both = pairs.count(("1", "1"))
    only_first, only_second = pairs.count(("1", "0")), pairs.count(("0", "1"))
    neither = len(pairs) - both - only_first - only_second
    n = len(pairs)
    p1, p2 = (both + only_first) / n, (both + only_second) / n
    l1, u1 = wilson_interval(both + only_first, n, confidence)
    l2, u2 = wilson_interval(both + only_second, n, confidence)
    margins = (both + only_first) * (only_second + neither) * (both + only_second)
    margins *= only_first + neither
    agreement = both * neither - only_first * only_second
    if agreement > 0:  # the correlation's continuity correction (Newcombe's)
        agreement = max(agreement - n / 2, 0)
    phi = agreement / math.sqrt(margins) if margins else 0.0
    # second - first: the lower limit pairs second's lower room with first's upper room
    down = math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0))
    up = math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0))
    difference = p2 - p1
    return PairedDifference(difference, difference - down, difference + up, both, only_first,
                            only_second, neither)  # fmt: skip
