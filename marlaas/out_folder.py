"""What a command may write: its own outputs, checked, locked, the old output or the new.

This is the one rule every command that writes follows (simulate, sweep, report, train,
evaluate, calibrate, replay, make-tiny-model, prepare-smollm2): it writes only a path it
created or a finished output of its own kind; nothing is deleted before every check has
passed; a symbolic link given as ``--out`` is followed to the folder or file it names (a
dangling one is refused), never replaced.

**Output folders.** Every folder marlaas writes holds ``manifest.json``::

    {"kind": "simulation", "status": "finished", "marlaas_version": "0.1.0",
     "created": "2026-12-01T10:00:00+00:00", "files": ["events.parquet", "summary.json"]}

``kind`` is one of :data:`KINDS`; ``status`` is ``finished``, or ``partial`` for a real run
still training (or killed: ``marlaas train --resume`` continues it); ``files`` are the
entries the command wrote. A command claims its ``--out`` with :func:`claim` before any work:

1. ``out`` must not be a file, the root, the working folder or a folder holding it, nor lie
   inside another marlaas output (it would be an entry that output's manifest does not
   list), and its parent must be writable: the lock file is created there;
2. the lock (``fcntl.flock`` on ``.NAME.lock`` beside ``out``) is held for the whole command,
   so a second command writing the same ``out`` is refused at once;
3. an existing ``out`` must be empty, or a finished output of the same kind (a real run may
   also be a partial one, for ``--resume``) holding nothing but the files its manifest lists;
   anything else (someone's folder, a folder of another kind, an output with a file added) is
   refused, never deleted, and so is a read-only ``out`` (its owner's way of keeping it);
4. only then is what an earlier killed command left removed: its staging folder
   ``.NAME.staging`` (marked as marlaas's), an old output ``.NAME.old`` that the new one
   replaced. An old output whose replacement never became an output (``out`` missing, or still
   marked as staging) is put back instead, saying so on stderr; a new output written in place
   with no old one (a fresh real run) still marked as staging is emptied, saying so.

Outputs written whole (simulate, report, sweep, replay, the model folders) are built in
``.NAME.staging`` and swapped into place in one step (``renameat2(RENAME_EXCHANGE)`` on
Linux), so ``out`` holds the old output or the new one, nothing in between. A write that
fails (disk full, permissions) leaves the old output and is reported as one
:class:`~marlaas.output.errors.WriteError` line (exit status 1).

An output written in place over a long time (a real run, which must be in ``out`` to be
resumed) replaces an old one with :meth:`Claim.in_place`: the old output moves to
``.NAME.old`` and ``out`` starts afresh, marked as staging (``.marlaas-staging`` in it) until
the new one has something that must not be lost (a real run's first durable step, or its
end): then the mark goes, and the old output after it. Until then a failure, Ctrl-C or
SIGTERM puts the old output back at once, and after a ``kill -9`` the next command on
``out`` does. This is the same ``.NAME.old`` as a swap's where the system cannot exchange
two folders: the old output is kept there until the new one is whole. A fresh output (no old
one) is marked the same way: until it holds something, a failure leaves ``out`` as it was
(missing, or empty), and after a ``kill -9`` the next command on ``out`` empties it, so that
a plain rerun is not refused as an unfinished run with nothing in it.

**Output files** (``calibrate --out PROFILE.yaml``, ``evaluate --out FILE.json``) are claimed
with :func:`claim_file`: an existing file is replaced only when the command recognises it as
one of its own (by its content, not its name), never a folder, and never a file inside a
marlaas output folder (``RUN/summary.json`` belongs to the run).

This module claims an ``--out``; the parts of the rule are the modules of
:mod:`marlaas.output`: :mod:`~marlaas.output.errors`, :mod:`~marlaas.output.manifest`,
:mod:`~marlaas.output.kinds`, :mod:`~marlaas.output.paths`, :mod:`~marlaas.output.lock`,
:mod:`~marlaas.output.leftovers`, :mod:`~marlaas.output.staging`,
:mod:`~marlaas.output.swap` and :mod:`~marlaas.output.claim` (:class:`Claim`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from marlaas.output.claim import Claim
from marlaas.output.errors import OutputError
from marlaas.output.kinds import folder_kind, foreign_entries
from marlaas.output.leftovers import remove_leftovers, restore_old
from marlaas.output.lock import lock_beside, unlock
from marlaas.output.manifest import KINDS, MANIFEST_FILE, NAMES
from marlaas.output.paths import inside_output, output_path


@contextmanager
def claim(
    out: str | Path,
    kind: str,
    *,
    allow_partial: bool = False,
    replace: bool = True,
    writes: bool = True,
) -> Iterator[Claim]:
    """Check, lock and clean ``out`` for an output of ``kind``, before any work; hold the
    lock until the block ends (see the module docstring). ``allow_partial``: a partial
    output of this kind (a killed real run) may be continued, in place; ``replace=False``: a
    finished output of this kind is refused too (``--overwrite`` was not given);
    ``writes=False``: the command only reads ``out`` (``evaluate --run RUN --out FILE``), so
    a read-only ``out`` is taken, and in a read-only parent, where no other command can
    write either, it is read unlocked and left as it is."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    out = output_path(out, in_place=allow_partial)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; not writing there")
    _refuse_inside_output(out)
    lock = None
    if writes or os.access(out.parent, os.W_OK | os.X_OK):
        lock = lock_beside(out)
    try:
        if lock is not None:
            restore_old(out, kind)
        existing: tuple[str | None, str] = (None, "")
        if out.is_dir() and any(out.iterdir()):
            existing = folder_kind(out)
            _check_owner(out, kind, existing, allow_partial)
            if not replace:
                raise OutputError(f"{out}: already holds a {NAMES[kind]}; not replacing it "
                                  "(give --overwrite to replace it)")  # fmt: skip
        if writes and out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
            # replaced anyway (renamed aside), its old output stayed beside it, unremovable,
            # and every later command on it failed naming one file in it
            raise OutputError(f"{out}: the folder is read-only; not writing there (make it "
                              "writable to replace or continue it)")  # fmt: skip
        if lock is not None:
            remove_leftovers(out)  # every check has passed
        yield Claim(out, kind, existing)
    finally:
        if lock is not None:
            unlock(out, lock)


@contextmanager
def claim_file(out: str | Path, what: str, recognise: Callable[[Path], bool]) -> Iterator[Path]:
    """Check and lock the file ``out`` (``what`` names its kind, e.g. ``cost profile``)
    before any work; yields the path to write, through :func:`marlaas.atomic.write_durably`.
    An existing file must be one ``recognise`` says this command wrote; a folder, a file
    inside a marlaas output folder and anything else are refused (OutputError)."""
    path = output_path(out)
    if path.is_dir():
        raise OutputError(f"{out}: is a folder; --out names the {what} file to write")
    if path.exists() and not path.is_file():
        raise OutputError(f"{out}: exists and is not a regular file; not writing there")
    _refuse_inside_output(path)
    lock = lock_beside(path)
    try:
        if path.exists() and not recognise(path):
            article = "an" if what[:1] in "aeiou" else "a"
            raise OutputError(f"{out}: exists and is not {article} {what} marlaas wrote; not "
                              "replacing it (choose another --out)")  # fmt: skip
        yield path
    finally:
        unlock(path, lock)


def _refuse_inside_output(path: Path) -> None:
    """OutputError when ``path`` lies inside a marlaas output folder: an output written there
    would be a file that output's manifest does not list (and its own folder's lock and
    staging beside it, too)."""
    owner = inside_output(path)
    if owner is not None:
        kind = NAMES[folder_kind(owner)[0] or "simulation"]
        raise OutputError(f"{path}: is inside {owner}, a {kind}; marlaas writes none of its "
                          "files there (choose a path outside it)")  # fmt: skip


def _check_owner(out: Path, kind: str, existing: tuple[str | None, str], partial: bool) -> None:
    found, status = existing
    if found is None:
        raise OutputError(f"{out}: folder exists and is not a marlaas output (no "
                          f"{MANIFEST_FILE}); not replacing it (choose another --out)")  # fmt: skip
    if found != kind:
        raise OutputError(f"{out}: holds a {NAMES[found]}, not a {NAMES[kind]}; not "
                          "writing there (choose another --out)")  # fmt: skip
    if status != "finished" and not partial:
        hint = " (continue it: the same command with --resume)" if kind == "real" else ""
        raise OutputError(f"{out}: holds an unfinished {NAMES[kind]}{hint}; not replacing it")
    foreign = [] if partial else foreign_entries(out)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(foreign[:3]) + more
        raise OutputError(f"{out}: holds {shown}, which marlaas did not write there; not "
                          "replacing it (move it out or choose another --out)")  # fmt: skip
