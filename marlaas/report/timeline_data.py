"""What the timeline figures draw, computed from the event log: bars per device lane (merged
when closer than a gap) and, for many devices, busy fraction and main job per device and
time bin.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from marlaas.metrics.devices import device_busy_intervals, device_table, makespan
from marlaas.metrics.intervals import cumulative_overlap, merge_intervals
from marlaas.metrics.natural_order import natural_key

LANE_KINDS = ("generate", "train", "sync", "adapter_load")
"""Kinds of work drawn on device lanes, in drawing order."""
BUSY_KINDS = ("generate", "train")


def lane_segments(df: pd.DataFrame, gap_s: float = 0.0) -> pd.DataFrame:
    """Bars of the device lanes: one per run of work of one (device, job, kind, version).

    Intervals of one such key that overlap or are at most ``gap_s`` [s] apart are merged.
    Columns: ``lane`` (index in :func:`marlaas.metrics.devices.device_table`), ``device``, ``pool``,
    ``tenant``, ``job``, ``kind``, ``version``, ``start_s``, ``end_s`` [s], ``rows`` (event-log
    rows merged into the bar). Times are clipped to ``[0, makespan]``.
    """
    devs = device_table(df)
    span = makespan(df)
    work = df[df["kind"].isin(LANE_KINDS) & (df["device"] != "")]
    keys = pd.DataFrame(
        {
            "lane": pd.Index(devs["device"]).get_indexer(work["device"].astype(object)),
            "job": work["job"].astype(object).to_numpy(),
            "kind": work["kind"].astype(object).to_numpy(),
            "version": work["version"].to_numpy(np.int64),
        }
    )
    code = keys.groupby(list(keys.columns), sort=False).ngroup().to_numpy()
    start = np.clip(work["start_s"].to_numpy(float), 0.0, span)
    end = np.clip(work["end_s"].to_numpy(float), 0.0, span)
    k, s, e = merge_intervals(code, start, end, gap=gap_s)
    first = np.unique(code, return_index=True)[1]  # first row of each key, by key
    key_rows = keys.iloc[first[k]].reset_index(drop=True)
    rows = _rows_per_bar(code, start, k, s)
    tenant_of = (
        work.assign(job=work["job"].astype(object), tenant=work["tenant"].astype(object))
        .drop_duplicates("job")
        .set_index("job")["tenant"]
    )
    lane = key_rows["lane"].to_numpy()
    return pd.DataFrame(
        {
            "lane": lane,
            "device": devs["device"].to_numpy()[lane] if len(lane) else [],
            "pool": devs["pool"].to_numpy()[lane] if len(lane) else [],
            "tenant": key_rows["job"].map(tenant_of).to_numpy(),
            "job": key_rows["job"].to_numpy(),
            "kind": key_rows["kind"].to_numpy(),
            "version": key_rows["version"].to_numpy(),
            "start_s": s,
            "end_s": e,
            "rows": rows,
        }
    )


def _rows_per_bar(code, start, k, s) -> np.ndarray:
    """How many input intervals each merged bar holds (bars sorted by key, then start)."""
    n_bars = len(k)
    keys = np.r_[k, code]
    starts = np.r_[s, start]
    is_input = np.r_[np.zeros(n_bars, bool), np.ones(len(code), bool)]
    order = np.lexsort((is_input, starts, keys))  # a bar before the inputs it starts
    bar_of = np.cumsum(~is_input[order]) - 1
    return np.bincount(bar_of[is_input[order]], minlength=n_bars)


def device_busy_fraction(
    df: pd.DataFrame, bins: int = 300
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Busy fraction of every device in ``bins`` equal time bins over ``[0, makespan]``.

    Returns ``(devices, edges, busy)``: the devices (:func:`marlaas.metrics.devices.device_table`),
    the bin edges [s] (``bins + 1``) and an array (devices, bins) of busy seconds / bin width,
    in [0, 1]. Summed over bins (times the width) a device's row is its busy seconds.
    """
    devs = device_table(df)
    span = makespan(df)
    edges = np.linspace(0.0, span, bins + 1)
    width = np.diff(edges)
    busy = np.zeros((len(devs), bins))
    if span <= 0:
        return devs, edges, busy
    for i, iv in enumerate(device_busy_intervals(df).values()):
        busy[i] = np.diff(cumulative_overlap(iv[:, 0], iv[:, 1], edges)) / width
    return devs, edges, np.clip(busy, 0.0, 1.0)


def main_job(df: pd.DataFrame, devices: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """The job with the most generate/train row-seconds on each device in each time bin.

    Returns an object array (devices, bins) of job names ("" where the device was idle).
    ``devices`` and ``edges`` [s] are those of :func:`device_busy_fraction`.
    """
    n_dev, n_bins = len(devices), len(edges) - 1
    out = np.full((n_dev, max(n_bins, 0)), "", dtype=object)
    work = df[df["kind"].isin(BUSY_KINDS) & (df["device"] != "")]
    if work.empty or n_bins <= 0:
        return out
    lane = pd.Index(devices["device"]).get_indexer(work["device"].astype(object))
    job_code, jobs = pd.factorize(work["job"].astype(object))
    start = np.clip(work["start_s"].to_numpy(float), edges[0], edges[-1])
    end = np.clip(work["end_s"].to_numpy(float), edges[0], edges[-1])
    first = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, n_bins - 1)
    last = np.clip(np.searchsorted(edges, end, side="left") - 1, first, n_bins - 1)
    spans = last - first + 1
    row = np.repeat(np.arange(len(work)), spans)
    bin_ = first[row] + (np.arange(len(row)) - np.repeat(np.cumsum(spans) - spans, spans))
    seconds = np.minimum(end[row], edges[bin_ + 1]) - np.maximum(start[row], edges[bin_])
    cell = lane[row].astype(np.int64) * n_bins + bin_
    key = cell * len(jobs) + job_code[row]
    total = pd.Series(seconds).groupby(key).sum()
    total = total[total > 0]
    best = total.groupby(total.index.to_numpy() // len(jobs)).idxmax()
    cells = best.index.to_numpy()
    out.ravel()[cells] = np.asarray(jobs, dtype=object)[best.to_numpy() % len(jobs)]
    return out


def env_concurrency(df: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Mean number of concurrent environment steps per tenant in each bin of ``edges`` [s]
    (index: bin starts [s]; columns: tenants in natural order)."""
    env = df[df["kind"] == "env"]
    width = np.diff(edges)
    out = {}
    for tenant, rows in env.groupby(env["tenant"].astype(object), sort=False):
        s, e = rows["start_s"].to_numpy(float), rows["end_s"].to_numpy(float)
        out[tenant] = np.diff(cumulative_overlap(s, e, edges)) / width
    frame = pd.DataFrame(out, index=edges[:-1])
    return frame[sorted(frame.columns, key=natural_key)]


def grouped_rows(
    devices: pd.DataFrame, busy: np.ndarray, jobs: np.ndarray, limit: int
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """At most about ``limit`` heatmap rows for many devices: runs of consecutive devices of
    one pool become one row, ``first .. last (n)``, with their mean busy fraction and, per
    time bin, the main job of the group's busiest device. Fewer devices are returned as
    they are. ``devices``, ``busy`` and ``jobs`` are those of :func:`device_busy_fraction`
    and :func:`main_job`; returns (row labels, busy, jobs)."""
    names = devices["device"].tolist()
    if len(names) <= limit:
        return names, busy, jobs
    pools = devices["pool"].to_numpy()
    size = -(-len(names) // limit)
    labels, rows, mains = [], [], []
    start = 0
    while start < len(names):
        end = min(start + size, len(names))
        other = np.flatnonzero(pools[start:end] != pools[start])
        end = start + int(other[0]) if other.size else end  # a group stays in its pool
        block = busy[start:end]
        labels.append(names[start] if end - start == 1
                      else f"{names[start]} .. {names[end - 1]} ({end - start})")  # fmt: skip
        rows.append(block.mean(axis=0))
        mains.append(jobs[start:end][block.argmax(axis=0), np.arange(busy.shape[1])])
        start = end
    return labels, np.array(rows), np.array(mains, dtype=object)
