"""Finish-time fairness: the job with the least slack to a fair finish time goes first.

Themis (Mahajan et al., "Themis: Fair and Efficient GPU Cluster Scheduling", NSDI 2020)
measures a job's fairness by rho = its finish time when shared / its finish time alone, and
serves the jobs with the worst rho. Here every job is given the finish time rho = ``RHO``
would allow, arrival + RHO x alone time (``alone_s``, estimated by the core from the job's
length distributions), and the job that must run soonest to meet it, the least slack
(that finish time - its remaining alone time), is served first: a key that does not move
with the clock, so keys change only when a job progresses. Small jobs go first while the
large ones' slack lasts; a large job's slack shrinks as it falls behind, not as time passes.
"""

from marlaas.core.policies.base import JobView, Policy, register

RHO = 2.0
"""The finish-time fairness every job is promised: twice its alone time (assumption)."""


@register
class FinishTimeFair(Policy):
    """Least slack to a finish time of RHO x the job's alone time (Themis' rho)."""

    name = "themis"
    idea = "least slack to a finish time of 2x the job's estimated alone time first"
    source = "Themis (Mahajan et al., NSDI 2020): finish-time fairness rho"

    def key(self, job: JobView) -> tuple:
        slack = job.arrival_s + RHO * job.alone_s - job.remaining_alone_s
        return (slack / job.weight, job.arrival_s, job.index)
