"""Per-job figures: each job's times, work done and device-seconds, its training steps once
each, and its progress over time."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from marlaas.metrics.devices import BUSY_KINDS, TIMES, clipped, makespan
from marlaas.metrics.natural_order import natural_key


def busy_share_s(df: pd.DataFrame) -> pd.Series:
    """Device-seconds [s] each generate/train row received, indexed like those rows.

    Where n rows overlap on one device, each gets 1/n of that time, so the shares of a device
    sum to its busy seconds. Times are clipped to ``[0, makespan]``.
    """
    work = df.loc[df["kind"].isin(BUSY_KINDS) & (df["device"] != ""), ["device", *TIMES]]
    n = len(work)
    if n == 0:
        return pd.Series(np.zeros(0), index=work.index, dtype=float)
    start, end = clipped(work, makespan(df))
    dev = pd.factorize(work["device"])[0]
    # Sweep line per device: events sorted by (device, time); +1 at starts, -1 at ends.
    t = np.r_[start, end]
    d = np.r_[dev, dev]
    delta = np.r_[np.ones(n), -np.ones(n)]
    order = np.lexsort((delta, t, d))  # ends before starts at equal times
    t, d, delta = t[order], d[order], delta[order]
    active = np.cumsum(delta)
    seg = np.zeros(2 * n)
    same = d[1:] == d[:-1]
    seg[:-1] = np.where(same, t[1:] - t[:-1], 0.0)
    weight = np.divide(seg, active, out=np.zeros(2 * n), where=active > 0)
    cum = np.r_[0.0, np.cumsum(weight)]
    pos = np.empty(2 * n, dtype=np.int64)
    pos[order] = np.arange(2 * n)
    share = cum[pos[n:]] - cum[pos[:n]]
    return pd.Series(np.maximum(share, 0.0), index=work.index)


def train_ops(df: pd.DataFrame) -> pd.DataFrame:
    """One row per training step *operation*: the train rows of the devices one step ran on
    collapsed into one (same job, step, start, end and outcome).

    Columns: ``job``, ``tenant``, ``step``, ``start_s``, ``end_s`` [s], ``tokens`` (tokens
    trained on, counted once), ``version``, ``staleness`` [versions], ``outcome`` and
    ``devices`` (how many device rows the step had).
    """
    cols = ["job", "tenant", "step", "start_s", "end_s", "tokens", "version", "staleness"]
    train = df.loc[df["kind"] == "train", [*cols, "outcome"]].astype(
        {"job": object, "tenant": object, "outcome": object}
    )
    key = ["job", "step", "start_s", "end_s", "outcome"]
    devices = train.groupby(key, sort=False).size()
    ops = train.drop_duplicates(key).reset_index(drop=True)
    ops["devices"] = devices.reindex(pd.MultiIndex.from_frame(ops[key])).to_numpy(np.int64)
    return ops


def job_table(
    df: pd.DataFrame,
    arrivals: Mapping[str, float] | None = None,
    unfinished: Collection[str] = (),
) -> pd.DataFrame:
    """One row per job: times [s], work done and device-seconds received.

    Columns: ``job``, ``tenant``, ``arrival_s`` (from ``arrivals``, else 0), ``completion_s``
    (end of the last sync row, else of the last train row; NaN when neither, and for the jobs
    named in ``unfinished``: cancelled ones, which did not complete),
    ``jct_s`` = completion - arrival, ``steps`` (successful train steps, each counted once
    however many devices it ran on), ``tokens`` (tokens generated), ``train_tokens`` (tokens
    trained on, once per step operation), ``device_s`` (busy device-seconds attributed to the
    job, see :func:`busy_share_s`; they sum to the total busy seconds).
    """
    arrivals = arrivals or {}
    cols = ["kind", "tenant", "job", "step", "tokens", "outcome", *TIMES]
    work = df.loc[(df["kind"] != "idle") & (df["job"] != ""), cols]
    job = work["job"].astype(object)
    kind = work["kind"]
    names = sorted(job.unique(), key=natural_key)

    def per_job(mask: pd.Series, values: pd.Series, how: str) -> pd.Series:
        return values[mask].groupby(job[mask]).agg(how).reindex(names)

    tenant = work["tenant"].astype(object).groupby(job).first().reindex(names)
    last_sync = per_job(kind == "sync", work["end_s"], "max")
    last_train = per_job(kind == "train", work["end_s"], "max")
    completion = last_sync.fillna(last_train)
    completion[completion.index.isin(list(unfinished))] = np.nan
    ops = train_ops(df)
    ok = ops[ops["outcome"] == "ok"]
    steps = ok.groupby("job")["step"].nunique().reindex(names).fillna(0)
    tokens = per_job(kind == "generate", work["tokens"], "sum").fillna(0)
    train_tokens = ops.groupby("job")["tokens"].sum().reindex(names).fillna(0)
    share = busy_share_s(df)
    device_s = share.groupby(df.loc[share.index, "job"].astype(object)).sum().reindex(names)
    arrival = pd.Series([float(arrivals.get(n, 0.0)) for n in names], index=names)
    out = pd.DataFrame(
        {
            "job": names,
            "tenant": tenant.to_numpy(),
            "arrival_s": arrival.to_numpy(),
            "completion_s": completion.to_numpy(dtype=float),
            "jct_s": (completion - arrival).to_numpy(dtype=float),
            "steps": steps.to_numpy(dtype=np.int64),
            "tokens": tokens.to_numpy(dtype=np.int64),
            "train_tokens": train_tokens.to_numpy(dtype=np.int64),
            "device_s": device_s.fillna(0.0).to_numpy(dtype=float),
        }
    )
    return out


def train_progress(df: pd.DataFrame) -> pd.DataFrame:
    """Successful train steps completed over time: columns ``job``, ``tenant``, ``t_s`` [s]
    (the end of each step, see :func:`train_ops`) and ``steps_done`` (cumulative count per
    job)."""
    ops = train_ops(df)
    train = ops[ops["outcome"] == "ok"]
    out = pd.DataFrame(
        {
            "job": train["job"].astype(object).to_numpy(),
            "tenant": train["tenant"].astype(object).to_numpy(),
            "t_s": train["end_s"].to_numpy(dtype=float),
        }
    ).sort_values(["job", "t_s"], kind="stable")
    out["steps_done"] = out.groupby("job").cumcount() + 1
    return out.reset_index(drop=True)
