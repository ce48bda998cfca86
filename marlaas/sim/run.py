"""Simulate a workload: the scheduler core driven over the SimPy executor."""

from __future__ import annotations

import pandas as pd

from marlaas.core.feasibility import check_some_fit
from marlaas.core.policies import Policy
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import Workload
from marlaas.drive import RunResult, check_invariants, drive
from marlaas.drive.inbox import Inbox, workload_inbox
from marlaas.drive.loop import OnEnded
from marlaas.drive.progress import StepProgress
from marlaas.eventlog import records_to_frame
from marlaas.runs import run_summary
from marlaas.sim.cost_model import CostModel
from marlaas.sim.cost_profiles import CostProfile
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.recording import Recording


def cost_of(workload: Workload) -> CostModel:
    """The workload's cost model (``cost:`` of a workload file), else the defaults."""
    return getattr(workload, "cost", None) or CostModel()


def simulate(
    workload: Workload,
    policy: Policy | str | None = None,
    seed: int | None = None,
    progress: bool = False,
    cost: CostModel | None = None,
    recording: Recording | None = None,
    check: bool = True,
    inbox: Inbox | None = None,
    on_ended: OnEnded | None = None,
) -> RunResult:
    """Simulate ``workload`` under ``policy`` (default: the workload's) and ``seed`` with
    ``cost`` (default: the workload's cost model), replaying ``recording`` if given;
    ``check``: verify the run's invariants. The jobs come from ``inbox`` (default: the
    workload's, each at its arrival); ``on_ended`` hears of each job as it ends
    (finished, cancelled, refused). Raises InfeasibleWorkloadError when none of the
    workload's jobs could ever run."""
    return _simulate(workload, policy, seed, progress, cost, recording, check, inbox,
                     on_ended)[0]  # fmt: skip


def _simulate(
    workload: Workload,
    policy: Policy | str | None,
    seed: int | None,
    progress: bool,
    cost: CostModel | None,
    recording: Recording | None,
    check: bool,
    inbox: Inbox | None = None,
    on_ended: OnEnded | None = None,
) -> tuple[RunResult, Scheduler]:
    if inbox is None:
        check_some_fit(workload.jobs, workload.cluster)
    scheduler = Scheduler.for_workload(workload, policy, seed)
    executor = SimPyExecutor(scheduler.cluster, cost or cost_of(workload), scheduler.seed,
                             recording)  # fmt: skip
    total = sum(j.rl.steps for j in workload.jobs)
    with StepProgress(total, "simulating", enabled=progress) as bar:
        observers = [bar] if progress else []  # a bar that shows nothing need not count
        result = drive(
            scheduler, executor, inbox or workload_inbox(workload), observers=observers,
            on_ended=on_ended, check=check,
        )  # fmt: skip
    return result, scheduler


def simulate_run(
    workload: Workload,
    policy: str | None = None,
    seed: int | None = None,
    progress: bool = False,
    profile: CostProfile | None = None,
    recording: Recording | None = None,
    kind: str = "simulation",
    on_ended: OnEnded | None = None,
    **extra,
) -> tuple[pd.DataFrame, dict]:
    """Simulate and return (event log frame, summary); the summary records the cost profile
    (``profile``: it replaces the workload's cost model) and ``extra`` keys. The run's
    invariants are checked on that frame."""
    _, events, summary = simulate_logged(workload, policy, seed, progress, profile, recording,
                                         kind, on_ended, **extra)  # fmt: skip
    return events, summary


def simulate_logged(
    workload: Workload,
    policy: Policy | str | None = None,
    seed: int | None = None,
    progress: bool = False,
    profile: CostProfile | None = None,
    recording: Recording | None = None,
    kind: str = "simulation",
    on_ended: OnEnded | None = None,
    **extra,
) -> tuple[RunResult, pd.DataFrame, dict]:
    """:func:`simulate_run`, also returning the run's :class:`RunResult` (first)."""
    cost = profile.cost if profile is not None else None
    result, scheduler = _simulate(workload, policy, seed, progress, cost, recording, False,
                                  on_ended=on_ended)  # fmt: skip
    events = records_to_frame(result.records)
    check_invariants(result, scheduler, events)
    used = profile.summary() if profile is not None else {"name": "workload", "path": None}
    summary = run_summary(workload, result, events, kind, cost_profile=used, **extra)
    return result, events, summary
