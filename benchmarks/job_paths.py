"""Each job's own path through a run: how long it lived, how much of that it had work running,
and the time of each kind of work (docs/quality-log.md, "What bounds the together run").

    python benchmarks/job_paths.py RUN_DIR [RUN_DIR ...]

A job whose work ran for nearly all of its span never waited: the run could not have ended
before it, whatever the order of the other jobs' work. Each kind's time is the union of that
job's rows of the kind (groups generating at once count once) [s]; ``active`` is the union over
every kind but ``idle``. Reads ``events.parquet`` only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from marlaas.metrics.intervals import merge_intervals

KINDS = ("generate", "env", "train", "sync", "adapter_load")
"""The kinds of work shown, in this order (a run without rows of one shows 0)."""


def union_s(starts: pd.Series, ends: pd.Series) -> float:
    """The total length of the union of the intervals [start, end) [s]."""
    _keys, merged_starts, merged_ends = merge_intervals(np.zeros(len(starts), int), starts, ends)
    return float((merged_ends - merged_starts).sum())


def job_paths(events: pd.DataFrame) -> pd.DataFrame:
    """One row per job: its span (first start to last end), the time it had work running
    (``active``) and the time of each kind of work (:data:`KINDS`) [s]."""
    work = events[(events["kind"] != "idle") & events["job"].notna() & (events["job"] != "")]
    rows = []
    for job, rows_of_job in work.groupby("job", sort=True):
        row = {
            "job": job,
            "span_s": rows_of_job["end_s"].max() - rows_of_job["start_s"].min(),
            "active_s": union_s(rows_of_job["start_s"], rows_of_job["end_s"]),
        }
        for kind in KINDS:
            of_kind = rows_of_job[rows_of_job["kind"] == kind]
            row[f"{kind}_s"] = union_s(of_kind["start_s"], of_kind["end_s"])
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (events.parquet)")
    args = parser.parse_args(argv)
    for run in args.runs:
        path = run / "events.parquet"
        try:
            events = pd.read_parquet(path)
        except (OSError, ValueError) as err:
            sys.exit(f"job_paths: {path}: {err}")
        table = job_paths(events)
        print(f"{run}: makespan {events['end_s'].max():.1f} s")
        print(table.to_string(index=False, float_format="{:.1f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
