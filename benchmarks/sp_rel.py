"""Scratch variants of split-progress with workload-relative constants, measured on
2026-12-05 (docs/policies-log.md, "split-progress at other scales"; every run's table in
docs/results/split-progress-scales.txt) and not adopted. Not part of the package: run one by
import path, with this folder on the path, as the measurements did::

    PYTHONPATH=benchmarks marlaas sweep traces/paper-32.yaml --policies sp_rel:A100x \
      --seeds 0,1,2,3,4 --workers 1 --no-events --out runs/p32-A100x

The key is split-progress's (marlaas/core/policies/split_progress.py) with four switches: which
jobs are big (``BIG``: ``abs``, the fixed bound split-progress had then, ``BIG_ALONE_S``;
``alone``: alone_s >= BIG_SHARE x longest_alone_s; ``longest``: remaining_alone_s >= BIG_SHARE x
longest_alone_s; ``horizon``: remaining_alone_s >= BIG_SHARE x max(backlog_s, longest_alone_s);
``backlog``: remaining_alone_s >= BIG_SHARE x backlog_s; ``alone+backlog``, ``alone+rbacklog``:
alone_s >= longest_alone_s, and alone_s, or remaining_alone_s, >= BIG_SHARE x backlog_s, or
backlog_s still infinite), the progress term (``abs``: 3 M tokens; ``rel``: PROGRESS_SHARE x the
job's own expected tokens, inside the service before the alone-time weight) and the slack term
(``abs``: 1,000 tokens per second; ``rel``: SLACK_SHARE x the job's own expected tokens per alone
time of slack), and how much a big job's attained tokens weigh (``BIG_ATTAINED``: 1 as cp-srpt, or
0.5 as the other jobs'). A job's expected tokens are read from the scheduler's JobState
(turn_tokens, total_groups), which a policy's JobView does not offer.
"""

import math

from marlaas.core.policies.base import JobView, Policy
from marlaas.core.policies.cp_srpt import CRITICAL_PATH_EXPONENT, REMAINING_WEIGHT
from marlaas.core.policies.split_progress import (
    ATTAINED_SHARE,
    PROGRESS_TOKENS,
    SLACK_TOKENS_PER_S,
    SMALL_EXPONENT,
    WEIGHT_EXPONENT,
    holds_the_horizon_alone,
)
from marlaas.core.policies.themis import RHO

BIG_ALONE_S = 1200.0
"""split-progress's big bound when these were measured [s] (a share of the run's span since
2026-12-06: ``split_progress.is_big``)."""


def tokens_of(job) -> float:
    """Expected tokens over all the job's steps (remaining_tokens at its start)."""
    return (
        (job.total_groups - job.start_version * job.prompts_per_step) * job.turns * job.turn_tokens
    )


class Base(Policy):
    name = "sp-scratch"
    reads_backlog = True
    BIG = "abs"  # abs | alone | longest | horizon | backlog | alone+backlog | alone+rbacklog
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


REL = {"PROGRESS": "rel"}
P127 = {**REL, "PROGRESS_SHARE": 1.27}
EXACT = 1.2713395758597803
"""The progress share that gives code-L exactly today's 3 M tokens."""
PX = {**REL, "PROGRESS_SHARE": EXACT}
SLACK_REL = {"SLACK": "rel"}

VARIANTS = {
    "Today": {},
    "ProgRel": REL,
    "L70": {"BIG": "longest", "BIG_SHARE": 0.7, **REL},
    "L80": {"BIG": "longest", "BIG_SHARE": 0.8, **REL},
    "L90": {"BIG": "longest", "BIG_SHARE": 0.9, **REL},
    "L80S": {"BIG": "longest", "BIG_SHARE": 0.8, **REL, **SLACK_REL},
    "B40": {"BIG": "backlog", "BIG_SHARE": 0.4, **REL},
    "B50": {"BIG": "backlog", "BIG_SHARE": 0.5, **REL},
    "B60": {"BIG": "backlog", "BIG_SHARE": 0.6, **REL},
    "B50S": {"BIG": "backlog", "BIG_SHARE": 0.5, **REL, **SLACK_REL},
    "H40": {"BIG": "horizon", "BIG_SHARE": 0.4, **REL},
    "H50": {"BIG": "horizon", "BIG_SHARE": 0.5, **REL},
    "H60": {"BIG": "horizon", "BIG_SHARE": 0.6, **REL},
    "H40S": {"BIG": "horizon", "BIG_SHARE": 0.4, **REL, **SLACK_REL},
    "H50S": {"BIG": "horizon", "BIG_SHARE": 0.5, **REL, **SLACK_REL},
    "H60S": {"BIG": "horizon", "BIG_SHARE": 0.6, **REL, **SLACK_REL},
    "H70S": {"BIG": "horizon", "BIG_SHARE": 0.7, **REL, **SLACK_REL},
    "H50S3": {"BIG": "horizon", "BIG_SHARE": 0.5, **REL, **SLACK_REL, "SLACK_SHARE": 0.3},
    "H50S6": {"BIG": "horizon", "BIG_SHARE": 0.5, **REL, **SLACK_REL, "SLACK_SHARE": 0.6},
    "P127": P127,
    "A100p": {"BIG": "alone", "BIG_SHARE": 1.0, **P127},
    "A90p": {"BIG": "alone", "BIG_SHARE": 0.9, **P127},
    "H50p": {"BIG": "horizon", "BIG_SHARE": 0.5, **P127},
    "L80p": {"BIG": "longest", "BIG_SHARE": 0.8, **P127},
    "PX": PX,
    "A100x": {"BIG": "alone", "BIG_SHARE": 1.0, **PX},
    "A90x": {"BIG": "alone", "BIG_SHARE": 0.9, **PX},
    "A80x": {"BIG": "alone", "BIG_SHARE": 0.8, **PX},
    "H50x": {"BIG": "horizon", "BIG_SHARE": 0.5, **PX},
    "L80x": {"BIG": "longest", "BIG_SHARE": 0.8, **PX},
    "AB40": {"BIG": "alone+backlog", "BIG_SHARE": 0.4, **PX},
    "AB45": {"BIG": "alone+backlog", "BIG_SHARE": 0.45, **PX},
    "AB50": {"BIG": "alone+backlog", "BIG_SHARE": 0.5, **PX},
    "AB70": {"BIG": "alone+backlog", "BIG_SHARE": 0.7, **PX},
    "AB85": {"BIG": "alone+backlog", "BIG_SHARE": 0.85, **PX},
    "AB100": {"BIG": "alone+backlog", "BIG_SHARE": 1.0, **PX},
    "RB50": {"BIG": "alone+rbacklog", "BIG_SHARE": 0.5, **PX},
    "RB70": {"BIG": "alone+rbacklog", "BIG_SHARE": 0.7, **PX},
    "A100xS": {"BIG": "alone", "BIG_SHARE": 1.0, **PX, "BIG_ATTAINED": 0.5},
    "AB70S": {"BIG": "alone+backlog", "BIG_SHARE": 0.7, **PX, "BIG_ATTAINED": 0.5},
}
"""Each variant measured: the Base settings it changes (a class of that name below)."""

globals().update({name: type(name, (Base,), dict(settings)) for name, settings in VARIANTS.items()})
