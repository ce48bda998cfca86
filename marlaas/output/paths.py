"""The paths of an output: the one a command writes for ``--out`` (links followed, the root
and the working folder refused), the output folder a path lies in, and the hidden folders
beside an output."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from marlaas.output.errors import OutputError
from marlaas.output.manifest import read_manifest


def output_path(out: str | Path, what: str = "--out", *, in_place: bool = False) -> Path:
    """The path a command writes for ``out``: a symbolic link followed to what it names
    (refused when that does not exist), ``.`` and ``..`` made absolute; the root, and unless
    the output is continued ``in_place`` the working folder and the folders holding it, are
    refused (OutputError)."""
    if str(out) == "":
        raise OutputError(f"{what} '': an empty path; give a folder or file name")
    path = Path(out)
    if ".." in path.parts[:-1]:  # "runs/a/../b": runs/b, as the system reads it (a is not made)
        path = Path(os.path.realpath(path.parent)) / path.name
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not target.exists():
            raise OutputError(f"{path}: a symbolic link to {target}, which does not exist; "
                              "not writing through it (give the target itself)")  # fmt: skip
        path = target
    if path.name in ("", ".", ".."):
        path = Path(os.path.abspath(path))  # "." or "runs/..": the folder it names
    if not path.name:
        raise OutputError(f"{path}: the root folder cannot be an output folder")
    with suppress(OSError):  # realpath: Path.resolve raised RuntimeError in a symlink loop
        here, real = Path.cwd().resolve(), Path(os.path.realpath(path))
        if not in_place and (real == here or real in here.parents):
            raise OutputError(f"{out}: is the working folder or holds it; not writing there "
                              "(give a folder inside it)")  # fmt: skip
    return path


def inside_output(path: Path) -> Path | None:
    """The marlaas output folder ``path`` lies in (its nearest parent with a manifest), or
    None."""
    for parent in Path(os.path.abspath(path)).parents:
        if read_manifest(parent) is not None:
            return parent
    return None


def staging_path(out: Path) -> Path:
    """Where the new output of ``out`` is built (beside it, hidden)."""
    return out.with_name(f".{out.name}.staging")


def old_path(out: Path) -> Path:
    """Where the old output of ``out`` waits while a new one replaces it (beside it, hidden)."""
    return out.with_name(f".{out.name}.old")
