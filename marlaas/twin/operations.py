"""A real run's event log as operations: one row per piece of work (a training step, a sync
or a trainer swap spans several device rows), with what the cost model needs to know of it."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

from marlaas.eventlog import DONE_OUTCOMES
from marlaas.metrics.intervals import merge_intervals


def operations(events: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Successful work of ``kind``, one row per operation, with ``duration_s`` and ``devices``
    (how many device rows it had)."""
    rows = events[(events["kind"] == kind) & events["outcome"].isin(DONE_OUTCOMES)]
    key = ["job", "step", "group", "turn", "version", "start_s", "end_s"]
    devices = rows.groupby(key, sort=False).size().rename("devices").reset_index()
    ops = rows.drop_duplicates(key).merge(devices, on=key)
    return ops.assign(duration_s=ops["end_s"] - ops["start_s"]).reset_index(drop=True)


def most_jobs_at_once(events: pd.DataFrame) -> int:
    """The most jobs whose work (generation, environment steps, training) was in flight at
    one instant of a run's event log."""
    work = events[events["kind"].isin(("generate", "env", "train"))]
    if work.empty:
        return 0
    _jobs, starts, ends = merge_intervals(pd.factorize(work["job"])[0],
                                          work["start_s"].to_numpy(float),
                                          work["end_s"].to_numpy(float))  # fmt: skip
    times = np.concatenate([starts, ends])
    changes = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((changes, times))  # at one instant, a job's end before another's start
    return int(np.cumsum(changes[order]).max())


def engine_devices(events: pd.DataFrame) -> set[str]:
    """Devices that ran generation (the engines)."""
    return set(events.loc[events["kind"] == "generate", "device"])


def split_loads(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(engine adapter loads, trainer swap-ins): a swap-in is the load that the job's training
    step starts right after (the scheduler starts it when the state has arrived)."""
    loads = operations(events, "adapter_load")
    train = operations(events, "train")[["job", "start_s"]].rename(columns={"start_s": "end_s"})
    swap = loads.merge(train.drop_duplicates(), on=["job", "end_s"], how="left", indicator=True)
    is_swap = swap["_merge"].eq("both").to_numpy()
    return loads[~is_swap].reset_index(drop=True), loads[is_swap].reset_index(drop=True)


def overlap_mean(
    starts: np.ndarray, ends: np.ndarray, values: np.ndarray, s: float, e: float
) -> float:
    """Time-weighted mean over [s, e] of the sum of ``values`` of the intervals covering each
    instant."""
    if e <= s:
        return float(values[(starts <= s) & (ends > s)].sum())
    covered = np.clip(np.minimum(ends, e) - np.maximum(starts, s), 0.0, None)
    return float((covered * values).sum() / (e - s))


def distinct_mean(
    starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, s: float, e: float
) -> float:
    """Time-weighted mean over [s, e] of how many distinct ``labels`` the intervals covering
    each instant carry (an engine's distinct adapters at each iteration, as the simulator
    counts them; not all those that passed through the span)."""
    live = (starts < e) & (ends > s) if e > s else (starts <= s) & (ends > s)
    if e <= s or not live.any():
        return float(len(set(labels[live])))
    lo, hi, names = np.maximum(starts[live], s), np.minimum(ends[live], e), labels[live]
    edges = np.unique(np.concatenate([lo, hi]))
    total = 0.0
    for a, b in pairwise(edges):
        total += (b - a) * len(set(names[(lo < b) & (hi > a)]))
    return total / (e - s)
