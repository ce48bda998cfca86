"""Scratch variants of split-progress with workload-relative constants, measured on
2026-12-05 (docs/policies.md, "split-progress at other scales"; every run's table in
docs/results/split-progress-scales.txt) and not adopted. Not part of the package: run one by
import path, with this folder on the path, as the measurements did::

    PYTHONPATH=benchmarks marlaas sweep traces/paper-32.yaml --policies sp_rel:A100x \
      --seeds 0,1,2,3,4 --workers 1 --no-events --out runs/p32-A100x

The key is split-progress's (marlaas/core/policies/split_progress.py) with four switches:
which jobs are big (``BIG``: ``abs``, today's fixed bound; ``alone``: alone_s >= BIG_SHARE x
longest_alone_s; ``longest``: remaining_alone_s >= BIG_SHARE x longest_alone_s;
``horizon``: remaining_alone_s >= BIG_SHARE x max(backlog_s, longest_alone_s); ``backlog``:
remaining_alone_s >= BIG_SHARE x backlog_s; ``alone+backlog``, ``alone+rbacklog``: alone_s
>= longest_alone_s, and alone_s, or remaining_alone_s, >= BIG_SHARE x backlog_s, or
backlog_s still infinite), the progress term (``abs``: 3 M tokens; ``rel``: PROGRESS_SHARE x
the job's own expected tokens, inside the service before the alone-time weight) and the
slack term (``abs``: 1,000 tokens per second; ``rel``: SLACK_SHARE x the job's own expected
tokens per alone time of slack), and how much a big job's attained tokens weigh
(``BIG_ATTAINED``: 1 as cp-srpt, or 0.5 as the other jobs'). A job's expected tokens are
read from the scheduler's JobState (turn_tokens, total_groups), which a policy's JobView
does not offer.
"""

import math

from marlaas.core.policies.base import JobView, Policy
from marlaas.core.policies.cp_srpt import CRITICAL_PATH_EXPONENT, REMAINING_WEIGHT
from marlaas.core.policies.split_progress import (
    ATTAINED_SHARE,
    BIG_ALONE_S,
    PROGRESS_TOKENS,
    SLACK_TOKENS_PER_S,
    SMALL_EXPONENT,
    WEIGHT_EXPONENT,
    holds_the_horizon_alone,
)
from marlaas.core.policies.themis import RHO


def tokens_of(job) -> float:
    """Expected tokens over all the job's steps (remaining_tokens at its start)."""
    return (
        (job.total_groups - job.start_version * job.prompts_per_step) * job.turns * job.turn_tokens
    )


class Base(Policy):
    name = "sp-scratch"
    reads_backlog = True
    BIG = "abs"  # abs | longest | backlog
    BIG_SHARE = 0.0
    PROGRESS = "abs"  # abs | rel
    PROGRESS_SHARE = 1.25
    SLACK = "abs"  # abs | rel
    SLACK_SHARE = 0.4
    BIG_ATTAINED = 1.0

    def big(self, job) -> bool:
        if self.BIG == "abs":
            return job.alone_s >= BIG_ALONE_S
        if self.BIG == "longest":
            return job.remaining_alone_s >= self.BIG_SHARE * job.longest_alone_s
        if self.BIG == "alone+backlog":
            return job.alone_s >= job.longest_alone_s and (
                math.isinf(job.backlog_s) or job.alone_s >= self.BIG_SHARE * job.backlog_s
            )
        if self.BIG == "alone+rbacklog":
            return job.alone_s >= job.longest_alone_s and (
                math.isinf(job.backlog_s) or job.remaining_alone_s >= self.BIG_SHARE * job.backlog_s
            )
        if self.BIG == "alone":
            return job.alone_s >= self.BIG_SHARE * job.longest_alone_s
        if self.BIG == "backlog":
            return job.remaining_alone_s >= self.BIG_SHARE * job.backlog_s
        horizon = max(job.backlog_s, job.longest_alone_s)  # "horizon"
        return job.remaining_alone_s >= self.BIG_SHARE * horizon

    def key(self, job: JobView) -> tuple:
        if holds_the_horizon_alone(job):
            return (-math.inf, -job.remaining_alone_s, job.arrival_s, job.index)
        alone = max(job.alone_s, 1.0)
        if self.big(job):
            service = (
                self.BIG_ATTAINED * job.attained_tokens + REMAINING_WEIGHT * job.remaining_tokens
            )
            done = 1.0 - job.remaining_alone_s / alone
            scale = alone**CRITICAL_PATH_EXPONENT
            if self.PROGRESS == "abs":
                value = service / scale + PROGRESS_TOKENS * done
            else:
                value = (service + self.PROGRESS_SHARE * tokens_of(job) * done) / scale
        else:
            service = ATTAINED_SHARE * job.attained_tokens + REMAINING_WEIGHT * job.remaining_tokens
            slack = job.arrival_s + RHO * job.alone_s - job.remaining_alone_s
            scale = alone**SMALL_EXPONENT
            if self.SLACK == "abs":
                value = service / scale + SLACK_TOKENS_PER_S * slack
            else:
                value = (service + self.SLACK_SHARE * tokens_of(job) * slack / alone) / scale
        return (value / job.weight**WEIGHT_EXPONENT, job.arrival_s, job.index)


class Today(Base):
    pass


class ProgRel(Base):
    PROGRESS = "rel"


class L80(Base):
    BIG, BIG_SHARE, PROGRESS = "longest", 0.8, "rel"


class B50(Base):
    BIG, BIG_SHARE, PROGRESS = "backlog", 0.5, "rel"


class B40(Base):
    BIG, BIG_SHARE, PROGRESS = "backlog", 0.4, "rel"


class B60(Base):
    BIG, BIG_SHARE, PROGRESS = "backlog", 0.6, "rel"


class L80S(L80):
    SLACK = "rel"


class B50S(B50):
    SLACK = "rel"


class H50(Base):
    BIG, BIG_SHARE, PROGRESS = "horizon", 0.5, "rel"


class H40(Base):
    BIG, BIG_SHARE, PROGRESS = "horizon", 0.4, "rel"


class H60(Base):
    BIG, BIG_SHARE, PROGRESS = "horizon", 0.6, "rel"


class H50S(H50):
    SLACK = "rel"


class H40S(H40):
    SLACK = "rel"


class H60S(H60):
    SLACK = "rel"


class H70S(Base):
    BIG, BIG_SHARE, PROGRESS, SLACK = "horizon", 0.7, "rel", "rel"


class H50S3(H50S):
    SLACK_SHARE = 0.3


class H50S6(H50S):
    SLACK_SHARE = 0.6


class L70(Base):
    BIG, BIG_SHARE, PROGRESS = "longest", 0.7, "rel"


class L90(Base):
    BIG, BIG_SHARE, PROGRESS = "longest", 0.9, "rel"


class P127(Base):
    PROGRESS, PROGRESS_SHARE = "rel", 1.27


class A100p(P127):
    BIG, BIG_SHARE = "alone", 1.0


class A90p(P127):
    BIG, BIG_SHARE = "alone", 0.9


class H50p(P127):
    BIG, BIG_SHARE = "horizon", 0.5


class L80p(P127):
    BIG, BIG_SHARE = "longest", 0.8


EXACT = 1.2713395758597803


class PX(Base):
    PROGRESS, PROGRESS_SHARE = "rel", EXACT


class A100x(PX):
    BIG, BIG_SHARE = "alone", 1.0


class A90x(PX):
    BIG, BIG_SHARE = "alone", 0.9


class A80x(PX):
    BIG, BIG_SHARE = "alone", 0.8


class H50x(PX):
    BIG, BIG_SHARE = "horizon", 0.5


class L80x(PX):
    BIG, BIG_SHARE = "longest", 0.8


class AB40(PX):
    BIG, BIG_SHARE = "alone+backlog", 0.4


class AB45(PX):
    BIG, BIG_SHARE = "alone+backlog", 0.45


class AB50(PX):
    BIG, BIG_SHARE = "alone+backlog", 0.5


class AB70(PX):
    BIG, BIG_SHARE = "alone+backlog", 0.7


class RB50(PX):
    BIG, BIG_SHARE = "alone+rbacklog", 0.5


class RB70(PX):
    BIG, BIG_SHARE = "alone+rbacklog", 0.7


class AB85(PX):
    BIG, BIG_SHARE = "alone+backlog", 0.85


class AB100(PX):
    BIG, BIG_SHARE = "alone+backlog", 1.0


class A100xS(A100x):
    BIG_ATTAINED = 0.5


class AB70S(AB70):
    BIG_ATTAINED = 0.5
