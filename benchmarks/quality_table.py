"""The quality experiment's table (docs/quality.md) from its run folders: per tenant, held-out
accuracy with 95% Wilson intervals of the base model, trained alone, and trained together (one
column per together run), the change against alone, and each run's times.

    python benchmarks/quality_table.py --alone runs/q-alone --together runs/q-s1 runs/q-s2

Each folder holds a finished `marlaas train` run and its `marlaas evaluate` (eval.json).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def newest(run: Path) -> pd.DataFrame:
    """eval.json's base rows and each job's newest evaluated version, indexed by (job, model)."""
    rows = pd.DataFrame(json.loads((run / "eval.json").read_text()))
    last = rows.groupby(["job", "model"])["version"].transform("max")
    return rows[rows["version"] == last].set_index(["job", "model"])


def cell(row: pd.Series) -> str:
    """``41.2% [35.3-47.4]`` (accuracy and its 95% interval, percent)."""
    return f"{row.accuracy:.1%} [{row.ci_low * 100:.1f}-{row.ci_high * 100:.1f}]"


def job_spans(run: Path) -> dict[str, float]:
    """Each job's time from its first piece of work to its end in the run [s]."""
    events = pd.read_parquet(run / "events.parquet")
    events = events[events["job"].astype(str) != ""]
    return (events.groupby("job")["end_s"].max() - events.groupby("job")["start_s"].min()).to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alone", type=Path, required=True, help="the sequential run")
    parser.add_argument("--together", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    alone = newest(args.alone)
    together = [(run.name, newest(run)) for run in args.together]
    head = ["tenant (job)", "base", "alone"] + [f"together: {n}" for n, _ in together]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for job in sorted({j for j, _ in alone.index}):
        base, solo = alone.loc[(job, "base")], alone.loc[(job, "trained")]
        cells = [f"{solo.tenant} ({job})", cell(base), cell(solo)]
        for _, frame in together:
            row = frame.loc[(job, "trained")]
            cells.append(f"{cell(row)}, {(row.accuracy - solo.accuracy) * 100:+.1f} points")
        print("| " + " | ".join(cells) + " |")
    print()
    spans = job_spans(args.alone)
    summary = json.loads((args.alone / "summary.json").read_text())
    alone_makespan = summary["metrics"]["makespan_s"]
    print(f"alone (sequential): makespan {alone_makespan:,.0f} s, wall {summary['wall_s']:,.0f} s; "
          + ", ".join(f"{j} {s:,.0f} s" for j, s in sorted(spans.items())))  # fmt: skip
    for name, _ in together:
        data = json.loads((args.together[[n for n, _ in together].index(name)] / "summary.json")
                          .read_text())  # fmt: skip
        makespan = data["metrics"]["makespan_s"]
        print(f"together {name}: makespan {makespan:,.0f} s, wall {data['wall_s']:,.0f} s, "
              f"{makespan / alone_makespan:.2f}x the alone runs' sum")  # fmt: skip


if __name__ == "__main__":
    main()
