"""A service's traffic as a workload file: every submission with its tenant, spec and time
(and its cancel), the tenants' quotas, on the service's cluster. ``marlaas simulate`` replays
it under another policy or cluster: the same admission code decides in both worlds."""

from __future__ import annotations

from pathlib import Path

import yaml

from marlaas.core.job_spec import JobSpec
from marlaas.core.workload import Workload
from marlaas.service.config import ServiceConfig
from marlaas.service.store import JobStore, core_name

HEADER = "# marlaas traffic: a service's submissions as a workload file"


def traffic_workload(store: JobStore, config: ServiceConfig) -> Workload:
    """Every submission in ``store`` as a job of ``config``'s cluster, at its time."""
    rows, tenants = store.traffic()
    if not rows:
        from marlaas.core.workload import WorkloadError

        raise WorkloadError("the service has had no submissions yet: no traffic to write")
    jobs = []
    for row, submitted_s, cancelled_s in rows:
        spec = JobSpec.model_validate(row["spec"])
        cancel = None if cancelled_s is None else max(0.0, cancelled_s - submitted_s)
        jobs.append(spec.model_copy(update={
            "name": core_name(row["id"]), "arrival_s": submitted_s, "cancel_after_s": cancel,
        }))  # fmt: skip
    return config.workload(jobs, tenants)


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
