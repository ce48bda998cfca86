"""Simulator cost of jobs that arrive while the run goes on, against another tree's.

    python benchmarks/arrivals.py                                   # this tree only
    python benchmarks/arrivals.py --baseline /path/to/older/checkout --repeat 3

The workload is paper-32's jobs cycled to ``--jobs`` jobs (1,024 by default) on 2 GPUs per
job (benchmarks/scaling.py's), each job with ``--steps`` steps (20), arriving one by one,
evenly spread over the first ``--spread-s`` seconds of the run (1,500 s: paper-32's jobs take
about 2,400 s all at once). Every run is ``marlaas.sim.run.simulate(workload, "fair",
check=False)`` in a process of its own, with marlaas imported from the tree given (this one,
and the ``--baseline`` checkout: compiled as it is, ``make build`` there first), in
alternating order, ``--repeat`` times each. Printed per run: the event log's rows, the CPU
time of the simulation in its process [s], CPU µs per row; then the ratio of this tree's to
the baseline's, round by round, and of the cheapest runs. The same workload file means the
same jobs for both trees: an older tree knows their arrivals up front, this one takes each
as a submission when it arrives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def arrivals_workload(jobs: int, steps: int, spread_s: float):
    """benchmarks/scaling.py's cycled paper-32 (2 GPUs per job), every job ``steps`` steps,
    job i arriving at ``i * spread_s / jobs`` [s]."""
    try:
        from benchmarks.scaling import cycled_workload
    except ImportError:  # run as a script: this folder is the first import path
        from scaling import cycled_workload

    cycled = cycled_workload(jobs, steps)
    data = cycled.model_dump()
    for i, job in enumerate(data["jobs"]):
        job["arrival_s"] = i * spread_s / jobs
    data["name"] = f"arrivals-{jobs}"
    return type(cycled).model_validate(data)


def child(jobs: int, steps: int, spread_s: float) -> dict:
    """One simulation in this process: rows, CPU [s], wall [s], makespan [s], and where
    marlaas came from."""
    import marlaas
    from marlaas.sim.run import simulate

    workload = arrivals_workload(jobs, steps, spread_s)
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(workload, "fair", check=False)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return {"rows": len(result.records), "cpu_s": cpu, "wall_s": wall,
            "makespan_s": result.makespan_s, "marlaas": marlaas.__file__}  # fmt: skip


def run_in(tree: Path, jobs: int, steps: int, spread_s: float) -> dict:
    """:func:`child` in a new process importing marlaas from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, __file__, "--child", "--jobs", str(jobs), "--steps", str(steps),
            "--spread-s", str(spread_s)]  # fmt: skip
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{tree}: the run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1024, help="jobs (a multiple of 8)")
    parser.add_argument("--steps", type=int, default=20, help="every job's rl.steps")
    parser.add_argument("--spread-s", type=float, default=1500.0,
                        help="arrivals spread evenly over this many seconds")  # fmt: skip
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each tree")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 8 or args.jobs % 8:
        parser.error(f"--jobs {args.jobs}: a multiple of 8")
    if args.steps < 1 or args.repeat < 1 or not args.spread_s >= 0:
        parser.error("--steps and --repeat: at least 1; --spread-s: 0 or more")
    if args.child:
        print(json.dumps(child(args.jobs, args.steps, args.spread_s)))
        return 0
    trees = {"this": HERE.parent}
    if args.baseline is not None:
        if not (args.baseline / "marlaas").is_dir():
            parser.error(f"--baseline {args.baseline}: no marlaas package there")
        trees["baseline"] = args.baseline.resolve()
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for round_ in range(1, args.repeat + 1):
        order = list(trees) if round_ % 2 else list(reversed(trees))  # alternate who goes first
        for name in order:
            row = run_in(trees[name], args.jobs, args.steps, args.spread_s)
            runs[name].append(row)
            print(f"round {round_}/{args.repeat} {name:8s} {row['rows']:9,d} rows "
                  f"{row['cpu_s']:7.2f} s CPU {row['cpu_s'] / row['rows'] * 1e6:6.2f} us/row "
                  f"makespan {row['makespan_s']:8.1f} s  ({row['marlaas']})",
                  flush=True)  # fmt: skip
    if "baseline" in runs:
        per_row = {name: [r["cpu_s"] / r["rows"] for r in rows] for name, rows in runs.items()}
        ratios = [a / b for a, b in zip(per_row["this"], per_row["baseline"], strict=True)]
        best = min(per_row["this"]) / min(per_row["baseline"])
        print(f"CPU per row, this tree / baseline: {best:.3f}x (cheapest runs); round by round "
              + ", ".join(f"{r:.3f}x" for r in ratios))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
