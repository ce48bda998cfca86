"""What a killed command left beside an output: an old output put back when its replacement
never became whole, and staging and old folders removed where they are marlaas's."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from marlaas.output.errors import OutputError, reason
from marlaas.output.kinds import LEGACY_ENTRIES, MODEL_FILES, folder_kind, foreign_entries
from marlaas.output.manifest import NAMES
from marlaas.output.paths import old_path, staging_path
from marlaas.output.staging import STAGING_MARK, empty, is_real_dir
from marlaas.terminal import warning_line

_LEGACY_STAGING = r"\.{name}\.[a-z0-9_]{{8}}"
"""Staging folders of marlaas before manifests (tempfile.mkdtemp names)."""


def restore_old(out: Path, kind: str) -> None:
    """Killed before the new output replaced the old one (we hold the lock): between the two
    renames of a swap (``out`` missing), or while ``out`` is a new output still marked as
    staging (see :meth:`marlaas.output.claim.Claim.in_place`): the old output returns. A
    marked new output with no old one beside it (a fresh start) is emptied instead
    (:func:`empty_unkept`)."""
    old = old_path(out)
    marked = is_real_dir(out) and (out / STAGING_MARK).is_file()
    if marked and not (old.exists() or old.is_symlink()):
        empty_unkept(out, kind)
        return
    if not is_real_dir(old) or folder_kind(old)[0] != kind:
        return  # not an output this command may put back (then refused or removed: see claim)
    if out.exists() and not marked:
        return  # the new output is whole: the old one is a leftover
    if marked:
        os.rename(out, staging_path(out))  # marked: removed with the other leftovers
    os.rename(old, out)
    print(warning_line(f"{out}: put the earlier {NAMES[kind]} back (the command replacing it "
                       "was stopped before its output was whole)"), file=sys.stderr)  # fmt: skip


def empty_unkept(out: Path, kind: str) -> None:
    """Empty ``out``, a new output of ``kind`` (or one killed before its manifest) still
    marked as staging with no old output to put back: a fresh real run killed before its
    first durable step held nothing that must be kept, and its partial folder once refused a
    plain rerun ("holds an unfinished real training run"). It says so on stderr. A marked
    output of another kind is left to its own command."""
    found = folder_kind(out)[0]
    if found not in (kind, None):
        return
    empty(out)
    print(warning_line(f"{out}: removed the start of a {NAMES[kind]} that was stopped before "
                       "it held anything to keep"), file=sys.stderr)  # fmt: skip


def remove_leftovers(out: Path) -> None:
    """Remove what a killed command left beside ``out``, where it is recognisably marlaas's;
    anything else of those names is refused, not removed."""
    staging, old = staging_path(out), old_path(out)
    for path, ours in ((staging, _is_staging), (old, _is_output)):
        if path.is_symlink() or path.exists():
            if not (is_real_dir(path) and ours(path)):
                raise OutputError(f"{path}: in the way of {out}'s output and not left by "
                                  "marlaas; not removing it (move it away)")  # fmt: skip
            try:
                shutil.rmtree(path)
            except OSError as err:  # its error names a file in it alone ("x.json: ...")
                raise OutputError(f"{path}: left by an earlier command, in the way of {out}'s "
                                  f"output, and cannot be removed ({reason(err)}); remove it "
                                  "yourself") from None  # fmt: skip
    legacy = re.compile(_LEGACY_STAGING.format(name=re.escape(out.name)))
    for path in out.parent.iterdir():
        if legacy.fullmatch(path.name) and is_real_dir(path) and _only_outputs(path):
            shutil.rmtree(path, ignore_errors=True)


def _is_staging(folder: Path) -> bool:
    """A staging folder of marlaas: marked, complete with its manifest, or (from before the
    mark) holding only names of marlaas's outputs."""
    return (folder / STAGING_MARK).is_file() or _is_output(folder) or _only_outputs(folder)


def _is_output(folder: Path) -> bool:
    return folder_kind(folder)[0] is not None and not foreign_entries(folder)


def _only_outputs(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    known = set().union(*LEGACY_ENTRIES.values()) - {"adapters"} - MODEL_FILES
    return names <= known
