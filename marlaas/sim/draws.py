"""Common random numbers: each group's turn draws from generators of its own.

The simulator draws a turn's response lengths and its environment waits
(:mod:`marlaas.sim.turn_draws`) from ``default_rng([seed, job, stream, turn, block])``, one
generator per block of ``BLOCK`` consecutive groups, whose draws are cut into one row of
``width`` values per group. A group's turn therefore gets the same numbers under every
schedule, whatever was drawn before it: two policies simulated on one workload and seed
differ only by what the policies did (a paired comparison, the variance reduction of common
random numbers), and an early change of order does not reshuffle every later draw. Drawing
a block at once keeps the simulator's cost where it was (paper-32 under fair, compiled: the
same CPU time within the machine's noise), where seeding one generator per group turn cost
about a third more.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BLOCK = 32
"""Groups whose draws one generator makes at once."""
KEPT_BLOCKS = 4
"""Blocks kept per stream and turn (groups of one turn run roughly in order)."""
RESPONSE_STREAM = 1
"""The stream of a turn's response lengths [tokens] (or uniforms, for paired traces)."""
ENV_STREAM = 2
"""The stream of a turn's environment waits [s]."""
ALIKE_STREAM = 3
"""The stream of whether a group's samples all earn the same reward (a uniform per group)."""

Sampler = Callable[[np.random.Generator, int], np.ndarray]
"""Draws ``n`` values with a generator (a distribution's ``sample``)."""


class Draws:
    """One job's common random numbers: ``row(stream, turn, group, n, sample)`` is the same
    ``n`` values for a given job, seed, stream, turn and group in every run."""

    def __init__(self, seed: int, job: int, width: int) -> None:
        self.seed, self.job = seed, job
        self.width = width
        """Values drawn per group (the job's group size: a turn has at most that many)."""
        self._blocks: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        """(stream, turn): {block: its draws, BLOCK x width}."""

    def row(self, stream: int, turn: int, group: int, n: int, sample: Sampler) -> np.ndarray:
        """``n`` values of ``sample`` for turn ``turn`` of group ``group`` (one sampler per
        stream: the block's draws are made by the first one asked)."""
        if n > self.width:  # more than a group holds: a generator of its own
            return sample(np.random.default_rng([self.seed, self.job, stream, turn, group]), n)
        blocks = self._blocks.get((stream, turn))
        if blocks is None:
            blocks = self._blocks[stream, turn] = {}
        block = group // BLOCK
        drawn = blocks.get(block)
        if drawn is None:
            rng = np.random.default_rng([self.seed, self.job, stream, turn, block])
            drawn = sample(rng, BLOCK * self.width).reshape(BLOCK, self.width)
            blocks[block] = drawn
            if len(blocks) > KEPT_BLOCKS:
                del blocks[min(blocks)]
        return drawn[group % BLOCK, :n]
