"""Sync: every job at once on colocated devices, with a global step barrier.

Multi-tenant but synchronous: all jobs generate step k together (multi-LoRA batches), then
train, then sync, and nobody starts step k+1 before everyone finished step k.
"""

from typing import Any, ClassVar

from marlaas.core.policies.base import JobView, Policy, register


@register
class Sync(Policy):
    """The synchronous multi-tenant baseline."""

    name = "sync"
    settings: ClassVar[dict[str, Any]] = {
        "placement": "colocated",
        "barrier": True,
        "staleness_cap": 0,
    }

    def key(self, job: JobView) -> tuple:
        return (job.arrival_s, job.index)
