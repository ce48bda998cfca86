"""marlaas.metrics.intervals: interval arithmetic."""

from __future__ import annotations

import numpy as np

from marlaas.metrics.intervals import merge_intervals


def test_merge_intervals_overlap_touch_gap():
    k, s, e = merge_intervals(
        np.array([0, 0, 0, 1, 0]),
        np.array([0.0, 1.0, 3.0, 0.0, 2.0]),
        np.array([2.0, 1.5, 4.0, 1.0, 2.5]),
    )
    assert k.tolist() == [0, 0, 1]
    assert s.tolist() == [0.0, 3.0, 0.0]
    assert e.tolist() == [2.5, 4.0, 1.0]
    k, s, e = merge_intervals(np.array([0, 0]), np.array([0.0, 3.0]), np.array([1.0, 4.0]), gap=2.0)
    assert (s.tolist(), e.tolist()) == ([0.0], [4.0])
