"""First come, first served: the earliest submitted job gets every free resource first."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class Fifo(Policy):
    """Strict arrival order; the plain baseline of the asynchronous pipeline."""

    name = "fifo"
    idea = "the earliest submitted job gets every free resource first"
    source = "baseline (first come, first served)"

    def key(self, job: JobView) -> tuple:
        return (job.arrival_s, job.index)
