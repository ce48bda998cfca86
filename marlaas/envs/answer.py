"""Verifiers of a dataset's answers: one turn, the response checked against the problem's
reference answer, with an optional reward for the response's format.

Options of every such environment: ``instruction`` (text appended to each prompt, after a
blank line; default none), ``format_pattern`` (a regular expression the whole stripped
response must match for the format reward) and ``format_reward`` (added when it matches;
from 0 to 1, default 0). Reward = 1 for a correct answer + the format reward.
"""

from __future__ import annotations

import abc
import re
from typing import ClassVar

from marlaas.datasets import Problem
from marlaas.envs.base import Environment, StepResult

ANSWER_OPTIONS = ("instruction", "format_pattern", "format_reward")
"""The options every answer-checking environment takes."""


class AnswerEnv(Environment):
    """A dataset problem per episode, scored by :meth:`is_correct`; subclasses add options."""

    needs_dataset: ClassVar[bool] = True

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.instruction: str = self._arg("instruction", "", str)
        self.format = FormatReward(self)
        self.problem: Problem | None = None

    async def reset(self, seed: int) -> str:
        """Not for these environments: their prompts are a dataset's."""
        raise TypeError(f"{type(self).__name__} takes its prompts from the job's dataset")

    async def reset_problem(self, problem: Problem) -> str:
        """Start an episode on ``problem``; the prompt with the instruction appended."""
        self.problem = problem
        return f"{problem.prompt}\n\n{self.instruction}" if self.instruction else problem.prompt

    async def step(self, action: str) -> StepResult:
        """Score the response; one turn."""
        if self.problem is None:
            raise RuntimeError("step() before reset_problem()")
        correct = self.is_correct(action, self.problem)
        formatted, bonus = self.format.score(action)
        reward = float(correct) + bonus
        return StepResult("", reward, True, {"correct": correct, "formatted": formatted})

    @abc.abstractmethod
    def is_correct(self, response: str, problem: Problem) -> bool:
        """Whether ``response`` answers ``problem``."""


class FormatReward:
    """An environment's ``format_pattern`` and ``format_reward`` options."""

    def __init__(self, env: Environment) -> None:
        self.pattern = compile_option(env._arg("format_pattern", "", str), "format_pattern")
        self.reward = float(env._arg("format_reward", 0.0, (int, float), 0, 1))
        if self.reward and self.pattern is None:
            raise ValueError(f"{type(env).__name__}: format_reward needs a format_pattern")

    def score(self, response: str) -> tuple[bool, float]:
        """(whether the stripped response matches the pattern, the reward it earns)."""
        formatted = bool(self.pattern and self.pattern.fullmatch(response.strip()))
        return formatted, self.reward if formatted else 0.0


def compile_option(pattern: str, option: str) -> re.Pattern[str] | None:
    """Option ``option``'s regular expression (``.`` matches newlines too); None for ""."""
    if not pattern:
        return None
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ValueError(f"option {option!r}: not a regular expression ({err})") from None


def normalized(text: str, case_sensitive: bool) -> str:
    """``text`` with runs of whitespace made one space, stripped (and case-folded)."""
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


class ExactMatchEnv(AnswerEnv):
    """Correct when the response (or the last match of ``extract``'s first group in it)
    equals the answer, whitespace runs made one space and, unless ``case_sensitive``, case
    ignored.

    Options: those of every answer environment, ``extract`` (a regular expression with a
    group; default: the whole response), ``case_sensitive`` (default false).
    """

    options = (*ANSWER_OPTIONS, "extract", "case_sensitive")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.extract = compile_option(self._arg("extract", "", str), "extract")
        if self.extract is not None and self.extract.groups < 1:
            raise ValueError("ExactMatchEnv: option 'extract' needs a group: (...)")
        self.case_sensitive: bool = self._arg("case_sensitive", False, bool)

    def is_correct(self, response: str, problem: Problem) -> bool:
        """The (extracted) response equals the answer."""
        if self.extract is not None:
            matches = list(self.extract.finditer(response))
            if not matches:
                return False
            response = matches[-1].group(1) or ""
        return normalized(response, self.case_sensitive) == normalized(
            problem.answer, self.case_sensitive
        )


class RegexEnv(AnswerEnv):
    """Correct when the whole stripped response matches the problem's answer, read as a
    regular expression (``search``: anywhere in the response).

    Options: those of every answer environment, ``search`` (default false).
    """

    options = (*ANSWER_OPTIONS, "search")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.search: bool = self._arg("search", False, bool)

    @classmethod
    def check_reference_answer(cls, answer: str) -> None:
        """A ValueError when ``answer`` is no regular expression (checked on load)."""
        answer_pattern(answer)

    def is_correct(self, response: str, problem: Problem) -> bool:
        """The response matches the answer's pattern."""
        try:
            pattern = answer_pattern(problem.answer)
        except ValueError as err:  # a problem that was not checked on load
            raise ValueError(f"{problem.source}: the answer is {err}") from None
        match = pattern.search if self.search else pattern.fullmatch
        return match(response.strip()) is not None


def answer_pattern(answer: str) -> re.Pattern[str]:
    """A ``regex`` problem's answer compiled (``.`` matches newlines too); a ValueError
    saying why when it is no regular expression."""
    try:
        return re.compile(answer, re.DOTALL)
    except re.error as err:
        raise ValueError(f"not a regular expression ({err})") from None
    except (OverflowError, RecursionError) as err:  # a{4294967296}, thousands of nested groups
        raise ValueError(f"not a regular expression this engine compiles ({err})") from None
