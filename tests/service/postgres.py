"""A PostgreSQL server of the tests' own: started from Debian's ``postgresql`` package on a
socket folder (no TCP), for the session, and stopped at its end. As root (CI), the server
runs as the ``postgres`` user the package makes."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

START_TIMEOUT_S = 60


def find_binary(name: str) -> str | None:
    """``name`` (initdb, pg_ctl) on PATH or in Debian's /usr/lib/postgresql/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


class PostgresServer:
    """initdb + pg_ctl start on a private socket folder; :meth:`url` of a fresh database."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        if self.initdb is None or self.pg_ctl is None:
            raise FileNotFoundError("initdb/pg_ctl not found (apt-get install -y postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="mlpg-"))
        self.data, self.socket = self.root / "data", self.root / "s"
        self.socket.mkdir()
        self._user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            self._user = pwd.getpwnam("postgres")
            for path in (self.root, self.socket):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self._databases = 0

    def _run(self, *command: str) -> None:
        if self._user is not None:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, capture_output=True, timeout=START_TIMEOUT_S)

    def start(self) -> None:
        """Create the cluster and start the server (socket only, trust auth)."""
        self._run(self.initdb, "-D", str(self.data), "-U", "marlaas", "--auth=trust",
                  "-E", "UTF8", "--no-sync")  # fmt: skip
        options = f"-k {self.socket} -c listen_addresses='' -c fsync=off -p 5433"
        self._run(self.pg_ctl, "-D", str(self.data), "-o", options, "-w", "-t",
                  str(START_TIMEOUT_S), "-l", str(self.root / "log"), "start")  # fmt: skip

    def stop(self) -> None:
        """Stop the server and remove its files."""
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self) -> str:
        """A new, empty database's SQLAlchemy URL."""
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://marlaas@/{name}?host={self.socket}&port=5433"

    def _dsn(self, database: str) -> str:
        return f"dbname={database} user=marlaas host={self.socket} port=5433"
