"""cp-srpt, and first of all the job whose remaining critical path is the backlog's horizon.

``cp-srpt``'s critical-path weight is a constant of the job: a key of one job cannot see
whether that job decides the makespan, which depends on the whole backlog (docs/policies-log.md,
"Why fifo wins on paper-8"). This policy reads the backlog the core keeps
(:mod:`marlaas.core.backlog`) and promotes one job at a time ahead of every other, by the
latest-start-time rule of the critical path method (J. E. Kelley and M. R. Walker,
"Critical-path planning and scheduling", 1959) with Graham's longest-processing-time order
(1969) among ties: the backlog cannot end before its horizon, the longest of the live jobs'
work at the cluster's rate (``backlog_s``: their expected remaining tokens over the measured
token rate) and their remaining critical paths (``longest_alone_s``). A job whose remaining
critical path (``remaining_alone_s``) is that horizon has no slack left: it must run at its
own pace from now on, or the backlog ends later with it running alone while the engines
idle. It goes first while it has tokens to generate; every other job keeps ``cp-srpt``'s
order. The rule adds no constant: the promoted job is the one that sets the horizon.

Its price (simulated, h100-7b profile, docs/policies-log.md): on paper-8 the makespan is fifo's
(cp-srpt's is 5-10% longer), on paper-32 the mean completion time is 1-2 points of fifo's
higher than cp-srpt's and the makespan about the same; with jobs arriving over time the live
backlog is short, the longest job is promoted often and the mean completion time rises.
The key changes when the job is served, when the backlog moved by 5% and when the longest
critical path passes to or from the job (the scheduler re-keys: ``reads_backlog``).
"""

from marlaas.core.policies.base import JobView, register
from marlaas.core.policies.cp_srpt import CriticalPathSrpt


@register
class Horizon(CriticalPathSrpt):
    """cp-srpt's order, after the job whose remaining critical path is the backlog's
    horizon (max of ``backlog_s`` and ``longest_alone_s``)."""

    name = "horizon"
    idea = (
        "cp-srpt's order, but first the job whose remaining critical path is the backlog's "
        "horizon (the live jobs' expected tokens at the measured rate, or the longest "
        "remaining critical path): its latest start time has come"
    )
    source = (
        "the critical path method's latest start time (Kelley and Walker 1959) and LPT "
        "(Graham 1969) on cp-srpt's Smith's rule"
    )
    reads_backlog = True

    def key(self, job: JobView) -> tuple:
        left = job.remaining_alone_s
        if job.remaining_tokens > 0 and left >= max(job.backlog_s, job.longest_alone_s):
            return (0, -left, job.arrival_s, job.index)  # its latest start time has come
        return (1, *super().key(job))
