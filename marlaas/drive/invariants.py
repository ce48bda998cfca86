"""Invariants every run checks on its own event log, simulated or real, before it returns.

- every job ended: a finished job trained and published all its steps once, a cancelled
  one at most its steps, a refused one nothing;
- nothing is left in the scheduler: no per-job structure holds an entry, every engine,
  trainer and environment worker is free (so a cancelled job released what it held);
- no training step used a sample staler than its job's bound;
- no engine ran more sequences at once than its batch limit;
- no trainer device ran two training steps at once;
- per device, busy time plus idle rows cover the run exactly, so utilization is in [0, 1].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from marlaas.core.outcomes import FINISHED, REFUSED
from marlaas.core.scheduler import Scheduler
from marlaas.eventlog import records_to_frame
from marlaas.metrics.idle import check_partition

if TYPE_CHECKING:
    from marlaas.drive.result import RunResult


class InvariantError(AssertionError):
    """A run broke one of its invariants (a bug in the mechanism or an executor)."""


def _max_concurrency(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray) -> float:
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([weights, -weights])
    order = np.lexsort((deltas, times))  # at equal times, ends (negative) come first
    return float(np.cumsum(deltas[order]).max()) if len(order) else 0.0


def check_invariants(
    result: RunResult, scheduler: Scheduler, frame: pd.DataFrame | None = None
) -> None:
    """Raise :class:`InvariantError` naming the first invariant that does not hold
    (``frame``: the run's event log as records_to_frame made it, if the caller has it)."""
    if frame is None:
        frame = records_to_frame(result.records)
    if scheduler.live:
        raise InvariantError(f"{scheduler.live} jobs never ended")
    left = scheduler.leftovers()
    if left:
        raise InvariantError(f"the scheduler still holds something of an ended job: {left}")
    train = frame[(frame.kind == "train") & (frame.outcome == "ok")]
    steps_of = train.groupby("job")["step"].nunique()
    worst_of = train.groupby("job")["staleness"].max()
    for name, job in result.jobs.items():
        steps = int(steps_of.get(name, 0))
        if job.state == REFUSED:  # it never ran (its name may be another job's)
            continue
        left_to_train = job.steps - job.start_version
        if job.state == FINISHED and (steps != left_to_train or job.published != job.steps):
            raise InvariantError(f"{name}: trained {steps} of {left_to_train} steps")
        if steps > left_to_train:
            raise InvariantError(f"{name}: trained {steps} steps, more than its {job.steps}")
        worst = worst_of.get(name, 0)
        if worst > job.max_staleness:
            raise InvariantError(f"{name}: trained on samples {worst} versions stale")
    limit = scheduler.cluster_spec.engine.max_seqs
    generate = frame[frame.kind == "generate"]
    for device, rows in generate.groupby("device"):
        peak = _max_concurrency(rows.start_s.values, rows.end_s.values, rows.seqs.values)
        if peak > limit:
            raise InvariantError(f"{device}: {peak:.0f} sequences at once, limit {limit}")
    for device, rows in train.groupby("device"):
        ones = np.ones(len(rows))
        if _max_concurrency(rows.start_s.values, rows.end_s.values, ones) > 1:
            raise InvariantError(f"{device}: two training steps at once")
    try:
        util = check_partition(frame)["utilization"]
    except AssertionError as err:
        raise InvariantError(str(err)) from None
    if ((util < 0) | (util > 1 + 1e-9)).any():
        raise InvariantError(f"utilization outside [0, 1]: {util.tolist()}")
