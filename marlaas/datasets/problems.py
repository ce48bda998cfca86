"""One problem of a prompt dataset: the prompt text and the answer its verifier checks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """A row of a prompt dataset."""

    prompt: str
    """The user message (the chat template, where the model has one, wraps it)."""
    answer: str
    """The reference answer, as text (a number, a LaTeX expression, a pattern...)."""
    source: str = ""
    """Where it came from (``file, row N``), for error messages."""
