"""Each prompt group's own prompt length, and its samples' response lengths [tokens].

A group's samples share one prompt, as in GRPO. Its length is drawn from the job's
``prompt_tokens`` with ``numpy.random.default_rng([seed, job index, group])``: the same for a
workload, seed, job and group in every run, known to the core before the group starts (it
reserves the group's KV cache for it) and to the simulator (the prefill and the context of
the group's first turn). It is truncated at :func:`prompt_cap`, the longest prompt the job
can have, for which the feasibility check sizes an engine.

Paired traces. When ``prompt_tokens`` and ``response_tokens`` are ``trace`` distributions of
one file (same path and format: one row per request, in file order), a group draws a row of
the trace, whose prompt is the group's. Each sample's response is the response of a row drawn
(with the run's generator) from the group's *prompt bucket*: the trace's rows sorted by
prompt length and cut into equal parts. So the samples of a group differ, the responses
follow the trace's distribution, and so does their correlation with the prompt, up to what
lies within a bucket (at most ``1 / MAX_BUCKETS`` of the rows).

Response lengths are common random numbers (:mod:`marlaas.core.draws`): a group's turn draws
the same lengths in every run of the workload and seed, whatever the schedule.
"""

from __future__ import annotations

import math

import numpy as np

from marlaas.core.distributions import Constant, LogNormal, Trace, Uniform
from marlaas.core.draws import RESPONSE_STREAM, Draws
from marlaas.core.job_spec import JobSpec
from marlaas.core.limits import MAX_TOKENS
from marlaas.core.seeds import SeededBlock

LOGNORMAL_TAIL_Z = 3.719016485455709
"""Standard normal quantile of 0.9999: a lognormal prompt is truncated at its p99.99
(median x e^(3.72 sigma)) unless rl.max_prompt_tokens says otherwise."""
MAX_BUCKETS = 100
"""Prompt buckets of a paired trace (fewer when a bucket would hold < MIN_BUCKET_ROWS)."""
MIN_BUCKET_ROWS = 16
"""Rows a bucket holds at least (a trace of fewer rows is one bucket)."""


def longest_prompt(spec: JobSpec) -> int:
    """The longest prompt ``spec.prompt_tokens`` gives [tokens]: a constant, the high end,
    the largest value, or a lognormal's p99.99; at most MAX_TOKENS."""
    dist = spec.prompt_tokens
    if isinstance(dist, Constant):
        top = dist.value
    elif isinstance(dist, Uniform):
        top = dist.high
    elif isinstance(dist, LogNormal):
        top = dist.median * math.exp(LOGNORMAL_TAIL_Z * dist.sigma)
    else:
        top = max(dist.values)
    return int(min(round(top), MAX_TOKENS))


def prompt_cap(spec: JobSpec) -> int:
    """The longest prompt a group of the job can get [tokens]: rl.max_prompt_tokens when it
    is set and shorter, else :func:`longest_prompt`."""
    cap = spec.rl.max_prompt_tokens
    return longest_prompt(spec) if cap is None else min(cap, longest_prompt(spec))


def paired(spec: JobSpec) -> bool:
    """Whether the job's prompt and response lengths are drawn as pairs: both ``trace``
    distributions of the same file and format, the prompt and response columns."""
    prompt, response = spec.prompt_tokens, spec.response_tokens
    return (
        isinstance(prompt, Trace)
        and isinstance(response, Trace)
        and (prompt.path, prompt.format) == (response.path, response.format)
        and (prompt.column, response.column) == ("prompt", "response")
        and len(prompt.values) == len(response.values)
    )


class GroupLengths:
    """One job's prompt length per group and response lengths per sample."""

    def __init__(self, spec: JobSpec, seed: int, job: int) -> None:
        self.spec = spec
        self.seed, self.job = seed, job
        self.cap = prompt_cap(spec)
        """The longest prompt a group gets [tokens]."""
        dist = spec.prompt_tokens
        self._constant = min(round(dist.value), self.cap) if isinstance(dist, Constant) else None
        values = getattr(dist, "values", None)
        self._values = np.asarray(values, dtype=float) if values else None
        self._pairs = _Buckets(self._values, spec.response_tokens.values) if paired(spec) else None  # type: ignore[union-attr,arg-type]
        self._last = (-1, 0, -1)
        """(group, prompt, row) of the last group asked for (asked again and again)."""
        self._seeded = SeededBlock([seed, job])
        """Each group's generator, default_rng([seed, job, group]), made in blocks."""
        self.draws = Draws(seed, job, spec.rl.group_size)
        """The job's common random numbers (response lengths here, environment waits in
        the simulator)."""

    def prompt(self, group: int) -> int:
        """Group ``group``'s prompt length [tokens], the same for each of its samples."""
        return self._draw(group)[1]

    def responses(self, group: int, turn: int, n: int) -> np.ndarray:
        """``n`` samples' response lengths [tokens] for turn ``turn`` of group ``group``, the
        same in every run: from the group's prompt bucket for a paired trace, else from
        response_tokens."""
        if self._pairs is None:
            return self.draws.row(RESPONSE_STREAM, turn, group, n, self.spec.response_tokens.sample)
        uniforms = self.draws.row(RESPONSE_STREAM, turn, group, n, _uniforms)
        return self._pairs.responses(uniforms, self._draw(group)[2])

    def _draw(self, group: int) -> tuple[int, int, int]:
        """(group, prompt length, trace row or -1)."""
        if self._last[0] == group:
            return self._last
        if self._constant is not None:
            self._last = (group, self._constant, -1)
            return self._last
        rng = self._seeded.rng(group)
        if self._values is not None:
            row = int(rng.integers(len(self._values)))
            drawn = self._values[row]
        else:
            row, drawn = -1, float(self.spec.prompt_tokens.sample(rng, 1)[0])
        self._last = (group, int(min(max(round(drawn), 0), self.cap)), row)
        return self._last


class _Buckets:
    """A paired trace's rows cut into prompt buckets of equal size."""

    def __init__(self, prompts: np.ndarray, responses: list[float]) -> None:
        n = len(prompts)
        count = max(1, min(MAX_BUCKETS, n // MIN_BUCKET_ROWS))
        self.order = np.argsort(prompts, kind="stable")
        """Rows by prompt length."""
        rank = np.empty(n, dtype=np.int64)
        rank[self.order] = np.arange(n)
        self.bounds = np.arange(count + 1) * n // count
        """Bucket k holds the rows of ranks bounds[k] .. bounds[k + 1] - 1."""
        self.bucket = np.searchsorted(self.bounds, rank, side="right") - 1
        """Each row's bucket."""
        self.response = np.asarray(responses, dtype=float)

    def responses(self, uniforms: np.ndarray, row: int) -> np.ndarray:
        """A response length per uniform in [0, 1): a row of ``row``'s prompt bucket each."""
        bucket = self.bucket[row]
        low, high = self.bounds[bucket], self.bounds[bucket + 1]
        ranks = low + (uniforms * (high - low)).astype(np.int64)
        return self.response[self.order[ranks]]


def _uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniforms in [0, 1)."""
    return rng.random(n)
