"""marlaas.metrics.devices: busy intervals and the makespan."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.metrics.devices import device_busy_intervals, makespan
from tests.metrics.examples import busy_reference
from tests.synthetic import make_frame


def test_busy_intervals_match_reference(medium_log):
    df, _ = medium_log
    intervals = device_busy_intervals(df)
    ref = busy_reference(df)
    assert set(intervals) == set(ref)
    for dev, iv in intervals.items():
        assert iv.shape[1] == 2
        assert np.all(iv[:, 1] >= iv[:, 0])
        assert np.all(iv[1:, 0] > iv[:-1, 1])  # sorted and disjoint
        assert (iv[:, 1] - iv[:, 0]).sum() == pytest.approx(ref[dev], abs=1e-9)


def test_makespan_without_train_uses_all_work():
    df = make_frame(
        [
            dict(kind="generate", device="r/0", pool="rollout", start_s=1, end_s=4),
            dict(kind="env", pool="env", start_s=4, end_s=6),
            dict(kind="idle", device="r/0", pool="rollout", start_s=0, end_s=9),
        ]
    )
    assert makespan(df) == 6.0
    assert makespan(df.iloc[:0]) == 0.0
