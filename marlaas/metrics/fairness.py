"""Fairness: Jain's indices of slowdowns, completion times and device-seconds per tenant."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from marlaas.metrics.jobs import busy_share_s, job_table
from marlaas.metrics.natural_order import natural_key


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2) of the finite values, in [1/n, 1].

    NaN when there are no finite values; 1 when they are all 0.
    """
    x = np.asarray(list(values), dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan
    sq = float(np.sum(x * x))
    return 1.0 if sq == 0 else float(np.sum(x) ** 2 / (len(x) * sq))


def tenant_gpu_s(df: pd.DataFrame) -> pd.Series:
    """Busy device-seconds [s] received per tenant (see
    :func:`marlaas.metrics.jobs.busy_share_s`).

    ("gpu" in this name and in the fairness keys is historical: devices may be CPUs.)"""
    share = busy_share_s(df)
    tenants = df.loc[share.index, "tenant"].astype(object)
    out = share.groupby(tenants).sum()
    return out.reindex(sorted(out.index, key=natural_key))


def fairness(
    df: pd.DataFrame,
    arrivals: Mapping[str, float] | None = None,
    weights: Mapping[str, float] | None = None,
    jobs: pd.DataFrame | None = None,
    alone_s: Mapping[str, float | None] | None = None,
) -> dict[str, float | None]:
    """Fairness figures; ``jobs``: :func:`marlaas.metrics.jobs.job_table` of ``df`` and
    ``arrivals``, when the caller has it; ``alone_s``: {job: its completion time alone [s]}
    (marlaas.sim.alone).

    ``jain_slowdown``: Jain's index over jobs of slowdown = jct / alone time (1 = every job
    slowed alike), over the completed jobs with an alone time; None without ``alone_s``.
    ``slowdown_max``: the largest slowdown (Themis' worst finish-time fairness rho).
    ``jain_jct``: Jain's index of the completion times themselves (1 = every job took as
    long; a small job that finishes early lowers it).
    ``jain_tenant_gpu_s``: Jain's index over tenants of busy device-seconds received.
    ``jain_tenant_gpu_s_per_weight``: the same divided by each tenant's weight; None when no
    ``weights`` are given (tenants missing from ``weights`` count with weight 1; weighted
    tenants with no work count with 0 s).
    Jain's indices are in [1/n, 1].
    """
    if jobs is None:
        jobs = job_table(df, arrivals)
    jct = dict(zip(jobs["job"], jobs["jct_s"].to_numpy(dtype=float), strict=True))
    slowdown = np.array(
        [t / alone_s[j] for j, t in jct.items() if np.isfinite(t) and (alone_s or {}).get(j)]
    )
    gpu = tenant_gpu_s(df)
    per_weight = None
    if weights is not None:
        names = sorted(set(gpu.index) | set(weights), key=natural_key)
        received = gpu.reindex(names).fillna(0.0)
        w = pd.Series([float(weights.get(n, 1.0)) for n in names], index=names)
        per_weight = jain_index(received / w)
    return {
        "jain_slowdown": jain_index(slowdown) if alone_s is not None else None,
        "slowdown_max": float(slowdown.max()) if len(slowdown) else None,
        "jain_jct": jain_index(jct.values()),
        "jain_tenant_gpu_s": jain_index(gpu.to_numpy()),
        "jain_tenant_gpu_s_per_weight": per_weight,
    }
