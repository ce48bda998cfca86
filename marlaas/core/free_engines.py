"""The inference engines' free room, indexed: the best engine for a group without a scan.

An engine is *open* when it has a free adapter slot or an idle adapter it may evict, so that
any adapter can be loaded there. The mechanism prefers, for a group of ``seqs`` sequences
reserving ``tokens`` KV tokens, the open engine with the most free sequences, then the lowest
index, among those with room for it. Open engines are kept in *levels*, one per number of
free sequences (engines take groups of a few sizes, so there are few levels: 6.5 on average
on 256 jobs' 384 engines), and each level is a max-tree over engine indices of its engines'
free KV tokens. The best engine is in the highest level, from ``seqs`` free sequences up,
whose root holds ``tokens``: the leftmost leaf of its tree that holds ``tokens``, one path
down the tree (wherever a node of a max-tree holds ``tokens``, one of its leaves does),
however the engines' free tokens lie. The next engines in that order
(:meth:`FreeEngines.in_order`) are the next leaves to the right that hold ``tokens``, then
the next levels down: a few steps each.

One more max-tree holds every engine's free KV tokens, open or not: on a busy cluster most
groups fit no engine at all, and its root says so at once. The index also counts the engines
that are busy (running groups or loading an adapter) and collects the engines whose room grew
(a group ended, an adapter was dropped or loaded) since the scheduler last looked, so that a
placement round looks only at what changed.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Collection, Iterator

_EMPTY = -1
"""The value of a leaf that holds no engine (every need asks for 0 tokens or more)."""


class FreeEngines:
    """Open engines by free sequences and free KV tokens; busy and grown engines."""

    def __init__(self, engines: int) -> None:
        self._size = 1 << max(0, engines - 1).bit_length()
        """Leaves per tree (engine i is leaf size + i)."""
        self._levels: dict[int, list[int]] = {}
        """Free sequences -> max-tree of the free KV tokens of the open engines with that
        many free sequences (others: _EMPTY)."""
        self._counts: dict[int, int] = {}
        """Free sequences -> open engines with that many."""
        self._values: list[int] = []
        """The free sequences of some open engine, ascending (the levels in use)."""
        self._level: list[int] = [_EMPTY] * engines
        """Each engine's level (its free sequences; _EMPTY: not open)."""
        self._room: list[int] = [_EMPTY] * (2 * self._size)
        """Max-tree of the free KV tokens of every engine, open or not."""
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
        leaf = self._size + index
        if self._room[leaf] != free_tokens:
            _set(self._room, leaf, free_tokens)
        old, new = self._level[index], free_seqs if is_open else _EMPTY
        if old == new:
            if new != _EMPTY:
                tree = self._levels[new]
                if tree[leaf] != free_tokens:
                    _set(tree, leaf, free_tokens)
            return
        self._level[index] = new
        counts = self._counts
        if old != _EMPTY:
            _set(self._levels[old], leaf, _EMPTY)
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
                self._values.remove(old)
        if new != _EMPTY:
            level = self._levels.get(new)
            if level is None:
                level = self._levels[new] = [_EMPTY] * (2 * self._size)
            _set(level, leaf, free_tokens)
            if new in counts:
                counts[new] += 1
            else:
                counts[new] = 1
                insort(self._values, new)

    @property
    def most_tokens(self) -> int:
        """The most free KV tokens of any engine, open or not (-1: no engine): a group that
        reserves more fits nowhere, whichever adapters the engines hold."""
        return self._room[1]

    def best(self, seqs: int, tokens: int, exclude: Collection[int] = ()) -> int | None:
        """The open engine with at least ``seqs`` free sequences and ``tokens`` free KV
        tokens that has the most free sequences, then the lowest index; ``exclude``: engines
        not to consider."""
        for index in self.in_order(seqs, tokens):
            if index not in exclude:
                return index
        return None

    def in_order(self, seqs: int, tokens: int) -> Iterator[int]:
        """The open engines with at least ``seqs`` free sequences and ``tokens`` free KV
        tokens, in the mechanism's order (the most free sequences, then the lowest index):
        :meth:`best` first, then the one ``best`` would find if the earlier ones were
        excluded, and so on. The index must not change while it is read."""
        values, levels, size = self._values, self._levels, self._size
        for k in range(len(values) - 1, -1, -1):
            room = values[k]
            if room < seqs:
                return
            tree = levels[room]
            if tree[1] < tokens:
                continue
            node = _leftmost(tree, 1, size, tokens)
            while node:
                yield node - size
                node = _next(tree, node, size, tokens)


def _leftmost(tree: list[int], node: int, size: int, tokens: int) -> int:
    """The leftmost leaf of ``node``'s subtree that holds ``tokens`` (``node`` holds them)."""
    while node < size:
        node <<= 1
        if tree[node] < tokens:
            node += 1
    return node


def _next(tree: list[int], leaf: int, size: int, tokens: int) -> int:
    """The next leaf to the right of ``leaf`` that holds ``tokens`` (0: none)."""
    node = leaf
    while node > 1:
        if not node & 1 and tree[node + 1] >= tokens:
            return _leftmost(tree, node + 1, size, tokens)
        node >>= 1
    return 0


def _set(tree: list[int], node: int, value: int) -> None:
    """Set leaf ``node`` of a max-tree and bring its ancestors up to date."""
    tree[node] = value
    node >>= 1
    while node:
        left, right = tree[2 * node], tree[2 * node + 1]
        top = left if left >= right else right
        if tree[node] == top:
            return  # the ancestors already hold the right maxima
        tree[node] = top
        node >>= 1
