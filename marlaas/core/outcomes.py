"""What became of a submission, and how a job's life in the scheduler ended: plain values."""

from __future__ import annotations

from dataclasses import dataclass

QUEUED, ACTIVE, CANCELLING = "queued", "active", "cancelling"
"""States of a live job: waiting for admission, admitted, cancelled with work in flight."""
FINISHED, CANCELLED, REFUSED = "finished", "cancelled", "refused"
"""States of an ended job."""


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to a submission: ``queued`` (admitted at the next decision round, in policy
    order, as room and quotas allow) or ``refused`` with the reason."""

    job: str
    state: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a job left the scheduler: finished, cancelled, or refused."""

    name: str
    tenant: str
    state: str
    """finished, cancelled or refused."""
    arrival_s: float
    """When it was submitted [s since the run's start]."""
    end_s: float
    """When it ended [s]: its last version published, its cancelled work discarded (or its
    cancel, if it was still queued), its refusal."""
    steps: int
    """Training steps it asked for."""
    start_version: int = 0
    """The adapter version it was submitted at (a resumed job's last durable one)."""
    published: int = 0
    """Its newest published adapter version when it ended."""
    max_staleness: int = 0
    """Its staleness bound in force [versions]."""
    reason: str = ""
    """Why it was refused (empty otherwise)."""
    index: int = -1
    """Its number in the run (submission order; -1: refused at submission)."""
