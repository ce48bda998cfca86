"""How close the core's alone-time estimate (``JobView.alone_s``, marlaas/core/estimates.py)
comes to each job simulated alone (marlaas/sim/alone.py), per job and over every job given::

    python -m benchmarks.alone_estimates traces/paper-32.yaml runs/unseen/rand-4.yaml

prints each job whose estimate counts training or the engines' room (its generation-only
estimate, the estimate, its simulated alone time), then, over all the jobs, the ratio of each
estimate to the simulated time: min, 10th percentile, median, 90th percentile, max and how
many are within 0.8-1.25x. Simulated with each workload's own seed and cost profile (h100-7b
unless the file names another); a few seconds a workload.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from marlaas.core.estimates import AloneCluster, WorkEstimate
from marlaas.core.scheduler import Scheduler
from marlaas.sim.alone import alone_times
from marlaas.workload_file import load_workload

GENERATION_ONLY = AloneCluster(trainer_devices=10**9)
"""Room for every group and a trainer too wide to take time: the estimate before training and
the engines' room were counted (2026-12-06)."""


def ratios(path: str) -> tuple[list[float], list[float], list[str]]:
    """The generation-only and full estimates over the simulated alone time of each job of
    the workload at ``path``, and a line per job whose two estimates differ. Each job is
    submitted to the workload's own scheduler, so that its estimate is the one its policy
    reads (its cluster, the staleness bound the preset enforces)."""
    workload = load_workload(path)
    scheduler = Scheduler.for_workload(workload)
    simulated = alone_times(workload, workload.seed, None, progress=False)
    before, now, lines = [], [], []
    for spec in workload.jobs:
        scheduler.submit(spec, 0.0)
    for job in scheduler.jobs.values():
        alone = simulated[job.name]
        if alone is None or alone <= 0:
            continue  # refused alone: no time to compare with
        steps = job.steps - job.start_version
        old = WorkEstimate.of(job.spec, GENERATION_ONLY, job.max_staleness).step_alone_s * steps
        new = job.alone_s
        before.append(old / alone)
        now.append(new / alone)
        if new != old:
            lines.append(f"  {job.name}: {old:,.0f} s -> {new:,.0f} s (simulated {alone:,.0f} s)")
    return before, now, lines


def summary(name: str, values: list[float]) -> str:
    """One line: the spread of the ratios and how many are within 0.8-1.25x."""
    r = np.asarray(values)
    p10, p50, p90 = np.percentile(r, [10, 50, 90])
    within = int(((r >= 0.8) & (r <= 1.25)).sum())
    return (f"{name:16s} min {r.min():.2f}  p10 {p10:.2f}  median {p50:.2f}  p90 {p90:.2f}  "
            f"max {r.max():.2f}  within 0.8-1.25x: {within} of {len(r)}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("::")[0])
    parser.add_argument("workloads", nargs="+", help="workload YAML files")
    args = parser.parse_args(argv)
    before: list[float] = []
    now: list[float] = []
    for path in args.workloads:
        old, new, lines = ratios(path)
        before += old
        now += new
        print(f"{path}: {len(new)} jobs", *lines, sep="\n", flush=True)
    if not now:
        print("no job ran alone", file=sys.stderr)
        return 1
    print("estimate / simulated alone time:")
    print(summary("generation only", before))
    print(summary("estimate", now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
