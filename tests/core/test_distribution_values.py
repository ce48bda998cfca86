"""A distribution of observed values (empirical, or a trace's up to a million rows) reads
them into arrays once: every job's estimates ask it for dozens of quantiles, and each one
turned the whole list into an array again (2 s a job at a million rows)."""

from __future__ import annotations

import copy
import pickle

import numpy as np

from marlaas.core import distributions
from marlaas.core.distributions import Empirical


def test_quantiles_are_numpy_s_and_each_is_computed_once(monkeypatch):
    values = [float(v) for v in np.random.default_rng(0).integers(1, 500, 1001)]
    dist = Empirical(dist="empirical", values=values)
    qs = [0.0, 0.001, 0.1, 0.5, 8 / 9, 0.99, 1.0, 1.5, -1.0]
    assert [dist.quantile(q) for q in qs] == [
        float(np.quantile(values, min(max(q, 0.0), 1.0))) for q in qs
    ]
    assert dist.mean() == float(np.mean(values))
    calls = []
    quantile = np.quantile
    monkeypatch.setattr(distributions.np, "quantile", lambda *a, **k: calls.append(a) or
                        quantile(*a, **k))  # fmt: skip
    for _ in range(3):
        dist.quantile(0.25)
    assert len(calls) == 1 and isinstance(calls[0][0], np.ndarray)


def test_the_arrays_are_no_field():
    dist = Empirical(dist="empirical", values=[3, 1, 2, 10])
    same = Empirical(dist="empirical", values=[3, 1, 2, 10])
    dist.quantile(0.3)
    assert dist == same and dist != Empirical(dist="empirical", values=[3, 1, 2, 11])
    assert dist.model_dump() == {"dist": "empirical", "values": [3.0, 1.0, 2.0, 10.0]}
    assert copy.deepcopy(dist) == dist and pickle.loads(pickle.dumps(dist)) == same
    rng = np.random.default_rng(1)
    assert (
        dist.sample(rng, 4).tolist()
        == np.random.default_rng(1).choice(np.asarray([3.0, 1.0, 2.0, 10.0]), 4).tolist()
    )


def test_the_arrays_follow_the_values_and_stay_out_of_a_pickle():
    """``model_copy(update={"values": ...})`` copies the instance's ``__dict__``, arrays and
    all: the copy's quantiles, mean and draws are its own values'; a pickle (a sweep's
    workload sent to a worker) carries the values, not their arrays too."""
    values = [float(v) for v in np.random.default_rng(0).integers(1, 500, 10_000)]
    dist = Empirical(dist="empirical", values=values)
    empty = len(pickle.dumps(dist))
    dist.quantile(0.5)
    assert len(pickle.dumps(dist)) == empty
    assert pickle.loads(pickle.dumps(dist)).quantile(0.5) == dist.quantile(0.5)
    other = dist.model_copy(update={"values": [1.0, 2.0]})
    assert (other.quantile(0.5), other.mean()) == (1.5, 1.5)
    assert set(other.sample(np.random.default_rng(0), 20).tolist()) <= {1.0, 2.0}
    assert dist.quantile(0.5) == float(np.quantile(values, 0.5))  # its own, still
