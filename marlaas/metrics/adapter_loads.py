"""Adapter loads: how many there were (a trainer's swap-in once, not once per device) and how
many engines needed per rollout group turn generated."""

from __future__ import annotations

import numpy as np
import pandas as pd


def adapter_loads(df: pd.DataFrame) -> int:
    """Number of adapter loads: each engine's load counts once, and so does a trainer's swap-in
    of a job although it has one row per device of the trainer.

    A swap-in is recognised by what follows it: on each of its devices the job's train step
    starts when the load ends. Rows of one (job, version, start, end) that are all followed so
    count as one load; every other adapter_load row counts as one.
    """
    loads, swap_in = _loads(df)
    if loads.empty:
        return 0
    n_swaps = loads[swap_in].drop_duplicates(["job", "version", "start_s", "end_s"]).shape[0]
    return int(n_swaps + np.count_nonzero(~swap_in))


def loads_per_group(df: pd.DataFrame) -> float | None:
    """Adapter loads on inference engines per rollout group turn generated (None: nothing
    generated): how often placement had to load an adapter before it could generate. Every
    adapter_load row that is not a trainer's swap-in (see :func:`adapter_loads`) is an
    engine's load."""
    generated = int((df["kind"] == "generate").sum())
    if not generated:
        return None
    _, swap_in = _loads(df)
    return float(np.count_nonzero(~swap_in)) / generated


def _loads(df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The adapter_load rows, and which of them are a trainer's swap-in (see adapter_loads)."""
    cols = ["job", "device", "version", "start_s", "end_s"]
    loads = df.loc[df["kind"] == "adapter_load", cols].astype({"job": object, "device": object})
    if loads.empty:
        return loads, np.zeros(0, dtype=bool)
    train = df.loc[df["kind"] == "train", ["job", "device", "start_s"]].astype(
        {"job": object, "device": object}
    )
    starts = pd.MultiIndex.from_frame(train.drop_duplicates())
    probe = pd.MultiIndex.from_arrays([loads["job"], loads["device"], loads["end_s"]])
    followed = pd.Series(probe.isin(starts), index=loads.index)
    key = [loads["job"], loads["version"], loads["start_s"], loads["end_s"]]
    return loads, followed.groupby(key).transform("all").to_numpy()
