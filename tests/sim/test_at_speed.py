"""CostModel.at_speed: the same costs on hardware so many times as slow, which a replay charges
a run whose host ran the engines' yardstick slower or faster than the calibration runs'."""

from __future__ import annotations

import pytest

from marlaas.sim.cost_model import SPEED_RATES, SPEED_TIMES, CostModel
from marlaas.sim.cost_profiles import load_profile

SHAPE = {"train_shares_prompts", "train_rank_scale", "train_forward_share",
         "adapter_load_wait_iterations", "overlap_decode_slowdown",
         "overlap_train_slowdown"}  # fmt: skip
"""The fields that say how the costs combine, not how long anything takes: no speed moves them."""


def test_every_field_is_a_time_a_rate_or_the_shape():
    """A field added to the cost model is classed here, or this fails: a time that at_speed
    left alone would replay a slow run's steps at the calibration runs' speed."""
    fields = set(CostModel.model_fields)
    assert set(SPEED_TIMES) | set(SPEED_RATES) | SHAPE == fields
    assert not set(SPEED_TIMES) & set(SPEED_RATES)


@pytest.mark.parametrize("slower", [0.5, 1.3, 2.0])
def test_times_scale_with_the_speed_and_rates_against_it(slower):
    cost = load_profile("cpu-tiny").cost
    scaled = cost.at_speed(slower)
    for name in SPEED_TIMES:
        assert getattr(scaled, name) == pytest.approx(getattr(cost, name) * slower)
    for name in SPEED_RATES:
        assert getattr(scaled, name) == pytest.approx(getattr(cost, name) / slower)
    for name in SHAPE:
        assert getattr(scaled, name) == getattr(cost, name)


def test_a_speed_is_kept_within_the_model_bounds():
    """A far speed gives the bounds, not a model that fails validation later; a speed that is
    not a positive number is refused by name."""
    far = CostModel().at_speed(1e9)
    assert far.decode_base_ms == 60_000.0 and far.train_tokens_per_s == 1.0
    near = CostModel().at_speed(1e-12)
    assert 0 < near.decode_base_ms < 1e-6 and near.train_tokens_per_s == 1e12
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="a speed ratio is a positive number"):
            CostModel().at_speed(bad)
