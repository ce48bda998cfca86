"""The decode regression says which of its terms the rows cannot tell from 0."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from marlaas.twin.calibrate import _decode_warnings
from marlaas.twin.decode_fit import COLUMNS, _standard_errors, fit_decode

BASE_S, PER_SEQ_S = 0.010, 0.0005
"""The true cost of a decode iteration: 10 ms plus 0.5 ms per running sequence."""


def rows(batch_sizes: np.ndarray, seed: int = 0) -> pd.DataFrame:
    """Generate rows of 20-40 iterations at the given mean running sequences, with the
    duration the true cost gives, times 5% noise."""
    rng = np.random.default_rng(seed)
    k = rng.integers(20, 40, len(batch_sizes)).astype(float)
    frame = pd.DataFrame({c: 0.0 for c in COLUMNS}, index=range(len(k)))
    frame["x_base"], frame["x_seq"] = k, k * batch_sizes
    frame["duration_s"] = (BASE_S * k + PER_SEQ_S * k * batch_sizes) * rng.normal(1, 0.05, len(k))
    frame["warm"] = False
    return frame


def test_batches_of_many_sizes_identify_the_per_sequence_cost():
    fit = fit_decode(rows(np.random.default_rng(1).uniform(1, 48, 400)))
    assert fit.coef["decode_per_seq_ms"] == pytest.approx(PER_SEQ_S, rel=0.1)
    assert "decode_per_seq_ms" not in fit.unidentified()
    assert fit.stderr["decode_per_seq_ms"] < PER_SEQ_S / 10
    assert not any("cannot tell it from 0" in w for w in _decode_warnings(fit, "generate rows"))


def test_batches_of_one_size_cannot_and_calibrate_says_so():
    """At 24.5-25.5 sequences a batch, 10 ms + 0.5 ms x n is about 22.5 ms however it is
    split: neither term's interval excludes 0."""
    fit = fit_decode(rows(np.random.default_rng(1).uniform(24.5, 25.5, 100)))
    assert set(fit.unidentified()) == {"decode_base_ms", "decode_per_seq_ms"}, fit.stderr
    warned = [w for w in _decode_warnings(fit, "generate rows") if "cannot tell it from 0" in w]
    assert len(warned) == 2
    assert warned[1].startswith("decode_per_seq_ms: ")
    assert " ms per sequence and iteration (95% interval, 100 generate rows)" in warned[1]
    assert re.search(r"\(their batches ran 24\.\d-25\.\d sequences: ", warned[0])
    assert "calibrate from runs of more schedules" in warned[0]


def test_a_ridge_fit_reports_no_standard_errors():
    fit = fit_decode(rows(np.random.default_rng(1).uniform(1, 48, 100)), ridge=0.1)
    assert fit.stderr == {} and fit.unidentified() == {}


def test_collinear_columns_leave_both_terms_undetermined():
    """One adapter in every iteration: the per-adapter column is the iteration column, any
    split of their sum fits alike: where the fit keeps both, neither standard error is
    finite (the per-sequence term's own column still tells it)."""
    frame = rows(np.random.default_rng(1).uniform(1, 48, 200))
    x = frame[list(COLUMNS)].to_numpy(float)
    x[:, COLUMNS.index("x_adapter")] = x[:, COLUMNS.index("x_base")]
    beta = np.array([0.006, PER_SEQ_S, 0.0, 0.004, 0.0, 0.0])  # base and adapter share 10 ms
    residual = frame["duration_s"].to_numpy(float) - x @ beta
    se = _standard_errors(x, residual, beta)
    assert np.isinf(se["decode_base_ms"]) and np.isinf(se["decode_per_adapter_ms"])
    assert se["decode_per_seq_ms"] < PER_SEQ_S / 10


def test_an_engine_counts_the_adapters_it_holds_at_once_not_all_that_passed():
    """A long group of adapter a beside b's group, then c's: at every instant the engine holds
    two adapters, as the simulator counts them (it charged three before: every adapter that
    passed through the span)."""
    from marlaas.core.cluster_spec import ClusterSpec
    from marlaas.twin.decode_fit import features
    from marlaas.twin.operations import distinct_mean

    spans = [("a", 0.0, 10.0), ("b", 0.0, 5.0), ("c", 5.0, 10.0)]
    events = pd.DataFrame([
        {"kind": "generate", "tenant": job, "job": job, "step": 0, "group": 0, "turn": 0,
         "device": "r/0", "pool": "r", "start_s": s, "end_s": e, "seqs": 4, "tokens": 40,
         "version": 0, "staleness": 0, "outcome": "ok", "reward": 0.0, "prompt_tokens": 8,
         "longest_tokens": 10}
        for job, s, e in spans
    ])  # fmt: skip
    rows = features(events, ClusterSpec()).set_index("row")
    assert rows.loc[0, "x_adapter"] == pytest.approx(10 * 2.0)  # k = 10 iterations, 2 at once
    assert rows.loc[1, "x_adapter"] == pytest.approx(10 * 2.0)
    labels = np.array(["a", "b", "a"])  # two groups of one adapter count once
    assert distinct_mean(np.array([0.0, 0, 2]), np.array([4.0, 2, 4]), labels, 0.0, 4.0) == 1.5
