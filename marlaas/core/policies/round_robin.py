"""Round robin: serve the job that was served least recently."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class RoundRobin(Policy):
    """Each placement moves the job to the back of the line."""

    name = "round-robin"
    idea = "the job served least recently goes next"
    source = "baseline (round robin)"

    def key(self, job: JobView) -> tuple:
        return (job.last_served, job.index)
