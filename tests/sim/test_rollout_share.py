"""The rollout share of docs/workloads.md (benchmarks/rollout_share.py): overlapping groups
count once, and a job's wall time runs from its first row to its last."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.rollout_share import shares, union_s


def test_overlapping_intervals_count_once():
    assert union_s(pd.Series([0.0, 1.0, 5.0]), pd.Series([2.0, 3.0, 6.0])) == 4.0
    assert union_s(pd.Series([], dtype=float), pd.Series([], dtype=float)) == 0.0


def test_shares_per_family_and_overall():
    rows = [  # kind, job, start_s, end_s
        ("generate", "math-01", 0.0, 4.0),
        ("generate", "math-01", 2.0, 6.0),  # overlaps the first group
        ("env", "math-01", 6.0, 8.0),
        ("train", "math-01", 8.0, 10.0),
        ("generate", "code-02", 10.0, 11.0),
        ("env", "code-02", 11.0, 15.0),
        ("sync", "code-02", 15.0, 20.0),
        ("idle", "", 0.0, 100.0),  # idle rows belong to no job
    ]
    events = pd.DataFrame(rows, columns=["kind", "job", "start_s", "end_s"])
    table = shares(events)
    assert table.loc["math", "rollout"] == pytest.approx(8 / 10)
    assert table.loc["math", "generation"] == pytest.approx(6 / 10)
    assert table.loc["code", "rollout"] == pytest.approx(5 / 10)
    assert table.loc["overall", "wall_s"] == pytest.approx(20.0)
    assert table.loc["overall", "rollout"] == pytest.approx(13 / 20)
