"""Multi-turn tool use: the model may call a calculator (`CALC: <expr>`) before it answers."""

from __future__ import annotations

import random
import re

from marlaas.core.limits import MAX_TURNS
from marlaas.envs.arithmetic import MAX_OPERAND
from marlaas.envs.base import Environment, StepResult, parse_number
from marlaas.envs.safe_eval import UnsafeExpression, safe_eval

_CALL = re.compile(r"CALC:\s*(.+)")


class CalculatorEnv(Environment):
    """Compute a*b+c with an optional calculator tool; reward 1 for the right final answer.

    A turn containing `CALC: <expr>` gets `RESULT: <value>` back and the episode goes on; any
    other turn is the final answer (the number after its last "="). After `max_turns` turns the
    episode ends with reward 0. A tool's latency is the workload's `env.latency_s`.
    Options: `max_turns` (int from 1 to 256, default 4), `max_operand` (int from 2 to 10^9,
    default 99).
    """

    options = ("max_turns", "max_operand")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.max_turns: int = self._arg("max_turns", 4, int, 1, MAX_TURNS)
        self.max_operand: int = self._arg("max_operand", 99, int, 2, MAX_OPERAND)
        self.answer: int | None = None
        self.turns = 0
        self.tool_calls = 0

    async def reset(self, seed: int) -> str:
        """Draw the problem from `seed`; return the instructions and the question."""
        rng = random.Random(seed)
        a, b, c = (rng.randint(2, self.max_operand) for _ in range(3))
        self.answer, self.turns, self.tool_calls = a * b + c, 0, 0
        return (
            f"What is {a}*{b}+{c}? You may use a calculator by writing 'CALC: <expression>' "
            "on its own turn. When you know the result, reply with just the number."
        )

    async def step(self, action: str) -> StepResult:
        """A tool call (observation = result, not done) or the final answer (reward, done)."""
        if self.answer is None:
            raise RuntimeError("step() before reset()")
        self.turns += 1
        call = _CALL.search(action)
        if call is not None:
            self.tool_calls += 1
            try:
                result = f"RESULT: {safe_eval(call.group(1))}"
            except UnsafeExpression as exc:
                result = f"ERROR: {exc}"
            if self.turns >= self.max_turns:
                return StepResult("", 0.0, True, self._info(False, "max_turns"))
            return StepResult(result + "\n", 0.0, False, self._info(False, "tool"))
        value = parse_number(action)
        correct = value is not None and value == self.answer
        return StepResult("", float(correct), True, self._info(correct, "answer"))

    def _info(self, correct: bool, kind: str) -> dict:
        return {"correct": correct, "turn_kind": kind, "tool_calls": self.tool_calls}
