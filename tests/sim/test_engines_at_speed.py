"""CostModel.engines_at_speed: the same costs with the engines so many times as slow, which a
replay charges a run whose engines ran the yardstick slower or faster than the calibration
runs'."""

from __future__ import annotations

import pytest

from marlaas.sim.cost_model import ENGINE_RATES, ENGINE_TIMES, CostModel
from marlaas.sim.cost_profiles import load_profile

NOT_THE_ENGINES = {"train_tokens_per_s", "train_overhead_s", "trainer_swap_s", "sync_s",
                   "colocated_switch_s", "engine_warmup_s", "train_shares_prompts",
                   "train_rank_scale", "train_forward_share", "adapter_load_wait_iterations",
                   "overlap_decode_slowdown", "overlap_train_slowdown"}  # fmt: skip
"""The fields no engine speed moves: training, syncs, the sleep and warm-up outside the
engines' steps, and how the costs combine (ratios, counts, slowdowns)."""


def test_every_field_is_the_engines_or_not():
    """A field added to the cost model is classed here, or this fails: an engine time that
    engines_at_speed left alone would replay a slow run's steps at the calibration runs'
    speed."""
    assert set(ENGINE_TIMES) | set(ENGINE_RATES) | NOT_THE_ENGINES == set(CostModel.model_fields)
    assert not set(ENGINE_TIMES) & set(ENGINE_RATES)


@pytest.mark.parametrize("slower", [0.5, 1.3, 2.0])
def test_engine_times_scale_with_the_speed_and_rates_against_it(slower):
    cost = load_profile("cpu-tiny").cost
    scaled = cost.engines_at_speed(slower)
    for name in ENGINE_TIMES:
        assert getattr(scaled, name) == pytest.approx(getattr(cost, name) * slower)
    for name in ENGINE_RATES:
        assert getattr(scaled, name) == pytest.approx(getattr(cost, name) / slower)
    for name in NOT_THE_ENGINES:
        assert getattr(scaled, name) == getattr(cost, name)


def test_a_speed_is_kept_within_the_model_bounds():
    """A far speed gives the bounds, not a model that fails validation later; a speed that is
    not a positive number is refused by name."""
    far = CostModel().engines_at_speed(1e9)
    assert far.decode_base_ms == 60_000.0 and far.prefill_tokens_per_s == 1.0
    near = CostModel().engines_at_speed(1e-12)
    assert 0 < near.decode_base_ms < 1e-6 and near.prefill_tokens_per_s == 1e12
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="a speed ratio is a positive number"):
            CostModel().engines_at_speed(bad)
