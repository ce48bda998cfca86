"""Synthetic but realistic event logs for tests and benchmarks (no simulator needed).

Jobs run an asynchronous RL loop: groups decode on the job's rollout engine (several groups at
once, so generate rows overlap), each turn is followed by an environment step, a training step
runs on a shared trainer (FIFO), the new adapter version is synced, and the engine loads it
before the next generation. Generation may run ahead of training by ``staleness_bound``
versions. Idle rows with causes fill every gap on every device up to the makespan, so that
per device busy union + idle = [0, makespan] holds exactly.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from marlaas.eventlog import COLUMNS, write_event_log


@dataclass
class _Rows:
    cols: dict[str, list] = field(default_factory=lambda: {c: [] for c in COLUMNS})

    def add(self, n: int, **values) -> None:
        """Append ``n`` rows; scalars are broadcast, arrays must have length n."""
        defaults = dict(
            tenant="",
            job="",
            step=-1,
            group=-1,
            turn=-1,
            device="",
            pool="",
            seqs=0,
            tokens=0,
            version=-1,
            staleness=-1,
            outcome="ok",
            reward=np.nan,
            prompt_tokens=-1,
            longest_tokens=-1,
        )
        defaults.update(values)
        for c in COLUMNS:
            v = defaults[c]
            self.cols[c].append(np.asarray(v) if np.ndim(v) else np.full(n, v))

    def frame(self) -> pd.DataFrame:
        data = {c: np.concatenate(v) if v else np.zeros(0) for c, v in self.cols.items()}
        df = pd.DataFrame(data)
        ints = ["step", "group", "turn", "seqs", "version", "staleness", "prompt_tokens",
                "longest_tokens"]  # fmt: skip
        return df.astype({**dict.fromkeys(ints, "int32"), "tokens": "int64"})


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Plain-Python interval union (independent of marlaas.metrics)."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def synthetic_log(
    n_jobs: int = 4,
    n_rollout: int = 3,
    n_train: int = 1,
    steps: int = 5,
    groups: int = 4,
    turns: int = 2,
    staleness_bound: int = 1,
    seed: int = 0,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Build an event log; returns ``(frame, arrivals)`` with arrivals [s] per job."""
    rng = np.random.default_rng(seed)
    rows = _Rows()
    n_tenants = max(1, (n_jobs + 1) // 2)
    arrivals = {f"job{j}": float(j * rng.uniform(0.0, 4.0)) for j in range(n_jobs)}
    tenant = {f"job{j}": f"t{j % n_tenants}" for j in range(n_jobs)}
    index = {f"job{j}": j for j in range(n_jobs)}
    trainer = {f"job{j}": f"train/{j % n_train}" for j in range(n_jobs)}
    trainer_free = {f"train/{d}": 0.0 for d in range(n_train)}
    published = dict.fromkeys(arrivals, 0)  # adapter version on the engines
    loaded: dict[tuple[str, str], int] = {}  # (engine, job) -> adapter version loaded
    next_step = dict.fromkeys(arrivals, 0)
    last_sync = dict.fromkeys(arrivals, 0.0)
    used_version: dict[tuple[str, int], int] = {}
    waiting: set[str] = set()
    events: list[tuple[float, int, str, str, int]] = []
    seq = 0
    for job, t in arrivals.items():
        heapq.heappush(events, (t, seq, "gen", job, 0))
        seq += 1
    while events:
        now, _, what, job, k = heapq.heappop(events)
        common = dict(tenant=tenant[job], job=job, step=k)
        if what == "gen":
            if k - published[job] > staleness_bound:
                waiting.add(job)
                continue
            t0 = now
            v = published[job]
            eng = f"rollout/{(index[job] + k * n_jobs) % n_rollout}"
            used_version[(job, k)] = v
            if loaded.get((eng, job)) != v:
                load = float(rng.uniform(0.2, 0.6))
                rows.add(
                    1,
                    kind="adapter_load",
                    device=eng,
                    pool="rollout",
                    start_s=t0,
                    end_s=t0 + load,
                    version=v,
                    **common,
                )
                loaded[(eng, job)], t0 = v, t0 + load
            start = t0 + rng.uniform(0.0, 0.5, groups)
            for turn in range(turns):
                dur = rng.lognormal(1.0, 0.4, groups)
                fail = rng.random(groups) < 0.01
                rows.add(
                    groups,
                    kind="generate",
                    device=eng,
                    pool="rollout",
                    start_s=start,
                    end_s=start + dur,
                    group=np.arange(groups),
                    turn=turn,
                    seqs=8,
                    tokens=(dur * 400).astype(np.int64),
                    version=v,
                    outcome=np.where(fail, "failed", "ok"),
                    **common,
                )
                env = rng.uniform(0.3, 2.5, groups)
                rows.add(
                    groups,
                    kind="env",
                    pool="env",
                    start_s=start + dur,
                    end_s=start + dur + env,
                    group=np.arange(groups),
                    turn=turn,
                    seqs=8,
                    **common,
                )
                start = start + dur + env
            heapq.heappush(events, (float(start.max()), seq, "train", job, k))
            if k + 1 < steps:
                heapq.heappush(events, (float(start.max()), seq + 1, "gen", job, k + 1))
            seq += 2
        elif what == "train":
            dev = trainer[job]
            t0 = max(now, trainer_free[dev], last_sync[job])
            dur = float(rng.uniform(2.0, 5.0))
            sync = float(rng.uniform(0.2, 0.5))
            lag = k - used_version[(job, k)]
            rows.add(
                1,
                kind="train",
                device=dev,
                pool="train",
                start_s=t0,
                end_s=t0 + dur,
                seqs=8 * groups * turns,
                tokens=int(dur * 3000),
                version=k + 1,
                staleness=lag,
                **common,
            )
            rows.add(
                1,
                kind="sync",
                device=dev,
                pool="train",
                start_s=t0 + dur,
                end_s=t0 + dur + sync,
                version=k + 1,
                **common,
            )
            trainer_free[dev] = last_sync[job] = t0 + dur + sync
            heapq.heappush(events, (t0 + dur + sync, seq, "synced", job, k + 1))
            seq += 1
        else:  # synced
            published[job] = max(published[job], k)
            if job in waiting:
                waiting.discard(job)
                heapq.heappush(events, (now, seq, "gen", job, next_step[job]))
                seq += 1
        if what == "gen":
            next_step[job] = k + 1
    df = rows.frame()
    _add_idle(df, rows, rng)
    return rows.frame(), arrivals


def _add_idle(df: pd.DataFrame, rows: _Rows, rng: np.random.Generator) -> None:
    """Append idle rows that fill every non-busy gap of every device up to the makespan."""
    span = float(df.loc[df["kind"].isin(["train", "sync"]), "end_s"].max())
    devices = df.loc[df["device"] != "", ["device", "pool"]].drop_duplicates("device")
    for dev, pool in devices.itertuples(index=False):
        on = df[df["device"] == dev]
        work = on.loc[on["kind"].isin(["generate", "train"]), ["start_s", "end_s"]]
        busy = _merge([(float(s), float(e)) for s, e in work.to_numpy()])
        marks = on[on["kind"].isin(["adapter_load", "sync"])]
        m_start, m_end = marks["start_s"].to_numpy(), marks["end_s"].to_numpy()
        m_load = (marks["kind"] == "adapter_load").to_numpy()
        cuts = np.unique(np.r_[m_start, m_end])
        gaps, t = [], 0.0
        for s, e in [*busy, (span, span)]:
            if s > t:
                gaps.append((t, min(s, span)))
            t = max(t, e)
        first = busy[0][0] if busy else span
        last = busy[-1][1] if busy else 0.0
        for gs, ge in gaps:
            inner = cuts[(cuts > gs) & (cuts < ge)]
            points = [gs, *inner.tolist(), ge]
            for a, b in itertools.pairwise(points):
                mid = (a + b) / 2
                cover = np.flatnonzero((m_start <= mid) & (m_end >= mid))
                if len(cover):
                    cause = "adapter_load" if m_load[cover[0]] else "weight_sync"
                elif b <= first or a >= last:
                    cause = "no_work"
                elif pool == "rollout":
                    cause = str(rng.choice(["environment", "staleness", "trainer"]))
                else:
                    cause = "rollouts"
                rows.add(1, kind="idle", device=dev, pool=pool, start_s=a, end_s=b, outcome=cause)


def write_run(
    run_dir: str | Path,
    policy: str = "fifo",
    seed: int = 0,
    weights: dict[str, float] | None = None,
    **kwargs,
) -> Path:
    """Write a synthetic run folder (events.parquet + summary.json); returns the folder."""
    import json

    run_dir = Path(run_dir)
    df, arrivals = synthetic_log(seed=seed, **kwargs)
    write_event_log(df, run_dir / "events.parquet")
    tenants = sorted(df.loc[df["tenant"] != "", "tenant"].unique())
    summary = {
        "workload": "synthetic",
        "policy": policy,
        "seed": seed,
        "arrivals": arrivals,
        "weights": weights or {t: 1.0 + (i % 2) for i, t in enumerate(tenants)},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir


def make_frame(rows: list[dict]) -> pd.DataFrame:
    """An event-log frame from a few hand-written rows (missing columns get defaults)."""
    out = _Rows()
    for row in rows:
        out.add(1, **row)
    return out.frame()
