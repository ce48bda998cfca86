"""Each job's slowdown against its own alone time, for every run of a sweep.

    python -m benchmarks.alone_slowdowns runs/paper-32-policies traces/paper-32.yaml
    python -m benchmarks.alone_slowdowns runs/p16 traces/paper-16.yaml --set 'arrivals=...'

The sweep tables' "Jain (slowdown)" is Jain's index of jct / min jct over jobs, which is
Jain's index of the completion times themselves (it does not depend on their scale): it
counts a small job that finishes early as unfair. The slowdown of queueing theory and of
Themis' finish-time fairness is a job's completion time shared / alone. This script
simulates every job of WORKLOAD alone (the same cluster and cost model, arriving at t = 0,
seed 0), then prints, per run of the sweep (its summaries.json), the mean JCT, Jain's index
of jct / alone, the mean and worst slowdown, and the sweep's own Jain index beside them.
``--set`` must repeat the sweep's overrides (an arrivals file may change the jobs' steps).

``--bound MEAN_S`` (all jobs arriving at t = 0, a sweep kept with its event logs) also prints
the highest Jain index of completion times (the sweep's "Jain (slowdown)") that any schedule
can have at a mean JCT of MEAN_S: the i-th job to finish cannot finish before the i-th
shortest alone time, nor before the i smallest jobs' tokens are generated at the best token
rate a run of the sweep reached (its tokens / its makespan); at a given mean, the squares
of completion times are least when every job finishes at that bound or at one common later
time, whichever is later (so that bound says how late the first job must finish).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from marlaas.metrics import jain_index
from marlaas.sim.run import simulate_logged
from marlaas.workload_file import load_with_overrides


def alone_times(workload) -> dict[str, float]:
    """Each job's completion time when it is the only job on the cluster [s]."""
    times = {}
    for job in workload.jobs:
        one = workload.model_copy(update={"jobs": [job.model_copy(update={"arrival_s": 0.0})]})
        times[job.name] = simulate_logged(one, "fifo", 0)[0].makespan_s
    return times


def slowdown_rows(summaries: list[dict], alone: dict[str, float]) -> list[dict]:
    """Per run: policy, seed, mean JCT [s], Jain of jct / alone, mean and max slowdown."""
    rows = []
    for run in summaries:
        arrivals = run["arrivals"]
        jct = {j: f - arrivals[j] for j, f in run["job_finish_s"].items() if f is not None}
        slow = [jct[j] / alone[j] for j in jct]
        rows.append({
            "policy": run["policy"] if not run.get("preset") else run["preset"],
            "seed": run["seed"],
            "jobs": len(jct),
            "jct_mean_s": sum(jct.values()) / len(jct),
            "jain_alone": jain_index(slow),
            "slowdown_mean": sum(slow) / len(slow),
            "slowdown_max": max(slow),
            "jain_sweep": run["metrics"]["fairness"]["jain_slowdown"],
        })  # fmt: skip
    return rows


def jain_bound(alone: dict[str, float], tokens: dict[str, float], rate: float, mean_s: float):
    """(highest Jain index of completion times at mean ``mean_s`` [s], the time before which
    no job may finish for it [s]): see the module's docstring. ``rate``: tokens/s."""
    lower = np.maximum(np.cumsum(np.sort(list(tokens.values()))) / rate,
                       np.sort(list(alone.values())))  # fmt: skip
    if lower.mean() > mean_s:
        return None, None
    low, high = 0.0, float(lower.max())
    for _ in range(100):  # the common time, by bisection on the mean
        mid = (low + high) / 2
        low, high = (mid, high) if np.maximum(lower, mid).mean() < mean_s else (low, mid)
    done = np.maximum(lower, low)
    return float(done.mean() ** 2 / np.mean(done**2)), low


def sweep_tokens_and_rate(sweep: Path) -> tuple[dict[str, float], float]:
    """Tokens generated per job (a run's event log) and the best tokens/s of the sweep's runs."""
    tokens: dict[str, float] = {}
    rate = 0.0
    for events in sorted(sweep.glob("runs/*/events.parquet")):
        df = pd.read_parquet(events, columns=["kind", "job", "tokens", "end_s"])
        per_job = df[df["kind"] == "generate"].groupby("job")["tokens"].sum()
        tokens = tokens or {j: float(t) for j, t in per_job.items()}
        rate = max(rate, float(per_job.sum()) / float(df["end_s"].max()))
    if not tokens:
        raise SystemExit(f"{sweep}: no runs/*/events.parquet (sweep without --no-events)")
    return tokens, rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="a `marlaas sweep` output folder (its summaries.json)")
    parser.add_argument("workload", help="the workload file the sweep ran")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="as the sweep's")
    parser.add_argument("--bound", type=float, metavar="MEAN_S", help="see the docstring")
    args = parser.parse_args(argv)
    summaries = json.loads((Path(args.sweep) / "summaries.json").read_text())
    alone = alone_times(load_with_overrides(args.workload, args.set))
    print(f"{'schedule':16} {'seed':>4} {'JCT mean s':>10} {'Jain jct/alone':>14} "
          f"{'slowdown mean':>13} {'max':>6} {'Jain jct/min':>12}")  # fmt: skip
    for row in slowdown_rows(summaries, alone):
        print(f"{row['policy']:16} {row['seed']:>4} {row['jct_mean_s']:>10,.0f} "
              f"{row['jain_alone']:>14.3f} {row['slowdown_mean']:>13.2f} "
              f"{row['slowdown_max']:>6.2f} {row['jain_sweep']:>12.3f}")  # fmt: skip
    if args.bound:
        tokens, rate = sweep_tokens_and_rate(Path(args.sweep))
        jain, first = jain_bound(alone, tokens, rate, args.bound)
        if jain is None:
            print(
                f"bound: no schedule has a mean JCT of {args.bound:,.0f} s at {rate:,.0f} tokens/s"
            )
        else:
            print(
                f"bound at {rate:,.0f} tokens/s: a mean JCT of {args.bound:,.0f} s allows a Jain "
                f"index of completion times of at most {jain:.3f}, and only if no job finishes "
                f"before {first:,.0f} s (shortest alone time {min(alone.values()):,.0f} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
