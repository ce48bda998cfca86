"""What the dashboard and ``/metrics`` show of the cluster: each pool's utilization over the
last minute, and the jobs queued and running.

Utilization is sampled on a thread of its own every ``period_s`` (a device is busy while
generation or training runs on it): a sample taken as work completes would always find the
device just freed. The samples read the scheduler's devices while the driver changes them;
each read is of one integer, and a sample a moment off is still a fair sample.
"""

from __future__ import annotations

import threading
from collections import deque

from marlaas.core.outcomes import QUEUED
from marlaas.core.scheduler import Scheduler


class Gauges:
    """Samples ``scheduler``'s devices every ``period_s`` [s] and keeps ``window_s`` [s]."""

    def __init__(self, scheduler: Scheduler, period_s: float = 0.25, window_s: float = 60.0):
        self.scheduler, self.period_s = scheduler, period_s
        self._samples: deque[dict[str, float]] = deque(maxlen=max(1, round(window_s / period_s)))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="marlaas-gauges", daemon=True)
        self.queued = self.running = 0
        """Jobs waiting for admission, and admitted (as of :meth:`count_jobs`)."""

    def start(self) -> Gauges:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(5)

    @property
    def utilization(self) -> dict[str, float]:
        """Per pool, the mean fraction of its devices busy over the window."""
        samples = list(self._samples)
        if not samples:
            return {}
        return {pool: sum(s[pool] for s in samples) / len(samples) for pool in samples[0]}

    def count_jobs(self) -> None:
        """Count the jobs queued and running now (on the driver's thread: as jobs change)."""
        states = [self.scheduler.status(job.name) for job in list(self.scheduler.jobs.values())]
        self.queued = states.count(QUEUED)
        self.running = len(states) - self.queued

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._samples.append(self._sample())

    def _sample(self) -> dict[str, float]:
        busy: dict[str, list[int]] = {}
        for device in self.scheduler.cluster.devices:
            counts = busy.setdefault(device.name.split("/", 1)[0], [0, 0])
            counts[0] += device.compute > 0
            counts[1] += 1
        return {pool: b / n for pool, (b, n) in busy.items()}
