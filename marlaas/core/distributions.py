"""Distributions of lengths [tokens] and latencies [s] in workload files.

Written in YAML as a mapping with a ``dist`` tag::

    {dist: constant, value: 256}
    {dist: lognormal, median: 300, sigma: 1.0}          # heavy tail: p99/median = e^(2.33 sigma)
    {dist: uniform, low: 1, high: 5}
    {dist: empirical, values: [120, 340, 2048]}
    {dist: trace, path: azure_code_sample.csv, format: azure, column: response}

A ``trace`` distribution holds token counts read from a request trace (see marlaas.traces):
:mod:`marlaas.workload_file` reads the file, relative to the workload file, into ``values``
when it loads the workload; from then on it behaves as ``empirical``, except that a job's
prompt and response traces of one file are drawn as pairs (:mod:`marlaas.core.prompts`).
Sampling takes a numpy Generator so that all randomness comes from the run's seed.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from marlaas.core.limits import MAX_DIST_VALUE, MAX_SIGMA, MAX_VALUES

Value = Annotated[float, Field(ge=0, le=MAX_DIST_VALUE)]
"""A finite, non-negative parameter (tokens or seconds), bounded (marlaas.core.limits)."""
Values = Annotated[list[Value], Field(max_length=MAX_VALUES)]


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values as float64."""
        raise NotImplementedError

    def mean(self) -> float:
        """The distribution's mean (used for estimates, e.g. by srtf)."""
        raise NotImplementedError


class Constant(_Dist):
    """Always the same value."""

    dist: Literal["constant"]
    value: Value

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value)

    def mean(self) -> float:
        return self.value


class LogNormal(_Dist):
    """Lognormal with the given median and log-space sigma (before any truncation)."""

    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, le=MAX_DIST_VALUE)]
    sigma: Annotated[float, Field(ge=0, le=MAX_SIGMA)]

    @cached_property
    def _log_median(self) -> float:
        return np.log(self.median)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(self._log_median, self.sigma, n)

    def mean(self) -> float:
        return float(self.median * np.exp(self.sigma**2 / 2))


class Uniform(_Dist):
    """Uniform on [low, high]."""

    dist: Literal["uniform"]
    low: Value
    high: Value

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)

    def mean(self) -> float:
        return (self.low + self.high) / 2


class Empirical(_Dist):
    """Resample from observed values."""

    dist: Literal["empirical"]
    values: Annotated[list[Value], Field(min_length=1, max_length=MAX_VALUES)]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), n)

    def mean(self) -> float:
        return float(np.mean(self.values))


class Trace(_Dist):
    """Token counts of a request trace file (Azure LLM trace, BurstGPT, Mooncake JSONL or
    plain CSV), in the file's row order."""

    dist: Literal["trace"]
    path: str
    """The trace file (made absolute when the workload file is read)."""
    format: Literal["azure", "burstgpt", "mooncake", "csv"] = "csv"
    column: Literal["prompt", "response"] = "response"
    values: Values = Field(default_factory=list)
    """The column's token counts, filled in from the file by marlaas.workload_file."""

    @model_validator(mode="after")
    def _loaded(self) -> Trace:
        if not self.values:
            raise ValueError(
                f"trace {self.path!r} has no values: read workloads that name trace files "
                "with marlaas.workload_file.load_workload"
            )
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), n)

    def mean(self) -> float:
        return float(np.mean(self.values))


def largest(dist: _Dist) -> float:
    """The largest value a distribution names: its constant, high end or largest value (a
    lognormal's median: its tail is unbounded), for the bounds of marlaas.core.limits."""
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, LogNormal):
        return dist.median
    if isinstance(dist, Uniform):
        return dist.high
    return max(dist.values)


Distribution = Annotated[
    Constant | LogNormal | Uniform | Empirical | Trace, Field(discriminator="dist")
]
