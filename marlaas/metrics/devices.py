"""A run's devices, its makespan, and when each device was busy (see :mod:`marlaas.metrics`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from marlaas.metrics.intervals import merge_intervals
from marlaas.metrics.natural_order import natural_key

BUSY_KINDS = ("generate", "train")
"""Kinds of work that make a device busy."""
TIMES = ("start_s", "end_s")
"""The time columns [s]."""


def makespan(df: pd.DataFrame) -> float:
    """Makespan of the run [s]: max ``end_s`` of train and sync rows, else of non-idle rows."""
    kind = df["kind"]
    ends = df["end_s"][kind.isin(("train", "sync"))]
    if ends.empty:
        ends = df["end_s"][kind != "idle"]
    return max(float(ends.max()), 0.0) if not ends.empty else 0.0


def device_table(df: pd.DataFrame) -> pd.DataFrame:
    """Devices of the run in natural order: columns ``device``, ``pool`` (first pool seen)."""
    rows = df.loc[df["device"] != "", ["device", "pool"]].drop_duplicates("device")
    rows = rows.astype({"device": object, "pool": object})
    names = rows["device"].tolist()
    order = sorted(range(len(names)), key=lambda i: natural_key(names[i]))
    return rows.iloc[order].reset_index(drop=True)


def clipped(df: pd.DataFrame, span: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times [s] of ``df``'s rows clipped to ``[0, span]`` (end >= start)."""
    start = np.clip(df["start_s"].to_numpy(dtype=float), 0.0, span)
    end = np.clip(df["end_s"].to_numpy(dtype=float), 0.0, span)
    return start, np.maximum(end, start)


def busy(df: pd.DataFrame):
    """Devices (:func:`device_table`), makespan [s] and the merged busy intervals as arrays
    (device code = row of the devices, start [s], end [s]), sorted by device then start."""
    devs = device_table(df)
    span = makespan(df)
    work = df.loc[df["kind"].isin(BUSY_KINDS) & (df["device"] != ""), ["device", *TIMES]]
    codes = pd.Index(devs["device"]).get_indexer(work["device"].astype(object))
    start, end = clipped(work, span)
    k, s, e = merge_intervals(codes, start, end)
    return devs, span, k, s, e


def device_busy_intervals(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Merged busy intervals of every device: ``{device: array (k, 2) of [start_s, end_s]}``.

    Busy means covered by a generate or train row; intervals are clipped to
    ``[0, makespan]``, sorted and disjoint. Devices without busy time map to a (0, 2) array.
    """
    devs, _, k, s, e = busy(df)
    bounds = np.searchsorted(k, np.arange(len(devs) + 1))
    pairs = np.column_stack([s, e])
    return {d: pairs[bounds[i] : bounds[i + 1]] for i, d in enumerate(devs["device"])}
