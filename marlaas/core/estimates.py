"""What the core can estimate about a job's remaining work from its spec alone.

Every figure here comes from the job's length and latency distributions and its settings
(group size, prompts per step, turns, max_new_tokens), never from the simulator's draws or a
cost model. They are computed once, when the job is submitted, and kept on the job
(:class:`~marlaas.core.jobs.JobState`); a policy reads them through its view:

- a group turn's tokens: the mean (as srtf has always used it) and the variance, of
  ``group_size`` responses each truncated at max_new_tokens (from a quantile grid of the
  response distribution), so that the remaining tokens have a quantile as well as a mean
  (many independent turns: the normal approximation);
- a step's time when the job runs alone on its cluster (:class:`AloneCluster`) [s]: its
  critical path. Its generation is one turn of the step's slowest group (the longest of all
  the step's responses, decoded one token after the other at :data:`DECODE_S_PER_TOKEN`,
  plus the slowest group's environment wait) and the other turns of a typical slowest group
  (the longest of one group's responses and environment waits), or, where the engines have
  room for fewer groups than a step has (each turn reserving its context so far and
  max_new_tokens a sample), a typical group's turn as many times as the groups take turns
  for the room, turn by turn. Its training reads each
  sample's whole context (prompt, responses, tool observations) at
  :data:`TRAIN_TOKENS_PER_DEVICE_S` on each device of the widest trainer. The step takes
  the longer of the two where the staleness bound lets the next step's generation overlap
  this one's training (a bound of 1 or more), both one after the other where it does not
  (0), or where generation and training take turns on the devices (colocated placement,
  one processor). A ranking figure, not a clock: over 315 jobs of 18 workloads it is 0.41-1.86x
  each job's simulated alone time (benchmarks/alone_estimates.py); it does not see a decode
  slowed by long contexts or by a shared processor, nor a training step's fixed costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from marlaas.core.distributions import _Dist
from marlaas.core.job_spec import JobSpec

DECODE_S_PER_TOKEN = 0.004
"""Seconds to decode one more token of a sequence in a busy engine: an assumption for the
estimate only (no cost model in the core), about 2/3 of the h100-7b profile's 6 ms decode
step (Vidur's Llama-2-7B fit): the critical paths it gives are within 0.84-1.51x of paper-32's
jobs simulated alone (docs/policies.md)."""

TRAIN_TOKENS_PER_DEVICE_S = 12_500.0
"""Context tokens one trainer device runs a LoRA forward and backward pass over per second:
an assumption for the estimate only, the h100-7b profile's train_tokens_per_s. Without it the
estimate left training out, and a job whose steps are bound by their training (many long
multi-turn samples a step) was estimated at 0.72x its simulated alone time (a tool job of 128
prompts a step, 31 steps: 1,465 s against 2,046 s; 1,912 s with it; docs/policies.md)."""

GRID = 64
"""Points of the quantile grid a truncated response length's mean and variance come from."""


@dataclass(frozen=True, slots=True)
class AloneCluster:
    """What a job running alone has of its cluster, for its alone-time estimate: the
    engines its groups spread over and their room, and the devices a training step is
    divided over. The default has room for any number of groups and a one-device trainer
    (a job outside a scheduler)."""

    engines: int = 0
    """Inference engines (0: room for every group of a step at once)."""
    max_seqs: int = 0
    """Sequences one engine runs at once."""
    kv_tokens: int = 0
    """KV tokens one engine holds [tokens]."""
    trainer_devices: int = 1
    """Devices the widest trainer divides a step over (Cluster.step_devices)."""
    exclusive: bool = False
    """Generation and training take turns on the devices (Cluster.exclusive: colocated
    placement, or one processor without overlap): a step's training never overlaps the next
    step's generation."""

    def groups_at_once(self, group_size: int, group_reserve: float) -> float:
        """How many groups of ``group_size`` samples reserving ``group_reserve`` KV tokens
        the engines run at once (infinite without engines; at least 1)."""
        if self.engines <= 0:
            return math.inf
        per_engine = min(self.kv_tokens // max(group_reserve, 1.0), self.max_seqs // group_size)
        return max(self.engines * per_engine, 1.0)


OUTSIDE_A_SCHEDULER = AloneCluster()
"""What a job built outside a scheduler is estimated on: room for every group at once and a
one-device trainer (the scheduler gives each job its own cluster's, Cluster.alone)."""


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """A job's per-turn tokens and per-step alone time, from its spec."""

    turn_tokens_var: float
    """Variance of the tokens one group turn generates [tokens^2]."""
    step_alone_s: float
    """A step's critical path when the job runs alone [s] (see the module's docstring)."""

    @classmethod
    def of(
        cls,
        spec: JobSpec,
        cluster: AloneCluster = OUTSIDE_A_SCHEDULER,
        max_staleness: int = 1,
        shares_prompt: bool = False,
    ) -> WorkEstimate:
        """The estimates of ``spec`` alone on ``cluster`` under the enforced staleness bound
        ``max_staleness``; ``shares_prompt``: a group's samples hold their prompt's KV once
        (JobState.shares_prompt)."""
        rl, responses, waits = spec.rl, spec.response_tokens, spec.env.latency_s
        cap = float(rl.max_new_tokens)
        draws = [min(responses.quantile((k + 0.5) / GRID), cap) for k in range(GRID)]
        mean = sum(draws) / GRID
        variance = sum((d - mean) ** 2 for d in draws) / GRID
        samples, sequences = rl.group_size, rl.group_size * rl.prompts_per_step
        group_turn = _longest(responses, samples, cap) * DECODE_S_PER_TOKEN + waits.quantile(
            1 - 1 / (samples + 1)
        )
        step_turn = _longest(responses, sequences, cap) * DECODE_S_PER_TOKEN + waits.quantile(
            1 - 1 / (sequences + 1)
        )
        prompt, observation = spec.prompt_tokens.mean(), spec.env.observation_tokens
        # each turn a group reserves its context (its prompt, and the responses and
        # observations of the turns before) and max_new_tokens a sample; groups that do not
        # fit at once take turns, each a whole group turn. A group frees its room while its
        # environment waits, but decode alone at DECODE_S_PER_TOKEN fit worse: a long-context
        # decode is slower than 4 ms a token (rand-7's code-02, 128 prompts of up to 4,096
        # tokens on 7 engines: 4,701 s with the waits, 2,476 s without, 4,339 s simulated)
        held = prompt if shares_prompt else samples * prompt
        waves = sum(
            rl.prompts_per_step
            / cluster.groups_at_once(samples, held + samples * (t * (mean + observation) + cap))
            for t in range(rl.turns)
        )
        generation = max(
            max(step_turn, group_turn) + (rl.turns - 1) * group_turn,
            waves * group_turn,
        )
        context = prompt + rl.turns * mean + (rl.turns - 1) * observation
        training = sequences * context / (TRAIN_TOKENS_PER_DEVICE_S * cluster.trainer_devices)
        overlap = max_staleness >= 1 and not cluster.exclusive
        step = max(generation, training) if overlap else generation + training
        return cls(samples * variance, step)


def _longest(responses: _Dist, draws: int, cap: float) -> float:
    """The expected longest of ``draws`` responses [tokens], truncated at ``cap``."""
    return min(responses.quantile(1 - 1 / (draws + 1)), cap)


def upper_tokens(mean: float, variance: float, z: float = 1.2815515655446004) -> float:
    """A high quantile of a sum of many independent turns (the normal approximation; ``z``:
    the standard normal's quantile, 1.28 = the 90th percentile) [tokens]."""
    return mean + z * math.sqrt(max(variance, 0.0))
