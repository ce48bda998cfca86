"""The inference engines' free room, indexed: the best engine for a group without a scan.

An engine is *open* when it has a free adapter slot or an idle adapter it may evict, so that
any adapter can be loaded there. The open engines are grouped by free sequences (a *level*);
each level is a max-tree over engine indices of free KV tokens. The engine the mechanism
prefers for a group of ``seqs`` sequences reserving ``tokens`` KV tokens (the most free
sequences, then the lowest index) is the first engine, from the left, holding at least
``tokens`` in the highest level with at least ``seqs``: a walk down one tree per level tried,
instead of a test of every engine.

It also keeps the most free KV tokens on any engine, open or not (a bound that rejects most
groups that fit nowhere at once), counts the engines that are busy (running groups or
loading an adapter) and collects the engines whose room grew (a group ended, an adapter was
dropped or loaded) since the scheduler last looked, so that a placement round looks only at
what changed.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection

_EMPTY = -1
"""Free tokens of a leaf that holds no open engine (every need asks for 0 tokens or more)."""


class FreeEngines:
    """Open engines by free sequences and free KV tokens; busy and grown engines."""

    def __init__(self, engines: int) -> None:
        self._size = 1 << max(0, engines - 1).bit_length()
        """Leaves per tree (engine i is leaf size + i)."""
        self._trees: dict[int, list[int]] = {}
        """Free sequences (a level) -> max-tree of free tokens over engine indices."""
        self._members: dict[int, int] = {}
        """Open engines per level."""
        self._levels: list[int] = []
        """Levels that have members, as negative numbers in ascending order (most free
        sequences first)."""
        self._spare: list[list[int]] = []
        """Trees of emptied levels, every node _EMPTY, for reuse."""
        self._level_of: list[int | None] = [None] * engines
        """Each engine's level (None: not open)."""
        self._room = [_EMPTY] * (2 * self._size)
        """Max-tree of free KV tokens over every engine, open or not."""
        self._busy: list[bool] = [False] * engines
        self.busy = 0
        """Engines running groups or loading an adapter."""
        self.grown: set[int] = set()
        """Engines whose free room (sequences, tokens or adapter slots) grew since the
        placement round last looked."""

    def update(
        self, index: int, is_open: bool, free_seqs: int, free_tokens: int, busy: bool
    ) -> None:
        """Record engine ``index``'s state after it changed."""
        if busy != self._busy[index]:
            self._busy[index] = busy
            self.busy += 1 if busy else -1
        if self._room[self._size + index] != free_tokens:
            self._set(self._room, index, free_tokens)
        old, new = self._level_of[index], (free_seqs if is_open else None)
        if old is not None and old != new:
            self._set(self._trees[old], index, _EMPTY)
            self._members[old] -= 1
            if not self._members[old]:
                self._spare.append(self._trees.pop(old))
                del self._members[old]
                self._levels.pop(bisect.bisect_left(self._levels, -old))
        if new is not None:
            tree = self._trees.get(new)
            if tree is None:
                tree = self._spare.pop() if self._spare else [_EMPTY] * (2 * self._size)
                self._trees[new] = tree
                self._members[new] = 0
                bisect.insort(self._levels, -new)
            if old != new:
                self._members[new] += 1
            self._set(tree, index, free_tokens)
        self._level_of[index] = new

    def most_tokens(self) -> int:
        """The most free KV tokens on any engine (-1 without engines): no group that needs
        more fits anywhere."""
        return self._room[1]

    def best(self, seqs: int, tokens: int, exclude: Collection[int] = ()) -> int | None:
        """The open engine with at least ``seqs`` free sequences and ``tokens`` free KV
        tokens that has the most free sequences, then the lowest index; ``exclude``: engines
        not to consider."""
        for negative in self._levels:
            if -negative < seqs:
                return None
            tree = self._trees[-negative]
            if tree[1] < tokens:
                continue
            found = self._first(tree, tokens, 0)
            while found is not None and found in exclude:
                found = self._first(tree, tokens, found + 1)
            if found is not None:
                return found
        return None

    def _set(self, tree: list[int], index: int, value: int) -> None:
        node = self._size + index
        tree[node] = value
        node >>= 1
        while node:
            left, right = tree[2 * node], tree[2 * node + 1]
            top = left if left >= right else right
            if tree[node] == top:
                return  # the ancestors already hold the right maxima
            tree[node] = top
            node >>= 1

    def _first(self, tree: list[int], tokens: int, start: int) -> int | None:
        """The lowest engine index >= ``start`` whose free tokens are >= ``tokens``."""
        size = self._size
        if start >= size:
            return None
        node = size + start
        while tree[node] < tokens:
            while node & 1:  # climb while a right child: its right neighbours are done
                node >>= 1
            if not node:
                return None
            node += 1
        while node < size:
            node = 2 * node if tree[2 * node] >= tokens else 2 * node + 1
        return node - size
