"""Names in natural order: ``rollout/2`` before ``rollout/10``."""

from __future__ import annotations

import re


def natural_key(name: str) -> tuple:
    """Sort key that orders ``rollout/2`` before ``rollout/10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))
