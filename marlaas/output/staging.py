"""The staging mark: what makes a hidden folder beside an output marlaas's, and removing such
a folder so that a kill midway leaves it recognisable."""

from __future__ import annotations

import shutil
from pathlib import Path

STAGING_MARK = ".marlaas-staging"
"""An empty file in every staging folder while it is built: what makes it marlaas's."""


def is_real_dir(path: Path) -> bool:
    """Whether ``path`` is a folder and not a symbolic link to one."""
    return path.is_dir() and not path.is_symlink()


def discard(folder: Path) -> None:
    """Remove a folder of marlaas's, marked as staging first: a kill midway leaves a marked
    folder, which the next claim removes."""
    empty(folder)
    folder.rmdir()


def empty(folder: Path) -> None:
    """Remove everything in a folder of marlaas's, which is marked as staging first and its
    mark last: a kill midway leaves it marked, and the next claim empties it again."""
    (folder / STAGING_MARK).touch()
    for path in folder.iterdir():
        if is_real_dir(path):
            shutil.rmtree(path)
        elif path.name != STAGING_MARK:
            path.unlink()
    (folder / STAGING_MARK).unlink()
