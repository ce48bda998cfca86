"""The service's tables (SQLAlchemy 2 ORM) and the database they live in.

SQLite in the data folder by default (WAL, so readers never wait for the driver's writes),
PostgreSQL by URL: the same code path. The schema is Alembic's (``migrations/``): a database
is migrated to the newest revision when a command that writes opens it (``serve``, ``tenants
add``, ``quota`` and ``revoke``); a command that only reads (``traffic``, ``tenants list``) opens it
read-only and migrates nothing (:func:`open_database`).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

DB_FILE = "service.db"
MIGRATIONS = Path(__file__).parent / "migrations"
"""Alembic's scripts: the schema's revisions."""


class Base(DeclarativeBase):
    """The service's tables."""


class Tenant(Base):
    """A tenant: its API key's hash and its quotas (None: the cluster file's defaults)."""

    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    max_active_jobs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_queued_jobs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    """Unix time [s]."""
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Job(Base):
    """A tenant's job: its spec as submitted, and where it stands."""

    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    """The tenant's name for it (the scheduler's is ``j<id>``)."""
    spec: Mapped[str] = mapped_column(Text)
    """The job spec as JSON (with the tenant)."""
    state: Mapped[str] = mapped_column(String(16), index=True)
    """queued, running, done, cancelled, failed or refused."""
    reason: Mapped[str] = mapped_column(Text, default="")
    step: Mapped[int] = mapped_column(Integer, default=0)
    """Durable steps (the newest adapter version that can be fetched)."""
    steps: Mapped[int] = mapped_column(Integer)
    staleness_max: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_at: Mapped[float] = mapped_column(Float)
    """Unix time [s]."""
    submitted_s: Mapped[float] = mapped_column(Float)
    """On the service's run clock [s] (continued over restarts): the traffic's arrival."""
    cancelled_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobEvent(Base):
    """A job's state change or durable step, in order (the SSE stream's ids)."""

    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    """state or step."""
    body: Mapped[str] = mapped_column(Text)
    """JSON."""
    at: Mapped[float] = mapped_column(Float)
    """Unix time [s]."""


class Step(Base):
    """A job's durable training step: its reward point (JSON)."""

    __tablename__ = "steps"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    staleness: Mapped[int] = mapped_column(Integer, default=0)
    body: Mapped[str] = mapped_column(Text)


class WorkRow(Base):
    """One event-log row (a work record, times on the run clock), as JSON."""

    __tablename__ = "work_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    part: Mapped[int] = mapped_column(Integer, index=True)
    body: Mapped[str] = mapped_column(Text)


class Part(Base):
    """One start of the service: where its run clock began [s] (continued over restarts)."""

    __tablename__ = "parts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[float] = mapped_column(Float)
    offset_s: Mapped[float] = mapped_column(Float)


def database_url(data_dir: Path, url: str | None) -> str:
    """``url``, or the SQLite file in ``data_dir``."""
    return url or f"sqlite:///{Path(data_dir).resolve() / DB_FILE}"


def open_database(url: str, read_only: bool = False) -> tuple[Engine, sessionmaker]:
    """An engine on ``url``, migrated to the newest schema, and its session factory;
    DatabaseError, one line, for a URL SQLAlchemy cannot read, a driver it lacks or a
    database it cannot reach or open. ``read_only``: for a command that only reads (``marlaas
    traffic``, ``tenants list``): the database is opened read-only (SQLite: ``mode=ro``, its
    file's bytes untouched; PostgreSQL: read-only transactions) and not migrated; a schema
    other than the newest is DatabaseError, saying to let ``marlaas serve`` migrate it (a
    reader migrated it, writing to a database it was only asked to read)."""
    sqlite = url.startswith("sqlite")
    options: dict = {"pool_pre_ping": not sqlite}
    if sqlite:
        options["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if read_only:
            options["creator"] = _read_only_sqlite(url)
    try:
        engine = create_engine(url, **options)
    except (SQLAlchemyError, ImportError) as err:
        raise DatabaseError(f"database {_shown(url)}: not a usable database URL "
                            f"({_reason(err)})") from None  # fmt: skip
    if sqlite:
        event.listen(engine, "connect", _sqlite_read_only if read_only else _sqlite_pragmas)
    elif read_only:  # on each connection: the URL's own options (a search_path) kept
        event.listen(engine, "connect", _read_only_session)
    try:
        if read_only:
            _check_schema(engine, _shown(url))
        else:
            migrate(engine)
    except SQLAlchemyError as err:
        engine.dispose()
        raise DatabaseError(f"database {_shown(url)}: cannot open it ({_reason(err)})") from None
    except BaseException:
        engine.dispose()
        raise
    return engine, sessionmaker(engine, expire_on_commit=False)


def _read_only_sqlite(url: str):
    """A connection factory opening ``url``'s SQLite file read-only (``mode=ro``): nothing it
    runs writes the file, and a file that is not there is an error, not a new database."""
    import sqlite3
    from urllib.parse import quote

    path = make_url(url).database or ""
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)

    return connect


def _check_schema(engine: Engine, shown: str) -> None:
    """DatabaseError unless the database's schema is the newest revision, which this code
    reads: a reader neither makes the tables nor migrates them."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    scripts = ScriptDirectory(str(MIGRATIONS))
    head = scripts.get_current_head()
    if current == head:
        return
    if current is None:
        raise DatabaseError(f"database {shown}: holds no service's tables (`marlaas serve` or "
                            "`marlaas tenants add` makes them)")  # fmt: skip
    if current in {script.revision for script in scripts.walk_revisions()}:
        raise DatabaseError(
            f"database {shown}: its schema is revision {current}, older than this marlaas's "
            f"{head}, and this command only reads: start `marlaas serve` on it once, which "
            "migrates it (back up the data folder first)"
        )
    raise DatabaseError(f"database {shown}: its schema is revision {current!r}, which this "
                        "marlaas does not know (a newer version made it): use that "
                        "version")  # fmt: skip


class DatabaseError(RuntimeError):
    """A database the service cannot open (its URL, driver or server), in one line."""


def failed_database(url: str, err: BaseException, then: str) -> DatabaseError:
    """DatabaseError, one line, for the database at ``url`` that failed with ``err`` (a
    SQLAlchemyError: the driver's own message, without SQLAlchemy's statement and links), and
    ``then``: what it means and what to do (none: '')."""
    return DatabaseError(f"database {_shown(url)}: {_reason(err)}" + (f"; {then}" if then else ""))


def _shown(url: str) -> str:
    """``url`` without its password (or a placeholder, when it is not a URL at all)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        return "(the --db URL)"


def _reason(err: BaseException) -> str:
    """The driver's own message where there is one, without SQLAlchemy's links, its first
    line: the reason. PostgreSQL's next lines hold a row's values (``DETAIL:  Key
    (key_hash)=(...)``) or the statement (``LINE 1: ...``), which the line of a failed
    database (``/v1/health`` included, read without a key) does not show."""
    cause = getattr(err, "orig", None) or err
    text = str(cause).split("(Background on this error")[0].strip()
    return " ".join((text.splitlines() or [""])[0].split())[:300]


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")  # a committed step survives a power cut
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_read_only(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _read_only_session(connection, _record) -> None:
    """Every transaction of this PostgreSQL connection read-only. Not the driver's
    ``options`` (``-c default_transaction_read_only=on``): they replaced the URL's own, and a
    store kept in a schema of its own (``?options=-csearch_path=...``) was read in another.
    Committed: a SET rolled back is undone."""
    cursor = connection.cursor()
    cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    cursor.close()
    connection.commit()


def migrate(engine: Engine) -> None:
    """Bring the database to Alembic's newest revision (a new one gets every table)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
