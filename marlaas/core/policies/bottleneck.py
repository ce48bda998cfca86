"""horizon, with each job sized by what binds the backlog: the cluster or the critical paths.

``cp-srpt`` sizes a job by its tokens (attained + 1.5 x expected remaining): the right size
while the cluster's token rate is what every job waits for. When the live jobs' work at the
measured rate (``backlog_s``) is shorter than the longest remaining critical path
(``longest_alone_s``), the cluster no longer binds: jobs wait on their own environment
waits, turns and training steps, and a job's tokens stop predicting when it can finish.
Then this policy orders by Smith's rule on the remaining critical path itself
(``remaining_alone_s`` / weight, W. E. Smith 1956, as shortest-remaining-time on the
resource that binds, the bottleneck of Goldratt's theory of constraints), after ``horizon``'s
promotion of the job whose remaining critical path is the backlog's horizon (its latest
start time has come). The order changes with the regime, which is the same for every job at
one instant: keys follow it when the scheduler re-keys on the backlog's moves
(``reads_backlog``; docs/policies-log.md has the sweeps: simulated, h100-7b profile).
"""

from marlaas.core.policies.base import JobView, register
from marlaas.core.policies.horizon import Horizon


@register
class Bottleneck(Horizon):
    """horizon's promotion; then cp-srpt's token order while the cluster binds the backlog
    (``backlog_s`` > ``longest_alone_s``), else the least remaining critical path per unit
    of weight."""

    name = "bottleneck"
    idea = (
        "horizon's promotion, then cp-srpt's token order while the cluster binds the backlog "
        "(its work at the measured rate exceeds the longest remaining critical path), else "
        "the least remaining critical path per unit of weight"
    )
    source = (
        "Smith's rule (1956) on the resource that binds (Goldratt's theory of constraints), "
        "on horizon's latest-start promotion (Kelley and Walker 1959)"
    )

    def key(self, job: JobView) -> tuple:
        ranked = super().key(job)
        if ranked[0] == 0 or job.backlog_s > job.longest_alone_s:
            return ranked  # promoted, or the cluster binds: horizon's (cp-srpt's) order
        return (1, job.remaining_alone_s / job.weight, job.arrival_s, job.index)
