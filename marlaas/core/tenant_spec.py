"""A tenant's quotas and its jobs' default deadline."""

from __future__ import annotations

from marlaas.core import limits as L
from marlaas.core.spec_fields import Amount, Count, StrictSpec


class TenantSpec(StrictSpec):
    """One tenant's quotas (a workload's ``tenants:``, a service's ``marlaas tenants add``):
    each replaces the scheduling block's tenant_max_* for this tenant (unset: that one)."""

    max_active_jobs: Count(L.MAX_JOBS) | None = None
    """Jobs of this tenant admitted at once; its others wait."""
    max_queued_jobs: Count(L.MAX_JOBS, low=0) | None = None
    """Jobs of this tenant that may wait for admission at once; its newest beyond are refused."""

    job_deadline_s: Amount(L.MAX_ARRIVAL_S, positive=True) | None = None
    """The tenant's target for each of its jobs that sets no ``deadline_s`` of its own: done
    this long after the job's arrival [s] (a batch workload's data, read by the metrics and
    ``marlaas plan``; the service keeps quotas only)."""

    def active_or(self, default: int | None) -> int | None:
        """max_active_jobs, or ``default`` where it is unset."""
        return default if self.max_active_jobs is None else self.max_active_jobs

    def queued_or(self, default: int | None) -> int | None:
        """max_queued_jobs, or ``default`` where it is unset."""
        return default if self.max_queued_jobs is None else self.max_queued_jobs
