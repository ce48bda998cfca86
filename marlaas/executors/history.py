"""A real run's whole history from its journal: one event log and one reward curve over every
part (the first run and each ``--resume``), each training step in it exactly once.

Work of a step that never became durable in its part (it was in flight, or done but not yet
synced, when the part was killed) was lost and is done again by a later part: its rows stay
in the log, marked ``failed``. Where a killed part left a device's time uncovered (work in
flight, an idle interval not yet closed), an ``idle`` row with cause ``interrupted`` covers
it, so that per device busy and idle time still partition the run.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import pandas as pd

from marlaas.core.job_spec import JobSpec
from marlaas.core.outcomes import FINISHED, JobOutcome
from marlaas.core.records import WorkRecord
from marlaas.eventlog import DONE_OUTCOMES, records_to_frame
from marlaas.executors.episode_runner import RewardPoint
from marlaas.executors.journal import Journaled
from marlaas.metrics.devices import BUSY_KINDS, makespan

INTERRUPTED = "interrupted"
"""Idle cause of device time lost when a part of a real run was killed."""
_EPS_S = 1e-9


def history_records(journaled: Journaled) -> list[WorkRecord]:
    """Every journaled record, work of steps lost with their part marked failed, and the
    devices' uncovered time at each interruption filled with ``interrupted`` idle rows."""
    durable = {(p.job, p.step): part for part, p in journaled.steps}
    records = []
    for part, record in journaled.records:
        lost = record.kind != "idle" and record.step >= 0
        done = record.outcome in DONE_OUTCOMES  # a dropped group's last step too
        if lost and durable.get((record.job, record.step)) != part and done:
            record = record._replace(outcome="failed")
        records.append(record)
    boundaries = sorted({_part_start(journaled, k) for k in range(1, journaled.parts)})
    return records + _interruptions(records, boundaries)


def history_events(journaled: Journaled) -> pd.DataFrame:
    """The run's event log over all its parts (see :func:`history_records`)."""
    return records_to_frame(history_records(journaled))


def history_points(journaled: Journaled) -> list[RewardPoint]:
    """The reward curve: one point per durable step, in (job, step) order."""
    return sorted((p for _, p in journaled.steps), key=lambda p: (p.job, p.step))


def history_result(
    result,
    journaled: Journaled,
    events: pd.DataFrame,
    steps: dict[str, int],
    specs: Sequence[JobSpec] = (),
):
    """``result`` (the last part's RunResult) widened to the whole history: its records,
    makespan, each job's finish time, the parts' wall time, batches and failures, and how
    each job ended: a job of ``specs`` (the workload's) that finished in an earlier part was
    not submitted again, so the last part knows nothing of it; it is ``finished`` at its
    last version's sync (``summary.json``'s ``job_states`` once left it out, and held no job
    at all when a resumed run had nothing left to train)."""
    earlier = [c for part, c in journaled.counters.items() if part != journaled.parts - 1]
    syncs = events[(events["kind"] == "sync") & (events["outcome"] == "ok")]
    finish = {}
    for job, total in steps.items():
        done = syncs[(syncs["job"] == job) & (syncs["version"] == total)]
        finish[job] = float(done["end_s"].max()) if len(done) else None
    before = {}
    for index, spec in enumerate(specs):
        end_s, total = finish.get(spec.name), steps[spec.name]
        if spec.name not in result.jobs and end_s is not None:
            before[spec.name] = JobOutcome(
                spec.name, spec.tenant, FINISHED, spec.arrival_s, end_s, total,
                start_version=total, published=total, max_staleness=spec.rl.max_staleness,
                index=index,
            )  # fmt: skip
    return dataclasses.replace(
        result,
        makespan_s=makespan(events),
        job_finish_s=finish,
        jobs={**before, **result.jobs},
        wall_s=result.wall_s + sum(c.get("wall_s", 0.0) for c in earlier),
        events=result.events + int(sum(c.get("batches", 0) for c in earlier)),
        failures=result.failures + int(sum(c.get("failures", 0) for c in earlier)),
    )


def _part_start(journaled: Journaled, part: int) -> float:
    """Where part ``part``'s clock starts: the end of what the parts before it journaled."""
    before = Journaled(
        parts=part,
        records=[(k, r) for k, r in journaled.records if k < part],
        steps=[(k, p) for k, p in journaled.steps if k < part],
    )
    return before.end_s


def _interruptions(records: list[WorkRecord], boundaries: list[float]) -> list[WorkRecord]:
    """Idle rows for each device's uncovered time that reaches an interruption."""
    if not boundaries:
        return []
    spans: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        if r.device and (r.kind in BUSY_KINDS or r.kind == "idle"):
            spans[(r.device, r.pool)].append((r.start_s, r.end_s))
    out = []
    for (device, pool), intervals in sorted(spans.items()):
        covered = 0.0
        for start, end in [*sorted(intervals), (boundaries[-1], boundaries[-1])]:
            gap = (covered, start)
            if start > covered + _EPS_S and any(
                gap[0] - _EPS_S <= b <= gap[1] + _EPS_S for b in boundaries
            ):
                out.append(WorkRecord("idle", "", "", device, pool, covered, start,
                                      outcome=INTERRUPTED))  # fmt: skip
            covered = max(covered, end)
    return out
