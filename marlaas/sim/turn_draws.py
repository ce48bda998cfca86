"""One job's simulated group turns: each turn's response lengths [tokens] and environment
waits [s], drawn as common random numbers (:mod:`marlaas.sim.draws`).

A group's turn draws the same lengths and waits in every run of the workload and seed,
whatever the schedule. The core never sees them: it decides with the prompt lengths
(:mod:`marlaas.core.prompts`) and the estimates made from the job's spec.

Paired traces. When ``prompt_tokens`` and ``response_tokens`` are ``trace`` distributions of
one file (same path and format: one row per request, in file order), a group's prompt is a
row of the trace (:meth:`~marlaas.core.prompts.PromptLengths.row`). Each sample's response is
the response of a row drawn from the group's *prompt bucket*: the trace's rows sorted by
prompt length and cut into equal parts. So the samples of a group differ, the responses
follow the trace's distribution, and so does their correlation with the prompt, up to what
lies within a bucket (at most ``1 / MAX_BUCKETS`` of the rows).
"""

from __future__ import annotations

import numpy as np

from marlaas.core.distributions import Trace
from marlaas.core.job_spec import JobSpec
from marlaas.core.prompts import PromptLengths
from marlaas.sim.draws import ALIKE_STREAM, ENV_STREAM, RESPONSE_STREAM, Draws

MAX_BUCKETS = 100
"""Prompt buckets of a paired trace (fewer when a bucket would hold < MIN_BUCKET_ROWS)."""
MIN_BUCKET_ROWS = 16
"""Rows a bucket holds at least (a trace of fewer rows is one bucket)."""


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


class TurnDraws:
    """One job's response lengths per sample [tokens] and environment waits [s], per group
    turn: the same for a seed, job, turn and group in every run."""

    def __init__(self, spec: JobSpec, seed: int, job: int) -> None:
        self.spec = spec
        self.draws = Draws(seed, job, spec.rl.group_size)
        """The job's common random numbers (response lengths, environment waits)."""
        self._pairs = _pairs(spec, seed, job)
        """A paired trace's prompt buckets and the job's prompt rows (None: not paired)."""

    def responses(self, group: int, turn: int, n: int) -> np.ndarray:
        """``n`` samples' response lengths [tokens] for turn ``turn`` of group ``group``, the
        same in every run: from the group's prompt bucket for a paired trace, else from
        response_tokens."""
        if self._pairs is None:
            return self.draws.row(RESPONSE_STREAM, turn, group, n, self.spec.response_tokens.sample)
        buckets, prompts = self._pairs
        uniforms = self.draws.row(RESPONSE_STREAM, turn, group, n, _uniforms)
        return buckets.responses(uniforms, prompts.row(group))

    def env_waits(self, group: int, turn: int, n: int) -> np.ndarray:
        """``n`` samples' environment waits [s] after turn ``turn`` of group ``group``, the
        same in every run (from env.latency_s)."""
        return self.draws.row(ENV_STREAM, turn, group, n, self.spec.env.latency_s.sample)

    def alike(self, group: int) -> bool:
        """Whether group ``group``'s samples all earn the same reward, with chance
        env.alike_groups, the same in every run."""
        chance = self.spec.env.alike_groups
        return (
            chance > 0 and float(self.draws.row(ALIKE_STREAM, 0, group, 1, _uniforms)[0]) < chance
        )


def _pairs(spec: JobSpec, seed: int, job: int) -> tuple[_Buckets, PromptLengths] | None:
    """A paired trace's prompt buckets and the job's prompts (which row each group's is)."""
    prompt, response = spec.prompt_tokens, spec.response_tokens
    if not (isinstance(prompt, Trace) and isinstance(response, Trace) and paired(spec)):
        return None
    buckets = _Buckets(np.asarray(prompt.values, dtype=float), response.values)
    return buckets, PromptLengths(spec, seed, job)


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
