"""A claimed ``--out`` folder (:class:`Claim`): its output built aside and swapped in whole,
or written in place with the old output kept until the new one holds something."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from marlaas.atomic import readable_files
from marlaas.output.errors import WriteError, reason
from marlaas.output.manifest import write_manifest
from marlaas.output.paths import old_path, staging_path
from marlaas.output.staging import STAGING_MARK, discard, empty, is_real_dir
from marlaas.output.swap import exchange


class Claim:
    """A claimed ``--out`` folder: checked, locked, cleaned of an earlier command's leftovers."""

    def __init__(self, out: Path, kind: str, existing: tuple[str | None, str]) -> None:
        self.out, self.kind = out, kind
        self.existing_kind, self.existing_status = existing
        self.staging = staging_path(out)
        self.old = old_path(out)

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
            readable_files(self.staging)
            write_manifest(self.staging, self.kind)
            self._swap_in()
        except OSError as err:  # the file named as it would be in out, not in the staging
            told = reason(err).replace(str(self.staging), str(self.out))
            raise WriteError(f"{self.out}: cannot write the output ({told}); "
                             f"{self._what_is_left()}") from None  # fmt: skip
        finally:
            if made:
                shutil.rmtree(self.staging, ignore_errors=True)

    @contextmanager
    def in_place(self, replace: bool = True) -> Iterator[Callable[[], None]]:
        """For an output written in place: yield ``keep``, to call once the new output holds
        something that must not be lost. Without ``replace``, an output in ``out`` is
        continued (a real run resumed): written as it is. Otherwise ``out`` starts afresh,
        marked as staging: an old output in it moves to ``.NAME.old`` first (and ``out``
        holds a ``partial`` manifest). ``keep()`` (also called when the block ends) removes
        the mark, then the old output. A block that fails before ``keep()`` puts the old
        output back, or, with none, leaves ``out`` as it was (removed, or emptied when it was
        an empty folder), so that a plain rerun is not refused as an unfinished output with
        nothing in it; after a kill the next claim does the same (see
        :mod:`marlaas.out_folder`)."""
        if self.has_output and not replace:
            self.out.mkdir(exist_ok=True)
            yield lambda: None
            return
        undo = self._set_aside() if self.has_output else self._start_afresh()
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
                undo()
            raise
        keep()

    def _start_afresh(self) -> Callable[[], None]:
        """Mark ``out`` (made here unless it is an empty folder) as a new output; return what
        undoes it: ``out`` emptied, and removed when it was made here (an OSError then is left
        to the next claim, which empties a marked output with no old one beside it)."""
        made = not self.out.exists()
        self.out.mkdir(exist_ok=True)
        (self.out / STAGING_MARK).touch()

        def undo() -> None:
            with suppress(OSError):
                empty(self.out)
                if made:
                    self.out.rmdir()

        return undo

    def _set_aside(self) -> Callable[[], None]:
        """Move the old output to ``.NAME.old``; ``out`` becomes a marked, empty output.
        Returns what puts the old output back."""
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
        return self._put_back

    def _put_back(self) -> None:
        """The old output returns to ``out``; the new one, still marked, goes."""
        os.rename(self.out, self.staging)
        os.rename(self.old, self.out)
        discard(self.staging)

    def _drop_old(self) -> None:
        """Remove ``.NAME.old`` (the new output is in place), through the staging name."""
        if is_real_dir(self.old):
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
