"""Simulate a workload: the scheduler core driven over the SimPy executor."""

from __future__ import annotations

import pandas as pd

from marlaas.core.policies import Policy
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import Workload
from marlaas.drive import RunResult, check_invariants, drive
from marlaas.drive.progress import StepProgress
from marlaas.eventlog import records_to_frame
from marlaas.runs import run_summary
from marlaas.sim.cost_model import CostModel
from marlaas.sim.executor import SimPyExecutor


def cost_of(workload: Workload) -> CostModel:
    """The workload's cost model (``cost:`` of a workload file), else the defaults."""
    return getattr(workload, "cost", None) or CostModel()


def simulate(
    workload: Workload,
    policy: Policy | str | None = None,
    seed: int | None = None,
    progress: bool = False,
    cost: CostModel | None = None,
) -> RunResult:
    """Simulate ``workload`` under ``policy`` (default: the workload's) and ``seed``."""
    return _simulate(workload, policy, seed, progress, cost, check=True)[0]


def _simulate(
    workload: Workload,
    policy: Policy | str | None,
    seed: int | None,
    progress: bool,
    cost: CostModel | None,
    check: bool,
) -> tuple[RunResult, Scheduler]:
    scheduler = Scheduler(workload, policy)
    executor = SimPyExecutor(workload, scheduler.cluster, cost or cost_of(workload), seed)
    total = sum(j.rl.steps for j in workload.jobs)
    with StepProgress(total, "simulating", enabled=progress) as bar:
        return drive(scheduler, executor, observers=[bar], check=check), scheduler


def simulate_run(
    workload: Workload, policy: str | None = None, seed: int | None = None, progress: bool = False
) -> tuple[pd.DataFrame, dict]:
    """Simulate and return (event log frame, summary); the run's invariants are checked on
    that frame."""
    result, scheduler = _simulate(workload, policy, seed, progress, None, check=False)
    events = records_to_frame(result.records)
    check_invariants(result, scheduler, events)
    return events, run_summary(workload, result, events, "simulation")
