"""Metrics of a run, computed from its event log alone (see :mod:`marlaas.eventlog`).

Every function is a pure function of the event-log frame; times are seconds [s] since the
run's start (0). The definitions, which reports and the simulator's invariants share:

- A *device* is every distinct non-empty ``device``; its pool is the row's ``pool``.
- A device is *busy* at ``t`` when a ``generate`` or ``train`` row on it covers ``t`` (the
  union of those intervals: generate rows of several groups overlap on one engine). All other
  time on a device is idle, and the log explains it with ``idle`` rows (``outcome`` = cause).
- The *makespan* [s] is the largest ``end_s`` of ``train`` and ``sync`` rows (a job finishes
  when its last adapter version is published), or of all non-idle rows when there are none.
  Busy and idle intervals are clipped to ``[0, makespan]``.
- A job's *completion* [s] is the end of its last ``sync`` row (else its last ``train`` row);
  its *arrival* [s] comes from an ``arrivals`` mapping when given, else 0.
- Work that spans several devices (a training step on a trainer of 4 devices, its weight sync,
  a trainer's adapter swap-in) is one row *per device* in the log. Device-seconds count every
  row; counts of work (steps, tokens, adapter loads, staleness samples) count each piece of
  work once (:func:`train_ops`, :func:`adapter_loads`).

All work is vectorised (sort + cumulative max), so 1e6-row logs take well under a second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping

import numpy as np
import pandas as pd

from marlaas.eventlog import IDLE_CAUSES

BUSY_KINDS = ("generate", "train")
"""Kinds of work that make a device busy."""
TIMES = ("start_s", "end_s")
"""The time columns [s]."""
DEFAULT_TIME_BINS = 200
"""Number of time bins of :func:`utilization_over_time` when ``bin_s`` is not given."""


# --------------------------------------------------------------------------- helpers


def natural_key(name: str) -> tuple:
    """Sort key that orders ``rollout/2`` before ``rollout/10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


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


def _clipped(df: pd.DataFrame, span: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times [s] of ``df``'s rows clipped to ``[0, span]`` (end >= start)."""
    start = np.clip(df["start_s"].to_numpy(dtype=float), 0.0, span)
    end = np.clip(df["end_s"].to_numpy(dtype=float), 0.0, span)
    return start, np.maximum(end, start)


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


def _busy(df: pd.DataFrame):
    """Devices, makespan [s] and merged busy intervals as (device code, start [s], end [s])."""
    devs = device_table(df)
    span = makespan(df)
    work = df.loc[df["kind"].isin(BUSY_KINDS) & (df["device"] != ""), ["device", *TIMES]]
    codes = pd.Index(devs["device"]).get_indexer(work["device"].astype(object))
    start, end = _clipped(work, span)
    k, s, e = merge_intervals(codes, start, end)
    return devs, span, k, s, e


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


# --------------------------------------------------------------------------- utilization


def device_busy_intervals(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Merged busy intervals of every device: ``{device: array (k, 2) of [start_s, end_s]}``.

    Busy means covered by a generate or train row; intervals are clipped to
    ``[0, makespan]``, sorted and disjoint. Devices without busy time map to a (0, 2) array.
    """
    devs, _, k, s, e = _busy(df)
    bounds = np.searchsorted(k, np.arange(len(devs) + 1))
    pairs = np.column_stack([s, e])
    return {d: pairs[bounds[i] : bounds[i + 1]] for i, d in enumerate(devs["device"])}


def utilization(df: pd.DataFrame) -> pd.DataFrame:
    """Per-device utilization: columns ``device``, ``pool``, ``busy_s`` [s], ``utilization``.

    ``utilization`` = busy seconds / makespan, in [0, 1] (0 when the makespan is 0).
    """
    devs, span, k, s, e = _busy(df)
    busy = np.bincount(k, weights=e - s, minlength=len(devs)) if len(devs) else np.zeros(0)
    out = devs.copy()
    out["busy_s"] = busy
    out["utilization"] = np.clip(busy / span, 0.0, 1.0) if span > 0 else 0.0
    return out


def processor_utilization(df: pd.DataFrame) -> float:
    """Busy fraction of one processor that every device shares (cluster.shared_compute):
    the union of all devices' busy intervals / makespan, in [0, 1]. Two devices working at
    once on one CPU keep it busy once, not twice, so placements that put more devices on it
    (colocated engines) compare with those that put fewer."""
    _, span, k, s, e = _busy(df)
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
    devs, span, k, s, e = _busy(df)
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
        busy = np.diff(cumulative_overlap(s[in_pool], e[in_pool], edges))
        out[str(pool)] = busy / (width * np.count_nonzero(pool_of == pool))
    out["overall"] = np.diff(cumulative_overlap(s, e, edges)) / (width * max(len(devs), 1))
    return pd.DataFrame(out)


# --------------------------------------------------------------------------- idle time


def idle_breakdown(df: pd.DataFrame) -> pd.DataFrame:
    """Idle device-seconds [s] by pool (rows) and cause (columns), from the ``idle`` rows.

    Idle intervals are clipped to ``[0, makespan]``. Columns are the known causes
    (:data:`marlaas.eventlog.IDLE_CAUSES`, all present, 0 when absent) then any others.
    """
    idle = df.loc[df["kind"] == "idle", ["pool", "outcome", *TIMES]]
    start, end = _clipped(idle, makespan(df))
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
    :func:`utilization` of ``df``, which the check computes.
    """
    u = utilization(df)
    span = makespan(df)
    idle = df.loc[(df["kind"] == "idle") & (df["device"] != ""), ["device", *TIMES]]
    start, end = _clipped(idle, span)
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


# --------------------------------------------------------------------------- jobs


def busy_share_s(df: pd.DataFrame) -> pd.Series:
    """Device-seconds [s] each generate/train row received, indexed like those rows.

    Where n rows overlap on one device, each gets 1/n of that time, so the shares of a device
    sum to its busy seconds. Times are clipped to ``[0, makespan]``.
    """
    work = df.loc[df["kind"].isin(BUSY_KINDS) & (df["device"] != ""), ["device", *TIMES]]
    n = len(work)
    if n == 0:
        return pd.Series(np.zeros(0), index=work.index, dtype=float)
    start, end = _clipped(work, makespan(df))
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


# --------------------------------------------------------------------------- staleness


def _train_staleness(df: pd.DataFrame) -> pd.DataFrame:
    """Staleness of every train step operation (once per step, not per device)."""
    ops = train_ops(df)
    train = ops[ops["staleness"] >= 0]
    return pd.DataFrame(
        {
            "job": train["job"].astype(object).to_numpy(),
            "tenant": train["tenant"].astype(object).to_numpy(),
            "staleness": train["staleness"].to_numpy(dtype=np.int64),
        }
    )


def staleness_table(df: pd.DataFrame) -> pd.DataFrame:
    """Staleness per job from the train rows (versions a batch's oldest sample lags).

    Columns: ``job``, ``tenant``, ``train_steps``, ``staleness_mean``, ``staleness_p90``,
    ``staleness_max`` [versions].
    """
    st = _train_staleness(df)
    grouped = st.groupby("job", sort=False)["staleness"]
    out = pd.DataFrame(
        {
            "tenant": st.groupby("job", sort=False)["tenant"].first(),
            "train_steps": grouped.size(),
            "staleness_mean": grouped.mean(),
            "staleness_p90": grouped.quantile(0.9),
            "staleness_max": grouped.max(),
        }
    )
    out = out.reindex(sorted(out.index, key=natural_key))
    out.index.name = "job"
    return out.reset_index()


def staleness_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Train steps per job (rows) and staleness value [versions] (columns)."""
    st = _train_staleness(df)
    table = pd.crosstab(st["job"], st["staleness"])
    table = table.reindex(sorted(table.index, key=natural_key))
    table.columns.name = "staleness"
    return table


# --------------------------------------------------------------------------- fairness


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
    """Busy device-seconds [s] received per tenant (see :func:`busy_share_s`).

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
    """Fairness figures; ``jobs``: :func:`job_table` of ``df`` and ``arrivals``, when the
    caller has it; ``alone_s``: {job: its completion time alone [s]} (marlaas.sim.alone).

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


# --------------------------------------------------------------------------- summary


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
    processor's busy fraction, :func:`processor_utilization`, also under
    ``processor_utilization``) and ``utilization_by_pool``; ``jct_mean_s``, ``jct_p90_s``,
    ``jct_max_s`` (job completion time - arrival [s]); ``idle_by_cause_device_s``
    (device-seconds per cause, all pools); ``staleness_mean``, ``staleness_max`` [versions];
    ``adapter_swaps`` (adapter loads, see :func:`adapter_loads`); ``loads_per_group`` (engine
    adapter loads per rollout group turn generated, see :func:`loads_per_group`);
    ``fairness`` (see :func:`fairness`); ``n_jobs``, ``n_tenants``, ``n_devices``, ``n_rows``.
    Jobs named in ``unfinished`` (cancelled) have no completion time: they count in none of
    the completion figures. ``deadlines_missed``: how many of the jobs in ``deadlines`` ({job:
    deadline after its arrival [s]}) missed theirs (see :func:`missed_deadlines`); None when
    no job has a deadline. ``alone_s``: each job's completion time alone [s], for the
    slowdowns (:func:`fairness`).
    """
    u = utilization(df)
    jobs = job_table(df, arrivals, unfinished)
    jct = jobs["jct_s"].dropna().to_numpy(dtype=float)
    idle = idle_breakdown(df).sum(axis=0)
    st = _train_staleness(df)["staleness"]
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
        "deadlines_missed": len(missed_deadlines(jobs, deadlines)) if deadlines else None,
    }


def missed_deadlines(jobs: pd.DataFrame, deadlines: Mapping[str, float] | None) -> list[str]:
    """Jobs of ``deadlines`` ({job: deadline after its arrival [s]}) that missed it, in
    natural order: their completion time (``jobs``: a :func:`job_table`) is later than the
    deadline, or they have none (refused, cancelled, never run)."""
    jct = dict(zip(jobs["job"], jobs["jct_s"], strict=True))
    missed = [
        name
        for name, deadline in (deadlines or {}).items()
        if not math.isfinite(jct.get(name, math.nan)) or jct[name] > deadline
    ]
    return sorted(missed, key=natural_key)
