"""Utilization: the busy fraction of each device, pool and shared processor, overall and
over time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from marlaas.metrics.devices import busy
from marlaas.metrics.intervals import cumulative_overlap, merge_intervals

DEFAULT_TIME_BINS = 200
"""Number of time bins of :func:`utilization_over_time` when ``bin_s`` is not given."""


def utilization(df: pd.DataFrame) -> pd.DataFrame:
    """Per-device utilization: columns ``device``, ``pool``, ``busy_s`` [s], ``utilization``.

    ``utilization`` = busy seconds / makespan, in [0, 1] (0 when the makespan is 0).
    """
    devs, span, k, s, e = busy(df)
    busy_s = np.bincount(k, weights=e - s, minlength=len(devs)) if len(devs) else np.zeros(0)
    out = devs.copy()
    out["busy_s"] = busy_s
    out["utilization"] = np.clip(busy_s / span, 0.0, 1.0) if span > 0 else 0.0
    return out


def processor_utilization(df: pd.DataFrame) -> float:
    """Busy fraction of one processor that every device shares (cluster.shared_compute):
    the union of all devices' busy intervals / makespan, in [0, 1]. Two devices working at
    once on one CPU keep it busy once, not twice, so placements that put more devices on it
    (colocated engines) compare with those that put fewer."""
    _, span, k, s, e = busy(df)
    if span <= 0 or not len(k):
        return 0.0
    _, s, e = merge_intervals(np.zeros(len(k), dtype=np.int64), s, e)
    return float(np.clip((e - s).sum() / span, 0.0, 1.0))


def utilization_by_pool(df: pd.DataFrame, u: pd.DataFrame | None = None) -> dict[str, float]:
    """Utilization of each pool: the mean over its devices of busy seconds / makespan
    (``u``: :func:`utilization` of ``df``, when the caller has it)."""
    if u is None:
        u = utilization(df)
    means = u.groupby("pool", sort=False)["utilization"].mean()
    return {str(p): float(v) for p, v in means.items()}


def utilization_over_time(df: pd.DataFrame, bin_s: float | None = None) -> pd.DataFrame:
    """Busy fraction per pool in time bins over ``[0, makespan]``.

    Columns: ``t_start_s``, ``t_end_s`` [s], one column per pool and ``overall``: the busy
    device-seconds in the bin / (bin width [s] x devices). Bins are ``bin_s`` [s] wide (the last
    one may be shorter) or, when ``bin_s`` is None, makespan / 200. The series integrates
    exactly: sum(fraction x width x devices) = the pool's busy seconds of :func:`utilization`.
    """
    devs, span, k, s, e = busy(df)
    if span <= 0:
        return pd.DataFrame(columns=["t_start_s", "t_end_s", *devs["pool"].unique(), "overall"])
    if bin_s is None:
        edges = np.linspace(0.0, span, DEFAULT_TIME_BINS + 1)
    else:
        if bin_s <= 0:
            raise ValueError(f"bin_s must be > 0 s, got {bin_s}")
        edges = np.r_[np.arange(0.0, span, bin_s), span]
    width = np.diff(edges)
    out = {"t_start_s": edges[:-1], "t_end_s": edges[1:]}
    pool_of = devs["pool"].to_numpy()
    for pool in pd.unique(pool_of):
        in_pool = np.isin(k, np.flatnonzero(pool_of == pool))
        busy_s = np.diff(cumulative_overlap(s[in_pool], e[in_pool], edges))
        out[str(pool)] = busy_s / (width * np.count_nonzero(pool_of == pool))
    out["overall"] = np.diff(cumulative_overlap(s, e, edges)) / (width * max(len(devs), 1))
    return pd.DataFrame(out)
