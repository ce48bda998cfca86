"""Shortest expected remaining time first, in the job's own alone time.

Tiresias (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI
2019) serves jobs whose size is a distribution by their Gittins index; when the remaining
size is concentrated (a job's remaining work is a sum of many independent turns: its 90th
percentile is within a few percent of its mean here, ``remaining_tokens_high``), the index
orders jobs as their expected remaining service does. Unlike ``srtf`` (remaining tokens),
the service counted is the job's remaining critical path alone (``remaining_alone_s``: slow
environments and long responses count, parallel groups do not), which is what delays it.
"""

from marlaas.core.policies.base import JobView, Policy, register


@register
class RemainingTime(Policy):
    """Least expected remaining alone time first (Gittins index of a concentrated size)."""

    name = "remaining-time"
    idea = "least expected remaining alone time (critical path) first"
    source = "Tiresias (Gu et al., NSDI 2019): Gittins index; SRPT when sizes are known"

    def key(self, job: JobView) -> tuple:
        return (job.remaining_alone_s / job.weight, job.arrival_s, job.index)
