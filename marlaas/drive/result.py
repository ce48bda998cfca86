"""What a run produced, simulated or real: the records and the headline figures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from marlaas.core.outcomes import JobOutcome
from marlaas.core.records import WorkRecord


@dataclass(frozen=True)
class RunResult:
    """The outcome of ``drive``: one type for every world."""

    records: Sequence[WorkRecord] = field(repr=False)
    """Every piece of work and every idle interval, as the scheduler recorded them."""
    makespan_s: float
    """Time from the run's start to the last event [s] (simulated or wall-clock)."""
    job_finish_s: dict[str, float | None]
    """When each job published its last version [s] (None: it did not finish: cancelled,
    refused, or a part of a real run that stopped)."""
    policy: str
    settings: dict[str, Any]
    """The mechanism settings in force (preset, placement, admission, barrier, cap)."""
    seed: int
    wall_s: float
    """Wall-clock time the loop took [s]."""
    events: int
    """Completion batches the loop handled."""
    failures: int = 0
    """Pieces of work that failed and were retried."""
    jobs: dict[str, JobOutcome] = field(default_factory=dict)
    """How each job submitted to the run ended (finished, cancelled, refused), in the order
    they were submitted."""
