"""Simulator speed on real workloads, against a bare SimPy loop measured in the same run.

Run: ``python -m pytest benchmarks/bench_simulator.py --benchmark-enable -s`` (a few
minutes), or ``python benchmarks/scaling.py`` for the same table without pytest.

1. paper-32 itself (32 jobs, 64 GPUs, the bundled trace) under ``fair``.
2. The job-count series: paper-32's jobs cycled to 8, 32, 64, 128 and 256 jobs on 2 GPUs per
   job (3:1 rollout to training), each reporting CPU µs per SimPy event and its ratio to a
   bare SimPy loop of as many events measured right after it, and the records per event and
   adapter loads per group (the work an event stands for grows with the jobs); then the growth
   exponent of µs per event between 64 and 256 jobs (0: the cost per event does not grow with
   the cluster). Each size is simulated again until it has processed 500,000 SimPy events, as
   ``scaling.py`` does by default.
3. The paper-scale workload (1024-token groups) with every max_new_tokens doubled (same
   number of sequences): the wall time ratio shows that cost follows sequences, not tokens.
4. 256 cycled jobs arriving one by one over the first 1,500 s (each a submission the
   scheduler did not know before) against the same jobs all at once: CPU µs per event-log
   row of each, and the ratio (``arrivals.py`` compares with another checkout).

Ratios, not wall-clock limits: the machines that run this are shared.
"""

from __future__ import annotations

import time

from benchmarks.arrivals import arrivals_workload
from benchmarks.paper_scale import paper_scale_workload
from benchmarks.scaling import MIN_EVENTS, PAPER_32, cycled_workload, growth_exponent, measure
from marlaas.core.scheduler import Scheduler
from marlaas.drive import drive
from marlaas.drive.inbox import workload_inbox
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.run import cost_of, simulate
from marlaas.workload_file import load_workload

SERIES = (8, 32, 64, 128, 256)


def _row(label: str, row: dict) -> str:
    return (
        f"{label:>10s} {row['jobs']:5d} jobs {row['gpus']:5d} GPUs {row['events']:9d} events "
        f"{row['us_per_event']:7.1f} us/event  bare {row['bare_us_per_event']:.2f}  "
        f"x{row['ratio']:.1f}  {row['records_per_event']:.2f} records/event  "
        f"{row['loads_per_group']:.2f} loads/group"
    )


def test_paper_32_vs_bare_simpy(benchmark):
    workload = load_workload(PAPER_32)
    row = benchmark.pedantic(measure, args=(workload,), rounds=1, iterations=1)
    benchmark.extra_info.update(row)
    print("\n" + _row("paper-32", row))
    assert row["events"] > 0


def test_job_count_series(benchmark):
    def series() -> list[dict]:
        return [
            {"label": "cycled", **measure(cycled_workload(n), min_events=MIN_EVENTS)}
            for n in SERIES
        ]

    rows = benchmark.pedantic(series, rounds=1, iterations=1)
    exponent = growth_exponent(rows)
    flat = rows[-1]["us_per_event"] / rows[0]["us_per_event"]
    benchmark.extra_info.update(rows=rows, growth_exponent=exponent, last_vs_first=flat)
    print()
    for row in rows:
        print(_row("cycled", row))
    print(
        f"growth exponent of us/event, 64 -> 256 jobs: {exponent:.2f}; "
        f"{SERIES[-1]} vs {SERIES[0]} jobs: {flat:.2f}x"
    )
    assert all(r["events"] > 0 for r in rows)


def _simulate(workload):
    """(wall [s], result, SimPy events) of one fair simulation, invariants not checked."""
    scheduler = Scheduler.for_workload(workload, "fair")
    executor = SimPyExecutor(scheduler.cluster, cost_of(workload), scheduler.seed)
    t0 = time.perf_counter()
    result = drive(scheduler, executor, workload_inbox(workload), check=False)
    return time.perf_counter() - t0, result, executor.steps


def test_doubling_tokens_barely_changes_wall_time(benchmark):
    base_s, base, base_events = _simulate(paper_scale_workload(steps=30))
    double_s, double, double_events = benchmark.pedantic(
        _simulate, args=(paper_scale_workload(steps=30, max_new_tokens=2048),), rounds=1,
        iterations=1,
    )  # fmt: skip
    ratio = double_s / base_s
    benchmark.extra_info.update(base_s=base_s, double_s=double_s, wall_ratio=ratio)
    print(
        f"\nmax_new_tokens 1024 -> 2048 (30 steps): wall {base_s:.2f} s -> {double_s:.2f} s "
        f"(ratio {ratio:.2f}); simulated makespan {base.makespan_s:,.0f} s -> "
        f"{double.makespan_s:,.0f} s; events {base_events} -> {double_events}"
    )
    assert double.makespan_s > base.makespan_s


def _cpu_per_row(workload) -> tuple[float, int]:
    """(CPU µs per event-log row, rows) of one fair simulation, invariants not checked."""
    c0 = time.process_time()
    rows = len(simulate(workload, "fair", check=False).records)
    return (time.process_time() - c0) / rows * 1e6, rows


def test_jobs_arriving_over_time_cost_what_jobs_at_once_cost_per_row(benchmark):
    at_once_us, at_once_rows = _cpu_per_row(arrivals_workload(256, 10, 0.0))
    arriving_us, arriving_rows = benchmark.pedantic(
        _cpu_per_row, args=(arrivals_workload(256, 10, 1500.0),), rounds=1, iterations=1
    )
    ratio = arriving_us / at_once_us
    benchmark.extra_info.update(at_once_us=at_once_us, arriving_us=arriving_us, ratio=ratio)
    print(
        f"\n256 jobs x 10 steps: all at once {at_once_us:.2f} us/row ({at_once_rows:,} rows), "
        f"arriving over 1,500 s {arriving_us:.2f} us/row ({arriving_rows:,} rows): {ratio:.2f}x"
    )
    assert arriving_rows > 0 and at_once_rows > 0
