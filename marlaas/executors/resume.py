"""Resuming a real run from its adapter store: versions already trained, the steps left.

The scheduler core counts every job's versions from 0. A resumed job that had trained k
versions is given to it as a job of ``steps - k`` steps; the driver adds k to the versions it
hands to the trainer and the generator, and :func:`shift_versions` adds k to the event log's
steps and versions, so a resumed run's log reads as the continuation it is.
"""

from __future__ import annotations

import pandas as pd

from marlaas.core.workload import Workload, WorkloadError, parse_workload
from marlaas.executors.adapter_store import AdapterStore


class NothingToResumeError(WorkloadError):
    """``--resume`` on a run whose jobs have all trained every step."""


def resume_offsets(store: AdapterStore, workload: Workload) -> dict[str, int]:
    """Newest saved version of each job (0 when none), capped at the job's steps."""
    return {j.name: min(store.latest(j.name) or 0, j.rl.steps) for j in workload.jobs}


def remaining_workload(workload: Workload, offsets: dict[str, int]) -> Workload:
    """The workload with each job's steps reduced by its offset; finished jobs left out."""
    if not any(offsets.values()):
        return workload
    data = workload.model_dump()
    jobs = []
    for job in data["jobs"]:
        left = job["rl"]["steps"] - offsets.get(job["name"], 0)
        if left > 0:
            job["rl"]["steps"] = left
            jobs.append(job)
    if not jobs:
        raise NothingToResumeError(
            f"{workload.name}: every job has already trained all its steps; nothing to resume"
        )
    data["jobs"] = jobs
    return parse_workload(data, source="resume", schema=type(workload))


def shift_versions(events: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """The event log with each job's steps and versions moved up by its offset."""
    events = events.copy()
    for job, offset in offsets.items():
        if not offset:
            continue
        rows = events["job"] == job
        for column in ("step", "version"):
            valid = rows & (events[column] >= 0)
            events.loc[valid, column] = events.loc[valid, column] + offset
    return events
