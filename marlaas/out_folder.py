"""Output folders (``--out``): whose they are, one writer at a time, the old output or the new.

Every folder marlaas writes holds ``manifest.json``::

    {"kind": "simulation", "status": "finished", "marlaas_version": "0.1.0",
     "created": "2026-12-01T10:00:00+00:00", "files": ["events.parquet", "summary.json"]}

``kind`` is one of :data:`KINDS`; ``status`` is ``finished``, or ``partial`` for a real run
still training (or killed: ``marlaas train --resume`` continues it). A command claims its
``--out`` with :func:`claim` before any work:

1. ``out`` must not be a file, and its parent must be writable: the lock file is created there;
2. the lock (``fcntl.flock`` on ``.NAME.lock`` beside ``out``) is held for the whole command,
   so a second command writing the same ``out`` is refused at once;
3. what an earlier killed command left is cleaned up: its staging folder ``.NAME.staging``,
   and an old output ``.NAME.old`` is put back where the new one never arrived;
4. an existing ``out`` must be empty, or a finished output of the same kind (a real run may
   also be a partial one, for ``--resume``); anything else is refused, never deleted.

Outputs written whole (simulate, report, sweep) are built in ``.NAME.staging`` and swapped
into place in one step (``renameat2(RENAME_EXCHANGE)`` on Linux), so ``out`` holds the old
output or the new one, nothing in between. A write that fails (disk full, permissions)
leaves the old output and is reported as one :class:`OutputError` line.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path

MANIFEST_FILE = "manifest.json"
KINDS = ("simulation", "real", "report", "sweep", "replay")
"""The kinds of output folder; a folder is only ever replaced by an output of its own kind."""
NAMES = {"simulation": "simulation run", "real": "real training run", "report": "report",
         "sweep": "sweep", "replay": "replay"}  # fmt: skip
"""How an error names each kind."""

LEGACY_ENTRIES: dict[str, frozenset[str]] = {
    "simulation": frozenset({"events.parquet", "summary.json", "workload.json"}),
    "real": frozenset(
        {
            "adapters",
            "events.parquet",
            "summary.json",
            "workload.json",
            "rewards.csv",
            "rewards.png",
            "eval.json",
            "tensorboard",
            "wandb",
        }
    ),
    "report": frozenset({"report.html", "trace.json", "summary.json", "figures"}),
    "sweep": frozenset({"sweep.csv", "summaries.json", "table.txt", "runs"}),
}
"""What each kind of folder held before manifests existed (such folders are still ours)."""


class OutputError(RuntimeError):
    """An ``--out`` that cannot be written: someone else's folder, another command writing
    it, an unwritable parent, a full disk."""


def marlaas_version() -> str:
    """The installed marlaas version ("unknown" when running from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("marlaas")
    except PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- manifests


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none (a damaged one counts as none)."""
    try:
        data = json.loads((Path(folder) / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("kind") in KINDS else None


def write_manifest(folder: Path, kind: str, status: str = "finished", **extra) -> Path:
    """Write ``folder/manifest.json`` atomically and durably (its files: the folder's entries)."""
    folder = Path(folder)
    old = read_manifest(folder) or {}
    files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    manifest = {
        "kind": kind,
        "status": status,
        "marlaas_version": marlaas_version(),
        "created": old.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": sorted({*files, MANIFEST_FILE}),
        **extra,
    }
    return write_durably(folder / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")


def write_durably(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file, fsynced, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def folder_kind(folder: Path) -> tuple[str | None, str]:
    """(kind, status) of an existing output folder; (None, "") when it is not marlaas's."""
    manifest = read_manifest(folder)
    if manifest is not None:
        return manifest["kind"], str(manifest.get("status", "finished"))
    entries = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
    for kind, allowed in LEGACY_ENTRIES.items():
        if entries and entries <= allowed and _legacy_kind(folder, entries) == kind:
            return kind, "finished"
    return None, ""


def _legacy_kind(folder: Path, entries: set[str]) -> str | None:
    if "report.html" in entries:
        return "report"
    if "sweep.csv" in entries:
        return "sweep"
    if "summary.json" not in entries:
        return "real" if "adapters" in entries else None
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    kind = summary.get("kind", "simulation") if isinstance(summary, dict) else None
    return kind if kind in ("simulation", "real") else None


# --------------------------------------------------------------------------- claims


class Claim:
    """A claimed ``--out``: checked, locked, cleaned of an earlier command's leftovers."""

    def __init__(self, out: Path, kind: str, existing: tuple[str | None, str]) -> None:
        self.out, self.kind = out, kind
        self.existing_kind, self.existing_status = existing
        self.staging = out.with_name(f".{out.name}.staging")
        self.old = out.with_name(f".{out.name}.old")

    @property
    def has_output(self) -> bool:
        """Whether ``out`` holds an output of this kind (to replace, or to resume)."""
        return self.existing_kind == self.kind

    @contextmanager
    def staged(self) -> Iterator[Path]:
        """Yield an empty staging folder; when the block succeeds it gets a manifest and
        replaces ``out`` in one step, when it fails it is removed and ``out`` is untouched."""
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            self.staging.mkdir()
            yield self.staging
            write_manifest(self.staging, self.kind)
            self._swap_in()
        except OSError as err:
            raise OutputError(f"{self.out}: cannot write the output ({_reason(err)}); "
                              f"{self._what_is_left()}") from None  # fmt: skip
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _what_is_left(self) -> str:
        return f"the earlier {self.out} is kept" if self.out.exists() else "nothing was written"

    def _swap_in(self) -> None:
        self.staging.chmod(0o755)
        if self.out.is_dir() and not any(self.out.iterdir()):
            self.out.rmdir()
        if not self.out.exists():
            os.rename(self.staging, self.out)
        elif exchange(self.staging, self.out):
            pass  # the old output is now in the staging folder, which the caller removes
        else:
            os.rename(self.out, self.old)
            os.rename(self.staging, self.out)
        shutil.rmtree(self.old, ignore_errors=True)


def _reason(err: OSError) -> str:
    code = errno.errorcode.get(err.errno or 0)
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}" + (f" [{code}]" if code else "")


@contextmanager
def claim(out: str | Path, kind: str, *, allow_partial: bool = False) -> Iterator[Claim]:
    """Check, lock and clean ``out`` for an output of ``kind``, before any work; hold the
    lock until the block ends (see the module docstring). ``allow_partial``: a partial
    output of this kind (a killed real run) may be continued."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    out = Path(out)
    if out.name in ("", ".", ".."):
        out = Path(os.path.abspath(out))  # "." or "runs/..": the folder it names
    if not out.name:
        raise OutputError(f"{out}: the root folder cannot be an output folder")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; not writing there")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = _lock(out)
    except OSError as err:
        raise OutputError(f"{out}: cannot write there ({_reason(err)})") from None
    try:
        _recover(out, kind)
        existing = folder_kind(out) if out.is_dir() and any(out.iterdir()) else (None, "")
        if out.is_dir() and any(out.iterdir()):
            _check_owner(out, kind, existing, allow_partial)
        yield Claim(out, kind, existing)
    finally:
        _unlock(out, lock)


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


def lock_path(out: Path) -> Path:
    """The lock file of ``out`` (beside it, hidden)."""
    return out.with_name(f".{out.name}.lock")


def _lock(out: Path) -> int:
    path = lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(
                f"{out}: another marlaas command is writing it (lock {path.name} held); wait "
                "for it to finish or choose another --out"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False  # its holder removed it as we opened it: take the new one
        if same:
            return fd
        os.close(fd)


def _unlock(out: Path, fd: int) -> None:
    with suppress(OSError):
        os.unlink(lock_path(out))  # while still holding it: a waiter then retries
    os.close(fd)


_LEGACY_STAGING = r"\.{name}\.[a-z0-9_]{{8}}"
"""Staging folders of marlaas before manifests (tempfile.mkdtemp names)."""


def _recover(out: Path, kind: str) -> None:
    """Undo what a killed command left (we hold the lock: nobody else is writing ``out``)."""
    old = out.with_name(f".{out.name}.old")
    if old.is_dir() and not out.exists() and folder_kind(old)[0] == kind:
        os.rename(old, out)  # killed between the two renames of a swap: the old output returns
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(out.with_name(f".{out.name}.staging"), ignore_errors=True)
    legacy = re.compile(_LEGACY_STAGING.format(name=re.escape(out.name)))
    for path in out.parent.iterdir():
        if legacy.fullmatch(path.name) and path.is_dir() and _only_outputs(path):
            shutil.rmtree(path, ignore_errors=True)


def _only_outputs(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    known = set().union(*LEGACY_ENTRIES.values()) - {"adapters"}
    return names <= known


# --------------------------------------------------------------------------- atomic swap

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))
