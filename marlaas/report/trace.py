"""Chrome / Perfetto trace export: one process per pool, one thread per device lane.

Slices are named after the work and whose it is, ``train math-a (alice)``, so that tenants can
be told apart and searched for; idle slices are ``idle: <cause>``. Flow arrows link each
training step's story: the generation that completed its batch -> the training step -> its
weight sync. Perfetto wants complete (``ph: "X"``) slices on one thread to nest, so rows that
overlap on a device (generate rows of several groups, environment steps) are spread over lanes
``device #k``. Huge logs are downsampled first: intervals of one (device, tenant, slice name)
closer than a gap are merged, doubling the gap until at most ``max_events`` slices remain
(merged traces have no flows). The file is written with orjson.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from marlaas.atomic import write_durably
from marlaas.metrics.devices import makespan
from marlaas.metrics.intervals import merge_intervals
from marlaas.metrics.natural_order import natural_key
from marlaas.report.load import Run

MAX_EVENTS = 200_000
"""Default cap on slices per trace (about 150 bytes each in JSON)."""


def slice_names(df: pd.DataFrame) -> pd.Series:
    """Slice name of every row: ``<kind> <job> (<tenant>)``, `` [failed]`` appended for failed
    work; ``idle: <cause>`` for idle rows."""
    kind = df["kind"].astype(object)
    owner = " " + df["job"].astype(object) + " (" + df["tenant"].astype(object) + ")"
    failed = np.where(df["outcome"].astype(object) == "failed", " [failed]", "")
    work = kind + owner.where(df["job"] != "", "") + failed
    return work.where(kind != "idle", "idle: " + df["outcome"].astype(object))


def _slices(df: pd.DataFrame, max_events: int) -> tuple[pd.DataFrame, float]:
    """Rows as slices (device, pool, tenant, job, kind, name, start_s, end_s, detail), merged
    when there are more than ``max_events``; returns them and the merge gap used [s]."""
    lane_dev = df["device"].astype(object).where(df["device"] != "", "env")
    name = slice_names(df)
    if len(df) <= max_events:
        out = pd.DataFrame(
            {
                "device": lane_dev,
                "pool": df["pool"].astype(object),
                "tenant": df["tenant"].astype(object),
                "job": df["job"].astype(object),
                "kind": df["kind"].astype(object),
                "name": name,
                "start_s": df["start_s"],
                "end_s": df["end_s"],
                "step": df["step"],
                "version": df["version"],
                "tokens": df["tokens"],
                "merged": 1,
            }
        )
        return out.reset_index(drop=True), 0.0
    key_frame = pd.DataFrame(
        {
            "device": lane_dev,
            "pool": df["pool"].astype(object),
            "tenant": df["tenant"].astype(object),
            "kind": df["kind"].astype(object),
            "name": name,
        }
    )
    codes = key_frame.groupby(list(key_frame.columns), sort=False).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]  # first row of each code, by code
    start, end = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
    gap = max(makespan(df), 1.0) / 20_000
    while True:
        k, s, e = merge_intervals(codes, start, end, gap=gap)
        if len(k) <= max_events:
            break
        gap *= 2
    keys = key_frame.iloc[first[k]].reset_index(drop=True)
    out = keys.assign(job="", start_s=s, end_s=e, step=-1, version=-1, tokens=0, merged=0)
    out["name"] = out["name"] + " (merged)"
    return out, gap


def _assign_lanes(dev: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per slice so that slices of one device in one lane never overlap (greedy)."""
    lanes = np.zeros(len(dev), dtype=np.int64)
    order = np.lexsort((start, dev))
    free: list[tuple[float, int]] = []  # (end, lane) of busy lanes of the current device
    idle: list[int] = []
    current, n_lanes = None, 0
    for i in order:
        if dev[i] != current:
            current, free, idle, n_lanes = dev[i], [], [], 0
        while free and free[0][0] <= start[i]:
            heapq.heappush(idle, heapq.heappop(free)[1])
        if idle:
            lane = heapq.heappop(idle)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        lanes[i] = lane
        heapq.heappush(free, (end[i], lane))
    return lanes


def trace_events(runs: list[Run], max_events: int = MAX_EVENTS) -> list[dict]:
    """Trace events of all runs: metadata (``ph: "M"``) then slices (``ph: "X"``, times in
    microseconds). Pool p of run r is process ``100 r + p + 1``; each device lane a thread."""
    events: list[dict] = []
    per_run = max(1, max_events // max(len(runs), 1))
    for r, run in enumerate(runs):
        sl, gap = _slices(run.events, per_run)
        pools = sorted(sl["pool"].unique(), key=natural_key)
        pid_of = {p: 100 * r + i + 1 for i, p in enumerate(pools)}
        dev_codes, devices = pd.factorize(sl["device"])
        lanes = _assign_lanes(dev_codes, sl["start_s"].to_numpy(), sl["end_s"].to_numpy())
        order = sorted(range(len(devices)), key=lambda i: natural_key(devices[i]))
        rank = np.empty(len(devices), dtype=np.int64)
        rank[order] = np.arange(len(devices))
        tids = rank[dev_codes] * 1000 + lanes + 1
        suffix = f" (merged, gap {gap * 1e3:.1f} ms)" if gap else ""
        for pool, pid in pid_of.items():
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"{run.label}: {pool}{suffix}"},
                }
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                }
            )
        pids = sl["pool"].map(pid_of).to_numpy()
        seen = pd.DataFrame({"pid": pids, "tid": tids, "dev": sl["device"], "lane": lanes})
        for pid, tid, dev, lane in seen.drop_duplicates(["pid", "tid"]).itertuples(index=False):
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": int(pid),
                    "tid": int(tid),
                    "args": {"name": f"{dev} #{lane}" if lane else str(dev)},
                }
            )
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": int(pid),
                    "tid": int(tid),
                    "args": {"sort_index": int(tid)},
                }
            )
        ts = np.round(sl["start_s"].to_numpy() * 1e6, 3)  # [us]; round ends, not durations,
        dur = np.round(sl["end_s"].to_numpy() * 1e6, 3) - ts  # so touching slices still touch
        cols = zip(
            sl["name"],
            sl["kind"],
            sl["tenant"],
            sl["job"],
            sl["step"],
            sl["version"],
            sl["tokens"],
            pids,
            tids,
            ts,
            dur,
            strict=True,
        )
        for name, kind, tenant, job, step, version, tokens, pid, tid, t, d in cols:
            args = {"tenant": tenant}
            if job:
                args.update(job=job, step=int(step), version=int(version), tokens=int(tokens))
            events.append(
                {
                    "ph": "X",
                    "name": name,
                    "cat": kind,
                    "pid": int(pid),
                    "tid": int(tid),
                    "ts": float(t),
                    "dur": float(d),
                    "args": args,
                }
            )
        if not gap:
            events += step_flows(sl, pids, tids, ts, dur, first_id=1_000_000 * (r + 1))
    return events


def step_flows(
    sl: pd.DataFrame,
    pids: np.ndarray,
    tids: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    first_id: int = 1,
) -> list[dict]:
    """Flow events (``ph`` s -> t -> f) that link, per (job, step), the generate slice that
    finished last, the training step (its first device's slice) and its weight sync. Each flow
    point sits in the middle of its slice [us], which Perfetto binds it to."""
    frame = pd.DataFrame(
        {
            "job": sl["job"].to_numpy(),
            "step": sl["step"].to_numpy(),
            "kind": sl["kind"].to_numpy(),
            "pid": pids,
            "tid": tids,
            "mid": ts + dur / 2,
            "end": ts + dur,
        }
    )
    frame = frame[(frame["job"] != "") & (frame["step"] >= 0)]
    key = ["job", "step"]

    def last(kind: str, by: str) -> pd.DataFrame:
        rows = frame[frame["kind"] == kind].sort_values([by, "tid"], kind="stable")
        return rows.groupby(key, sort=False).tail(1).set_index(key)

    gen, train = last("generate", "end"), last("train", "end")
    sync = frame[frame["kind"] == "sync"].sort_values("tid").groupby(key).head(1).set_index(key)
    chain = train.join(gen.add_suffix("_gen"), how="inner").join(
        sync.add_suffix("_sync"), how="left"
    )
    events = []
    for i, ((job, step), row) in enumerate(chain.sort_values("mid").iterrows()):
        points = [("s", "_gen"), ("t", ""), ("f", "_sync")]
        if not np.isfinite(row["mid_sync"]):
            points = [("s", "_gen"), ("f", "")]
        for ph, suffix in points:
            event = {
                "ph": ph,
                "id": first_id + i,
                "name": f"step {int(step)} of {job}",
                "cat": "step",
                "pid": int(row[f"pid{suffix}"]),
                "tid": int(row[f"tid{suffix}"]),
                "ts": float(row[f"mid{suffix}"]),
            }
            if ph == "f":
                event["bp"] = "e"
            events.append(event)
    return events


def write_trace(runs: list[Run], path: Path, max_events: int = MAX_EVENTS) -> Path:
    """Write ``{"traceEvents": [...]}`` to ``path`` atomically; open it in ui.perfetto.dev."""
    payload = {"traceEvents": trace_events(runs, max_events), "displayTimeUnit": "ms"}
    return write_durably(path, orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY))
