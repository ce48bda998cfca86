"""The backlog: how long the live jobs' expected remaining work takes the whole cluster.

A figure every job's view shares (``JobView.backlog_s``), for policies that weigh a job
against everything else still to do (cp-srpt: a job whose critical path is as long as the
backlog must run at its own pace from now on, or it ends alone after the others):

- the live jobs' expected remaining tokens [tokens]: each job's ``remaining_tokens`` (from
  the spec's response-length means), added at submission, moved by the scheduler whenever
  an event moves a job's figure, and taken out when the job ends;
- the cluster's measured token rate [tokens/s]: the tokens generated so far over the time
  some job was live (no cost model in the core: it is what the engines did, under this
  workload and schedule, and it is known from the first finished group turn on);
- ``seconds`` = tokens / rate [s], infinite before any token was generated.

Every update is O(1): the figure is kept current on every event at no cost that grows with
the number of jobs. A policy key that reads it goes stale as the backlog shrinks without the
job changing; the scheduler re-keys every active job when ``seconds`` has moved by
:data:`REKEY_FRACTION` (and :data:`REKEY_MIN_S`) since the last re-key, only for a policy that
reads it (``Policy.reads_backlog``): a number of re-keys per run that grows with the log of
the backlog's range, not with the number of jobs or events.
"""

from __future__ import annotations

import math

REKEY_FRACTION = 0.05
"""Re-key the active jobs when the backlog's seconds moved by 5% since the last re-key."""

REKEY_MIN_S = 10.0
"""... and by at least 10 s (the tail of a run, where the backlog goes to 0)."""


class Backlog:
    """The live jobs' expected remaining tokens and the cluster's measured token rate."""

    __slots__ = ("tokens", "generated", "busy_s", "seconds", "_at", "_live", "_keyed_s")

    def __init__(self) -> None:
        self.tokens = 0.0
        """Live jobs' expected remaining tokens [tokens]."""
        self.generated = 0.0
        """Tokens generated so far (finished group turns) [tokens]."""
        self.busy_s = 0.0
        """Time with at least one live job so far [s]."""
        self.seconds = math.inf
        """tokens / (generated / busy_s) as of the last :meth:`advance` [s]; inf before any
        token was generated."""
        self._at = 0.0
        self._live = False
        self._keyed_s = math.inf
        """``seconds`` at the last re-key."""

    @property
    def rate(self) -> float:
        """The measured token rate [tokens/s] (0 before any token was generated)."""
        return self.generated / self.busy_s if self.busy_s > 0 and self.generated > 0 else 0.0

    def advance(self, now: float, live: bool) -> None:
        """Time moved to ``now`` [s]; ``live``: whether some job is live from now on."""
        if self._live and now > self._at:
            self.busy_s += now - self._at
        self._at = now
        self._live = live
        rate = self.rate
        self.seconds = max(self.tokens, 0.0) / rate if rate > 0 else math.inf

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
