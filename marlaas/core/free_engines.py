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

The roots are a bound that rejects at once a group that fits no open engine. The index also
counts the engines that are busy (running groups or loading an adapter) and collects the
engines whose room grew (a group ended, an adapter was dropped or loaded) since the scheduler
last looked, so that a placement round looks only at what changed.
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
        if not is_open:
            free_seqs = free_tokens = _EMPTY
        if self._tokens[leaf] != free_tokens:
            _set(self._tokens, leaf, free_tokens)
        if self._seqs[leaf] != free_seqs:
            _set(self._seqs, leaf, free_seqs)

    def best(self, seqs: int, tokens: int, exclude: Collection[int] = ()) -> int | None:
        """The open engine with at least ``seqs`` free sequences and ``tokens`` free KV
        tokens that has the most free sequences, then the lowest index; ``exclude``: engines
        not to consider."""
        if self._tokens[1] < tokens or self._seqs[1] < seqs:
            return None
        best, _ = self._search(1, 0, self._size, tokens, exclude, -1, seqs)
        return None if best < 0 else best

    def _search(
        self, node: int, first: int, span: int, tokens: int, exclude: Collection[int],
        best: int, most: int,
    ) -> tuple[int, int]:  # fmt: skip
        """The better of engine ``best`` (-1: none yet; ``most`` free sequences) and the
        engines of ``node``'s subtree (``first`` to ``first + span - 1``), with its free
        sequences: a recursion, compiled into calls of a C function, where a stack of Python
        tuples would allocate at every node."""
        room = self._seqs[node]
        if self._tokens[node] < tokens or room < most:
            return best, most
        if best >= 0 and room == most and first > best:
            return best, most  # as many free sequences at best, all to the right of the best
        if span == 1:
            return (best, most) if first in exclude else (first, room)
        half, left, right = span >> 1, 2 * node, 2 * node + 1
        if self._seqs[right] > self._seqs[left]:  # the right child first: it may hold more
            best, most = self._search(right, first + half, half, tokens, exclude, best, most)
            return self._search(left, first, half, tokens, exclude, best, most)
        best, most = self._search(left, first, half, tokens, exclude, best, most)
        return self._search(right, first + half, half, tokens, exclude, best, most)


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
