"""Interval arithmetic on arrays of start and end times [s]: merging and overlap."""

from __future__ import annotations

import numpy as np
import pandas as pd


def merge_intervals(
    keys: np.ndarray, start: np.ndarray, end: np.ndarray, gap: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge intervals per integer key (vectorised sort + cumulative max).

    Intervals of one key that overlap, touch, or are at most ``gap`` [s] apart become one.
    Returns ``(keys, starts, ends)`` sorted by key then start; the intervals of one key are
    disjoint.
    """
    keys = np.asarray(keys)
    if len(keys) == 0:
        return keys[:0], np.zeros(0), np.zeros(0)
    order = np.lexsort((start, keys))
    k, s, e = keys[order], np.asarray(start, float)[order], np.asarray(end, float)[order]
    e_max = pd.Series(e).groupby(k, sort=False).cummax().to_numpy()
    new = np.ones(len(k), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > e_max[:-1] + gap)
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(k) - 1]
    return k[first], s[first], e_max[last]


def cumulative_overlap(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t`` [s]: the summed length [s] of the intervals' parts before it.

    Differences between consecutive times give the interval-seconds inside each bin (for
    overlapping intervals that is concurrency x seconds).
    """
    s, e = np.sort(starts), np.sort(ends)
    cs, ce = np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(e)]
    n_s = np.searchsorted(s, t, side="right")
    n_e = np.searchsorted(e, t, side="right")
    return (n_s * t - cs[n_s]) - (n_e * t - ce[n_e])
