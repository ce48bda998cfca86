"""Fair share: least attained service per unit of weight first (max-min fairness)."""

from marlaas.core.policies.base import JobView, Policy, register


@register
class Fair(Policy):
    """Weighted least-attained-service over tokens generated and trained."""

    name = "fair"

    def key(self, job: JobView) -> tuple:
        return (job.attained_tokens / job.weight, job.arrival_s, job.index)
