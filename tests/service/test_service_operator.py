"""What an operator meets running the service: ``serve --help`` states the bounds the code
holds, the reading commands leave the job store as they found it, and the operator's sandbox
caps hold for every sandbox a job's environment makes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from marlaas.cli import main
from tests.service.conftest import CLUSTER, JOB, model_folder, store_with_a_job


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
    store_with_a_job(data)
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


def test_a_read_only_postgresql_store_keeps_the_urls_connection_options(tmp_path, postgres,
                                                                        capsys):  # fmt: skip
    """A reading command opened PostgreSQL read-only by giving the driver its own ``options``
    (``-c default_transaction_read_only=on``), which replaced the URL's: a store kept in a
    schema of its own (``?options=-csearch_path=svc``, as the service writes it) was read
    in ``public`` and refused as holding no service's tables. The URL's options are kept, and
    nothing can be written."""
    import psycopg
    from sqlalchemy.exc import SQLAlchemyError

    from marlaas.service.store import JobStore

    url = postgres.url()
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("CREATE SCHEMA svc")
    url += "&options=-csearch_path%3Dsvc"
    data = tmp_path / "data"
    data.mkdir()
    store = JobStore(url, data)
    try:
        store.add_tenant("frank")
    finally:
        store.close()
    assert main(["tenants", "list", "--data", str(data), "--db", url]) == 0, capsys.readouterr()
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "frank"
    reader = JobStore(url, data, read_only=True)
    try:
        with pytest.raises(SQLAlchemyError, match="read-only transaction"):
            reader.add_tenant("gina")
    finally:
        reader.close()


WRAPPERS = {"wraps_python_exec": "WrapsPythonExec", "makes_its_sandbox": "MakesItsSandbox"}
"""Registered names of tests.service.wrapped_sandboxes' environments -> their classes."""


@pytest.fixture
def wrappers(monkeypatch):
    """The wrapping environments, registered for the test; a cluster that offers them, with a
    2,048 MiB cap on a sandbox's memory (the default)."""
    from marlaas.envs import registry
    from marlaas.service.config import ServiceConfig
    from tests.service import wrapped_sandboxes

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    for name, cls in WRAPPERS.items():
        registry.register_env(name)(getattr(wrapped_sandboxes, cls))
    offered = ["arithmetic", "python_exec", *WRAPPERS]
    return ServiceConfig.model_validate(
        {**CLUSTER, "service": {**CLUSTER["service"], "environments": offered}}
    )


def test_a_job_whose_environment_holds_a_python_exec_past_the_caps_is_refused(wrappers):
    """The service checked the sandbox caps (service: max_sandbox_*) against the limits of
    the environment a job names, where they are its own (``python_exec``'s ``env.args``): a
    user's environment holding a ``python_exec`` of 4,096 MiB was taken under a 2,048 MiB cap.
    The environments it holds are checked too, 422 naming the field and the cap."""
    from marlaas.service.requests import JobRequestError, job_from_request

    job = {**JOB, "env": {"name": "wraps_python_exec"}}
    with pytest.raises(JobRequestError) as refused:
        job_from_request(job, "alice", wrappers)
    assert str(refused.value) == (
        "env: 'wraps_python_exec' holds an environment (its inner) whose sandbox's memory_mb, "
        "4,096 MiB, is above this service's max_sandbox_memory_mb (2,048 MiB)"
    )
    within = {**JOB, "env": {"name": "wraps_python_exec", "args": {"memory_mb": 1024}}}
    assert job_from_request(within, "alice", wrappers).env.args == {"memory_mb": 1024}


REFUSED = ("sandbox memory_mb: 4,096 MiB is above 2,048 MiB, the most this service's "
           "max_sandbox_memory_mb allows; the sandbox was not started")  # fmt: skip


def test_the_services_backends_cap_every_sandbox_made_in_their_process(wrappers):
    """A sandbox an environment makes as it runs (its limits nowhere to see at submission) is
    held to the service's caps where it is made: the service's backends bound every sandbox
    of the process while they are open (sandbox.cap_sandboxes), and release them when they
    close. Past a cap, no sandbox is started: the step raises, one line."""
    pytest.importorskip("torch")  # the real backends (a simulation-only install skips)
    import asyncio

    from marlaas.core.scheduler import Scheduler
    from marlaas.envs import make_env
    from marlaas.envs.sandbox import SandboxCapError, held_caps
    from marlaas.executors.local import LocalBackends

    class Engine:
        tokenizer = None

        async def close(self) -> None:
            pass

    config = wrappers
    cluster = Scheduler(config.cluster, config.scheduling, config.policy, config.seed).cluster
    engines = {engine.name: Engine() for engine in cluster.engines}
    backends = LocalBackends(Path("unused"), "hf", generators=engines, trainers={},
                             sandbox_caps=config.service.sandbox_caps())  # fmt: skip

    async def steps() -> list:
        said = []
        for name in WRAPPERS:
            env = backends.make_env(name, {})
            await env.reset(0)
            try:
                said.append((await env.step("print(1)")).reward)
            except SandboxCapError as err:
                said.append(str(err))
        return said

    assert held_caps() == ()
    asyncio.run(backends.open(None, cluster, 64, 0))
    try:
        assert asyncio.run(steps()) == [REFUSED, REFUSED]
    finally:
        asyncio.run(backends.close())
    assert held_caps() == ()  # released
    env = make_env("makes_its_sandbox", {})  # a batch run sets no caps: the sandbox runs
    assert asyncio.run(env.step("")).reward in (0.0, 1.0)


def test_backends_open_at_once_each_hold_their_caps_until_they_close(monkeypatch, wrappers):
    """Two services' backends in one process (or a test's beside a service's), closed in the
    order they were opened: each put back the caps it found, so the first one's close left
    the second open with no caps at all (any sandbox ran), and the second's close left the
    first one's caps on the process for good (a batch run after it was refused). Every open
    backends' caps hold until it closes, whatever the order; closed, none is left."""
    pytest.importorskip("torch")  # the real backends (a simulation-only install skips)
    import asyncio

    from marlaas.core.scheduler import Scheduler
    from marlaas.envs import sandbox
    from marlaas.envs.sandbox import SandboxCapError, SandboxLimits, run_python
    from marlaas.executors.local import LocalBackends

    class Engine:
        tokenizer = None

        async def close(self) -> None:
            pass

    def no_sandbox():  # past the caps' check: a sandbox would be started
        raise sandbox.SandboxUnavailable("not started by this test")

    monkeypatch.setattr(sandbox, "require_sandbox", no_sandbox)
    config = wrappers
    cluster = Scheduler(config.cluster, config.scheduling, config.policy, config.seed).cluster
    service = config.service

    def backends(memory_mb: int) -> LocalBackends:
        capped = service.model_copy(update={"max_sandbox_memory_mb": memory_mb})
        engines = {engine.name: Engine() for engine in cluster.engines}
        return LocalBackends(Path("unused"), "hf", generators=engines, trainers={},
                             sandbox_caps=capped.sandbox_caps())  # fmt: skip

    def refused(memory_mb: int) -> str:
        try:
            asyncio.run(run_python("print(1)", {}, SandboxLimits(memory_mb=memory_mb)))
        except SandboxCapError as err:
            return str(err)
        except sandbox.SandboxUnavailable:
            return ""
        raise AssertionError("the sandbox ran")

    first, second = backends(2048), backends(1024)
    asyncio.run(first.open(None, cluster, 64, 0))
    asyncio.run(second.open(None, cluster, 64, 0))
    try:
        assert refused(1536).startswith("sandbox memory_mb: 1,536 MiB is above 1,024 MiB")
        assert refused(4096).startswith("sandbox memory_mb: 4,096 MiB is above ")
        asyncio.run(first.close())
        assert refused(1536).startswith("sandbox memory_mb: 1,536 MiB is above 1,024 MiB")
    finally:
        asyncio.run(second.close())
    assert refused(4096) == ""  # none left: a batch run's sandbox is not bounded


def test_the_service_gives_its_caps_to_the_executors_backends(monkeypatch, wrappers, tmp_path):
    """The service opens its real executor with the sandbox caps of its cluster file: they
    reach the backends (in this process, or each Ray environment actor)."""
    pytest.importorskip("torch")  # the real backends (a simulation-only install skips)
    from contextlib import nullcontext

    from marlaas.core.scheduler import Scheduler
    from marlaas.executors import open_real
    from marlaas.service.runner import ServiceRunner

    given = {}
    monkeypatch.setattr(open_real, "open_real_executor",
                        lambda *args, **kwargs: given.update(kwargs) or nullcontext())  # fmt: skip
    model = model_folder(tmp_path / "model")  # what the service reads before the executor opens
    config = wrappers.model_copy(update={"base_model": wrappers.base_model.model_copy(
        update={"path": str(model)})})  # fmt: skip
    config = config.model_copy(update={"service": config.service.model_copy(
        update={"max_sandbox_processes": 8, "max_sequence_tokens": 256})})  # fmt: skip
    runner = ServiceRunner(config, tmp_path, tmp_path, store=None)
    scheduler = Scheduler(config.cluster, config.scheduling, config.policy, config.seed)
    runner._open_executor(scheduler)
    caps = given["sandbox_caps"]
    assert (caps.memory_mb, caps.max_processes, caps.max_output_bytes) == (2048, 8, 8 * 2**20)


@pytest.mark.slow
def test_a_ray_environment_actor_holds_the_services_caps(wrappers):
    """Under `serve --ray` the environments run in Ray actors, other processes: the caps
    travel to each actor (a restarted one is given them again), and a sandbox made there past
    them is refused as in the service's process."""
    pytest.importorskip("ray")
    import asyncio

    from marlaas.envs import make_env
    from marlaas.executors.ray_actors import EnvActor, EnvPool, RemoteEnv
    from marlaas.ray_cluster import ray_session

    with ray_session(None, num_cpus=1):
        actor = EnvActor.options(num_cpus=0).remote(wrappers.service.sandbox_caps())
        env = RemoteEnv(EnvPool([actor]), make_env("makes_its_sandbox", {}))

        async def step() -> str:
            await env.reset(0)
            try:
                await env.step("")
            except Exception as err:
                return str(err)
            return "ran"

        said = asyncio.run(step())
    assert said.endswith(REFUSED), said


def test_serve_names_the_cluster_file_it_cannot_read_or_use(tmp_path, capsys):
    """`serve` on a cluster file that is not there said 'no such cluster file file'; and a
    real service's cluster file without base_model.path was refused naming the field but not
    the file (the line spoke of 'the workload'). Both name the cluster file, once; nothing
    is made."""
    data = tmp_path / "data"
    missing = tmp_path / "nowhere.yaml"
    assert main(["serve", str(missing), "--data", str(data), "--simulate", "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == f"marlaas: error: {missing}: no such cluster file"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64, environments: [arithmetic]}\n")
    assert main(["serve", str(cluster), "--data", str(data), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"marlaas: error: {cluster}: base_model.path: a real run needs the "
                          "base model's local folder"), err  # fmt: skip
    assert "\n" not in err and not data.exists()


def test_a_database_that_fails_under_the_service_stops_it_in_one_line(capsys):
    """The job store's database failing under a running service (its disk full, its
    PostgreSQL server gone) stopped the driver, and `serve` exited with SQLAlchemy's
    traceback, the statement and its parameters included. It exits 2 with one line: the
    database, the driver's reason, and what it means for the jobs."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from marlaas.service.db import DatabaseError
    from marlaas.service.serve_command import _driver_stopped
    from marlaas.terminal import error_line

    failed = OperationalError("INSERT INTO steps (job_id, step) VALUES (?, ?)", (3, 7),
                              sqlite3.OperationalError("database or disk is full"))  # fmt: skip
    stopped = _driver_stopped(failed, "cluster.yaml", "sqlite:////srv/data/service.db")
    assert isinstance(stopped, DatabaseError)
    assert error_line(stopped) == (
        "marlaas: error: database sqlite:////srv/data/service.db: database or disk is full; "
        "the service stopped: every job is kept at its last durable step and continues when "
        "the service starts again: see to the database (its disk, its server), then serve again"
    )
    other = RuntimeError("an executor's own")
    assert _driver_stopped(other, "cluster.yaml", "sqlite:////srv/data/service.db") is other


def test_a_database_that_fails_under_the_service_is_logged_in_one_line(tmp_path, caplog):
    """serve's exit line for a database that failed under it is one line (above), but the
    driver's thread logged it first with log.exception: SQLAlchemy's traceback, the statement
    and its parameters, on serve's stderr above that line. The driver's log says it in one
    line too, the traceback at debug level only."""
    import logging
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from marlaas.service.config import ServiceConfig
    from marlaas.service.db import database_url
    from marlaas.service.runner import ServiceRunner
    from marlaas.service.store import JobStore

    data = tmp_path / "data"
    data.mkdir()
    store = JobStore(database_url(data, None), data)
    try:
        runner = ServiceRunner(ServiceConfig.model_validate(CLUSTER), data, data, store,
                               simulate=True)  # fmt: skip

        def fails() -> None:
            full = sqlite3.OperationalError("database or disk is full")
            raise OperationalError("INSERT INTO steps (job_id, step) VALUES (?, ?)", (3, 7), full)

        runner._drive = fails
        with caplog.at_level(logging.INFO, logger="marlaas"):
            runner._run()
    finally:
        store.close()
    assert isinstance(runner.error, OperationalError)
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.exc_info is None
    assert record.getMessage() == (
        f"the driver stopped: database {database_url(data, None)}: database or disk is full"
    )


def test_health_names_a_failed_database_without_its_statement_or_values(tmp_path):
    """/v1/health, which needs no key, answered a stopped driver's error as str(error): for
    the job store's database failing, SQLAlchemy's text with the statement and its values (a
    tenant's job spec, a key's hash) to anyone who asked. It answers the one line serve
    logs."""
    import sqlite3

    import httpx
    from sqlalchemy.exc import OperationalError

    from marlaas.service.db import database_url
    from tests.service.conftest import serve

    data = tmp_path / "data"
    served = serve(data)
    try:
        full = sqlite3.OperationalError("database or disk is full")
        served.runner.error = OperationalError("INSERT INTO tenants (name, key_hash) VALUES "
                                               "(?, ?)", ("eve", "a1b2c3"), full)  # fmt: skip
        answer = httpx.get(f"{served.url}/v1/health", timeout=30)
        assert answer.status_code == 503
        assert answer.json()["error"] == (
            f"database {database_url(data, None)}: database or disk is full"
        )
    finally:
        served.runner.error = None
        served.stop()


def test_a_failed_databases_line_has_the_drivers_reason_without_values_or_sql():
    """The one line of a database that failed (serve's exit, the driver's log, /v1/health)
    held all of the driver's message on one line: PostgreSQL's holds a DETAIL with the row's
    values (a key's hash) and, for a statement it could not run, a LINE of the SQL. The
    line has the driver's first line, its reason."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    from marlaas.service.db import failed_database

    url = "postgresql+psycopg://marlaas:hunter2@db/marlaas"
    for error, reason in (
        (IntegrityError, 'duplicate key value violates unique constraint "tenants_key_hash_key"'
                         "\nDETAIL:  Key (key_hash)=(5e8f1c) already exists."),
        (ProgrammingError, 'syntax error at or near "SELEC"\nLINE 1: SELEC key_hash FROM '
                           "tenants\n        ^"),
    ):  # fmt: skip
        failed = error("INSERT ...", ("5e8f1c",), Exception(reason))
        first = reason.splitlines()[0]
        said = str(failed_database(url, failed, ""))
        assert said == f"database postgresql+psycopg://marlaas:***@db/marlaas: {first}"


def test_an_operator_changes_a_tenants_quotas_without_changing_its_key(tmp_path, capsys):
    """A tenant's quotas could be changed only by revoking its key and adding it again: a
    new key to hand out, and its event streams ended, to give it one more job at once
    (`tenants add` of a tenant that exists is refused). `tenants quota NAME` sets them as
    `add` names them, the key kept; a running service takes them with the tenant's next
    request: its queued job is admitted."""
    from tests.service.conftest import serve

    data = tmp_path / "data"
    served = serve(data)
    try:
        key = served.key("bob", max_active_jobs=1, max_queued_jobs=1)
        bob = served.client(key)
        long = {**JOB, "rl": {**JOB["rl"], "steps": 100_000}}
        first, second = bob.submit(long)["id"], bob.submit(long)["id"]
        assert [bob.job(first)["state"], bob.job(second)["state"]] == ["running", "queued"]
        assert main(["tenants", "quota", "bob", "--data", str(data), "--max-active-jobs",
                     "2"]) == 0  # fmt: skip
        assert capsys.readouterr().out.strip() == (
            "tenant bob: at most 2 active and 1 queued (from its next request)"
        )  # the quota left out is kept (it was set back to the cluster file's)
        bob.jobs()  # its next request
        deadline = time.monotonic() + 30
        while bob.job(second)["state"] != "running":  # the same key: the quota reached it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for job in (first, second):
            bob.cancel(job)
    finally:
        served.stop()
    assert main(["tenants", "list", "--data", str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["bob", "2", "1"]
    assert main(["tenants", "quota", "bob", "--data", str(data), "--max-queued-jobs",
                 "default"]) == 0  # fmt: skip
    assert main(["tenants", "list", "--data", str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[:3] == ["bob", "2", "-"]
    for args, says in (
        (["quota", "nobody", "--max-active-jobs", "3"], "tenants quota: no tenant named 'nobody'"),
        (["quota", "bob"], "tenants quota: give --max-active-jobs or --max-queued-jobs (a "
         "number, or 'default' for the cluster file's); one left out is kept"),
        (["revoke", "bob", "--max-active-jobs", "3"],
         "tenants revoke: --max-active-jobs is for tenants add and tenants quota"),
    ):  # fmt: skip
        assert main(["tenants", *args, "--data", str(data)]) == 2
        assert capsys.readouterr().err.strip() == f"marlaas: error: {says}"
    assert main(["tenants", "revoke", "bob", "--data", str(data)]) == 0
    assert main(["tenants", "quota", "bob", "--data", str(data), "--max-active-jobs", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        "marlaas: error: tenants quota: tenant 'bob' is revoked; `tenants add bob` gives it a "
        "new key and the quotas it names"
    )


def test_a_request_authenticated_before_a_quota_change_does_not_send_the_old_quota(tmp_path):
    """Every request sends its tenant's quotas to the scheduler when they differ from those
    sent, as its authentication read them: a request read before `tenants quota` and ending
    after a newer one had sent the new quotas (a slow GET beside a submission) sent the old
    ones again, and the scheduler judged the tenant's next jobs under them. The quotas sent
    are the store's when they differ, and never older than those already sent."""
    from marlaas.core.tenant_spec import TenantSpec
    from marlaas.drive.inbox import SetQuota
    from marlaas.service.config import ServiceConfig
    from marlaas.service.db import database_url
    from marlaas.service.runner import ServiceRunner
    from marlaas.service.store import JobStore

    class Inbox:
        def __init__(self) -> None:
            self.quotas = []

        def put(self, item, at_s=None) -> None:
            if isinstance(item, SetQuota):
                self.quotas.append(item.quota.max_active_jobs)

    data = tmp_path / "data"
    data.mkdir()
    store = JobStore(database_url(data, None), data)
    try:
        key = store.add_tenant("bob", TenantSpec(max_active_jobs=1))
        runner = ServiceRunner(ServiceConfig.model_validate(CLUSTER), data, data, store,
                               simulate=True)  # fmt: skip
        runner.inbox = Inbox()
        before = store.authenticate(key)  # a slow request's tenant, read now
        runner.take_quota(before)
        store.set_quota("bob", max_active_jobs=3)  # `tenants quota bob`
        runner.take_quota(store.authenticate(key))  # a request after it
        runner.take_quota(before)  # the slow request goes on
        runner.take_quota(store.authenticate(key))
        assert runner.inbox.quotas == [1, 3]
    finally:
        store.close()


def test_jobs_a_host_cannot_run_are_refused_at_start_with_the_hosts_advice(tmp_path, capsys,
                                                                          monkeypatch):  # fmt: skip
    """A service restarted on a host where the sandbox is missing leaves python_exec out of
    the default environments (a warning); its queued python_exec jobs then refused the start
    saying to start with the cluster file they were submitted under and cancel them, or
    keep its limits: the cluster file was that one, and cancelling was not the fix. The
    refusal names the environment this host cannot run, and the host as what to change."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.envs import sandbox_runtime
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore

    model = model_folder(tmp_path / "model")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"base_model: {{name: tiny, path: {model}}}\n"
                       "service: {max_sequence_tokens: 256}\n")  # fmt: skip
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    store = JobStore(database_url(data, None), data)
    try:
        store.add_tenant("ann")
        (tenant,) = store.tenants()
        task = {"prompt": "p", "func": "f", "tests": [[[1], 2]]}
        code = {**JOB, "env": {"name": "python_exec", "args": {"tasks": [task]}}}
        job = store.add_job(tenant, JobSpec.model_validate({**code, "tenant": "ann"}), 1.0)
    finally:
        store.close()
    monkeypatch.setattr(sandbox_runtime, "_probe", lambda: "`bwrap` not found on PATH")
    assert main(["serve", str(cluster), "--data", str(data), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("marlaas: warning: serve: environment 'python_exec' is not offered")
    assert err[1] == (
        "marlaas: error: serve: 1 queued or running job(s) need an environment this host "
        "cannot run (python_exec; the warning above says why): job "
        f"{job}: env.name: 'python_exec' is not one of this service's environments "
        "['arithmetic', 'calculator', 'target_char']; serve where it runs, or make it run "
        "here, to continue them"
    )
    assert len(err) == 2

    # A job that misfits for a reason of the cluster file's is not the host's to fix.
    store = JobStore(database_url(data, None), data)
    try:
        (tenant,) = store.tenants()
        ranked = {**JOB, "lora_rank": 16}
        other = store.add_job(tenant, JobSpec.model_validate({**ranked, "tenant": "ann"}), 2.0)
    finally:
        store.close()
    cluster.write_text(f"base_model: {{name: tiny, path: {model}}}\n"
                       "service: {max_sequence_tokens: 256, max_lora_rank: 8}\n")  # fmt: skip
    assert main(["serve", str(cluster), "--data", str(data), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[1].startswith(
        "marlaas: error: serve: 1 queued or running job(s) no longer fit the service: block "
        f"of {cluster} (job {other}: lora_rank"
    ), err[1]
    assert len(err) == 2
