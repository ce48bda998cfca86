"""The token rate per window of benchmarks/tail_timeline.py: a generation's tokens are spread
evenly over its duration, per job and in all."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.tail_timeline import token_rate


def test_tokens_spread_over_windows_per_job():
    events = pd.DataFrame(
        [  # kind, job, start_s, end_s, tokens
            ("generate", "a", 0.0, 20.0, 2_000),  # 100 tokens/s across both windows
            ("generate", "b", 5.0, 10.0, 500),  # 100 tokens/s for 5 s of the first
            ("env", "b", 10.0, 20.0, 0),  # not generation: not counted
        ],
        columns=["kind", "job", "start_s", "end_s", "tokens"],
    )
    rate = token_rate(events, bin_s=10.0)
    assert list(rate.index) == [0, 10]
    assert rate.loc[0, "a"] == pytest.approx(100.0)
    assert rate.loc[10, "a"] == pytest.approx(100.0)
    assert rate.loc[0, "b"] == pytest.approx(50.0)  # 500 tokens in a 10 s window
    assert rate.loc[10, "b"] == 0.0
    assert rate.loc[0, "all"] == pytest.approx(150.0)
    assert rate["all"].sum() * 10.0 == pytest.approx(2_500.0)  # every token counted once
