"""marlaas.metrics.fairness: Jain's index and the tenants' weighted shares."""

from __future__ import annotations

import math

import pytest

from marlaas.metrics.fairness import fairness, jain_index
from tests.metrics.examples import tiny


def test_jain_index():
    assert jain_index([2, 2, 2]) == 1.0
    assert jain_index([1, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([0, 0]) == 1.0
    assert math.isnan(jain_index([]))
    assert jain_index([1, float("nan"), 1]) == 1.0


def test_fairness_weights():
    df = tiny()
    fair = fairness(df, weights={"a": 3.5, "b": 4.5})
    assert fair["jain_tenant_gpu_s_per_weight"] == pytest.approx(1.0)
    assert fair["jain_tenant_gpu_s"] < 1.0
    assert fairness(df)["jain_tenant_gpu_s_per_weight"] is None
