"""The scheduler's books: work in flight, follow-ups due next round, records and idle time.

Every stage of the scheduler (generation, environments, training) writes through one
:class:`Ledger`, so that a decision is started, tracked, and recorded the same way whatever
its kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from marlaas.core.cluster import Cluster, Device, Engine, Trainer
from marlaas.core.idle import IdleAccounting
from marlaas.core.jobs import JobState
from marlaas.core.record_fields import append_row
from marlaas.core.records import NO_REWARD, RecordLog
from marlaas.core.work import Decision, WorkDone

FollowUp = Callable[[float, list[Decision]], None]
"""Work that starts in the next decision round: ``(now, out) -> None``."""


@dataclass(slots=True)
class Running:
    """A decision whose work is in flight, and where it runs."""

    decision: Decision
    start_s: float
    engine: Engine | None = None
    trainer: Trainer | None = None


class Ledger:
    """What is running, what starts next round, which jobs changed, and what happened."""

    def __init__(self, cluster: Cluster) -> None:
        self.records = RecordLog()
        self.idle = IdleAccounting(cluster, self.records)
        self.running: dict[int, Running] = {}
        self.due: list[FollowUp] = []
        """Follow-up work started by the next decide (a Generate after its load, a Sync)."""
        self.touched: set[int] = set()
        """Jobs whose state changed since their work sets and idle votes were refreshed."""
        self._next_id = 0

    def new_id(self) -> int:
        """A fresh work id."""
        self._next_id += 1
        return self._next_id

    def begin(
        self,
        decision: Decision,
        now: float,
        out: list[Decision],
        engine: Engine | None = None,
        trainer: Trainer | None = None,
    ) -> None:
        """Start ``decision`` at ``now`` (on ``engine`` or ``trainer``, if any): track it
        until its WorkDone, and hand it out."""
        self.running[decision.work_id] = Running(decision, now, engine, trainer)
        out.append(decision)

    def end(self, work_id: int) -> Running:
        """Stop tracking a piece of work; KeyError when it is not running."""
        running = self.running.pop(work_id, None)
        if running is None:
            raise KeyError(f"no running work with id {work_id}")
        return running

    def add_compute(self, device: Device, delta: int) -> None:
        """Count generate/train work starting (+1) or ending (-1) on a device."""
        before = device.compute
        device.compute = before + delta
        if not before or not device.compute:  # idle time sees only whether it has any
            self.idle.mark(device)

    def set_activity(self, trainer: Trainer, activity: str | None) -> None:
        """What a trainer is doing besides computing (adapter_load, train, weight_sync)."""
        trainer.activity = activity
        self.idle.mark(*trainer.devices)

    def record(
        self,
        kind: str,
        job: JobState,
        devices: tuple[Device, ...],
        start: float,
        end: float,
        event: WorkDone,
        step: int = -1,
        group: int = -1,
        turn: int = -1,
        seqs: int = 0,
        tokens: int = 0,
        version: int = -1,
        staleness: int = -1,
        reward: object = NO_REWARD,
        prompt_tokens: int = -1,
        longest_tokens: int = -1,
        resampled: bool = False,
    ) -> None:
        """One record per device the work ran on (environment work: one, without device);
        the fields as in :class:`WorkRecord`. Work of a cancelled job is ``cancelled``: it
        finished, and was discarded; ``resampled``: an episode's last step whose group was
        dropped as all alike (rl.resample_alike)."""
        if job.cancelled:
            outcome = "cancelled"
        elif not event.ok:
            outcome = "failed"
        else:
            outcome = "resampled" if resampled else "ok"
        tenant, name, fields = job.tenant, job.name, self.records.fields
        if not devices:
            append_row(
                fields,
                (kind, tenant, name, "", "env", start, end, step, group, turn, seqs, tokens,
                 version, staleness, outcome, reward, prompt_tokens, longest_tokens)
            )  # fmt: skip
        for device in devices:
            append_row(
                fields,
                (kind, tenant, name, device.name, device.pool, start, end, step, group, turn,
                 seqs, tokens, version, staleness, outcome, reward, prompt_tokens, longest_tokens)
            )  # fmt: skip
