"""A pydantic validation error as one line that names each bad field by its path."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

MAX_PROBLEMS_SHOWN = 5
"""Problems named in one error line; the rest are counted."""


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line naming each problem (the first few): ``source: jobs[2].rl.steps: Input should
    be greater than 0 (got -3); ...``."""
    problems: dict[tuple[str, str], list[str]] = {}
    for problem in err.errors():
        path = shape = ""  # shape: the path with every list index as [*]
        for part in problem["loc"]:
            if isinstance(part, int):
                path, shape = path + f"[{part}]", shape + "[*]"
            elif not str(part).startswith(("function-", "tagged-union")):
                path += f".{part}" if path else str(part)
                shape += f".{part}" if shape else str(part)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown field"
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {short_repr(got)})"
        problems.setdefault((shape, message + shown), []).append(path)
    lines = []
    for (_, message), paths in problems.items():
        alike = f" (and {len(paths) - 1} more like it)" if len(paths) > 1 else ""
        lines.append(f"{paths[0]}: {message}{alike}" if paths[0] else message + alike)
    more = len(lines) - MAX_PROBLEMS_SHOWN
    text = "; ".join(lines[:MAX_PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return f"{source}: {text}"


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters with the length said when longer."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
