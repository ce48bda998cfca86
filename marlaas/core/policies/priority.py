"""Priority: higher tenant weight first, then arrival order."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class Priority(Policy):
    """Strict priority by weight."""

    name = "priority"
    idea = "highest tenant weight first, then arrival order"
    source = "baseline (strict priority)"

    def key(self, job: JobView) -> tuple:
        return (-job.weight, job.arrival_s, job.index)
