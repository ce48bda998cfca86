"""A service's traffic as a workload file: every submission with its tenant, spec and time
(and its cancel), the tenants' quotas, on the service's cluster. ``marlaas simulate`` replays
it under another policy or cluster: the same admission code decides in both worlds."""

from __future__ import annotations

from pathlib import Path

import yaml

from marlaas.core.job_spec import JobSpec
from marlaas.core.limits import MAX_GROUP_TURNS, MAX_JOBS
from marlaas.core.workload import Workload, group_turns
from marlaas.service.config import ServiceConfig
from marlaas.service.store import JobStore, core_name

HEADER = "# marlaas traffic: a service's submissions as a workload file"


def traffic_workload(store: JobStore, config: ServiceConfig) -> tuple[Workload, int, int]:
    """Every submission in ``store`` as a job of ``config``'s cluster, at its time; how many
    were left out: the newest that one workload holds (:data:`~marlaas.core.limits.
    MAX_JOBS` jobs, :data:`~marlaas.core.limits.MAX_GROUP_TURNS` group-turns in all) are
    written (jobs each within the service's envelope can together be more: two of 1.5 M
    group-turns, refused for a quota or not, and the traffic of every tenant could not be
    written at all); and how many refused ones are left out because the store no longer
    holds their spec (``service: refused_specs_kept``)."""
    rows, tenants = store.traffic()
    if not rows:
        from marlaas.core.workload import WorkloadError

        raise WorkloadError("the service has had no submissions yet: no traffic to write")
    jobs, unkept = [], 0
    for row, submitted_s, cancelled_s in rows:
        if row["spec"] is None:  # a refused one past the newest kept: no spec to replay
            unkept += 1
            continue
        spec = JobSpec.model_validate(row["spec"])
        cancel = None if cancelled_s is None else max(0.0, cancelled_s - submitted_s)
        jobs.append(spec.model_copy(update={
            "name": core_name(row["id"]), "arrival_s": submitted_s, "cancel_after_s": cancel,
        }))  # fmt: skip
    if not jobs:
        from marlaas.core.workload import WorkloadError

        raise WorkloadError(f"the service keeps no submission's spec ({unkept:,} refused ones "
                            "were dropped): no traffic to write")  # fmt: skip
    kept, work = 0, 0
    for job in reversed(jobs):  # the newest that fit
        work += group_turns(job)
        if kept == MAX_JOBS or work > MAX_GROUP_TURNS:
            break
        kept += 1
    return config.workload(jobs[len(jobs) - kept :], tenants), len(jobs) - kept, unkept


def traffic_yaml(workload: Workload) -> str:
    """The workload file's text."""
    body = yaml.safe_dump(workload.model_dump(mode="json"), sort_keys=False)
    return f"{HEADER}\n{body}"


def is_traffic_file(path: Path) -> bool:
    """Whether ``path`` is a traffic file this command wrote (its first line says so)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.readline().rstrip("\n") == HEADER
    except (OSError, UnicodeDecodeError):
        return False
