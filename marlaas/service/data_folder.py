"""A service's data folder and its job store, as the operator's commands (``serve``,
``tenants``, ``traffic``) find, make and open them: what it may hold, its owner-only mode,
the ``--data`` and ``--db`` arguments."""

from __future__ import annotations

import argparse
import stat
from contextlib import suppress
from pathlib import Path

from marlaas.run_options import path_arg
from marlaas.service.stack import require_service_stack

CONFIG_FILE = "config.json"
"""The cluster file the service last ran with, in the data folder (for ``traffic``)."""

BASE_MODEL_FILE = "base_model.json"
"""The base model the data folder's adapters are trained on (its name and config's SHA-256)."""

OURS = {"service.db", "service.db-wal", "service.db-shm", "secret.key", "operator.key",
        "adapters", CONFIG_FILE, BASE_MODEL_FILE}  # fmt: skip
"""What a data folder of ours may hold; a folder with anything else is not taken."""

DATA_FOLDER_MODE = 0o700
"""A new data folder's permissions: owner-only. It holds every tenant's adapters and job
specs, and the database; another user of the host reads none of them."""


def data_folder(path: str, create: bool = True) -> Path:
    """The data folder: new, empty, or one of ours (made unless ``create`` is False)."""
    from marlaas.output.errors import OutputError

    data = Path(path)
    if data.exists() and not data.is_dir():
        raise OutputError(f"{data}: is not a folder; --data names the service's data folder")
    if data.is_dir():
        strangers = sorted(p.name for p in data.iterdir() if p.name not in OURS)
        if strangers:
            raise OutputError(f"{data}: holds {strangers[:5]}, which is not a service's data; "
                              "choose an empty or new --data folder")  # fmt: skip
    if create:
        make_data_folder(data)
    return data


def make_data_folder(data: Path) -> None:
    """Make the data folder, owner-only (``DATA_FOLDER_MODE``), unless it exists (then it is
    left as its owner set it)."""
    data.mkdir(mode=DATA_FOLDER_MODE, parents=True, exist_ok=True)


def open_to_others(data: Path) -> str | None:
    """A warning when other users of the host may read the data folder (its group or others
    have any permission on it: a folder made before ``serve``, or by an earlier version);
    None when it is its owner's only."""
    mode = stat.S_IMODE(data.stat().st_mode)
    if not mode & 0o077:
        return None
    return (f"{data} is open to other users of this host (mode {mode:o}): every tenant's "
            f"adapters, job specs and database can be read there; chmod 700 {data}")  # fmt: skip


def data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--data`` (the data folder) and ``--db`` (the database's URL) to ``parser``."""
    parser.add_argument("--data", required=True, type=path_arg, help="the service's data "
                        "folder (adapters, keys' secret, the SQLite database)")  # fmt: skip
    parser.add_argument("--db", metavar="URL", help="database URL (default: SQLite in --data; "
                        "e.g. postgresql+psycopg://user@host/db)")  # fmt: skip


def open_store(args: argparse.Namespace, with_keys: bool = True, read_only: bool = False):
    """The job store of ``--data`` (made, for ``tenants add``) on ``--db``; ``with_keys``
    False: without the keys' secret; ``read_only``: for a command that only reads, which
    makes, migrates and writes nothing (:class:`~marlaas.service.store.JobStore`)."""
    require_service_stack(("sqlalchemy", "alembic"))
    created = not Path(args.data).exists()
    data = data_folder(args.data, create=not read_only)
    return store_in(data, args.db, created, with_keys, read_only)


def store_in(data: Path, db: str | None, created: bool, with_keys: bool = True,
              read_only: bool = False):  # fmt: skip
    """The job store of ``data`` on ``db``; a database it cannot open removes ``data`` again
    when this command ``created`` it (empty: nothing was written yet), and is raised."""
    from marlaas.service.db import DatabaseError, database_url
    from marlaas.service.store import JobStore

    try:
        return JobStore(database_url(data, db), data, with_keys, read_only)
    except DatabaseError:
        if created:
            with suppress(OSError):
                data.rmdir()
        raise
