"""Idle-time accounting: every stretch a device spends without generate/train work, with why.

The scheduler tells the tracker, after each decision round, which devices have no compute
work and the cause for each; the tracker turns that into ``idle`` work records, so that per
device the busy intervals and the idle rows partition the run.
"""

from __future__ import annotations

from marlaas.core.cluster import Device
from marlaas.core.records import WorkRecord


class IdleTracker:
    """Open idle intervals per device; closed ones become ``idle`` records."""

    def __init__(self, records: list[WorkRecord]) -> None:
        self._records = records
        self._open: dict[str, tuple[float, str, str]] = {}
        """device name -> (since [s], cause, pool)."""

    def update(self, device: Device, cause: str | None, now: float) -> None:
        """Set the device's state at ``now``: ``cause`` None means it is computing."""
        current = self._open.get(device.name)
        if current is not None and current[1] == cause:
            return
        if current is not None:
            self._close(device.name, current, now)
        if cause is not None:
            self._open[device.name] = (now, cause, device.pool)

    def close_all(self, now: float) -> None:
        """Close every open interval at ``now`` (the end of the run)."""
        for name, current in sorted(self._open.items()):
            self._close(name, current, now)
        self._open.clear()

    def _close(self, name: str, current: tuple[float, str, str], now: float) -> None:
        since, cause, pool = current
        del self._open[name]
        if now > since:
            self._records.append(WorkRecord("idle", "", "", name, pool, since, now, outcome=cause))
