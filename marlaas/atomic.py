"""Atomic writes: a file or a folder is written under a temporary name beside it, then
renamed into place, so that a reader (or a run killed midway) never sees half of it.

Every temporary name is ``.NAME.<random>.tmp`` (a file; ``.NAME.<random>.tmp.png`` when the
writer needs the extension) or ``.NAME.tmp-<random>`` (a folder), the names
:data:`marlaas.output.kinds.TEMPORARY` recognises as leftovers.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILE_MODE = 0o644
"""Permissions of a file written here (mkstemp's temporary file has 0600)."""


@contextmanager
def replacing(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it is fsynced and renamed
    to ``path``, on an exception removed (``path`` untouched). ``suffix`` ends the temporary
    name (``.tmp.png``: for a writer that picks the format by extension)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as err:
        raise naming(err, path) from err
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, FILE_MODE)
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename in (None, str(tmp)):
            raise naming(err, path) from err
        raise


def naming(err: OSError, path: Path) -> OSError:
    """``err`` naming ``path``, the file being written: a failed write names no file
    (``File too large``, pyarrow's ``Error writing bytes to file``) or only its hidden
    temporary name."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def write_durably(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically and fsynced; returns ``path``."""
    with replacing(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return Path(path)


def _fsync(path: Path) -> None:
    """Flush a written file's data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_dir(final: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside `final`; on success rename it to `final`.

    Readers never see a half-written folder: either `final` is absent (or the old one), or it
    is complete. On an exception the temporary folder is removed and `final` is untouched.
    With `overwrite`, an existing `final` is replaced (removed just before the rename).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists (pass overwrite=True to replace it)")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; give the folder normal permissions
    try:
        yield tmp
        readable_files(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def readable_files(folder: Path) -> None:
    """Let every file under ``folder`` be read as the umask lets a new file be read (0644
    under umask 022; its other bits kept): a writer that made one private (safetensors
    writes model and adapter weights 0600) would leave it unreadable to the other users of a
    shared model folder or run folder, and to a Ray worker running as one. A folder meant
    for its owner alone (a service's data) keeps others out by its own mode."""
    umask = os.umask(0)
    os.umask(umask)
    readable = 0o444 & ~umask
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) | readable)
