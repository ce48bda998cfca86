"""Fair share: least attained service per unit of weight first (max-min fairness)."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class Fair(Policy):
    """Weighted least-attained-service over tokens generated and trained."""

    name = "fair"
    idea = "least attained service (tokens) per unit of weight first: max-min fair share"
    source = "baseline (weighted max-min fairness; Tiresias' LAS without the 2D)"

    def key(self, job: JobView) -> tuple:
        return (job.attained_tokens / job.weight, job.arrival_s, job.index)
