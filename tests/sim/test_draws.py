"""Common random numbers (marlaas/sim/draws.py): a group's turn gets the same draws
whatever was asked before it."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.sim.draws import BLOCK, ENV_STREAM, KEPT_BLOCKS, RESPONSE_STREAM, Draws


def uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n)


def test_a_row_does_not_depend_on_what_was_drawn_before():
    groups = list(range(5 * BLOCK))
    forward = Draws(seed=3, job=1, width=4)
    want = {g: forward.row(RESPONSE_STREAM, 0, g, 4, uniforms).copy() for g in groups}
    shuffled = Draws(seed=3, job=1, width=4)
    for g in np.random.default_rng(0).permutation(groups).tolist():
        shuffled.row(ENV_STREAM, 0, g, 4, uniforms)  # another stream drawn in between
        np.testing.assert_array_equal(shuffled.row(RESPONSE_STREAM, 0, g, 4, uniforms), want[g])


def test_streams_turns_groups_jobs_and_seeds_draw_different_numbers():
    base = Draws(seed=0, job=0, width=8).row(RESPONSE_STREAM, 0, 0, 8, uniforms)
    others = [
        Draws(seed=0, job=0, width=8).row(ENV_STREAM, 0, 0, 8, uniforms),
        Draws(seed=0, job=0, width=8).row(RESPONSE_STREAM, 1, 0, 8, uniforms),
        Draws(seed=0, job=0, width=8).row(RESPONSE_STREAM, 0, 1, 8, uniforms),
        Draws(seed=0, job=1, width=8).row(RESPONSE_STREAM, 0, 0, 8, uniforms),
        Draws(seed=1, job=0, width=8).row(RESPONSE_STREAM, 0, 0, 8, uniforms),
    ]
    for other in others:
        assert not np.array_equal(base, other)


def test_fewer_samples_than_a_group_are_its_first_ones_and_more_still_work():
    draws = Draws(seed=0, job=2, width=8)
    full = draws.row(RESPONSE_STREAM, 1, 40, 8, uniforms).copy()
    np.testing.assert_array_equal(draws.row(RESPONSE_STREAM, 1, 40, 3, uniforms), full[:3])
    wide = draws.row(RESPONSE_STREAM, 1, 40, 12, uniforms)
    assert wide.shape == (12,) and np.array_equal(
        wide, draws.row(RESPONSE_STREAM, 1, 40, 12, uniforms)
    )


def test_an_evicted_block_draws_the_same_numbers_again():
    draws = Draws(seed=5, job=0, width=2)
    first = draws.row(RESPONSE_STREAM, 0, 0, 2, uniforms).copy()
    for block in range(1, KEPT_BLOCKS + 2):  # pushes block 0 out
        draws.row(RESPONSE_STREAM, 0, block * BLOCK, 2, uniforms)
    np.testing.assert_array_equal(draws.row(RESPONSE_STREAM, 0, 0, 2, uniforms), first)


def test_rows_follow_the_sampler():
    draws = Draws(seed=0, job=0, width=16)
    values = np.concatenate(
        [
            draws.row(RESPONSE_STREAM, 0, g, 16, lambda r, n: r.exponential(2.0, n))
            for g in range(2_000)
        ]
    )
    assert values.mean() == pytest.approx(2.0, rel=0.03)
    assert len(np.unique(values)) == len(values)  # no group repeats another's draws
