"""Idle-time accounting: every stretch a device spends without generate/train work, and why.

Each active job votes for what an idle engine and an idle trainer would be waiting for on its
account (its rollouts, the trainer, environments, a weight sync, the staleness bound); the
majority is the cause shared by idle devices of that role, unless a device's own state says
more (a trainer busy with a sync or a swap, an engine loading an adapter). The scheduler
marks the devices whose state changed; after each decision round :meth:`IdleAccounting.update`
turns the changes into ``idle`` work records, so that per device the busy intervals and the
idle rows partition the run.
"""

from __future__ import annotations

from collections.abc import Collection

from marlaas.core.cluster import Cluster, Device, Engine, Trainer
from marlaas.core.record_fields import append_row
from marlaas.core.records import NO_REWARD, RecordLog

CAUSE_ORDER = (
    "trainer", "rollouts", "environment", "weight_sync", "staleness", "barrier", "no_work",
)  # fmt: skip
"""Tie-break order between causes with equal votes."""


Votes = tuple[str | None, str | None]
"""A job's (engine cause, trainer cause); None where it does not hold that role up."""


_CAUSE_INDEX = {cause: i for i, cause in enumerate(CAUSE_ORDER)}


def majority_cause(counts: list[int]) -> str:
    """The most common cause among the votes, ``counts`` per cause in CAUSE_ORDER (ties in
    CAUSE_ORDER); no_work without any."""
    top = max(counts)
    if top <= 0:
        return "no_work"
    return CAUSE_ORDER[counts.index(top)]


class IdleAccounting:
    """Open idle intervals per device, the jobs' votes, and the idle records they become."""

    def __init__(self, cluster: Cluster, records: RecordLog) -> None:
        self._records = records
        self._devices = {d.name: d for d in cluster.devices}
        self._roles: dict[str, tuple[Engine | None, Trainer | None]] = {
            name: (None, None) for name in self._devices
        }
        for engine in cluster.engines:
            self._roles[engine.name] = (engine, None)
        for trainer in cluster.trainers:
            for device in trainer.devices:
                self._roles[device.name] = (self._roles[device.name][0], trainer)
        self._votes: dict[int, Votes] = {}
        causes = len(CAUSE_ORDER)
        self._counts: tuple[list[int], list[int]] = ([0] * causes, [0] * causes)
        """The votes for each cause (in CAUSE_ORDER) of idle engines, and of idle trainers."""
        self._causes = ("no_work", "no_work")
        self._recount = False
        """Votes changed since the majority causes were last found."""
        self._open: dict[str, tuple[float, str]] = {}
        """device name -> (idle since [s], cause)."""
        self.dirty: set[str] = set(self._devices)
        """Devices whose idle state may have changed since the last update."""

    @property
    def voters(self) -> Collection[int]:
        """The jobs with votes in (read only)."""
        return self._votes.keys()

    def vote(self, job: int, votes: Votes | None) -> None:
        """Set (or with None, withdraw) a job's votes."""
        old = self._votes.get(job)
        if old == votes:
            return
        if votes is None:
            del self._votes[job]
        else:
            self._votes[job] = votes
        old, new = old or (None, None), votes or (None, None)
        for role in range(2):
            before, after = old[role], new[role]
            if before != after:
                counts = self._counts[role]
                if before is not None:
                    counts[_CAUSE_INDEX[before]] -= 1
                if after is not None:
                    counts[_CAUSE_INDEX[after]] += 1
                self._recount = True

    def mark(self, *devices: Device) -> None:
        """Note that these devices' compute, loading or trainer activity changed."""
        for device in devices:
            self.dirty.add(device.name)

    def update(self, now: float) -> None:
        """Bring every changed device's idle interval up to date at ``now``."""
        if self._recount:
            self._recount = False
            causes = (majority_cause(self._counts[0]), majority_cause(self._counts[1]))
            if causes != self._causes:
                self._causes = causes
                self.dirty.update(self._open)  # only idle devices can change their cause
        dirty = self.dirty
        if not dirty:
            return
        cause, set_cause = self._cause, self._set
        for name in sorted(dirty) if len(dirty) > 1 else dirty:  # sorted: row order must
            set_cause(name, cause(name), now)  # not depend on hashing
        dirty.clear()

    def close_all(self, now: float) -> None:
        """Close every open interval at ``now`` (the end of the run)."""
        for name in sorted(self._open):
            self._set(name, None, now)

    def _cause(self, name: str) -> str | None:
        """Why a device has no compute work now (None: it has some)."""
        if self._devices[name].compute:
            return None
        engine, trainer = self._roles[name]
        if trainer is not None and trainer.activity is not None:
            return trainer.activity
        if engine is not None and engine.loading:
            return "adapter_load"
        return self._causes[0] if engine is not None else self._causes[1]

    def _set(self, name: str, cause: str | None, now: float) -> None:
        current = self._open.get(name)
        if current is not None and current[1] == cause:
            return
        if current is not None:
            since, old = self._open.pop(name)
            if now > since:
                pool = self._devices[name].pool
                append_row(
                    self._records.fields,
                    ("idle", "", "", name, pool, since, now, -1, -1, -1, 0, 0, -1, -1, old,
                     NO_REWARD, -1, -1),
                )  # fmt: skip
        if cause is not None:
            self._open[name] = (now, cause)
