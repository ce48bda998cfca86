"""benchmarks/job_paths.py: a job's span, the time its work ran, and each kind's union."""

import pandas as pd
import pytest

from benchmarks.job_paths import job_paths, main, union_s


def _events(rows):
    return pd.DataFrame(rows, columns=["kind", "job", "start_s", "end_s"])


def test_overlapping_rows_count_once_and_gaps_are_not_active():
    events = _events([
        ("generate", "a", 0.0, 4.0),
        ("generate", "a", 1.0, 5.0),  # beside the first: 0-5 s once
        ("train", "a", 7.0, 9.0),  # 5-7 s: waited
        ("sync", "a", 9.0, 9.5),
        ("generate", "b", 2.0, 3.0),
        ("idle", "", 0.0, 20.0),  # a device's idle row is no job's work
    ])  # fmt: skip
    table = job_paths(events).set_index("job")
    assert table.loc["a", "span_s"] == pytest.approx(9.5)
    assert table.loc["a", "active_s"] == pytest.approx(7.5)
    assert table.loc["a", "generate_s"] == pytest.approx(5.0)
    assert table.loc["a", "train_s"] == pytest.approx(2.0)
    assert table.loc["a", "env_s"] == 0.0
    assert table.loc["b", "span_s"] == pytest.approx(1.0)
    assert list(table.index) == ["a", "b"]


def test_union_of_nested_and_touching_intervals():
    starts = pd.Series([0.0, 1.0, 3.0, 10.0])
    ends = pd.Series([3.0, 2.0, 4.0, 11.0])
    assert union_s(starts, ends) == pytest.approx(5.0)
    assert union_s(pd.Series([], dtype=float), pd.Series([], dtype=float)) == 0.0


def test_a_folder_without_an_event_log_is_one_line(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path)])
    assert str(exit_.value).startswith(f"job_paths: {tmp_path / 'events.parquet'}")
