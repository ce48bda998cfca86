"""Jobs by the room their next rollout group needs, in policy order.

For each group size, a sparse min-tree over the KV tokens a group reserves holds the policy
keys of the jobs whose next group has that size and reserve (one heap per reserve, for the
jobs that share it). ``first_fitting(seqs, tokens)`` is the job with the smallest key whose
group fits in ``seqs`` free sequences and ``tokens`` free KV tokens: a walk up one tree per
group size, whatever the number of jobs. When an engine's room grows, this is the only job
that could take it first.
"""

from __future__ import annotations

import heapq
from typing import Any

Entry = tuple[Any, int]
"""(policy key, job index); keys end with the job index, so no two are equal."""


class NeedIndex:
    """Jobs (by index) with the size and KV reserve of their next group and their key."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        """Largest reserve an engine can hold; jobs that need more are not indexed."""
        self._size = 1 << max_tokens.bit_length()
        """Leaves per tree: reserves 0 .. max_tokens."""
        self._trees: dict[int, list[Entry | None]] = {}
        """Group size -> node -> smallest entry below it (None: no entry)."""
        self._leaves: dict[tuple[int, int], list[Entry]] = {}
        """(group size, reserve) -> heap of entries, some stale (see _entry)."""
        self.indexed: dict[int, tuple[int, int, Any]] = {}
        """Job -> (group size, reserve, key): what the job is indexed under now (read only)."""
        self._live: dict[tuple[int, int], int] = {}
        """Current entries per leaf (the rest of its heap is stale)."""

    def put(self, job: int, seqs: int, tokens: int, key: Any) -> None:
        """Index ``job`` under its next group's size and reserve and its policy key."""
        old = self.indexed.get(job)
        if old is not None:
            if old == (seqs, tokens, key):
                return
            self.remove(job)
        if tokens > self.max_tokens:
            return  # no engine can ever hold it: never the answer to first_fitting
        self.indexed[job] = (seqs, tokens, key)
        leaf = (seqs, tokens)
        heap = self._leaves.get(leaf)
        if heap is None:
            heap = self._leaves[leaf] = []
            self._live[leaf] = 0
        self._live[leaf] += 1
        entry = (key, job)
        heapq.heappush(heap, entry)
        if heap[0] is entry:
            self._fix(seqs, tokens, entry)

    def remove(self, job: int) -> None:
        """Take ``job`` out (no group to generate, or none that can be placed this round)."""
        old = self.indexed.pop(job, None)
        if old is None:
            return
        seqs, tokens, _ = old
        leaf = (seqs, tokens)
        self._live[leaf] -= 1
        heap = self._leaves[leaf]
        if self._live[leaf] == 0:
            del self._leaves[leaf], self._live[leaf]
            self._fix(seqs, tokens, None)
        elif heap[0][1] == job:
            top = self._clean(heap)
            self._fix(seqs, tokens, top)
        elif len(heap) > 2 * self._live[leaf] + 8:
            heap[:] = [e for e in heap if self._current(e, leaf)]
            heapq.heapify(heap)

    def first_fitting(self, seqs: int, tokens: int) -> Entry | None:
        """The smallest (key, job) whose next group needs at most ``seqs`` sequences and
        ``tokens`` KV tokens, or None."""
        best = None
        last = min(tokens, self.max_tokens) + 1
        for size, tree in self._trees.items():
            if size > seqs:
                continue
            low, high = self._size, self._size + last  # the leaves [0, last)
            while low < high:
                if low & 1:
                    entry = tree[low]
                    if entry is not None and (best is None or entry < best):
                        best = entry
                    low += 1
                if high & 1:
                    high -= 1
                    entry = tree[high]
                    if entry is not None and (best is None or entry < best):
                        best = entry
                low >>= 1
                high >>= 1
        return best

    def _current(self, entry: Entry, leaf: tuple[int, int]) -> bool:
        now = self.indexed.get(entry[1])
        return now is not None and now[2] == entry[0] and (now[0], now[1]) == leaf

    def _clean(self, heap: list[Entry]) -> Entry:
        """Pop stale entries off the top of a leaf's heap; returns the top (a current one)."""
        leaf_of = self.indexed
        while True:
            key, job = heap[0]
            now = leaf_of.get(job)
            if now is not None and now[2] == key and self._leaves.get((now[0], now[1])) is heap:
                return heap[0]
            heapq.heappop(heap)

    def _fix(self, seqs: int, tokens: int, top: Entry | None) -> None:
        """Set a leaf's smallest entry and bring its ancestors up to date."""
        tree = self._trees.get(seqs)
        if tree is None:
            tree = self._trees[seqs] = [None] * (2 * self._size)
        node = self._size + tokens
        tree[node] = top
        while node > 1:
            other = tree[node ^ 1]
            if top is None or (other is not None and other < top):
                top = other
            node >>= 1
            if tree[node] is top:
                return  # the ancestors already hold the right minima
            tree[node] = top
