"""Where a run's makespan goes: each job's service window and the rollout pool's token rate
over time, per job, from a run's event log.

    python -m benchmarks.tail_timeline RUN_FOLDER [RUN_FOLDER ...] [--bin-s 200]

A RUN_FOLDER is one that ``marlaas simulate --out`` or a sweep's ``runs/`` writes (with
``events.parquet`` and ``summary.json``). Printed per run: each job's first generation,
finish and simulated alone time [s] (``summary.json``'s ``alone_s``), the rollout pool's
idle device-seconds by cause, and per ``--bin-s`` window the tokens generated per second,
in all and per job (a group's tokens spread evenly over its generation). The tail, where one
job is left alone and generates at its own critical path's pace while engines idle, shows
as the last rows. Written for docs/policies-log.md's "Why fifo wins on paper-8".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from marlaas.eventlog import read_event_log


def token_rate(events: pd.DataFrame, bin_s: float) -> pd.DataFrame:
    """Tokens generated per second [tokens/s] in each ``bin_s`` window, in all and per job
    (each generation's tokens spread evenly over its duration)."""
    gen = events[events.kind == "generate"]
    end = float(events.end_s.max())
    edges = np.arange(0.0, end + bin_s, bin_s)
    jobs = sorted(gen.job.unique())
    rate = pd.DataFrame(0.0, index=edges[:-1].astype(int), columns=jobs)
    starts, ends = gen.start_s.to_numpy(), gen.end_s.to_numpy()
    per_s = gen.tokens.to_numpy() / np.maximum(ends - starts, 1e-9)
    for k, lo in enumerate(edges[:-1]):
        overlap = np.clip(np.minimum(ends, lo + bin_s) - np.maximum(starts, lo), 0.0, None)
        rate.iloc[k] = pd.Series(per_s * overlap, index=gen.job.to_numpy()).groupby(level=0).sum()
    rate = rate.fillna(0.0) / bin_s
    rate.insert(0, "all", rate.sum(axis=1))
    return rate


def describe(folder: Path, bin_s: float) -> str:
    """The report of one run folder."""
    events = read_event_log(folder)
    summary = json.loads((folder / "summary.json").read_text())
    gen = events[events.kind == "generate"]
    first = gen.groupby("job").start_s.min()
    finish, alone = summary["job_finish_s"], summary["alone_s"]
    lines = [f"{folder}: policy {summary['policy']}, makespan {events.end_s.max():,.0f} s"]
    for job in sorted(finish, key=finish.get):
        lines.append(
            f"  {job:10s} first generation {first.get(job, float('nan')):7,.0f} s  "
            f"finish {finish[job]:7,.0f} s  alone {alone.get(job, float('nan')):7,.0f} s"
        )
    idle = events[(events.kind == "idle") & (events.pool != "train")]
    by_cause = (idle.end_s - idle.start_s).groupby(idle.outcome).sum().round(0)
    lines.append(f"  rollout idle device-s by cause: {by_cause.astype(int).to_dict()}")
    lines.append(f"  tokens generated per second, {bin_s:g} s windows:")
    lines.append(token_rate(events, bin_s).round(0).astype(int).to_string())
    return "\n".join(lines)


def main() -> None:
    """Print the report of each run folder given."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (events.parquet)")
    parser.add_argument("--bin-s", type=float, default=200.0, help="window [s] (200)")
    args = parser.parse_args()
    for folder in args.runs:
        print(describe(folder, args.bin_s))


if __name__ == "__main__":
    main()
