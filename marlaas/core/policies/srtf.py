"""Shortest remaining work first: the job closest to done gets resources first."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class ShortestRemaining(Policy):
    """Minimises mean job completion time when sizes are known (estimated from the spec)."""

    name = "srtf"
    idea = "fewest expected remaining tokens first (mean response lengths)"
    source = "baseline (shortest remaining processing time, Schrage 1968)"

    def key(self, job: JobView) -> tuple:
        return (job.remaining_tokens, job.arrival_s, job.index)
