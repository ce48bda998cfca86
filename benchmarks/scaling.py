"""Simulator cost per event as the number of jobs (and GPUs with them) grows.

    python benchmarks/scaling.py                          # paper-32, then 8 ... 256 jobs
    python benchmarks/scaling.py --jobs 8,256 --steps 2 --no-paper --repeat 5 --policy fair
    python benchmarks/scaling.py --jobs 8,256 --steps 2 --repeat 3 --side-by-side --policy fair
    python benchmarks/scaling.py --jobs 1024 --steps 20 --no-paper --repeat 1

The workload of N jobs is paper-32's jobs cycled (job i is paper-32's job i mod 32, renamed,
with a tenant of its own) on 2 GPUs per job, split 3:1 between rollout and training (trainers
of 4 devices): traces/paper-8.yaml is the 8-job one. Every size is simulated under
``--policy`` (``fair`` by default; invariants not checked: they read the whole event log),
again and again (the same events each pass) until it has processed ``--min-events`` SimPy
events (500,000 by default: 25 passes of 8 jobs, one of 256), so that a small size is
measured over a window as long as a large one's. Then a bare SimPy loop processes one pass's
events (timeouts with a callback each, as the simulator uses SimPy; the best of 3) in the
same process, so that the ratio of the two is measured under the same machine load.

The sizes are measured in ``--repeat`` rounds (3 by default, progress on stderr), and within
a round in a palindrome: the sizes up, then down again (8, 64, 256, 64, 8), the largest once
with the whole window and the others twice with half of it each, so that every size's
measurement is centred on the same moment of the round and a machine load that rises or
falls through the round weighs on every size alike. (Until 2026-12-02 the sizes ran once
each per round, smallest first, and each size was shown at its cheapest round: on a shared
machine the cheapest of three short runs is a luckier draw than the cheapest of three long
ones, and a load that changed within a round hit one size only.) Each size is shown at its
median round, with the spread of its µs per event over the rounds; the growth between the
first and the last size is the median over the rounds of the ratio within each round, with
its range.

``--side-by-side`` measures the first and the last job count at once instead, in two
threads of one process (a fresh one per round): the last size simulated once, the first
again and again meanwhile, each timed by its own thread's CPU time. The threads take turns
on the interpreter every few milliseconds, so a change in the machine's load, however
short, weighs on both sizes alike. On a shared 2-core machine (plain sources, three rounds
per policy) the ratio then varied by 0.02-0.07x from round to round for five of the eight
policies (fair in palindromes, earlier the same day: 1.34-1.62x), though a burst of load
can still fall on one thread's turns more than on the other's (fair: 0.96-1.29x). Both
sizes cost more per event than alone (each evicts the other's data from the processor's
caches at every turn, and the interpreter switches); the ratio is what it is for. The bare
SimPy loop runs in each thread after its simulations.

Printed per size: SimPy events of a pass, passes of the median round, its wall and CPU time,
CPU µs per event and its spread, the bare loop's CPU µs per event and the ratio, the work an
event stands for (records of the event log per event, adapter loads per rollout group), the
CPU µs per record and per group turn generated; then the growth exponent of µs per event
between 64 and 256 jobs (0: flat; 1: linear in jobs). The mix of work changes with the size
and the policy: each engine holds 8 adapters, so the more jobs share the engines, the more
groups wait for an adapter load (and an eviction), and more devices write idle rows when the
jobs' majority idle cause changes. A policy that saves adapter loads saves their events, which
cost less than most: its µs per event rises though it does less work. A group turn (one
prompt's samples generated once) is the same work under every policy: the workload sets how
many there are, so µs per group turn compares policies on equal work.
Each half of a size's round runs in a process of its own (``--same-process``: all in this
one), which reports its peak RSS. The script imports marlaas from PYTHONPATH, so one copy of
it can measure an older tree.
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import simpy

from marlaas.core.policies import policy_names
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import Workload, parse_workload
from marlaas.drive import drive
from marlaas.executors.memory import peak_rss_mb
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.run import cost_of
from marlaas.workload_file import WorkloadFile, load_workload

PAPER_32 = Path(__file__).resolve().parents[1] / "traces" / "paper-32.yaml"
MIN_EVENTS = 500_000
"""SimPy events each size is measured over by default (8 jobs: 25 passes; 256 jobs: one)."""


def cycled_workload(jobs: int, steps: int | None = None) -> Workload:
    """paper-32's jobs cycled to ``jobs`` jobs on ``2 * jobs`` GPUs (3:1 rollout:train);
    ``steps``: every job's rl.steps (default: each paper-32 job's own)."""
    if jobs % 8:
        raise ValueError(f"jobs={jobs}: a multiple of 8 (whole 4-device trainers)")
    data = load_workload(PAPER_32).model_dump()
    source = data["jobs"]
    cycled = []
    for i in range(jobs):
        job = dict(source[i % len(source)])
        if i >= len(source):
            lap = i // len(source)
            job["name"], job["tenant"] = f"{job['name']}-{lap}", f"{job['tenant']}-{lap}"
        if steps is not None:
            job["rl"] = {**job["rl"], "steps": steps}
        cycled.append(job)
    data["jobs"], data["arrivals"], data["name"] = cycled, None, f"paper-cycled-{jobs}"
    data["cluster"]["pools"] = [
        {"name": "rollout", "role": "inference", "devices": jobs * 3 // 2},
        {"name": "train", "role": "training", "devices": jobs // 2, "devices_per_trainer": 4},
    ]
    return parse_workload(data, source=f"paper-32 cycled to {jobs} jobs", schema=WorkloadFile)


def bare_simpy(
    events: int, chains: int = 64, clock: Callable[[], float] = time.process_time
) -> float:
    """CPU time [s] of SimPy processing ``events`` timeouts in ``chains`` callback chains."""
    env = simpy.Environment()
    left = [events]

    def fire(_event) -> None:
        left[0] -= 1
        if left[0] >= chains:
            env.timeout(1.0 + (left[0] % 7) * 0.1).callbacks.append(fire)

    for i in range(min(chains, events)):
        env.timeout(i * 0.01).callbacks.append(fire)
    t0 = clock()
    env.run()
    return clock() - t0


def measure(
    workload: Workload,
    policy: str = "fair",
    min_events: int = 0,
    until: threading.Event | None = None,
    clock: Callable[[], float] = time.process_time,
) -> dict:
    """Simulations of ``workload`` (a new scheduler and executor each pass: the same events
    every time) until they have processed ``min_events`` SimPy events in all (one at least;
    with ``until``: until it is set, one pass at least), then a bare SimPy loop of one pass's
    events, after the last pass's state is freed. Costs per event are CPU times (``clock``:
    of this process, or of this thread side by side) over all passes, which other processes
    on the machine disturb less than wall times; the wall time of the simulations is reported
    too. Passes give a small workload a measuring window as long as a large one's: on a
    shared machine the cheapest of a few runs of 0.3 s is a luckier draw than the cheapest of
    a few runs of 15 s."""
    from marlaas.drive.inbox import workload_inbox  # here: arrivals.py imports this module

    passes = events = 0
    wall = cpu = 0.0
    while True:
        t0, c0 = time.perf_counter(), clock()
        scheduler = Scheduler.for_workload(workload, policy)
        executor = SimPyExecutor(scheduler.cluster, cost_of(workload), scheduler.seed)
        result = drive(scheduler, executor, workload_inbox(workload), check=False)
        wall, cpu = wall + time.perf_counter() - t0, cpu + clock() - c0
        passes, events = passes + 1, events + executor.steps
        if (until.is_set() if until is not None else events >= min_events) or not executor.steps:
            break
        del scheduler, executor, result  # the next pass starts without this one's memory
        gc.collect()  # (a run's objects refer to each other), outside the timed window
    records = scheduler.records
    kinds = Counter(records.columns()[0])  # the kind field
    row = {
        "jobs": len(workload.jobs),
        "gpus": workload.cluster.total_devices,
        "events": executor.steps,
        "passes": passes,
        "wall_s": wall,
        "cpu_s": cpu,
        "us_per_event": cpu / max(1, events) * 1e6,
        "records": len(records),
        "records_per_event": len(records) / max(1, executor.steps),
        "loads_per_group": kinds["adapter_load"] / max(1, kinds["generate"]),
        "us_per_record": cpu / max(1, len(records) * passes) * 1e6,
        "group_turns": kinds["generate"],
        "us_per_group": cpu / max(1, kinds["generate"] * passes) * 1e6,
        "makespan_s": result.makespan_s,
    }
    del scheduler, executor, result, records  # the bare loop's garbage collections would
    gc.collect()  # walk the run's objects too
    bare = min(bare_simpy(row["events"], clock=clock) for _ in range(3)) / max(1, row["events"])
    row["bare_us_per_event"] = bare * 1e6
    row["ratio"] = row["us_per_event"] / row["bare_us_per_event"] if bare else math.inf
    return row


def side_by_side(small: int, large: int, steps: int | None, policy: str) -> tuple[dict, dict]:
    """``large`` jobs simulated once and ``small`` jobs again and again meanwhile, in two
    threads of this process: they take turns on the interpreter every few milliseconds
    (``sys.getswitchinterval``), so that whatever else loads the machine weighs on both
    alike. Each is timed by its own thread's CPU time. Both cost more per event than alone
    (each evicts the other's data from the processor's caches at every turn); their ratio is
    what this measures. The rows as ``measure_in_child`` makes them, each with ``label``
    cycled and the process's peak RSS."""
    workloads = cycled_workload(small, steps), cycled_workload(large, steps)
    done = threading.Event()
    rows: dict[str, dict] = {}
    failed: list[BaseException] = []

    def run_large() -> None:
        try:
            rows["large"] = measure(workloads[1], policy, clock=time.thread_time)
        except BaseException as error:  # the other thread must stop too
            failed.append(error)
        finally:
            done.set()

    def run_small() -> None:
        try:
            rows["small"] = measure(workloads[0], policy, until=done, clock=time.thread_time)
        except BaseException as error:
            failed.append(error)
            done.set()

    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, *thresholds[1:])  # marlaas.drive.collector's young threshold:
    try:  # drive() would set and restore it in each thread, at different times
        threads = [threading.Thread(target=run_large), threading.Thread(target=run_small)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*thresholds)
    if failed:
        raise failed[0]
    rss = peak_rss_mb()
    return (
        {"label": "cycled", **rows["small"], "peak_rss_mb": rss},
        {"label": "cycled", **rows["large"], "peak_rss_mb": rss},
    )


def side_by_side_fresh(small: int, large: int, steps: int | None, policy: str) -> tuple[dict, dict]:
    """``side_by_side`` in a new process."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(side_by_side, small, large, steps, policy).result()


def growth_exponent(rows: list[dict], small: int = 64, large: int = 256) -> float | None:
    """d log(µs per event) / d log(jobs) between ``small`` and ``large`` jobs."""
    by_jobs = {r["jobs"]: r for r in rows if r["label"] != "paper-32"}
    if small not in by_jobs or large not in by_jobs:
        return None
    a, b = by_jobs[small]["us_per_event"], by_jobs[large]["us_per_event"]
    return math.log(b / a) / math.log(large / small)


def measure_in_child(
    label: str, jobs: int | None, steps: int | None, policy: str, min_events: int = 0
) -> dict:
    """``measure`` in this process, for ``run_fresh``: paper-32 (``jobs`` None) or the cycled
    workload; with the peak RSS of the process [MiB]."""
    workload = load_workload(PAPER_32) if jobs is None else cycled_workload(jobs, steps)
    row = measure(workload, policy, min_events)
    return {"label": label, **row, "peak_rss_mb": peak_rss_mb()}


def run_fresh(
    label: str, jobs: int | None, steps: int | None, policy: str, min_events: int = 0
) -> dict:
    """``measure_in_child`` in a new process: a size measured after another would otherwise
    pay for the memory the earlier one left behind."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(measure_in_child, label, jobs, steps, policy, min_events).result()


def combine(halves: list[dict]) -> dict:
    """One size's measurement in one round from its parts (the two halves of a palindrome,
    or the whole window): passes, times and costs over all of them; the peak RSS of all."""
    first = halves[0]
    passes = sum(h["passes"] for h in halves)
    cpu = sum(h["cpu_s"] for h in halves)
    events, records = first["events"] * passes, first["records"] * passes
    us = cpu / max(1, events) * 1e6
    return {
        **first,
        "passes": passes,
        "cpu_s": cpu,
        "wall_s": sum(h["wall_s"] for h in halves),
        "us_per_event": us,
        "bare_us_per_event": min(h["bare_us_per_event"] for h in halves),
        "ratio": us / min(h["bare_us_per_event"] for h in halves),
        "us_per_record": cpu / max(1, records) * 1e6,
        "us_per_group": cpu / max(1, first["group_turns"] * passes) * 1e6,
        "peak_rss_mb": max(h["peak_rss_mb"] for h in halves),
    }


def median_of(measured: list[dict]) -> dict:
    """The round with the median µs per event (of an even number, the lower of the middle
    two), with the spread of µs per event over all rounds (``spread``: largest / smallest -
    1) and the peak RSS of all."""
    ordered = sorted(measured, key=lambda r: r["us_per_event"])
    costs = [r["us_per_event"] for r in measured]
    return {
        **ordered[(len(ordered) - 1) // 2],
        "spread": max(costs) / min(costs) - 1,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in measured),
    }


def median(values: list[float]) -> float:
    """The median (of an even number, the mean of the middle two)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def palindrome(count: int) -> list[tuple[int, bool]]:
    """The order of ``count`` sizes in a round: (size, whether it runs with half of the
    window) up, then down again, the last size once with the whole window."""
    if count == 1:
        return [(0, False)]
    up = [(i, True) for i in range(count - 1)]
    return [*up, (count - 1, False), *up[::-1]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="8,32,64,128,256", help="job counts (multiples of 8)")
    parser.add_argument("--steps", type=int, help="every job's rl.steps (default: its own)")
    parser.add_argument("--policy", default="fair", choices=policy_names())
    parser.add_argument("--no-paper", action="store_true", help="skip paper-32 itself")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds over all sizes; each size's median is shown"
    )
    parser.add_argument(
        "--min-events",
        type=int,
        default=MIN_EVENTS,
        help="simulate each size again until it has processed this many SimPy events",
    )
    parser.add_argument(
        "--same-process", action="store_true", help="measure every size in this process"
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="measure the first and the last job count at once, in two threads of one "
        "process (no paper-32, no sizes between; --min-events unused)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: at least 1")
    if args.min_events < 0:
        parser.error(f"--min-events {args.min_events}: 0 or more")
    try:
        counts = [int(n) for n in args.jobs.split(",")]
    except ValueError:
        parser.error(f"--jobs {args.jobs!r}: job counts separated by commas, such as 8,64")
    if any(n < 8 or n % 8 for n in counts):
        parser.error(f"--jobs {args.jobs}: each count a multiple of 8 (whole 4-device trainers)")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps {args.steps}: at least 1")
    if args.side_by_side and len(counts) < 2:
        parser.error(f"--side-by-side with --jobs {args.jobs}: two job counts at least")
    runs = [] if args.no_paper or args.side_by_side else [("paper-32", None)]
    runs += [("cycled", n) for n in counts]
    if args.side_by_side:
        runs = [runs[0], runs[-1]]
    run = measure_in_child if args.same_process else run_fresh
    pair = side_by_side if args.same_process else side_by_side_fresh
    measured: list[list[dict]] = [[] for _ in runs]
    for round_ in range(1, args.repeat + 1) if args.side_by_side else ():
        both = pair(counts[0], counts[-1], args.steps, args.policy)
        for row, rounds in zip(both, measured, strict=True):
            rounds.append(row)
            print(
                f"round {round_}/{args.repeat}: cycled {row['jobs']} jobs: "
                f"{row['us_per_event']:.1f} us/event ({row['cpu_s']:.2f} s CPU, "
                f"{row['passes']} pass{'es' if row['passes'] > 1 else ''}; side by side)",
                file=sys.stderr,
                flush=True,
            )
    for round_ in range(1, args.repeat + 1) if not args.side_by_side else ():
        halves: list[list[dict]] = [[] for _ in runs]
        for which, half in palindrome(len(runs)):
            label, jobs = runs[which]
            window = (args.min_events + 1) // 2 if half else args.min_events
            part = run(label, jobs, args.steps, args.policy, window)
            halves[which].append(part)
            print(
                f"round {round_}/{args.repeat}: {label} {part['jobs']} jobs: "
                f"{part['us_per_event']:.1f} us/event ({part['cpu_s']:.2f} s CPU, "
                f"{part['passes']} pass{'es' if part['passes'] > 1 else ''})",
                file=sys.stderr,
                flush=True,
            )
        for parts, rounds in zip(halves, measured, strict=True):
            rounds.append(combine(parts))
    rows = [median_of(rounds) for rounds in measured]
    print(
        f"{'run':>10s} {'jobs':>5s} {'GPUs':>5s} {'events':>9s} {'passes':>6s} {'wall s':>8s} "
        f"{'cpu s':>8s} {'us/event':>9s} {'spread':>7s} {'bare us':>8s} {'x bare':>7s} "
        f"{'rec/ev':>7s} {'load/grp':>8s} {'us/rec':>7s} {'us/grp':>7s} {'RSS MiB':>7s}"
    )
    for row in rows:
        print(
            f"{row['label']:>10s} {row['jobs']:5d} {row['gpus']:5d} {row['events']:9d} "
            f"{row['passes']:6d} {row['wall_s']:8.2f} {row['cpu_s']:8.2f} "
            f"{row['us_per_event']:9.1f} {row['spread']:7.0%} {row['bare_us_per_event']:8.2f} "
            f"{row['ratio']:7.1f} "
            f"{row['records_per_event']:7.2f} {row['loads_per_group']:8.2f} "
            f"{row['us_per_record']:7.1f} {row['us_per_group']:7.1f} {row['peak_rss_mb']:7.0f}"
        )
    cycled = [
        rounds for row, rounds in zip(rows, measured, strict=True) if row["label"] != "paper-32"
    ]
    if len(cycled) >= 2:
        first_rounds, last_rounds = cycled[0], cycled[-1]
        by_round = [
            b["us_per_event"] / a["us_per_event"]
            for a, b in zip(first_rounds, last_rounds, strict=True)
        ]
        per_record, per_group = (
            [b[unit] / a[unit] for a, b in zip(first_rounds, last_rounds, strict=True)]
            for unit in ("us_per_record", "us_per_group")
        )
        print(
            f"per-event cost {last_rounds[0]['jobs']} vs {first_rounds[0]['jobs']} jobs: "
            f"{median(by_round):.2f}x (median of {args.repeat} round"
            + (
                f"s; round by round {min(by_round):.2f}-{max(by_round):.2f}x"
                if args.repeat > 1
                else ""
            )
            + f"); per record: {median(per_record):.2f}x; per group turn: "
            f"{median(per_group):.2f}x"
        )
    exponent = growth_exponent(rows)
    if exponent is not None:
        print(f"growth exponent of us/event, 64 -> 256 jobs: {exponent:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
