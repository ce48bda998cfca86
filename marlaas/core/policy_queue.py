"""Jobs in policy order, with each job's key recomputed only when the job changed.

A heap of (key, job) whose entries go stale when a job's key changes or it leaves: a stage
takes its jobs in order without sorting every job on every decision round.
"""

from __future__ import annotations

import heapq
from typing import Any


class PolicyQueue:
    """Job indices ordered by policy key (lowest first)."""

    def __init__(self) -> None:
        self._heap: list[tuple[Any, int]] = []
        self._key: dict[int, Any] = {}
        """Members -> their current key (heap entries with another key are stale)."""

    def __len__(self) -> int:
        return len(self._key)

    def __contains__(self, index: int) -> bool:
        return index in self._key

    def put(self, index: int, key: Any) -> None:
        """Add a job, or give a member its new key."""
        if self._key.get(index) == key:
            return
        self._key[index] = key
        heapq.heappush(self._heap, (key, index))
        if len(self._heap) > 2 * len(self._key) + 16:
            self._heap = [(k, i) for i, k in self._key.items()]
            heapq.heapify(self._heap)

    def discard(self, index: int) -> None:
        """Remove a job if it is a member."""
        self._key.pop(index, None)

    def pop(self) -> int | None:
        """Remove and return the member with the smallest key (None when empty)."""
        heap, keys = self._heap, self._key
        while heap:
            key, index = heapq.heappop(heap)
            if keys.get(index) == key:
                del keys[index]
                return index
        return None
