"""Toy task for the tiny test model: emit the tenant's target character as often as possible."""

from __future__ import annotations

import random
import string

from marlaas.core.limits import MAX_TOKENS
from marlaas.envs.base import Environment, StepResult


class TargetCharEnv(Environment):
    """Reward = fraction of generated characters equal to `target` (0 for an empty answer).

    Options: `target` (one character, default "a"), `prompt_len` (characters of the random
    lowercase prompt, from 1 to 2^20, default 4). A slow verifier is the workload's `env.latency_s`.
    """

    options = ("target", "prompt_len")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.target: str = self._arg("target", "a", str)
        if len(self.target) != 1:
            raise ValueError(f"TargetCharEnv: 'target' must be one character, got {self.target!r}")
        self.prompt_len: int = self._arg("prompt_len", 4, int, 1, MAX_TOKENS)

    async def reset(self, seed: int) -> str:
        """A random lowercase prompt of `prompt_len` characters drawn from `seed`."""
        rng = random.Random(seed)
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(self.prompt_len))

    async def step(self, action: str) -> StepResult:
        """Score the completion; one turn."""
        return StepResult("", target_char_reward(action, self.target), True, {})


def target_char_reward(text: str, target: str) -> float:
    """Fraction of the characters of `text` that equal `target` (0.0 for empty text)."""
    return text.count(target) / len(text) if text else 0.0
