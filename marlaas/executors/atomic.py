"""Atomic folder writes: build a folder under a temporary name, then rename it into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
