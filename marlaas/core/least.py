"""The smallest of a changing multiset of ints: a job's figure counted while the job lives."""

from __future__ import annotations


class Least:
    """Values counted in and out (each job adds its own when admitted and removes it when it
    ends); :attr:`value` is the smallest counted, 0 when none is."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.value = 0
        """The smallest value counted (0: none)."""

    def add(self, value: int) -> None:
        """Count ``value`` in."""
        counts = self._counts
        counts[value] = counts.get(value, 0) + 1
        if len(counts) == 1 or value < self.value:
            self.value = value

    def remove(self, value: int) -> None:
        """Count ``value`` out (it was counted in)."""
        counts = self._counts
        left = counts[value] - 1
        if left:
            counts[value] = left
            return
        del counts[value]
        if value == self.value:
            self.value = min(counts) if counts else 0
