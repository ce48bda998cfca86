"""A run's headline numbers, as the strict-JSON dict its ``summary.json`` keeps."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from marlaas.metrics.adapter_loads import adapter_loads, loads_per_group
from marlaas.metrics.deadlines import missed_deadlines
from marlaas.metrics.devices import makespan
from marlaas.metrics.fairness import fairness
from marlaas.metrics.idle import idle_breakdown
from marlaas.metrics.jobs import job_table
from marlaas.metrics.staleness import train_staleness
from marlaas.metrics.utilization import processor_utilization, utilization, utilization_by_pool


def _num(x: float) -> float | None:
    """A plain float, or None for NaN/inf (so the summary is strict JSON)."""
    x = float(x)
    return x if math.isfinite(x) else None


def summarize(
    df: pd.DataFrame,
    arrivals: Mapping[str, float] | None = None,
    weights: Mapping[str, float] | None = None,
    unfinished: Collection[str] = (),
    deadlines: Mapping[str, float] | None = None,
    shared_processor: bool = False,
    alone_s: Mapping[str, float | None] | None = None,
) -> dict:
    """Headline numbers of a run as a JSON-serialisable dict of plain floats/ints/None.

    Keys: ``makespan_s``; ``utilization`` (overall: the mean over devices, or, when every
    device shares one processor (``shared_processor``: cluster.shared_compute), that
    processor's busy fraction, :func:`~marlaas.metrics.utilization.processor_utilization`,
    also under ``processor_utilization``) and ``utilization_by_pool``; ``jct_mean_s``,
    ``jct_p90_s``, ``jct_max_s`` (job completion time - arrival [s]);
    ``idle_by_cause_device_s`` (device-seconds per cause, all pools); ``staleness_mean``,
    ``staleness_max`` [versions]; ``adapter_swaps`` (adapter loads, see
    :func:`~marlaas.metrics.adapter_loads.adapter_loads`); ``loads_per_group`` (engine adapter
    loads per rollout group turn generated, see
    :func:`~marlaas.metrics.adapter_loads.loads_per_group`); ``fairness`` (see
    :func:`~marlaas.metrics.fairness.fairness`); ``n_jobs``, ``n_tenants``, ``n_devices``,
    ``n_rows``; ``groups_dropped`` (groups whose samples all earned the same reward, dropped
    and replaced under ``rl.resample_alike``: their environment rows' outcome ``resampled``).
    Jobs named in ``unfinished`` (cancelled) have no completion time: they count
    in none of the completion figures. ``deadlines_missed``: how many of the jobs in
    ``deadlines`` ({job: deadline after its arrival [s]}) missed theirs (see
    :func:`~marlaas.metrics.deadlines.missed_deadlines`); None when no job has a deadline.
    ``alone_s``: each job's completion time alone [s], for the slowdowns
    (:func:`~marlaas.metrics.fairness.fairness`).
    """
    u = utilization(df)
    jobs = job_table(df, arrivals, unfinished)
    jct = jobs["jct_s"].dropna().to_numpy(dtype=float)
    idle = idle_breakdown(df).sum(axis=0)
    st = train_staleness(df)["staleness"]
    fair = fairness(df, arrivals, weights, jobs, alone_s)
    overall = float(u["utilization"].mean()) if len(u) else 0.0
    shared = {"processor_utilization": processor_utilization(df)} if shared_processor else {}
    return {
        "makespan_s": float(makespan(df)),
        "utilization": shared.get("processor_utilization", overall),
        **shared,
        "utilization_by_pool": utilization_by_pool(df, u),
        "jct_mean_s": _num(jct.mean()) if len(jct) else None,
        "jct_p90_s": _num(np.percentile(jct, 90)) if len(jct) else None,
        "jct_max_s": _num(jct.max()) if len(jct) else None,
        "idle_by_cause_device_s": {str(c): float(v) for c, v in idle.items()},
        "staleness_mean": _num(st.mean()) if len(st) else None,
        "staleness_max": int(st.max()) if len(st) else None,
        "adapter_swaps": adapter_loads(df),
        "loads_per_group": loads_per_group(df),
        "fairness": {k: (None if v is None else _num(v)) for k, v in fair.items()},
        "n_jobs": len(jobs),
        "n_tenants": int(jobs["tenant"].nunique()),
        "n_devices": len(u),
        "n_rows": len(df),
        "groups_dropped": int(((df["kind"] == "env") & (df["outcome"] == "resampled")).sum()),
        "deadlines_missed": len(missed_deadlines(jobs, deadlines)) if deadlines else None,
    }
