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
prompt and response traces of one file are drawn as pairs (:mod:`marlaas.sim.turn_draws`).
Sampling takes a numpy Generator so that all randomness comes from the run's seed.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from marlaas.core.limits import MAX_DIST_VALUE, MAX_SIGMA, MAX_VALUES
from marlaas.core.plain_numbers import plain_number

Value = Annotated[float, Field(ge=0, le=MAX_DIST_VALUE)]
"""A finite, non-negative parameter (tokens or seconds), bounded (marlaas.core.limits)."""
Values = Annotated[list[Value], Field(max_length=MAX_VALUES)]


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("value", "median", "sigma", "low", "high", mode="before", check_fields=False)
    @classmethod
    def _plain_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return plain_number(cls, value, info)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values as float64."""
        raise NotImplementedError

    def mean(self) -> float:
        """The distribution's mean (used for estimates, e.g. by srtf)."""
        raise NotImplementedError

    def quantile(self, q: float) -> float:
        """The value below which a fraction ``q`` (0 to 1) of draws fall (used for estimates
        of the longest of many draws: the quantile at 1 - 1/(n + 1))."""
        raise NotImplementedError


class Constant(_Dist):
    """Always the same value."""

    dist: Literal["constant"]
    value: Value

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value)

    def mean(self) -> float:
        return self.value

    def quantile(self, q: float) -> float:
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

    def quantile(self, q: float) -> float:
        return float(self.median * np.exp(self.sigma * _normal_quantile(q)))


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

    def quantile(self, q: float) -> float:
        return self.low + (self.high - self.low) * min(max(q, 0.0), 1.0)


class _Observed:
    """A distribution's values as arrays, made once from the list ``values`` (not a field:
    not dumped, not pickled; any two are equal, so that the distributions compare by their
    fields alone)."""

    __slots__ = ("array", "quantiles", "sorted", "values")

    def __init__(self, values: list[float]) -> None:
        self.values = values  # the list they were made from (no copy)
        self.array = np.asarray(values, dtype=float)
        self.sorted = np.sort(self.array)  # the same quantiles, found faster
        self.quantiles: dict[float, float] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Observed)

    __hash__ = None  # type: ignore[assignment]


class _Values(_Dist):
    """A distribution of observed ``values`` (up to MAX_VALUES: a million rows of a trace),
    read into arrays once: a job's estimates ask for dozens of quantiles, and turning the
    list into an array for each one cost 30 ms at a million values (2 s a job, twice a run).

    The arrays are kept in the instance's ``__dict__`` as ``_observed`` and remade when
    ``values`` is another list (``model_copy(update={"values": ...})`` copies the
    ``__dict__``, arrays included); a pickle leaves them out (a million values pickle to
    9 MB, their arrays to 16 MB more: a sweep sends its workloads to worker processes)."""

    if TYPE_CHECKING:
        values: list[float]  # the subclasses' field (declared here it would be dumped first)

    @property
    def _observed(self) -> _Observed:
        observed = self.__dict__.get("_observed")
        if observed is None or observed.values is not self.values:
            observed = self.__dict__["_observed"] = _Observed(self.values)
        return observed

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        if "_observed" in state["__dict__"]:
            state["__dict__"] = {k: v for k, v in state["__dict__"].items() if k != "_observed"}
        return state

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self._observed.array, n)

    def mean(self) -> float:
        return float(np.mean(self._observed.array))

    def quantile(self, q: float) -> float:
        q = min(max(q, 0.0), 1.0)
        observed = self._observed
        known = observed.quantiles.get(q)
        if known is None:
            known = observed.quantiles[q] = float(np.quantile(observed.sorted, q))
        return known


class Empirical(_Values):
    """Resample from observed values."""

    dist: Literal["empirical"]
    values: Annotated[list[Value], Field(min_length=1, max_length=MAX_VALUES)]

    @field_validator("values", mode="before")
    @classmethod
    def _plain_values(cls, value: Any, info: ValidationInfo) -> Any:
        return plain_number(cls, value, info)  # true or false in the list refused


class Trace(_Values):
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


def _normal_quantile(q: float) -> float:
    """The standard normal's quantile at ``q`` (Acklam's rational approximation, relative
    error below 1.2e-9; ``q`` is clamped to [1e-12, 1 - 1e-12])."""
    q = min(max(q, 1e-12), 1 - 1e-12)
    a = (-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.3577518672690,
         -30.66479806614716, 2.506628277459239)  # fmt: skip
    b = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972,
         -13.28068155288572)  # fmt: skip
    c = (-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734,
         4.374664141464968, 2.938163982698783)  # fmt: skip
    d = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
    if q < 0.02425 or q > 1 - 0.02425:
        t = np.sqrt(-2 * np.log(q if q < 0.5 else 1 - q))
        x = (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) / (
            (((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1
        )
        return float(x if q < 0.5 else -x)
    r = q - 0.5
    t = r * r
    return float(
        (((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5])
        * r
        / (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1)
    )


LOGNORMAL_TAIL_Z = 3.719016485455709
"""Standard normal quantile of 0.9999: a lognormal's p99.99 (median x e^(3.72 sigma)) stands
for its longest draw where one is needed: a latency's bound here, a prompt's truncation in
marlaas.core.prompts (unless rl.max_prompt_tokens says otherwise)."""


def largest(dist: _Dist, tail: bool = False) -> float:
    """The largest value a distribution names, for the bounds of marlaas.core.limits: its
    constant, high end or largest value; a lognormal's median, or with ``tail`` its p99.99
    (its tail is unbounded: ``tail`` for a use that takes every draw whole, a latency, where
    a length is truncated at its cap)."""
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, LogNormal):
        return dist.median * math.exp(LOGNORMAL_TAIL_Z * dist.sigma) if tail else dist.median
    if isinstance(dist, Uniform):
        return dist.high
    return max(dist.values)


Distribution = Annotated[
    Constant | LogNormal | Uniform | Empirical | Trace, Field(discriminator="dist")
]
