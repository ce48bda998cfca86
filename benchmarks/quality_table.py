"""The quality experiment's table (docs/quality.md) from its run folders: per tenant, held-out
accuracy with 95% Wilson intervals of the base model, trained alone, and trained together (one
column per together run), the change against alone with its paired 95% interval, and each
run's times.

    python benchmarks/quality_table.py --alone runs/q-alone --together runs/q-s1 runs/q-s2
    python benchmarks/quality_table.py --pooled runs/a-s0:runs/s2-s0 runs/a-s1:runs/s2-s1

Each folder holds a finished `marlaas train` run and its `marlaas evaluate` (eval.json); each
uses its newest evaluated version. The change's interval pairs the two models problem by
problem (Newcombe's, marlaas.metrics.proportions), which needs eval.json's `outcomes` (written
by `marlaas evaluate` since 2026-12-04); without them the change is shown alone. `--pooled`
joins several ALONE:TOGETHER pairs (seeds) into one paired comparison per tenant: the
problems of every pair count as independent pairs, so the run-to-run spread of training is
in the estimate but not in the interval's width.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from marlaas.metrics.proportions import paired_difference


def newest(run: Path) -> pd.DataFrame:
    """eval.json's base rows and each job's newest evaluated version, indexed by (job, model)."""
    if not (run / "eval.json").is_file():
        raise SystemExit(f"{run}: no eval.json; score the run first: marlaas evaluate WORKLOAD "
                         f"--run {run} --prompts 200")  # fmt: skip
    rows = pd.DataFrame(json.loads((run / "eval.json").read_text()))
    if "outcomes" not in rows:
        rows["outcomes"] = None
    last = rows.groupby(["job", "model"])["version"].transform("max")
    return rows[rows["version"] == last].set_index(["job", "model"])


def cell(row: pd.Series) -> str:
    """``41.2% [35.3-47.4]`` (accuracy and its 95% interval, percent)."""
    return f"{row.accuracy:.1%} [{row.ci_low * 100:.1f}-{row.ci_high * 100:.1f}]"


def change(alone: pd.Series, together: pd.Series) -> str:
    """``-3.5 points [-8.1, +1.0]``: together's accuracy minus alone's, with the paired 95%
    interval where both rows have their problems' outcomes."""
    text = f"{(together.accuracy - alone.accuracy) * 100:+.1f} points"
    if isinstance(alone.outcomes, str) and isinstance(together.outcomes, str):
        diff = paired_difference(alone.outcomes, together.outcomes)
        text += f" [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}]"
    return text


def job_spans(run: Path) -> dict[str, float]:
    """Each job's time from its first piece of work to its end in the run [s]."""
    events = pd.read_parquet(run / "events.parquet")
    events = events[events["job"].astype(str) != ""]
    return (events.groupby("job")["end_s"].max() - events.groupby("job")["start_s"].min()).to_dict()


def table(alone_run: Path, together_runs: list[Path]) -> None:
    """Print the per-tenant table and each run's makespan and wall time."""
    alone = newest(alone_run)
    together = [(run.name, newest(run)) for run in together_runs]
    head = ["tenant (job)", "base", "alone"] + [f"together: {n}" for n, _ in together]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for job in sorted({j for j, _ in alone.index}):
        base, solo = alone.loc[(job, "base")], alone.loc[(job, "trained")]
        cells = [f"{solo.tenant} ({job})", cell(base), cell(solo)]
        for _, frame in together:
            row = frame.loc[(job, "trained")]
            cells.append(f"{cell(row)}, {change(solo, row)}")
        print("| " + " | ".join(cells) + " |")
    print()
    spans = job_spans(alone_run)
    summary = json.loads((alone_run / "summary.json").read_text())
    alone_makespan = summary["metrics"]["makespan_s"]
    print(f"alone (sequential): makespan {alone_makespan:,.0f} s, wall {summary['wall_s']:,.0f} s; "
          + ", ".join(f"{j} {s:,.0f} s" for j, s in sorted(spans.items())))  # fmt: skip
    for run in together_runs:
        data = json.loads((run / "summary.json").read_text())
        makespan = data["metrics"]["makespan_s"]
        print(f"together {run.name}: makespan {makespan:,.0f} s, wall {data['wall_s']:,.0f} s, "
              f"{makespan / alone_makespan:.2f}x the alone runs' sum")  # fmt: skip


def pooled(pairs: list[str]) -> None:
    """Print, per tenant, the paired difference together - alone over every ALONE:TOGETHER
    pair's problems at once."""
    runs = []
    for pair in pairs:
        alone, sep, together = pair.partition(":")
        if not sep or not alone or not together:
            raise SystemExit(f"--pooled: {pair!r} is not ALONE:TOGETHER")
        runs.append((newest(Path(alone)), newest(Path(together))))
    print("| tenant (job) | pairs | problems | alone | together | change [95%, paired] |")
    print("|---|---|---|---|---|---|")
    for job in sorted({j for j, _ in runs[0][0].index}):
        solo = [a.loc[(job, "trained")] for a, _ in runs]
        shared = [t.loc[(job, "trained")] for _, t in runs]
        if not all(isinstance(r.outcomes, str) for r in solo + shared):
            raise SystemExit(f"--pooled: {job}: an eval.json without outcomes; evaluate the "
                             "runs again with this version of marlaas")  # fmt: skip
        diff = paired_difference("".join(r.outcomes for r in solo),
                                 "".join(r.outcomes for r in shared))  # fmt: skip
        right_alone = (diff.both + diff.only_first) / diff.n
        right_together = (diff.both + diff.only_second) / diff.n
        print(f"| {solo[0].tenant} ({job}) | {len(runs)} | {diff.n} | {right_alone:.1%} | "
              f"{right_together:.1%} | {diff.difference * 100:+.1f} points "
              f"[{diff.low * 100:+.1f}, {diff.high * 100:+.1f}] |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alone", type=Path, help="the sequential run")
    parser.add_argument("--together", type=Path, nargs="+")
    parser.add_argument("--pooled", nargs="+", metavar="ALONE:TOGETHER",
                        help="pairs of runs (one per seed) compared as one")  # fmt: skip
    args = parser.parse_args()
    if args.pooled:
        pooled(args.pooled)
    elif args.alone and args.together:
        table(args.alone, args.together)
    else:
        parser.error("give --alone and --together, or --pooled")


if __name__ == "__main__":
    main()
