"""Accuracy intervals: Wilson's for one model, Newcombe's paired one for the difference of two
models scored on the same problems."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.metrics.proportions import paired_difference, wilson_interval


@pytest.mark.parametrize(
    ("correct", "n", "low", "high"),
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0),
     (100, 200, 0.4314, 0.5686)],
)  # fmt: skip
def test_wilson_interval_matches_the_published_values(correct, n, low, high):
    assert wilson_interval(correct, n) == pytest.approx((low, high), abs=1e-4)


def outcomes(both: int, only_first: int, only_second: int, neither: int) -> tuple[str, str]:
    """Two outcome strings with the given 2x2 table."""
    first = "1" * (both + only_first) + "0" * (only_second + neither)
    second = "1" * both + "0" * only_first + "1" * only_second + "0" * neither
    return first, second


def test_the_paired_interval_matches_the_published_example():
    # Cavo et al. (2012), complete response before and after consolidation therapy:
    # [[59, 6], [16, 80]]; Fagerland, Lydersen and Laake (2014, 2017) give the square-and-add
    # interval of p1 - p2 as -0.0621 (-0.1186 to -0.0046)
    before, after = outcomes(59, 6, 16, 80)
    result = paired_difference(after, before)  # second - first = before's p - after's p
    assert (result.difference, result.low, result.high) == pytest.approx(
        (-0.0621, -0.1186, -0.0046), abs=1e-4)  # fmt: skip
    assert (result.both, result.only_first, result.only_second, result.neither, result.n) == (
        59, 16, 6, 80, 161)  # fmt: skip


def test_pairs_that_agree_give_a_narrower_interval_than_two_independent_ones():
    first, second = outcomes(130, 6, 4, 60)  # 200 problems, 10 discordant
    paired = paired_difference(first, second)
    p1, p2 = first.count("1") / 200, second.count("1") / 200
    (l1, u1), (l2, u2) = wilson_interval(136, 200), wilson_interval(134, 200)
    independent = np.hypot(p1 - l1, u2 - p2), np.hypot(u1 - p1, p2 - l2)  # Newcombe's unpaired
    assert paired.difference == pytest.approx(p2 - p1)
    assert paired.low < paired.difference < paired.high
    assert paired.difference - paired.low < independent[0] / 2
    assert paired.high - paired.difference < independent[1] / 2


def test_swapping_the_models_mirrors_the_interval():
    first, second = outcomes(50, 12, 3, 35)
    forward, backward = paired_difference(first, second), paired_difference(second, first)
    assert (backward.difference, backward.low, backward.high) == pytest.approx(
        (-forward.difference, -forward.high, -forward.low))  # fmt: skip


def test_identical_models_give_an_interval_around_zero():
    same = "1101" * 50
    result = paired_difference(same, same)
    assert result.difference == 0 and result.low < 0 < result.high


def test_the_interval_covers_the_true_difference_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    n, runs = 200, 600
    # each problem: both right 0.6, only the first 0.08, only the second 0.04, neither 0.28
    cells = rng.choice(4, size=(runs, n), p=[0.6, 0.08, 0.04, 0.28])
    covered = 0
    for row in cells:
        first = "".join("1" if c in (0, 1) else "0" for c in row)
        second = "".join("1" if c in (0, 2) else "0" for c in row)
        result = paired_difference(first, second)
        covered += result.low <= -0.04 <= result.high
    assert 0.93 <= covered / runs <= 0.975


@pytest.mark.parametrize(("first", "second"), [("101", "10"), ("", ""), ("1a0", "100")])
def test_outcomes_that_do_not_pair_are_refused(first, second):
    with pytest.raises(ValueError, match="paired outcomes"):
        paired_difference(first, second)
