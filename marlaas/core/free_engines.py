"""The inference engines' free room, indexed: the best engine for a group without a scan.

An engine is *open* when it has a free adapter slot or an idle adapter it may evict, so that
any adapter can be loaded there. Two max-trees over engine indices hold, for every subtree,
the most free KV tokens and the most free sequences of its open engines. The engine the
mechanism prefers for a group of ``seqs`` sequences reserving ``tokens`` KV tokens (the most
free sequences, then the lowest index) is found by a search that enters only subtrees with
an open engine holding ``tokens`` and one with more free sequences than the best found so
far, the one with more free sequences first: a few paths down the trees instead of a test of
every engine (engines that lack the tokens, the usual case on a busy cluster, are never
visited).

A third max-tree holds the most free KV tokens of every engine, open or not: a bound that
rejects at once most groups that fit nowhere. The index also counts the engines that are busy
(running groups or loading an adapter) and collects the engines whose room grew (a group
ended, an adapter was dropped or loaded) since the scheduler last looked, so that a
placement round looks only at what changed.
"""

from __future__ import annotations

from collections.abc import Collection

_EMPTY = -1
"""The value of a leaf that holds no engine (every need asks for 0 tokens or more)."""


class FreeEngines:
    """Open engines by free sequences and free KV tokens; busy and grown engines."""

    def __init__(self, engines: int) -> None:
        self._size = 1 << max(0, engines - 1).bit_length()
        """Leaves per tree (engine i is leaf size + i)."""
        self._tokens = [_EMPTY] * (2 * self._size)
        """Max-tree of the free KV tokens of open engines."""
        self._seqs = [_EMPTY] * (2 * self._size)
        """Max-tree of the free sequences of open engines."""
        self._room = [_EMPTY] * (2 * self._size)
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
        if not is_open:
            free_seqs = free_tokens = _EMPTY
        if self._tokens[leaf] != free_tokens:
            _set(self._tokens, leaf, free_tokens)
        if self._seqs[leaf] != free_seqs:
            _set(self._seqs, leaf, free_seqs)

    def most_tokens(self) -> int:
        """The most free KV tokens on any engine (-1 without engines): no group that needs
        more fits anywhere."""
        return self._room[1]

    def best(self, seqs: int, tokens: int, exclude: Collection[int] = ()) -> int | None:
        """The open engine with at least ``seqs`` free sequences and ``tokens`` free KV
        tokens that has the most free sequences, then the lowest index; ``exclude``: engines
        not to consider."""
        have_tokens, have_seqs = self._tokens, self._seqs
        if have_tokens[1] < tokens or have_seqs[1] < seqs:
            return None
        best, most = None, seqs
        stack = [(1, 0, self._size)]  # (node, its first engine, engines below it)
        while stack:
            node, first, span = stack.pop()
            room = have_seqs[node]
            if have_tokens[node] < tokens or room < most:
                continue
            if best is not None and room == most and first > best:
                continue  # as many free sequences at best, and all to the right of the best
            if span == 1:
                if first not in exclude:
                    best, most = first, room
                continue
            half = span >> 1
            left, right = (2 * node, first, half), (2 * node + 1, first + half, half)
            if have_seqs[2 * node + 1] > have_seqs[2 * node]:
                stack += (left, right)  # the right child first: it may hold more sequences
            else:
                stack += (right, left)
        return best


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
