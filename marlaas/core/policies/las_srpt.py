"""Least attained service plus expected remaining work: a blend of fair share and SRPT.

``fair`` (least attained service, LAS: Tiresias, Gu et al., NSDI 2019) gives every job the
same service at once: all of them are in flight, the engines stay full, and the makespan is
the shortest of the baselines, but every job finishes late. ``srtf`` (shortest remaining
processing time, Schrage 1968) finishes the small jobs first, the lowest mean completion
time, but its key falls as a job is served: of several large jobs, the one that got ahead
runs ahead, and the others finish alone at the end, their pipelines (staleness-bounded) too
narrow to fill the engines, so the makespan grows. This key is the sum of the two, attained
service + c x expected remaining service (c = :data:`REMAINING_WEIGHT`), per unit of tenant
weight. For a job of expected size N that has received a tokens it is c N + (1 - c) a: with
c < 1 it grows as the job is served (fair's way: a job starts at c N, then shares), with
c > 1 it falls (srtf's way). With c = 1 generating leaves it unchanged and training adds to
it: jobs are served smallest first (SRPT's order, a low mean completion time), and jobs of
about the same size take turns instead of racing, so that the largest ones are in flight
together to the end and keep the engines full (fair's makespan).

The remaining service is the core's estimate from the job's length distributions
(``remaining_tokens``), never the simulator's draws; the key changes only when the job is
served, not as time passes.
"""

from marlaas.core.policies.base import JobView, Policy, register

REMAINING_WEIGHT = 1.0
"""c: how much a token still to generate weighs against a token received. Swept on paper-32
(h100-7b profile, seed 0, common random numbers; docs/policies-log.md): 0.5 and 0.75 keep about
fair's makespan (1-1.3% longer) with a mean completion time 12% and 17% below fair's; 1 lowers
it 20% below fair's with a makespan 2.7% above fair's (0.91x fifo's); 1.1 and 1.25 lower it
by 1-2% more, with a makespan 4-7% longer."""


@register
class LasSrpt(Policy):
    """Attained + c x expected remaining tokens, per unit of weight (c = REMAINING_WEIGHT)."""

    name = "las-srpt"
    idea = (
        f"attained + {REMAINING_WEIGHT:g} x expected remaining tokens, least first: jobs "
        "finish smallest first, all in flight to the end"
    )
    source = "LAS (Tiresias, Gu et al., NSDI 2019) + SRPT (Schrage 1968), blended"

    def key(self, job: JobView) -> tuple:
        service = job.attained_tokens + REMAINING_WEIGHT * job.remaining_tokens
        return (service / job.weight, job.arrival_s, job.index)
