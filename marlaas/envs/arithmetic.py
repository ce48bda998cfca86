"""Single-turn addition: "What is a+b? Answer with just the number." with a verifiable reward."""

from __future__ import annotations

import random

from marlaas.envs.base import Environment, StepResult, is_bare_number, parse_number

MAX_OPERAND = 10**9
"""The largest operand an arithmetic or calculator environment draws (max_operand)."""


class ArithmeticEnv(Environment):
    """Reward 1 for the right sum + `format_bonus` for a bare number.

    The answer is the number after the last '=', else the first number (see parse_number).

    Options: `max_operand` (int from 0 to 10^9, default 99), `format_bonus` (float from 0 to
    1, default 0.1).
    """

    options = ("max_operand", "format_bonus")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.max_operand: int = self._arg("max_operand", 99, int, 0, MAX_OPERAND)
        self.format_bonus: float = float(self._arg("format_bonus", 0.1, (int, float), 0, 1))
        self.answer: int | None = None

    async def reset(self, seed: int) -> str:
        """Draw a, b in [0, max_operand] from `seed`; return the question."""
        rng = random.Random(seed)
        a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
        self.answer = a + b
        return f"What is {a}+{b}? Answer with just the number."

    async def step(self, action: str) -> StepResult:
        """Score the answer; the episode ends after one turn."""
        if self.answer is None:
            raise RuntimeError("step() before reset()")
        value = parse_number(action)
        correct = value is not None and value == self.answer
        bare = is_bare_number(action)
        reward = float(correct) + (self.format_bonus if bare else 0.0)
        return StepResult("", reward, True, {"correct": correct, "bare_number": bare})
