"""Shortest remaining work first, guarded by the critical path: the combined policy.

Mean completion time falls when the jobs with the least remaining work go first (SRPT,
``srtf``); makespan rises when that starves the jobs whose own critical path is long, since a
job cannot go faster than its steps follow one another (Graham's critical-path bound; Gavel's
makespan policy, Narayanan et al., OSDI 2020, plans for the same bound). So a job whose
remaining alone time (``remaining_alone_s``, the core's estimate from its length
distributions) exceeds :data:`GUARD_S` goes first, the longest first: it takes only what its
pipeline can use (its staleness bound caps its groups in flight), and the rest of the
cluster goes to the other jobs, fewest expected remaining tokens first. A guarded job joins
the SRPT order once its remaining alone time falls below the guard, so the long jobs finish
near the others' end instead of after it, which also evens out completion times.
"""

from marlaas.core.policies.base import JobView, Policy, register

GUARD_S = 700.0
"""Remaining alone time above which a job is on the critical path [s]: about 2/3 of the
longest alone time among paper-32's jobs (1,458 s estimated), chosen from the sweep in
docs/policies.md (500 ... 1,300 s; assumption for other workloads)."""


@register
class GuardedSrpt(Policy):
    """Jobs with a long remaining critical path first, then shortest remaining work first."""

    name = "guarded-srpt"
    idea = (
        f"jobs with over {GUARD_S:.0f} s of remaining alone time first (longest first), "
        "then fewest remaining tokens"
    )
    source = "SRPT (Schrage 1968) + critical-path guard (Graham 1969; Gavel, OSDI 2020)"

    def key(self, job: JobView) -> tuple:
        left = job.remaining_alone_s
        if left > GUARD_S:
            return (0, -left, job.index)
        return (1, job.remaining_tokens / job.weight, job.index)
