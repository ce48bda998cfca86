"""The admission queue: the submitted jobs waiting for admission, and the tenants' job counts
and quotas.

An admission round (:meth:`AdmissionQueue.admit`) takes waiting jobs in policy order while
there is room (``max_active_jobs``) and their tenant's active-job quota allows; then
(:meth:`AdmissionQueue.refuse_beyond_bounds`) the newest waiting jobs beyond
``max_queued_jobs`` and their tenant's queued-job quota are refused. A tenant's quotas are
the mechanism's ``tenant_max_active_jobs`` and ``tenant_max_queued_jobs`` unless the
operator set its own (:meth:`AdmissionQueue.set_quota`).
"""

from __future__ import annotations

from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy
from marlaas.core.scheduling import Mechanism
from marlaas.core.tenant_spec import TenantSpec


class AdmissionQueue:
    """The jobs waiting for admission, oldest first, and each live tenant's job counts."""

    def __init__(self, mechanism: Mechanism, policy: Policy) -> None:
        self.mechanism, self.policy = mechanism, policy
        self.waiting: list[JobState] = []
        """Submitted, not yet admitted (max_active_jobs, tenant quotas), oldest first."""
        self.tenants: dict[str, list[int]] = {}
        """Per tenant with live jobs: [active, waiting, live] job counts (a finished or
        cancelled job being torn down counts as live only)."""
        self.quotas: dict[str, TenantSpec] = {}
        """Tenants whose quotas differ from the mechanism's tenant_max_* (set_quota)."""

    def set_quota(self, tenant: str, quota: TenantSpec | None) -> None:
        """The operator set ``tenant``'s quotas (None: back to the mechanism's
        tenant_max_active_jobs and tenant_max_queued_jobs). They apply from the next
        admission round on; jobs already admitted stay."""
        if quota is None:
            self.quotas.pop(tenant, None)
        else:
            self.quotas[tenant] = quota

    def quota(self, tenant: str) -> tuple[int | None, int | None]:
        """``tenant``'s (active, queued) job quotas (None: no bound)."""
        quota = self.quotas.get(tenant)
        mechanism = self.mechanism
        if quota is None:
            return mechanism.tenant_max_active_jobs, mechanism.tenant_max_queued_jobs
        return quota.active_or(mechanism.tenant_max_active_jobs), quota.queued_or(
            mechanism.tenant_max_queued_jobs
        )

    # ----------------------------------------------------------------------------- counts
    def add(self, job: JobState) -> None:
        """A job was submitted: it waits, and counts as waiting and live for its tenant."""
        self.waiting.append(job)
        counts = self.tenants.setdefault(job.tenant, [0, 0, 0])
        counts[1] += 1
        counts[2] += 1

    def withdraw(self, job: JobState) -> None:
        """A waiting job was cancelled: it waits no more (it is still live until ended)."""
        self.waiting.remove(job)
        self.tenants[job.tenant][1] -= 1

    def deactivate(self, job: JobState) -> None:
        """An admitted job finished or was cancelled: it no longer counts as active."""
        self.tenants[job.tenant][0] -= 1

    def ended(self, job: JobState) -> None:
        """A job ended: it no longer counts as live (a tenant with none left is dropped)."""
        counts = self.tenants[job.tenant]
        counts[2] -= 1
        if not counts[2]:
            del self.tenants[job.tenant]

    # ----------------------------------------------------------------------------- rounds
    def admit(self, active: int) -> list[JobState]:
        """The waiting jobs admitted now, in policy order, given ``active`` admitted jobs:
        while there is room (max_active_jobs) and their tenant's quota allows. They leave
        the queue and count as active."""
        limit = self.mechanism.max_active_jobs
        room = len(self.waiting) if limit is None else limit - active
        admitted: list[JobState] = []
        if room <= 0:
            return admitted
        for job in sorted(self.waiting, key=self.policy.key):
            if len(admitted) >= room:
                break
            counts = self.tenants[job.tenant]
            per_tenant = self.quota(job.tenant)[0]
            if per_tenant is not None and counts[0] >= per_tenant:
                continue
            counts[0] += 1
            counts[1] -= 1
            admitted.append(job)
        if admitted:
            taken = {job.index for job in admitted}
            self.waiting = [job for job in self.waiting if job.index not in taken]
        return admitted

    def refuse_beyond_bounds(self) -> list[tuple[JobState, str]]:
        """The newest waiting jobs beyond max_queued_jobs and tenant_max_queued_jobs (or
        their tenant's own quota), oldest first, each with the reason: they leave the queue
        (still live until the caller ends them)."""
        mechanism = self.mechanism
        total = mechanism.max_queued_jobs
        refused: list[tuple[JobState, str]] = []
        if total is None and mechanism.tenant_max_queued_jobs is None and not self.quotas:
            return refused
        keep: list[JobState] = []
        waiting: dict[str, int] = {}
        for job in self.waiting:  # oldest first
            mine = waiting.get(job.tenant, 0)
            per_tenant = self.quota(job.tenant)[1]
            if per_tenant is not None and mine >= per_tenant:
                source = "its quota" if job.tenant in self.quotas else "tenant_max_queued_jobs"
                refused.append((job, f"tenant {job.tenant!r} already has {_jobs(per_tenant)} "
                                     f"waiting for admission ({source})"))  # fmt: skip
            elif total is not None and len(keep) >= total:
                refused.append((job, f"{_jobs(total)} already waiting for admission "
                                     "(max_queued_jobs)"))  # fmt: skip
            else:
                keep.append(job)
                waiting[job.tenant] = mine + 1
        if refused:
            self.waiting = keep
            for job, _ in refused:
                self.tenants[job.tenant][1] -= 1
        return refused


def _jobs(count: int) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{count} job" if count == 1 else f"{count} jobs"
