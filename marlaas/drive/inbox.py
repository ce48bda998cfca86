"""The driver's inbox: the jobs tenants submit and cancel while a run goes on.

Each item is due at a time on the run's clock, or as soon as the driver sees it (``at_s`` left
out: a service's request, stamped with the executor's clock when taken). A batch run fills the
inbox from its workload before the run and closes it (:func:`workload_inbox`); a long-running
caller keeps it open and puts items from any thread, and the inbox wakes the executor's
``wait`` so that a submission is acted on at once. The run ends once the inbox is closed and
empty and every job it brought has ended.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from marlaas.core.job_spec import JobSpec
from marlaas.core.outcomes import Admission
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.workload import Workload


@dataclass(frozen=True, slots=True)
class Submit:
    """A tenant submits ``job``, to start from adapter ``version`` (a resumed job's), as
    job number ``index`` (default: its submission number; see Scheduler.submit).

    ``heard`` (a service's request waiting for its answer) is called, on the driver's
    thread, after the decision round that followed the submission, with the job's state
    then: queued, active, or refused with the reason (a queue bound refuses in that round)."""

    job: JobSpec
    version: int = 0
    heard: Callable[[Admission], None] | None = field(default=None, compare=False)
    index: int | None = None
    """The job's number (Scheduler.submit), None: its submission number."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """A tenant cancels the job named ``job``."""

    job: str


@dataclass(frozen=True, slots=True)
class SetQuota:
    """The operator set ``tenant``'s quotas (None: back to the mechanism's defaults)."""

    tenant: str
    quota: TenantSpec | None


Item = Submit | Cancel | SetQuota


@mypyc_attr(native_class=False)
class InboxClosedError(RuntimeError):
    """An item put into an inbox that was closed."""


class Inbox:
    """Submissions and cancels, in time order (items of one time in the order they came)."""

    def __init__(self) -> None:
        self._timed: list[tuple[float, int, Item]] = []
        """A heap of (due time [s], sequence, item)."""
        self._now: deque[Item] = deque()
        """Items due as soon as the driver sees them."""
        self._sequence = 0
        self._closed = False
        self._stopped = False
        self._lock = threading.Condition()
        self._waker: Callable[[], None] | None = None

    # ----------------------------------------------------------------------------- callers
    def put(self, item: Item, at_s: float | None = None) -> None:
        """Add ``item``, due at ``at_s`` [s on the run's clock] or, with None, at once. Safe
        from any thread; wakes the driver."""
        if at_s is not None and not math.isfinite(at_s):
            raise ValueError(f"an inbox item's time must be finite, got {at_s!r}")
        with self._lock:
            if self._closed:
                raise InboxClosedError("the inbox is closed: the run takes no more jobs")
            if at_s is None:
                self._now.append(item)
            else:
                heapq.heappush(self._timed, (at_s, self._sequence, item))
                self._sequence += 1
            self._lock.notify_all()
            waker = self._waker
        if waker is not None:
            waker()

    def close(self) -> None:
        """No more items will come: the run ends once those in it are done."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            waker = self._waker
        if waker is not None:
            waker()

    def stop(self) -> None:
        """End the run now (a service shutting down): the driver returns after the work it is
        waiting on, leaving the work in flight and the jobs unfinished (a real run resumes
        them from their last durable step). Items not yet taken stay untaken."""
        with self._lock:
            self._closed = self._stopped = True
            self._lock.notify_all()
            waker = self._waker
        if waker is not None:
            waker()

    # ----------------------------------------------------------------------------- driver
    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    @property
    def closed(self) -> bool:
        """Whether the inbox takes no more items."""
        return self._closed

    @property
    def exhausted(self) -> bool:
        """Closed, with nothing left in it."""
        return self._closed and not self._timed and not self._now

    def next_at(self) -> float | None:
        """When the next item is due [s] (-inf: one is due at once), None when none is in."""
        if self._now:
            return -math.inf
        timed = self._timed
        return timed[0][0] if timed else None

    def take(self, now: float) -> list[Item]:
        """The items due at ``now`` [s] or before, in order (those due at once last)."""
        timed = self._timed
        if not self._now and not (timed and timed[0][0] <= now):
            return []
        with self._lock:
            items = []
            while timed and timed[0][0] <= now:
                items.append(heapq.heappop(timed)[2])
            while self._now:
                items.append(self._now.popleft())
            return items

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until an item comes or the inbox is closed (or ``timeout_s`` [s] passes)."""
        with self._lock:
            if not (self._now or self._timed or self._closed):
                self._lock.wait(timeout_s)

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """Call ``waker`` (an executor's ``wake``) whenever an item is put or the inbox closed."""
        self._waker = waker


def workload_inbox(
    workload: Workload, versions: Mapping[str, int] | None = None, shift_s: float = 0.0
) -> Inbox:
    """A closed inbox with a batch workload's jobs: each submitted at its ``arrival_s`` (in
    arrival order, then the file's), and cancelled ``cancel_after_s`` later where it says so.

    ``versions``: jobs to submit at a later adapter version (a resumed run's last durable
    ones); a job at its last version is left out. ``shift_s``: arrivals come that much earlier
    [s] (not before 0): a resumed run's clock starts where the earlier part ended."""
    versions = versions or {}
    inbox = Inbox()
    order = sorted(enumerate(workload.jobs), key=lambda pair: (pair[1].arrival_s, pair[0]))
    for _, job in order:
        version = versions.get(job.name, 0)
        if version >= job.rl.steps:
            continue
        at_s = max(0.0, job.arrival_s - shift_s)
        inbox.put(Submit(job, version), at_s)
        if job.cancel_after_s is not None:
            inbox.put(Cancel(job.name), at_s + job.cancel_after_s)
    inbox.close()
    return inbox
