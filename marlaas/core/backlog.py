"""The backlog: how long the live jobs' expected remaining work takes the whole cluster.

A figure every job's view shares (``JobView.backlog_s``), for policies that weigh a job
against everything else still to do (horizon: a job whose critical path is as long as the
backlog must run at its own pace from now on, or it ends alone after the others):

- the live jobs' expected remaining tokens [tokens]: each job's ``remaining_tokens`` (from
  the spec's response-length means), added at submission, moved by the scheduler whenever
  an event moves a job's figure, and taken out when the job ends;
- the cluster's measured token rate [tokens/s]: the tokens generated so far over the time
  some job was live (no cost model in the core: it is what the engines did, under this
  workload and schedule, and it is known from the first finished group turn on);
- ``seconds`` = tokens / rate [s] as of the last :meth:`Backlog.advance` (the start of a
  decision round, or a submission), infinite before any token was generated; and ``end_s``,
  the time it would end at that rate (the time of that advance plus ``seconds``) [s since the
  run's start];
- the longest estimated remaining alone time among the live jobs (``longest_alone_s``, each
  job's ``remaining_alone_s``: its remaining critical path, core.estimates) [s]. The backlog
  cannot end before it, nor before ``seconds``: their maximum is the backlog's horizon, and the
  job that sets it is the one whose critical path decides the makespan; and how many live
  jobs hold it (``longest_alone_jobs``: one alone, or several whose critical paths end
  together); and the runner-up's (``runner_up_late_s``): the longest remaining alone time
  below it, one of its holder's steps later (the remaining path of that job set back by a
  step). A job that holds the longest alone and whose path equals that to the last bit is
  one step ahead of a job of its own spec: the two end together (split-progress counts it a
  tie); a path that differs from it in either direction is not a tie.

The tokens and the rate are kept current in O(1) per event, the longest alone time in
O(log n) per change of a job's figure (a finished training step), the runner-up's in O(log n)
plus the jobs that share its value. A policy key that reads them goes stale as the backlog
shrinks without the job changing. For a policy that reads them (``Policy.reads_backlog``),
the scheduler re-keys every active job when ``seconds`` has moved by :data:`REKEY_FRACTION` (and
:data:`REKEY_MIN_S`) since the last re-key, a number of re-keys per run that grows with the
log of the backlog's range, not with the number of jobs or events; and it re-keys the jobs
that hold the longest alone time when it or its holders change (:meth:`Backlog.set_alone`
returns them).
"""

from __future__ import annotations

import heapq
import math

REKEY_FRACTION = 0.05
"""Re-key the active jobs when the backlog's seconds moved by 5% since the last re-key."""

REKEY_MIN_S = 10.0
"""... and by at least 10 s (the tail of a run, where the backlog goes to 0)."""


class Backlog:
    """The live jobs' expected remaining tokens and the cluster's measured token rate."""

    def __init__(self) -> None:
        self.tokens = 0.0
        """Live jobs' expected remaining tokens [tokens]."""
        self.generated = 0.0
        """Tokens generated so far (finished group turns) [tokens]."""
        self.busy_s = 0.0
        """Time with at least one live job so far [s]."""
        self.busy_since_s = math.inf
        """When the current busy stretch began: the last time a job became live while none
        was [s since the run's start]; inf before the first job. A service that was idle
        between two jobs starts a new stretch with the second."""
        self.seconds = math.inf
        """tokens / (generated / busy_s) as of the last :meth:`advance` [s]; inf before any
        token was generated. Stored, not derived: a job that ends within a decision round
        (cancelled, failed) takes its tokens out, and every key computed in that round
        still reads the figure the round started with (a property would move it mid-round
        and change decisions)."""
        self.end_s = math.inf
        """When the backlog would end at the measured rate: the time of the last
        :meth:`advance` plus ``seconds`` [s since the run's start]; inf with ``seconds``."""
        self._at = 0.0
        self._live = False
        self._keyed_s = math.inf
        """``seconds`` at the last re-key."""
        self._alone: dict[int, float] = {}
        """Live job -> its remaining alone time [s]."""
        self._by_alone: dict[float, set[int]] = {}
        """Remaining alone time [s] -> the live jobs that have it."""
        self._alone_heap: list[float] = []
        """Negated remaining alone times, some stale (no job has them any more)."""
        self._late: dict[int, float] = {}
        """Live job -> its remaining alone time one of its steps later [s]."""
        self.runner_up_late_s = 0.0
        """The longest remaining alone time below ``longest_alone_s``, one step later (the
        largest among the jobs that hold it) [s]; 0 with no such job. Kept by
        :meth:`set_alone`."""

    @property
    def longest_alone_s(self) -> float:
        """The longest remaining alone time among the live jobs [s] (0 with none)."""
        heap, by_alone = self._alone_heap, self._by_alone
        while heap and -heap[0] not in by_alone:
            heapq.heappop(heap)
        return -heap[0] if heap else 0.0

    @property
    def longest_alone_jobs(self) -> int:
        """How many live jobs hold ``longest_alone_s`` (0 with none)."""
        return len(self._by_alone.get(self.longest_alone_s, ())) if self._alone else 0

    def _runner_up_late(self) -> float:
        """The longest remaining alone time below the longest, one of its holder's steps
        later (0 with none): the second distinct value of the heap, O(log n) plus the jobs
        that hold it (jobs of one spec at one step hold one value together)."""
        top = self.longest_alone_s
        heap, by_alone = self._alone_heap, self._by_alone
        if not heap:
            return 0.0
        first = heapq.heappop(heap)
        while heap and (-heap[0] == top or -heap[0] not in by_alone):
            heapq.heappop(heap)  # a stale entry, or a copy of the longest
        second = -heap[0] if heap else None
        heapq.heappush(heap, first)
        if second is None:
            return 0.0
        late = self._late
        return max(late[holder] for holder in by_alone[second])

    def set_alone(self, job: int, alone_s: float | None, late_s: float = 0.0) -> set[int]:
        """Job ``job``'s remaining alone time is now ``alone_s`` [s] (None: it ended), and
        ``late_s`` one of its steps later [s]. Returns the jobs that held the longest alone
        time and those that hold it now, when it, its holders or the runner-up's
        (``runner_up_late_s``) changed (the other jobs' keys that compare with them stay
        current): empty when none did."""
        old = self._alone.get(job)
        if old == alone_s:
            return set()
        before = self.longest_alone_s
        held = set(self._by_alone.get(before, ()))
        late_before = self.runner_up_late_s
        if old is not None:
            holders = self._by_alone[old]
            holders.discard(job)
            if not holders:
                del self._by_alone[old]
            del self._alone[job]
            del self._late[job]
        if alone_s is not None:
            self._alone[job] = alone_s
            self._late[job] = late_s
            if alone_s not in self._by_alone:
                self._by_alone[alone_s] = set()
                heapq.heappush(self._alone_heap, -alone_s)
            self._by_alone[alone_s].add(job)
        if len(self._alone_heap) > 2 * len(self._by_alone) + 16:
            self._alone_heap = [-a for a in self._by_alone]
            heapq.heapify(self._alone_heap)
        after = self.longest_alone_s
        holding = self._by_alone.get(after, set())
        self.runner_up_late_s = self._runner_up_late()
        if after == before and holding == held and self.runner_up_late_s == late_before:
            return set()
        return held | holding

    @property
    def rate(self) -> float:
        """The measured token rate [tokens/s] (0 before any token was generated)."""
        return self.generated / self.busy_s if self.busy_s > 0 and self.generated > 0 else 0.0

    def advance(self, now: float, live: bool) -> None:
        """Time moved to ``now`` [s]; ``live``: whether some job is live from now on."""
        if self._live and now > self._at:
            self.busy_s += now - self._at
        elif live and not self._live:
            self.busy_since_s = now
        self._at = now
        self._live = live
        rate = self.rate
        self.seconds = max(self.tokens, 0.0) / rate if rate > 0 else math.inf
        self.end_s = now + self.seconds

    def rekey_due(self) -> bool:
        """Whether ``seconds`` moved far enough since the last re-key that keys reading it
        should be recomputed (the call then counts as the re-key)."""
        seconds, last = self.seconds, self._keyed_s
        if seconds == last:
            return False
        if math.isinf(seconds) or math.isinf(last):
            due = True
        else:
            moved = abs(seconds - last)
            due = moved >= REKEY_MIN_S and moved >= REKEY_FRACTION * last
        if due:
            self._keyed_s = seconds
        return due
