"""Jobs by the room their next rollout group needs, in policy order.

Jobs whose next group has the same size and KV reserve share a *leaf*: a heap of their
policy keys. Per group size, the leaves are grouped into about a thousand buckets of
consecutive reserves (128 tokens wide on 120,000-token engines), and a min-tree over the
buckets holds each bucket's smallest key. ``first_fitting(seqs, tokens)`` is the job with
the smallest key whose group fits in ``seqs`` free sequences and ``tokens`` free KV tokens:
the buckets wholly below ``tokens`` from the tree (a walk up a tree of about ten levels) and
the leaves of the bucket that holds ``tokens`` one by one. Narrow buckets keep that scan,
and finding a bucket's smallest key, short as the jobs grow (buckets of 1,024 tokens held up
to 30 leaves each with the 256 jobs of benchmarks/scaling.py). When an engine's room grows,
this is the only job that could take it first.

Leaves change often (a fair policy moves a job's key with every group it places); the trees
are brought up to date when a query needs them, so several changes between two queries cost
one walk.
"""

from __future__ import annotations

import heapq
from typing import Any

Entry = tuple[Any, int]
"""(policy key, job index); keys end with the job index, so no two are equal."""

BUCKETS_LOG2 = 10
"""About 2**10 buckets of reserves per group size."""


class NeedIndex:
    """Jobs (by index) with the size and KV reserve of their next group and their key."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        """Largest reserve an engine can hold; jobs that need more are not indexed."""
        self._shift = max(0, max_tokens.bit_length() - BUCKETS_LOG2)
        """A reserve's bucket is reserve >> shift."""
        self._size = 1 << (max_tokens >> self._shift).bit_length()
        """Leaves per tree (buckets 0 .. max_tokens >> shift)."""
        self.indexed: dict[int, tuple[int, int, Any]] = {}
        """Job -> (group size, reserve, key): what the job is indexed under now (read only)."""
        self._leaves: dict[tuple[int, int], list[Entry]] = {}
        """(group size, reserve) -> heap of entries, some stale (see indexed)."""
        self._live: dict[tuple[int, int], int] = {}
        """Current entries per leaf (the rest of its heap is stale)."""
        self._tops: dict[int, dict[int, dict[int, Entry]]] = {}
        """Group size -> bucket -> reserve -> the leaf's smallest current entry."""
        self._trees: dict[int, list[Entry | None]] = {}
        """Group size -> min-tree over buckets of their smallest entry (None: empty)."""
        self._stale: set[tuple[int, int]] = set()
        """Leaves that changed since the trees were brought up to date."""

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
        heapq.heappush(heap, (key, job))
        self._stale.add(leaf)

    def remove(self, job: int) -> None:
        """Take ``job`` out (no group to generate, or none that can be placed this round)."""
        old = self.indexed.pop(job, None)
        if old is None:
            return
        leaf = (old[0], old[1])
        live = self._live[leaf] = self._live[leaf] - 1
        self._stale.add(leaf)
        heap = self._leaves[leaf]
        if len(heap) > 2 * live + 8:  # mostly stale entries: keep the current ones
            heap[:] = [e for e in heap if self._current(e, leaf)]
            heapq.heapify(heap)

    def first_fitting(self, seqs: int, tokens: int) -> Entry | None:
        """The smallest (key, job) whose next group needs at most ``seqs`` sequences and
        ``tokens`` KV tokens, or None."""
        if self._stale:
            self._settle()
        best = None
        if tokens > self.max_tokens:
            tokens = self.max_tokens
        bucket = tokens >> self._shift
        leaf = self._size + bucket
        for size, tree in self._trees.items():
            if size > seqs:
                continue
            node = leaf
            while node > 1:  # the buckets below: left siblings on the way up from its leaf
                if node & 1:
                    entry = tree[node - 1]
                    if entry is not None and (best is None or entry < best):
                        best = entry
                node >>= 1
            tops = self._tops[size].get(bucket)
            if tops:
                for reserve, entry in tops.items():
                    if reserve <= tokens and (best is None or entry < best):
                        best = entry
        return best

    def _settle(self) -> None:
        """Bring the leaves' smallest entries and the trees up to date."""
        buckets, live, all_tops = set(), self._live, self._tops
        for leaf in self._stale:
            seqs, tokens = leaf
            bucket = tokens >> self._shift
            by_bucket = all_tops.get(seqs)
            if by_bucket is None:
                by_bucket = all_tops[seqs] = {}
            tops = by_bucket.get(bucket)
            if tops is None:
                tops = by_bucket[bucket] = {}
            if live[leaf]:
                tops[tokens] = self._clean(leaf)
            else:
                del self._leaves[leaf], live[leaf]
                tops.pop(tokens, None)
            buckets.add((seqs, bucket))
        self._stale.clear()
        for seqs, bucket in buckets:
            tops = all_tops[seqs][bucket]
            self._fix(seqs, bucket, min(tops.values()) if tops else None)
            if not tops:
                del all_tops[seqs][bucket]

    def _current(self, entry: Entry, leaf: tuple[int, int]) -> bool:
        now = self.indexed.get(entry[1])
        return now is not None and now[2] == entry[0] and (now[0], now[1]) == leaf

    def _clean(self, leaf: tuple[int, int]) -> Entry:
        """Pop stale entries off the top of a leaf's heap; returns the top (a current one)."""
        heap = self._leaves[leaf]
        while not self._current(heap[0], leaf):
            heapq.heappop(heap)
        return heap[0]

    def _fix(self, seqs: int, bucket: int, top: Entry | None) -> None:
        """Set a bucket's smallest entry and bring its ancestors up to date."""
        tree = self._trees.get(seqs)
        if tree is None:
            tree = self._trees[seqs] = [None] * (2 * self._size)
        node = self._size + bucket
        tree[node] = top
        while node > 1:
            other = tree[node ^ 1]
            if top is None or (other is not None and other < top):
                top = other
            node >>= 1
            if tree[node] is top:
                return  # the ancestors already hold the right minima
            tree[node] = top
