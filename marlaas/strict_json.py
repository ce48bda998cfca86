"""JSON as a user's file or request gives it, read strictly: an object with a key twice, or
nesting past the decoder's depth, is a ValueError (not the last value kept, nor a
RecursionError traceback)."""

from __future__ import annotations

import json
import math
from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object names a key twice."""


class TooDeepError(ValueError):
    """JSON nested past the decoder's depth."""


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses an object with a key twice and nesting too deep for the
    decoder (ValueError, one line)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise TooDeepError("nested too deeply") from None


def non_finite(value: Any, where: str) -> str | None:
    """The dotted path, from ``where``, of the first NaN or infinite number in ``value`` (dicts
    and lists within), else None: JSON carries neither, and a reader that took one (Python's
    ``json``, as its ``NaN`` and ``Infinity``) cannot write it back as JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, inner in items:
        found = non_finite(inner, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found is not None:
            return found
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; DuplicateKeyError for a key it has twice."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(f"duplicate key {key[:80]!r}")
        obj[key] = value
    return obj


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` is not Unicode text (None: it is): a lone surrogate (``'\\ud800'``, from a
    JSON escape or a wrongly decoded byte), which has no UTF-8 encoding, so no tokenizer takes
    it."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"a lone surrogate {text[err.start]!r} at character {err.start}"
    return None
