"""Idle time: device-seconds by pool and cause, and the check that busy + idle time fills
every device's makespan."""

from __future__ import annotations

import numpy as np
import pandas as pd

from marlaas.eventlog import IDLE_CAUSES
from marlaas.metrics.devices import TIMES, clipped, device_table, makespan
from marlaas.metrics.utilization import utilization


def idle_breakdown(df: pd.DataFrame) -> pd.DataFrame:
    """Idle device-seconds [s] by pool (rows) and cause (columns), from the ``idle`` rows.

    Idle intervals are clipped to ``[0, makespan]``. Columns are the known causes
    (:data:`marlaas.eventlog.IDLE_CAUSES`, all present, 0 when absent) then any others.
    """
    idle = df.loc[df["kind"] == "idle", ["pool", "outcome", *TIMES]]
    start, end = clipped(idle, makespan(df))
    frame = pd.DataFrame(
        {
            "pool": idle["pool"].astype(object).to_numpy(),
            "cause": idle["outcome"].astype(object).to_numpy(),
            "seconds": end - start,
        }
    )
    table = frame.pivot_table(
        index="pool", columns="cause", values="seconds", aggfunc="sum", fill_value=0.0
    )
    extra = [c for c in table.columns if c not in IDLE_CAUSES]
    table = table.reindex(columns=[*IDLE_CAUSES, *extra], fill_value=0.0).astype(float)
    pools = [p for p in device_table(df)["pool"].unique() if p in table.index]
    table = table.reindex([*pools, *[p for p in table.index if p not in pools]])
    table.index.name, table.columns.name = "pool", "cause"
    return table


def check_partition(df: pd.DataFrame, tol: float = 1e-6) -> pd.DataFrame:
    """Assert that on every device busy seconds + idle seconds = makespan.

    The tolerance is ``tol`` x max(1, makespan) [s]. Raises AssertionError naming the first
    device that breaks the invariant (the simulator calls this after every run). Returns
    :func:`marlaas.metrics.utilization.utilization` of ``df``, which the check computes.
    """
    u = utilization(df)
    span = makespan(df)
    idle = df.loc[(df["kind"] == "idle") & (df["device"] != ""), ["device", *TIMES]]
    start, end = clipped(idle, span)
    idle_s = pd.Series(end - start).groupby(idle["device"].astype(object).to_numpy()).sum()
    total = u["busy_s"].to_numpy() + idle_s.reindex(u["device"]).fillna(0.0).to_numpy()
    bad = np.flatnonzero(np.abs(total - span) > tol * max(1.0, span))
    if len(bad):
        i = bad[0]
        raise AssertionError(
            f"device {u['device'].iloc[i]!r} (pool {u['pool'].iloc[i]!r}): busy "
            f"{u['busy_s'].iloc[i]:.6f} s + idle {total[i] - u['busy_s'].iloc[i]:.6f} s = "
            f"{total[i]:.6f} s, but the makespan is {span:.6f} s "
            f"({len(bad)} device(s) break the busy + idle partition)"
        )
    return u
