"""The environment of a child Python that imports marlaas from a given folder."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def python_path_first(*folders: Path | str, base: Mapping[str, str] | None = None) -> dict:
    """``base`` (``os.environ`` when None) with ``folders`` put first on ``PYTHONPATH``, before
    what it already holds: packages installed with ``pip --target`` or a user's own folders on
    ``PYTHONPATH`` stay importable in the child, as they are in this process."""
    env = dict(os.environ if base is None else base)
    held = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, folders), *held])
    return env
