"""Names in natural order: ``rollout/2`` before ``rollout/10``."""

from __future__ import annotations

import re


def natural_key(name: str) -> tuple:
    """Sort key that orders ``rollout/2`` before ``rollout/10``: the name's runs of ASCII digits
    as numbers, between its other parts as text (so every key alternates text and number, and
    any two compare). A character that is a digit to ``str.isdigit`` but not to ``int``
    (``'²'``, in an event log's job name) is text."""
    parts = re.split(r"([0-9]+)", str(name))
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))
