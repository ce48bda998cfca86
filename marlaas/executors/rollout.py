"""Data types exchanged by the generators, the environments and the trainer (torch-free).

Log-probabilities are natural-log probabilities of each token under the *untempered* policy
(softmax of the raw logits), whatever the sampling temperature: that is what vLLM v1 returns by
default (`logprobs_mode="raw_logprobs"`) and what the trainer computes, so the importance ratio
exp(logp_new - logp_old) is 1 for an unchanged adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Completion:
    """One sampled completion of one prompt."""

    prompt_ids: tuple[int, ...]
    """Token ids of the prompt as the engine saw it (special tokens included)."""
    completion_ids: tuple[int, ...]
    """Token ids sampled by the engine (the stop token included when one was sampled)."""
    logprobs: tuple[float, ...]
    """Log-probability [nats] of each completion token under the sampling adapter version."""
    text: str
    """Detokenized completion (special tokens skipped)."""
    finish_reason: str
    """"stop" (end-of-sequence or stop string) or "length" (max_new_tokens reached)."""
    adapter: str | None = None
    """Adapter (tenant/job) name the completion was sampled with; None for the base model."""
    version: int = -1
    """Adapter version the completion was sampled with (-1 for the base model)."""
    cached_tokens: int = 0
    """Prompt tokens the engine took from its prefix cache instead of computing them."""

    @property
    def num_tokens(self) -> int:
        """Number of completion tokens."""
        return len(self.completion_ids)


@dataclass(frozen=True, slots=True)
class TrainSample:
    """One scored completion, as the trainer consumes it."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    """Sampling log-probabilities [nats] of the completion tokens (the "old" policy)."""
    reward: float
    group_id: int | str
    """Samples of one prompt share a group id: advantages are computed within a group."""
    version: int
    """Adapter version the sample was generated with (for staleness and importance ratios)."""

    @classmethod
    def from_completion(
        cls, completion: Completion, reward: float, group_id: int | str
    ) -> TrainSample:
        """Build a sample from a completion, its reward and its group id."""
        return cls(
            prompt_ids=completion.prompt_ids,
            completion_ids=completion.completion_ids,
            logprobs=completion.logprobs,
            reward=float(reward),
            group_id=group_id,
            version=completion.version,
        )


@dataclass(frozen=True, slots=True)
class TrainStats:
    """What one training step did."""

    job: str
    version: int
    """Adapter version after the step."""
    loss: float
    """Loss of the step (marlaas.executors.grpo), mean over completion tokens."""
    samples: int
    tokens: int
    """Completion tokens trained on."""
    mean_reward: float
    mean_weight: float
    """Mean importance weight pi / mu = exp(logp - behaviour logp) over tokens, before
    truncation and before the update."""
    largest_weight: float
    """Largest importance weight over tokens, before truncation."""
    clip_fraction: float
    """Fraction of tokens whose weight was truncated, not clipped (they keep a gradient,
    weighted by the truncation; the name is PPO's, kept for rewards.csv and trackers)."""
    grad_norm: float
    """Global L2 gradient norm of the job's adapter, before clipping."""
    max_staleness: int = 0
    """Largest (trainer version - sample version) in the batch."""
    read_tokens: int = 0
    """Tokens its backward passes' forward passes read over its samples, prompts and
    completions, each shared beginning once where the prefix tree was used
    (marlaas.executors.token_layout); 0: not counted."""
    sample_tokens: int = 0
    """Tokens its samples hold, prompts and completions (what reading each whole would read)."""
    extra: dict = field(default_factory=dict)


class Generator(Protocol):
    """What the real executor (marlaas.executors.local) calls on one inference engine's
    generation backend (vLLM or HF+PEFT)."""

    async def generate(
        self,
        adapter: str | None,
        version: int,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[list[Completion]]:
        """Sample `n` completions per prompt with (adapter, version); groups in prompt order."""
        ...

    async def publish(self, adapter: str, version: int, adapter_dir: str) -> None:
        """Make adapter (name, version), saved in `adapter_dir`, available for generation."""
        ...

    async def retire(self, adapter: str, version: int) -> None:
        """Forget adapter (name, version); later requests for it fail."""
        ...

    async def resident(self) -> set[tuple[str, int]]:
        """The (adapter, version) pairs the engine itself holds now."""
        ...

    async def close(self) -> None:
        """Release the engine."""
        ...
