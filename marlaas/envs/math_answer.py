"""Math answers checked by math-verify (as TRL's accuracy reward does): the reference and the
response are parsed (LaTeX, ``\\boxed{}``, plain numbers and expressions) and compared
symbolically, so ``\\frac{1}{2}``, ``0.5`` and ``$\\boxed{1/2}$`` agree."""

from __future__ import annotations

import threading

from marlaas.datasets import Problem
from marlaas.envs.answer import ANSWER_OPTIONS, AnswerEnv

TIMEOUT_S = 5
"""math-verify's limit on parsing and on comparing [s] (enforced with SIGALRM, so only on the
main thread; elsewhere there is none)."""


class MathEnv(AnswerEnv):
    """Reward 1 when math-verify finds the response's answer equal to the dataset's, plus the
    format reward. Options: those of every answer environment (see marlaas.envs.answer)."""

    options = ANSWER_OPTIONS

    @classmethod
    def check_runtime(cls) -> None:
        """math-verify must be installed."""
        _math_verify()

    def is_correct(self, response: str, problem: Problem) -> bool:
        """math-verify's verdict on (the reference, the response)."""
        mv = _math_verify()
        timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
        gold = mv.parse(problem.answer, parsing_timeout=timeout)
        if not gold:  # bare LaTeX (``\\sqrt{2}``): read it as inline math
            gold = mv.parse(f"${problem.answer}$", parsing_timeout=timeout)
        if all(isinstance(g, str) for g in gold):  # nothing but the text itself
            raise ValueError(f"{problem.source}: math-verify cannot read the answer "
                             f"{problem.answer[:80]!r} as math")  # fmt: skip
        answer = mv.parse(response, parsing_timeout=timeout)
        return bool(answer) and bool(mv.verify(gold, answer, timeout_seconds=timeout))


def _math_verify():
    try:
        import math_verify
    except ImportError:
        raise RuntimeError(
            "env 'math' needs math-verify: pip install 'marlaas[verifiers]'"
        ) from None
    return math_verify
