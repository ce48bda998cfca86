"""The share of each job's wall time taken by rollout (generation plus environment steps), from
a run's event log, per job family (the job name's first part: math, tool, code) and overall.

    marlaas simulate traces/paper-32.yaml --preset sequential --out runs/p32-seq
    python benchmarks/rollout_share.py runs/p32-seq

A job's wall time is its first row's start to its last row's end; its rollout time is the
union of its generate and env rows (groups overlap), its generation time the union of its
generate rows alone. Under ``sequential`` one job runs at a time, so this is the share [R2]
of paper-32's header compares with ("rollout takes 70-90% of a synchronous step").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def union_s(starts: pd.Series, ends: pd.Series) -> float:
    """Length of the union of the intervals [start, end) [s]."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(zip(starts, ends, strict=True)):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (cur_end - cur_start if cur_end is not None else 0.0)


def shares(events: pd.DataFrame) -> pd.DataFrame:
    """Per job family and overall: wall_s, rollout share, generation share."""
    rows = []
    for job, g in events[events.job != ""].groupby("job"):
        rollout = g[g.kind.isin(["generate", "env"])]
        generate = g[g.kind == "generate"]
        rows.append(
            {
                "family": job.split("-")[0],
                "wall_s": g.end_s.max() - g.start_s.min(),
                "rollout_s": union_s(rollout.start_s, rollout.end_s),
                "generate_s": union_s(generate.start_s, generate.end_s),
            }
        )
    per_job = pd.DataFrame(rows)
    table = per_job.groupby("family")[["wall_s", "rollout_s", "generate_s"]].sum()
    table.loc["overall"] = table.sum()
    table["rollout"] = table.rollout_s / table.wall_s
    table["generation"] = table.generate_s / table.wall_s
    return table[["wall_s", "rollout", "generation"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder (its events.parquet)")
    args = parser.parse_args()
    table = shares(pd.read_parquet(args.run / "events.parquet"))
    print(table.to_string(formatters={"wall_s": "{:,.0f}".format, "rollout": "{:.1%}".format,
                                      "generation": "{:.1%}".format}))  # fmt: skip


if __name__ == "__main__":
    main()
