"""benchmarks/alone_slowdowns.py: slowdowns against alone times, and the Jain bound."""

from __future__ import annotations

import pytest

from benchmarks.alone_slowdowns import jain_bound, slowdown_rows


def test_slowdowns_are_against_each_jobs_alone_time():
    run = {"policy": "fair", "preset": None, "seed": 0, "arrivals": {"a": 0.0, "b": 10.0},
           "job_finish_s": {"a": 20.0, "b": 50.0},
           "metrics": {"fairness": {"jain_slowdown": 0.9}}}  # fmt: skip
    (row,) = slowdown_rows([run], {"a": 10.0, "b": 20.0})
    assert row["jct_mean_s"] == 30.0  # 20 and 40
    assert row["slowdown_mean"] == 2.0 and row["jain_alone"] == pytest.approx(1.0)


def test_the_bound_holds_the_small_jobs_back_to_reach_a_mean():
    alone, tokens = {"s": 1.0, "l": 1.0}, {"s": 10.0, "l": 90.0}
    # at 1 token/s the small job can finish at 10 s, the large one at 100 s: mean 55 s
    assert jain_bound(alone, tokens, 1.0, 50.0) == (None, None)
    jain, first = jain_bound(alone, tokens, 1.0, 60.0)
    assert first == pytest.approx(20.0)  # the small job finishes at 20 s, not 10 s
    assert jain == pytest.approx(60.0**2 / ((20.0**2 + 100.0**2) / 2))
