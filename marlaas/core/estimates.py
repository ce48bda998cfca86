"""What the core can estimate about a job's remaining work from its spec alone.

Every figure here comes from the job's length and latency distributions and its settings
(group size, prompts per step, turns, max_new_tokens), never from the simulator's draws or a
cost model. They are computed once, when the job is submitted, and kept on the job
(:class:`~marlaas.core.jobs.JobState`); a policy reads them through its view:

- a group turn's tokens: the mean (as srtf has always used it) and the variance, of
  ``group_size`` responses each truncated at max_new_tokens (from a quantile grid of the
  response distribution), so that the remaining tokens have a quantile as well as a mean
  (many independent turns: the normal approximation);
- a step's time when the job runs alone [s]: its critical path, which is one turn of the
  step's slowest group (the longest of all the step's responses, decoded one token after the
  other at :data:`DECODE_S_PER_TOKEN`, plus the slowest group's environment wait) and the
  other turns of a typical slowest group (the longest of one group's responses and
  environment waits). Steps overlap when the staleness bound allows, so this is an upper
  estimate; policies use it to rank jobs, not to predict a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from marlaas.core.distributions import _Dist
from marlaas.core.job_spec import JobSpec

DECODE_S_PER_TOKEN = 0.004
"""Seconds to decode one more token of a sequence in a busy engine: an assumption for the
estimate only (no cost model in the core), about 2/3 of the h100-7b profile's 6 ms decode
step (Vidur's Llama-2-7B fit): the critical paths it gives are within 0.6-1.4x of paper-32's
jobs simulated alone (docs/policies.md)."""

GRID = 64
"""Points of the quantile grid a truncated response length's mean and variance come from."""


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """A job's per-turn tokens and per-step alone time, from its spec."""

    turn_tokens_var: float
    """Variance of the tokens one group turn generates [tokens^2]."""
    step_alone_s: float
    """A step's critical path when the job runs alone [s] (see the module's docstring)."""

    @classmethod
    def of(cls, spec: JobSpec) -> WorkEstimate:
        """The estimates of ``spec``."""
        rl, responses, waits = spec.rl, spec.response_tokens, spec.env.latency_s
        cap = float(rl.max_new_tokens)
        draws = [min(responses.quantile((k + 0.5) / GRID), cap) for k in range(GRID)]
        mean = sum(draws) / GRID
        variance = sum((d - mean) ** 2 for d in draws) / GRID
        samples, groups = rl.group_size, rl.group_size * rl.prompts_per_step
        group_turn = _longest(responses, samples, cap) * DECODE_S_PER_TOKEN + waits.quantile(
            1 - 1 / (samples + 1)
        )
        step_turn = _longest(responses, groups, cap) * DECODE_S_PER_TOKEN + waits.quantile(
            1 - 1 / (groups + 1)
        )
        step = max(step_turn, group_turn) + (rl.turns - 1) * group_turn
        return cls(samples * variance, step)


def _longest(responses: _Dist, draws: int, cap: float) -> float:
    """The expected longest of ``draws`` responses [tokens], truncated at ``cap``."""
    return min(responses.quantile(1 - 1 / (draws + 1)), cap)


def upper_tokens(mean: float, variance: float, z: float = 1.2815515655446004) -> float:
    """A high quantile of a sum of many independent turns (the normal approximation; ``z``:
    the standard normal's quantile, 1.28 = the 90th percentile) [tokens]."""
    return mean + z * math.sqrt(max(variance, 0.0))
