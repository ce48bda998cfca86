"""Simulator speed against a bare SimPy loop, and against its own token count.

Run: ``python -m pytest benchmarks/bench_simulator.py --benchmark-enable -s``.

1. A paper-scale simulation (32 jobs, 64 GPUs, 100 steps each) and, in the same session, a
   bare SimPy loop processing the same number of events (timeouts with a callback each, the
   way the simulator uses SimPy). The ratio of wall time per event is printed and stored.
2. The same workload with every max_new_tokens doubled (same number of sequences): the wall
   time ratio shows that cost follows sequences, not tokens.
"""

from __future__ import annotations

import time

import simpy

from benchmarks.paper_scale import paper_scale_workload
from marlaas.core.scheduler import Scheduler
from marlaas.drive import drive
from marlaas.sim.executor import SimPyExecutor


def bare_simpy(events: int, chains: int = 64) -> float:
    """Wall time [s] of SimPy processing ``events`` timeouts in ``chains`` callback chains."""
    env = simpy.Environment()
    left = [events]

    def fire(_event) -> None:
        left[0] -= 1
        if left[0] >= chains:
            env.timeout(1.0 + (left[0] % 7) * 0.1).callbacks.append(fire)

    for i in range(min(chains, events)):
        env.timeout(i * 0.01).callbacks.append(fire)
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0


def _simulate(workload):
    """(wall [s], result, SimPy events) of one fair simulation, invariants not checked."""
    scheduler = Scheduler(workload, "fair")
    executor = SimPyExecutor(workload, scheduler.cluster)
    t0 = time.perf_counter()
    result = drive(scheduler, executor, check=False)
    return time.perf_counter() - t0, result, executor.steps


def test_paper_scale_vs_bare_simpy(benchmark):
    workload = paper_scale_workload()
    wall_s, result, events = benchmark.pedantic(_simulate, args=(workload,), rounds=1, iterations=1)
    bare_s = min(bare_simpy(events) for _ in range(3))
    ratio = wall_s / bare_s
    benchmark.extra_info.update(events=events, sim_s=wall_s, bare_simpy_s=bare_s,
                                per_event_ratio=ratio)  # fmt: skip
    print(
        f"\n32 jobs x 64 GPUs x 100 steps: {events} events, simulated "
        f"{result.makespan_s:,.0f} s in {wall_s:.2f} s wall ({wall_s / events * 1e6:.1f} "
        f"us/event); bare SimPy, same events: {bare_s:.3f} s "
        f"({bare_s / events * 1e6:.2f} us/event); ratio {ratio:.1f}x"
    )
    assert events > 0


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
