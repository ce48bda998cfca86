"""Expected remaining work, weighted by the job's critical path: small jobs first, the jobs
with the longest alone time started early enough that they do not end alone.

Smith's rule (weighted shortest processing time, W. E. Smith, "Various optimizers for
single-stage production", Naval Research Logistics Quarterly, 1956) serves jobs in order of
size / weight and minimises the weighted sum of completion times. Here the size is
``las-srpt``'s service, attained + c x expected remaining tokens (LAS: Tiresias, Gu et al.,
NSDI 2019; SRPT: Schrage 1968), and the weight the tenant's weight times the job's estimated
alone time to the power b (``alone_s``: its critical path, from the spec, a constant of the
job). b = 0 is the blend alone (mean completion time); a large b serves the longest critical
path first (Graham's longest-processing-time rule, 1969, for the makespan). A job whose steps
are slow (long environment waits, long multi-turn episodes) cannot go faster than its
critical path whatever it is given; started last, it finishes alone while the engines idle.
A small b ranks it, among jobs of about its size, ahead of those that can catch up, while
the small jobs still go first.

A job of N expected tokens starts at c N and ends at N + the tokens it trained (its
contexts: on paper-32 1.4-1.5x its generated tokens for single-turn jobs, 2.7x for the
multi-turn tool jobs). With c = 1 (``las-srpt``) a tool job's key ends 3.7x where it
started, and medium tool jobs wait behind large ones; with c = 1.5 it ends 2.4x, and a
single-turn job's 1.6x: jobs are served smallest first, yet jobs of about the same size
still take turns, so that the largest are in flight together to the end.

Every figure comes from the core's estimates (``remaining_tokens``, ``alone_s``), never the
simulator's draws; the key changes only when the job is served, not as time passes.
"""

from marlaas.core.policies.base import JobView, Policy, register

REMAINING_WEIGHT = 1.5
"""c: how much an expected token still to generate weighs against a token received."""

CRITICAL_PATH_EXPONENT = 0.2
"""b: the job's weight grows as alone_s ** b. Chosen with c on paper-32 (h100-7b profile,
seeds 0-4; docs/policies-log.md): (c, b) = (1.5, 0.2) and its neighbours (c 1.5-2, b 0.15-0.25)
reach makespans of 0.85-0.99x fifo's with mean completion times of 0.76-0.82x, varying by a
few percent from one (c, b) or seed to the next; b = 0 (c 1.1-2) has makespans of 0.94-0.95x
fifo's (seed 0), and b = 0.3 is longer on both. These figures predate common random numbers
(7c527cf); docs/policies-log.md has the grid measured again, where (1.6, 0.2) meets the makespan
and mean JCT goals on more seeds than (1.5, 0.2) and no point reaches a Jain index of 0.85."""


@register
class CriticalPathSrpt(Policy):
    """(attained + c x expected remaining tokens) / (weight x alone_s ** b), least first."""

    name = "cp-srpt"
    idea = (
        f"(attained + {REMAINING_WEIGHT:g} x expected remaining tokens) / (weight x alone "
        f"time^{CRITICAL_PATH_EXPONENT:g}), least first: small jobs first, long critical "
        "paths started early"
    )
    source = (
        "Smith's rule (WSPT, 1956) on the LAS + SRPT service of las-srpt, weighted by the "
        "critical path (LPT, Graham 1969)"
    )

    def key(self, job: JobView) -> tuple:
        service = job.attained_tokens + REMAINING_WEIGHT * job.remaining_tokens
        weight = job.weight * max(job.alone_s, 1.0) ** CRITICAL_PATH_EXPONENT
        return (service / weight, job.arrival_s, job.index)
