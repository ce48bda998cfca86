"""SeededBlock hands out exactly the generators numpy.random.default_rng would make."""

from __future__ import annotations

import random

import numpy as np
import pytest

from marlaas.core.seeds import SeededBlock, pcg64_states


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2**32 - 1, 2**32, 2**40 + 5, 2**64 - 1])
def test_states_are_numpys(seed):
    rng = random.Random(seed)
    job = rng.randrange(5000)
    last = np.array([*sorted(rng.sample(range(100_000), 50)), 0, 2**32 - 1])
    states = pcg64_states([seed, job], last)
    for i, (state, inc) in zip(last.tolist(), states, strict=True):
        expected = np.random.PCG64(np.random.SeedSequence([seed, job, i])).state["state"]
        assert (state, inc) == (expected["state"], expected["inc"])


def test_block_draws_as_default_rng_in_any_order():
    block = SeededBlock([3, 9], size=16)
    order = [*range(40), 5, 39, 41, 100, 7, 2**32 - 1, 2**32 + 3]
    for i in order:
        expected = np.random.default_rng([3, 9, i])
        got = block.rng(i)
        assert got.lognormal(5.0, 1.0) == expected.lognormal(5.0, 1.0)
        assert got.integers(1000) == expected.integers(1000)


def test_negative_seeds_are_refused():
    with pytest.raises(ValueError):
        pcg64_states([-1, 0], np.arange(3))
