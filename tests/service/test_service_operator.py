"""What an operator meets running the service: ``serve --help`` states the bounds the code
holds, the reading commands leave the job store as they found it, and the operator's sandbox
caps hold for every sandbox a job's environment makes."""

from __future__ import annotations

import json

from marlaas.cli import main
from tests.service.conftest import CLUSTER, JOB


def test_serve_help_states_the_stream_and_connection_bounds_it_is_built_from(monkeypatch,
                                                                            capsys):  # fmt: skip
    """`serve --help` wrote its figures out ('default: 256; each key holds 16 at most', 'N +
    272'), which app.MAX_STREAMS, MAX_STREAMS_PER_CALLER and the server's connections for
    requests define: a change to one left the help naming the old figure. The help is built
    from the constants (marlaas.service.connections), and imports no service library."""
    from marlaas.service import connections

    monkeypatch.setattr(connections, "MAX_STREAMS", 300)
    monkeypatch.setattr(connections, "MAX_STREAMS_PER_CALLER", 8)
    monkeypatch.setattr(connections, "OTHER_CONNECTIONS", 100)
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: the figures are not wrapped
    try:
        main(["serve", "--help"])
    except SystemExit as done:
        assert done.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 300; each key holds 8 at most;" in text
    assert "the server keeps N + 108 connections open at most" in text
    assert "256" not in text and "272" not in text


def _store_with_a_job(data):
    """A data folder as a service leaves it: a tenant, a job, the cluster file saved."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore

    data.mkdir()
    store = JobStore(database_url(data, None), data)
    try:
        store.add_tenant("frank")
        (tenant,) = store.tenants()
        store.add_job(tenant, JobSpec.model_validate({**JOB, "tenant": "frank"}), 1.0)
    finally:
        store.close()
    (data / "config.json").write_text(json.dumps(CLUSTER))  # as serve saves it


def _as_found(data):
    """Each file of ``data`` with its bytes and its modification time [ns]."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(data.iterdir())
            if p.name not in ("service.db-wal", "service.db-shm")}  # fmt: skip


NEXT_REVISION = '''"""A later schema (a test's): a column more.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("note", sa.Text, nullable=True))
'''


def test_the_reading_commands_leave_the_job_store_as_they_found_it(tmp_path, monkeypatch,
                                                                   capsys):  # fmt: skip
    """`marlaas traffic` and `tenants list` only read the job store, and they opened it as
    the service does: migrated to this marlaas's schema (a store of an older one was
    rewritten by a command asked to report on it), and `tenants list` on a data folder
    without a database made one, and the keys' secret. They open it read-only: a store of
    the schema they read is read, the file's bytes and time untouched; one of an older schema
    is refused in one line saying that `serve` migrates it, and left as it was; a data folder
    without a database is listed as holding no tenant, and nothing is made."""
    import shutil

    from marlaas.service import db

    data = tmp_path / "data"
    _store_with_a_job(data)
    before = _as_found(data)
    out = tmp_path / "day.yaml"
    assert main(["traffic", "--data", str(data), "--out", str(out)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["tenants", "list", "--data", str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["frank", "-", "-", "1", "queued"]
    assert _as_found(data) == before

    later = tmp_path / "migrations"  # this marlaas's schema, and a later one
    shutil.copytree(db.MIGRATIONS, later, ignore=shutil.ignore_patterns("__pycache__"))
    (later / "versions" / "0002_note.py").write_text(NEXT_REVISION)
    monkeypatch.setattr(db, "MIGRATIONS", later)
    for args in (["traffic", "--data", str(data), "--out", str(tmp_path / "again.yaml")],
                 ["tenants", "list", "--data", str(data)]):  # fmt: skip
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err == (
            f"marlaas: error: database sqlite:///{data.resolve() / 'service.db'}: its schema is "
            "revision 0001, older than this marlaas's 0002, and this command only reads: start "
            "`marlaas serve` on it once, which migrates it (back up the data folder first)"
        ), args
        assert _as_found(data) == before, args
    assert not (tmp_path / "again.yaml").exists()
    assert main(["tenants", "add", "gina", "--data", str(data)]) == 0  # a writer migrates it
    capsys.readouterr()
    assert main(["tenants", "list", "--data", str(data)]) == 0  # and then it is read
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "tenant", "frank", "gina"]  # fmt: skip

    fresh = tmp_path / "fresh"  # a data folder with no database: no tenant, nothing made
    fresh.mkdir()
    assert main(["tenants", "list", "--data", str(fresh)]) == 0
    assert capsys.readouterr().out.split() == ["tenant", "active", "queued", "jobs"]
    assert main(["tenants", "revoke", "frank", "--data", str(fresh)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"marlaas: error: tenants revoke: no tenant named 'frank' ({fresh} has no database yet)"
    )
    assert list(fresh.iterdir()) == []
