"""Distributions of lengths [tokens] and latencies [s] in workload files.

Written in YAML as a mapping with a ``dist`` tag::

    {dist: constant, value: 256}
    {dist: lognormal, median: 300, sigma: 1.0}          # heavy tail: p99/median = e^(2.33 sigma)
    {dist: uniform, low: 1, high: 5}
    {dist: empirical, values: [120, 340, 2048]}
    {dist: trace, path: azure_code_sample.csv, format: azure, column: response}

A ``trace`` distribution holds token counts read from a request trace (see marlaas.traces):
:mod:`marlaas.workload_file` reads the file, relative to the workload file, into ``values``
when it loads the workload; from then on it behaves as ``empirical``. Sampling takes a numpy
Generator so that all randomness comes from the run's seed.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values as float64."""
        raise NotImplementedError

    def mean(self) -> float:
        """The distribution's mean (used for estimates, e.g. by srtf)."""
        raise NotImplementedError


class Constant(_Dist):
    """Always the same value."""

    dist: Literal["constant"]
    value: Annotated[float, Field(ge=0)]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value)

    def mean(self) -> float:
        return self.value


class LogNormal(_Dist):
    """Lognormal with the given median and log-space sigma (before any truncation)."""

    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0)]
    sigma: Annotated[float, Field(ge=0)]

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
    low: Annotated[float, Field(ge=0)]
    high: Annotated[float, Field(ge=0)]

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
    values: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), n)

    def mean(self) -> float:
        return float(np.mean(self.values))


class Trace(_Dist):
    """Token counts of a request trace file (Azure LLM trace, BurstGPT or plain CSV)."""

    dist: Literal["trace"]
    path: str
    """The trace file (made absolute when the workload file is read)."""
    format: Literal["azure", "burstgpt", "csv"] = "csv"
    column: Literal["prompt", "response"] = "response"
    values: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list)
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


Distribution = Annotated[
    Constant | LogNormal | Uniform | Empirical | Trace, Field(discriminator="dist")
]
