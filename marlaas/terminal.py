"""What the command line prints about failures: one line, printable, and signals as exceptions.

Everything echoed from user input (file names, job names, YAML values) may hold newlines,
ANSI escape sequences or other control characters; :func:`printable` escapes them, in this
one place, so an error can neither forge a second ``marlaas: error:`` line nor drive the
terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from marlaas import interrupts
from marlaas.interrupts import Interrupted as Interrupted  # where the CLI looks for it

MAX_ERROR_CHARS = 2000
"""Longest error line printed [characters]; longer ones are cut, saying how much was cut."""

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class UsageError(ValueError):
    """A command line argparse refuses (unknown option, bad value): one line, exit 2."""


def printable(text: str) -> str:
    """``text`` with every non-printable character (newlines, ESC and other C0/C1 controls,
    bidirectional overrides) written as a Python escape such as ``\\n`` or ``\\x1b``."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                       else f"\\U{code:08x}")  # fmt: skip
    return "".join(out)


def error_line(err: BaseException | str) -> str:
    """``marlaas: error: ...`` for an error: one line of printable characters, cut to
    :data:`MAX_ERROR_CHARS`."""
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename is not None else ""
        text = f"{where}{err.strerror}"
    else:
        text = str(err) or type(err).__name__
    return f"marlaas: error: {_one_line(text)}"


def warning_line(text: str) -> str:
    """``marlaas: warning: ...``: one line of printable characters, cut as an error is."""
    return f"marlaas: warning: {_one_line(text)}"


def print_refusal(outcome) -> None:
    """Say on stderr, in one warning line, that the scheduler refused a job (an ended job's
    :class:`marlaas.core.outcomes.JobOutcome`; others are not mentioned): the run goes on
    without it."""
    if outcome.state != "refused":
        return
    print(warning_line(f"job {outcome.name!r} refused: {outcome.reason}"), file=sys.stderr)


def _one_line(text: str) -> str:
    line = printable(text.strip())
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[:MAX_ERROR_CHARS]}... ({len(line) - MAX_ERROR_CHARS} more characters)"
    return line


@contextmanager
def on_signals() -> Iterator[None]:
    """For the block, SIGINT raises KeyboardInterrupt and SIGTERM :class:`Interrupted` in the
    main thread, never inside an import (:mod:`marlaas.interrupts`), so ``finally`` blocks
    clean up as for Ctrl-C. Outside the main thread, signals are left alone."""
    if not interrupts.take():
        yield
        return
    try:
        yield
    finally:
        interrupts.give_back()
