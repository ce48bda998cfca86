"""Sequential: one job at a time, synchronous on-policy RL, all devices colocated.

The usual single-task setup run job after job: generate, then train, then sync, with every
device in one time-shared pool. It is FIFO order plus mechanism settings.
"""

from typing import Any, ClassVar

from marlaas.core.policies.base import JobView, Policy, register


@register
class Sequential(Policy):
    """The one-job-at-a-time baseline."""

    name = "sequential"
    settings: ClassVar[dict[str, Any]] = {
        "placement": "colocated",
        "max_active_jobs": 1,
        "staleness_cap": 0,
    }

    def key(self, job: JobView) -> tuple:
        return (job.arrival_s, job.index)
