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

1. ``out`` must not be a file, the root, the working folder or a folder holding it, and its
   parent must be writable: the lock file is created there;
2. the lock (``fcntl.flock`` on ``.NAME.lock`` beside ``out``) is held for the whole command,
   so a second command writing the same ``out`` is refused at once;
3. an existing ``out`` must be empty, or a finished output of the same kind (a real run may
   also be a partial one, for ``--resume``) holding nothing but the files its manifest lists;
   anything else (someone's folder, a folder of another kind, an output with a file added) is
   refused, never deleted;
4. only then is what an earlier killed command left removed: its staging folder
   ``.NAME.staging`` (marked as marlaas's), an old output ``.NAME.old`` that the new one
   replaced. An old output whose replacement never became an output (``out`` missing, or still
   marked as staging) is put back instead, saying so on stderr.

Outputs written whole (simulate, report, sweep, replay, the model folders) are built in
``.NAME.staging`` and swapped into place in one step (``renameat2(RENAME_EXCHANGE)`` on
Linux), so ``out`` holds the old output or the new one, nothing in between. A write that
fails (disk full, permissions) leaves the old output and is reported as one
:class:`WriteError` line (exit status 1).

An output written in place over a long time (a real run, which must be in ``out`` to be
resumed) replaces an old one with :meth:`Claim.in_place`: the old output moves to
``.NAME.old`` and ``out`` starts afresh, marked as staging (``.marlaas-staging`` in it) until
the new one has something that must not be lost (a real run's first durable step, or its
end): then the mark goes, and the old output after it. Until then a failure, Ctrl-C or
SIGTERM puts the old output back at once, and after a ``kill -9`` the next command on
``out`` does. This is the same ``.NAME.old`` as a swap's where the system cannot exchange
two folders: the old output is kept there until the new one is whole.

**Output files** (``calibrate --out PROFILE.yaml``, ``evaluate --out FILE.json``) are claimed
with :func:`claim_file`: an existing file is replaced only when the command recognises it as
one of its own (by its content, not its name), never a folder, and never a file inside a
marlaas output folder (``RUN/summary.json`` belongs to the run).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path

from marlaas.atomic import write_durably
from marlaas.terminal import warning_line

MANIFEST_FILE = "manifest.json"
STAGING_MARK = ".marlaas-staging"
"""An empty file in every staging folder while it is built: what makes it marlaas's."""
KINDS = ("simulation", "real", "report", "sweep", "replay", "model", "adapter", "plan")
"""The kinds of output folder; a folder is only ever replaced by an output of its own kind."""
NAMES = {"simulation": "simulation run", "real": "real training run", "report": "report",
         "sweep": "sweep", "replay": "replay", "model": "model folder",
         "adapter": "fetched adapter", "plan": "plan"}  # fmt: skip
"""How an error names each kind."""
STATUSES = ("finished", "partial")

MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
    }
)
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
    "model": MODEL_FILES,
}
"""What each kind of folder held before manifests existed (such folders are still ours when
their content says so, see :func:`folder_kind`)."""
TEMPORARY = re.compile(r"\.[^/]+\.tmp(\.png|-[^/]+)?")
"""Names of the temporary files marlaas writes beside a file before renaming it into place
(``.summary.json.x1y2.tmp``, ``.rewards.png.x1y2.tmp.png``, a folder's ``.v2.tmp-x1y2``: see
:mod:`marlaas.atomic`)."""
TINY_MODEL = {"model_type": "llama", "vocab_size": 259, "hidden_size": 128,
              "num_hidden_layers": 2}  # fmt: skip
"""config.json values of marlaas's tiny model (``make-tiny-model``): its byte vocabulary is
marlaas's own, so a folder of them from before manifests is recognisably ours."""
MAX_PEEK_BYTES = 1 << 20
"""Most bytes read of a file to tell whose it is."""


class OutputError(RuntimeError):
    """An ``--out`` that cannot be written: someone else's folder or file, another command
    writing it, a dangling link, an unwritable parent (a user error: exit status 2)."""

    exit_status = 2


class WriteError(OutputError):
    """A write that failed on the machine (disk full, permissions, a file size limit): the old
    output is kept (exit status 1)."""

    exit_status = 1


def marlaas_version() -> str:
    """The installed marlaas version ("unknown" when running from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("marlaas")
    except PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- manifests


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none (a damaged or foreign one counts as
    none: it must name a kind of :data:`KINDS`, a status and its files)."""
    try:
        data = json.loads(_peek(Path(folder) / MANIFEST_FILE))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    files = data.get("files")
    if data.get("status", "finished") not in STATUSES or not (
        isinstance(files, list) and all(isinstance(f, str) for f in files)
    ):
        return None
    return data


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


def foreign_entries(folder: Path) -> list[str]:
    """Entries of an output folder that its command did not write: not in its manifest (or,
    before manifests, not among its kind's files), not one of marlaas's temporary files."""
    manifest = read_manifest(folder)
    if manifest is not None:
        ours = {*manifest["files"], MANIFEST_FILE}
    else:
        kind = folder_kind(folder)[0]
        ours = set(LEGACY_ENTRIES.get(kind or "", ()))
    return sorted(
        p.name for p in folder.iterdir() if p.name not in ours and not TEMPORARY.fullmatch(p.name)
    )


def _peek(path: Path) -> str:
    """The first MAX_PEEK_BYTES of a file as text (OSError, ValueError when it is not one)."""
    with open(path, "rb") as handle:
        return handle.read(MAX_PEEK_BYTES).decode("utf-8")


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(_peek(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _legacy_kind(folder: Path, entries: set[str]) -> str | None:
    """The kind a folder from before manifests is, by its content (None: not ours)."""
    if "report.html" in entries:
        try:
            head = _peek(folder / "report.html")[:4096]
        except (OSError, ValueError):
            return None
        return "report" if "<title>MARLaaS " in head else None
    if "sweep.csv" in entries:
        try:
            header = _peek(folder / "sweep.csv").split("\n", 1)[0].split(",")
        except (OSError, ValueError):
            return None
        keys = {"workload", "jobs", "variant", "schedule", "policy", "seed"}
        return "sweep" if "summaries.json" in entries and keys <= set(header) else None
    if "config.json" in entries:
        config = _json_object(folder / "config.json")
        return "model" if all(config.get(k) == v for k, v in TINY_MODEL.items()) else None
    if not {"summary.json", "events.parquet"} <= entries:
        return None
    summary = _json_object(folder / "summary.json")
    kind = summary.get("kind", "simulation")
    if not {"policy", "metrics"} <= set(summary):
        return None
    return kind if kind in ("simulation", "real") else None


# --------------------------------------------------------------------------- paths


def output_path(out: str | Path, what: str = "--out", *, in_place: bool = False) -> Path:
    """The path a command writes for ``out``: a symbolic link followed to what it names
    (refused when that does not exist), ``.`` and ``..`` made absolute; the root, and unless
    the output is continued ``in_place`` the working folder and the folders holding it, are
    refused (OutputError)."""
    if str(out) == "":
        raise OutputError(f"{what} '': an empty path; give a folder or file name")
    path = Path(out)
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
    with suppress(OSError):
        here, real = Path.cwd().resolve(), path.resolve()
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


# --------------------------------------------------------------------------- claims


class Claim:
    """A claimed ``--out`` folder: checked, locked, cleaned of an earlier command's leftovers."""

    def __init__(self, out: Path, kind: str, existing: tuple[str | None, str]) -> None:
        self.out, self.kind = out, kind
        self.existing_kind, self.existing_status = existing
        self.staging = staging_path(out)
        self.old = out.with_name(f".{out.name}.old")

    @property
    def has_output(self) -> bool:
        """Whether ``out`` holds an output of this kind (to replace, or to resume)."""
        return self.existing_kind == self.kind

    @contextmanager
    def staged(self) -> Iterator[Path]:
        """Yield an empty staging folder; when the block succeeds it gets a manifest and
        replaces ``out`` in one step, when it fails it is removed and ``out`` is untouched."""
        made = False
        try:
            self.staging.mkdir()
            made = True
            (self.staging / STAGING_MARK).touch()
            yield self.staging
            (self.staging / STAGING_MARK).unlink()
            write_manifest(self.staging, self.kind)
            self._swap_in()
        except OSError as err:
            raise WriteError(f"{self.out}: cannot write the output ({_reason(err)}); "
                             f"{self._what_is_left()}") from None  # fmt: skip
        finally:
            if made:
                shutil.rmtree(self.staging, ignore_errors=True)

    @contextmanager
    def in_place(self, replace: bool = True) -> Iterator[Callable[[], None]]:
        """For an output written in place: yield ``keep``, to call once the new output holds
        something that must not be lost. With ``replace``, an old output in ``out`` moves to
        ``.NAME.old`` and ``out`` starts afresh (its manifest ``partial``), marked as staging;
        ``keep()`` (also called when the block ends) removes the mark, then the old output. A
        block that fails before ``keep()`` puts the old output back (see the module
        docstring). Without (a run continued), ``out`` is written as it is."""
        if not (replace and self.has_output):
            self.out.mkdir(exist_ok=True)
            yield lambda: None
            return
        self._set_aside()
        kept = []

        def keep() -> None:
            if not kept:
                kept.append(True)
                (self.out / STAGING_MARK).unlink()  # from now on the new output is out
                with suppress(OSError):  # else the next claim removes what is left of it
                    self._drop_old()

        try:
            yield keep
        except BaseException:
            if not kept:
                self._put_back()
            raise
        keep()

    def _set_aside(self) -> None:
        """Move the old output to ``.NAME.old``; ``out`` becomes a marked, empty output."""
        self.staging.mkdir()
        try:
            (self.staging / STAGING_MARK).touch()
            write_manifest(self.staging, self.kind, "partial")
            os.rename(self.out, self.old)
            try:
                os.rename(self.staging, self.out)
            except BaseException:
                os.rename(self.old, self.out)
                raise
        except BaseException:
            with suppress(OSError):
                discard(self.staging)
            raise

    def _put_back(self) -> None:
        """The old output returns to ``out``; the new one, still marked, goes."""
        os.rename(self.out, self.staging)
        os.rename(self.old, self.out)
        discard(self.staging)

    def _drop_old(self) -> None:
        """Remove ``.NAME.old`` (the new output is in place), through the staging name."""
        if _is_dir(self.old):
            os.rename(self.old, self.staging)
            discard(self.staging)

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
            with suppress(OSError):  # else the next claim removes what is left of it
                self._drop_old()


def staging_path(out: Path) -> Path:
    """Where the new output of ``out`` is built (beside it, hidden)."""
    return out.with_name(f".{out.name}.staging")


def discard(folder: Path) -> None:
    """Remove a folder of marlaas's, marked as staging first: a kill midway leaves a marked
    folder, which the next claim removes."""
    (folder / STAGING_MARK).touch()
    for path in folder.iterdir():
        if _is_dir(path):
            shutil.rmtree(path)
        elif path.name != STAGING_MARK:
            path.unlink()
    shutil.rmtree(folder)


def _reason(err: OSError) -> str:
    code = errno.errorcode.get(err.errno or 0)
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}" + (f" [{code}]" if code else "")


@contextmanager
def claim(
    out: str | Path, kind: str, *, allow_partial: bool = False, replace: bool = True
) -> Iterator[Claim]:
    """Check, lock and clean ``out`` for an output of ``kind``, before any work; hold the
    lock until the block ends (see the module docstring). ``allow_partial``: a partial
    output of this kind (a killed real run) may be continued, in place; ``replace=False``: a
    finished output of this kind is refused too (``--overwrite`` was not given)."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    out = output_path(out, in_place=allow_partial)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; not writing there")
    lock = _lock_beside(out)
    try:
        _restore_old(out, kind)
        existing: tuple[str | None, str] = (None, "")
        if out.is_dir() and any(out.iterdir()):
            existing = folder_kind(out)
            _check_owner(out, kind, existing, allow_partial)
            if not replace:
                raise OutputError(f"{out}: already holds a {NAMES[kind]}; not replacing it "
                                  "(give --overwrite to replace it)")  # fmt: skip
        _remove_leftovers(out)  # every check has passed
        yield Claim(out, kind, existing)
    finally:
        _unlock(out, lock)


@contextmanager
def claim_file(out: str | Path, what: str, recognise: Callable[[Path], bool]) -> Iterator[Path]:
    """Check and lock the file ``out`` (``what`` names its kind, e.g. ``cost profile``)
    before any work; yields the path to write, through :func:`write_durably`. An existing
    file must be one ``recognise`` says this command wrote; a folder, a file inside a
    marlaas output folder and anything else are refused (OutputError)."""
    path = output_path(out)
    if path.is_dir():
        raise OutputError(f"{out}: is a folder; --out names the {what} file to write")
    if path.exists() and not path.is_file():
        raise OutputError(f"{out}: exists and is not a regular file; not writing there")
    owner = inside_output(path)
    if owner is not None:
        kind = NAMES[folder_kind(owner)[0] or "simulation"]
        raise OutputError(f"{out}: is inside {owner}, a {kind}; marlaas writes none of its "
                          "files there (choose a path outside it)")  # fmt: skip
    lock = _lock_beside(path)
    try:
        if path.exists() and not recognise(path):
            article = "an" if what[:1] in "aeiou" else "a"
            raise OutputError(f"{out}: exists and is not {article} {what} marlaas wrote; not "
                              "replacing it (choose another --out)")  # fmt: skip
        yield path
    finally:
        _unlock(path, lock)


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


def lock_path(out: Path) -> Path:
    """The lock file of ``out`` (beside it, hidden)."""
    return out.with_name(f".{out.name}.lock")


def lock_folder(out: Path) -> int:
    """Hold ``out``'s lock (beside it) for as long as the returned descriptor stays open;
    OutputError when another marlaas command holds it."""
    return _lock_beside(Path(out))


def _lock_beside(out: Path) -> int:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return _lock(out)
    except OSError as err:
        raise OutputError(f"{out}: cannot write there ({_reason(err)})") from None


def _lock(out: Path) -> int:
    path = lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
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


# --------------------------------------------------------------------------- leftovers

_LEGACY_STAGING = r"\.{name}\.[a-z0-9_]{{8}}"
"""Staging folders of marlaas before manifests (tempfile.mkdtemp names)."""


def _restore_old(out: Path, kind: str) -> None:
    """Killed before the new output replaced the old one (we hold the lock): between the two
    renames of a swap (``out`` missing), or while ``out`` is a new output still marked as
    staging (see :meth:`Claim.in_place`): the old output returns."""
    old = out.with_name(f".{out.name}.old")
    marked = _is_dir(out) and (out / STAGING_MARK).is_file()
    if marked and not (old.exists() or old.is_symlink()):
        (out / STAGING_MARK).unlink()  # nothing to put back (removed): the new one is all
        return
    if not _is_dir(old) or folder_kind(old)[0] != kind:
        return  # not an output this command may put back (then refused or removed: see claim)
    if out.exists() and not marked:
        return  # the new output is whole: the old one is a leftover
    if marked:
        os.rename(out, staging_path(out))  # marked: removed with the other leftovers
    os.rename(old, out)
    print(warning_line(f"{out}: put the earlier {NAMES[kind]} back (the command replacing it "
                       "was stopped before its output was whole)"), file=sys.stderr)  # fmt: skip


def _remove_leftovers(out: Path) -> None:
    """Remove what a killed command left beside ``out``, where it is recognisably marlaas's;
    anything else of those names is refused, not removed."""
    staging, old = staging_path(out), out.with_name(f".{out.name}.old")
    for path, ours in ((staging, _is_staging), (old, _is_output)):
        if path.is_symlink() or path.exists():
            if not (_is_dir(path) and ours(path)):
                raise OutputError(f"{path}: in the way of {out}'s output and not left by "
                                  "marlaas; not removing it (move it away)")  # fmt: skip
            shutil.rmtree(path)
    legacy = re.compile(_LEGACY_STAGING.format(name=re.escape(out.name)))
    for path in out.parent.iterdir():
        if legacy.fullmatch(path.name) and _is_dir(path) and _only_outputs(path):
            shutil.rmtree(path, ignore_errors=True)


def _is_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


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
