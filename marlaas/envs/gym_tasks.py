"""reasoning-gym's procedural tasks by name, scored by each task's own ``score_answer``.

``env: {name: reasoning_gym, args: {task: chain_sum, min_terms: 2, ...}}``: every option but
``task``, ``extract`` and the answer options (``instruction``, ``format_pattern``,
``format_reward``, see marlaas.envs.answer) is the task's configuration, checked by
reasoning-gym itself. A prompt is the task's question for the episode's seed; nothing is
downloaded.
"""

from __future__ import annotations

import re
from typing import Any

from marlaas.envs.answer import ANSWER_OPTIONS, FormatReward, compile_option
from marlaas.envs.base import Environment, StepResult

_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)


class ReasoningGymEnv(Environment):
    """Reward = the task's score of the answer (in [0, 1]) + the format reward. Correct: a
    score of 1. The answer: the first group of the last match of option ``extract`` (a
    regular expression; no match: the response is not scored), else the text inside the last
    ``<answer>...</answer>`` when there is one, else the stripped response."""

    options = None  # the task's own options; reasoning-gym refuses unknown ones

    @classmethod
    def check_runtime(cls) -> None:
        """reasoning-gym must be installed."""
        _gym()

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.task: str = self._arg("task", "", str)
        if not self.task:
            raise ValueError("ReasoningGymEnv: option 'task' is required (e.g. chain_sum)")
        self.instruction: str = self._arg("instruction", "", str)
        self.format = FormatReward(self)
        self.extract = compile_option(self._arg("extract", "", str), "extract")
        if self.extract is not None and self.extract.groups < 1:
            raise ValueError("ReasoningGymEnv: option 'extract' needs a group: (...)")
        self.config: dict[str, Any] = {
            k: v for k, v in self.args.items() if k not in ("task", "extract", *ANSWER_OPTIONS)
        }
        self._dataset(0)  # the task's name and configuration, checked by reasoning-gym
        self.entry: dict[str, Any] | None = None
        self.dataset = None

    def _dataset(self, seed: int):
        gym = _gym()
        try:
            return gym.create_dataset(self.task, seed=seed, size=1, **self.config)
        except (ValueError, TypeError, AssertionError, KeyError) as err:
            text = " ".join(str(err).split())[:300]
            raise ValueError(f"reasoning_gym task {self.task!r}: {text}") from None

    async def reset(self, seed: int) -> str:
        """The task's question for ``seed`` (with the instruction appended)."""
        self.dataset = self._dataset(seed)
        self.entry = self.dataset[0]
        question = self.entry["question"]
        return f"{question}\n\n{self.instruction}" if self.instruction else question

    async def step(self, action: str) -> StepResult:
        """Score the response with the task's ``score_answer``; one turn."""
        if self.entry is None:
            raise RuntimeError("step() before reset()")
        answer = self._answer(action)
        score = 0.0
        if answer is not None:
            score = float(self.dataset.score_answer(answer=answer, entry=self.entry) or 0.0)
        formatted, bonus = self.format.score(action)
        reward = score + bonus
        return StepResult("", reward, True, {"correct": score >= 1.0, "formatted": formatted})

    def _answer(self, action: str) -> str | None:
        """The answer in ``action`` (see the class docstring); None: ``extract`` found none."""
        if self.extract is not None:
            matches = list(self.extract.finditer(action))
            return (matches[-1].group(1) or "").strip() if matches else None
        tagged = list(_ANSWER_TAG.finditer(action))
        return tagged[-1].group(1).strip() if tagged else action.strip()


def _gym():
    try:
        import reasoning_gym
    except ImportError:
        raise RuntimeError(
            "env 'reasoning_gym' needs reasoning-gym: pip install --no-deps reasoning-gym==0.1.25 "
            "and pip install 'marlaas[verifiers]' (docs/datasets.md)"
        ) from None
    return reasoning_gym
