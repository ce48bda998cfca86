"""``marlaas serve``, ``tenants`` and ``traffic`` (the operator's); a tenant's ``submit``,
``status``, ``watch``, ``cancel`` and ``fetch`` are in :mod:`marlaas.service.tenant_cli`.

marlaas.cli registers them. The service's libraries (FastAPI, uvicorn, SQLAlchemy, httpx)
are imported inside the commands; without them a command says what to install, in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import sys
from contextlib import ExitStack, suppress
from pathlib import Path

from marlaas.run_options import bounded_int, path_arg, positive_float
from marlaas.service import tenant_cli
from marlaas.service.stack import require_service_stack
from marlaas.terminal import UsageError

SERVE_HELP = "run MARLaaS as a service: tenants submit jobs over HTTP"
TENANTS_HELP = "add, list, set the quotas of or revoke a service's tenants (API keys)"
TRAFFIC_HELP = "write a service's submissions as a workload file (for marlaas simulate)"

MAX_SPEED = 1e6
"""The fastest --simulate clock [simulated seconds per wall second]: a year of work in 32 s."""
CONFIG_FILE = "config.json"
"""The cluster file the service last ran with, in the data folder (for ``traffic``)."""
BASE_MODEL_FILE = "base_model.json"
"""The base model the data folder's adapters are trained on (its name and config's SHA-256)."""
OURS = {"service.db", "service.db-wal", "service.db-shm", "secret.key", "operator.key",
        "adapters", CONFIG_FILE, BASE_MODEL_FILE}  # fmt: skip
"""What a data folder of ours may hold; a folder with anything else is not taken."""
RESERVED_DESCRIPTORS = 512
"""File descriptors ``serve`` keeps for itself beyond its connections: the database's, the
adapters' and the model's files, the engines', trainers' and environments' own."""
DATA_FOLDER_MODE = 0o700
"""A new data folder's permissions: owner-only. It holds every tenant's adapters and job
specs, and the database; another user of the host reads none of them."""


# ------------------------------------------------------------------ operator commands


def _serve(args: argparse.Namespace) -> int:
    require_service_stack()
    import logging

    from marlaas.executors.quiet import quiet_libraries

    quiet_libraries(verbose=args.log_level == "debug")
    import uvicorn

    from marlaas.output.lock import lock_folder, unlock
    from marlaas.service.app import OPERATOR_KEY_FILE, create_app
    from marlaas.service.config import load_config
    from marlaas.service.connections import connection_limit
    from marlaas.service.keys import new_key
    from marlaas.service.runner import ServiceRunner
    from marlaas.service.server import server_config

    config, base_dir = load_config(args.cluster, args.policy)
    cost = None
    if args.cost:
        if not args.simulate:
            raise UsageError("serve: --cost is for --simulate")
        from marlaas.sim.cost_profiles import load_profile

        cost = load_profile(args.cost).cost
    if args.ray is not None:
        if args.simulate:
            raise UsageError("serve: --ray runs the real executor's actors; not with --simulate")
        from marlaas.ray_cluster import require_ray

        require_ray("serve --ray", args.ray)
    max_streams = _ensure_descriptors(args.max_streams)
    data = _data_folder(args.data, create=False)  # every check before anything is written
    unoffered: list[str] = []  # the environments this host cannot run, left out
    if not args.simulate:
        from marlaas.executors.backends import ModelDirError

        listed = config.service.environments
        config = _check_environments(config, args.cluster)
        unoffered = [name for name in listed if name not in config.service.environments]
        try:
            _check_base_model(data, config, base_dir)
        except ModelDirError as err:  # named by its field: the file is the cluster file
            raise ModelDirError(f"{args.cluster}: {err}") from None
    listening = _listening_socket(args.host, args.port)  # a port in use: nothing written
    try:
        created = not data.exists()
        make_data_folder(data)
        lock = lock_folder(data, "--data")
        opened = open_to_others(data)
        if opened:
            print(f"marlaas: warning: {opened}", file=sys.stderr)
    except BaseException:
        listening.close()
        raise
    stack = ExitStack()  # the Ray session of --ray
    try:
        store = _store_in(data, args.db, created)  # first: if it fails, nothing is written
        try:
            store.hold()  # one service to a database (two data folders may name one --db)
        except BaseException:
            store.close()
            raise
        args.interrupt_hint = (  # from here on, a Ctrl-C or SIGTERM leaves the data folder
            "the service stopped; its jobs continue from their last durable step when it "
            "starts again"
        )
        _write_once(data / OPERATOR_KEY_FILE, new_key())
        if not args.simulate:
            _record_base_model(data, config, base_dir)
        logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
        options = {} if args.simulate else {"backend": args.backend, "ray": args.ray}
        runner = ServiceRunner(config, base_dir, data, store, simulate=args.simulate,
                               speed=args.speed, cost=cost, **options)  # fmt: skip
        found = runner.misfits()
        misfits = [said for env, said in found if env not in unoffered]  # the cluster file's
        hosts = [said for env, said in found if env in unoffered]  # this host cannot run them
        if hosts and not misfits:  # the host, not the cluster file: the advice is the host's
            store.close()  # (with misfits of the cluster file's too: theirs first)
            raise UsageError(
                f"serve: {len(hosts)} queued or running job(s) need an environment this "
                f"host cannot run ({', '.join(unoffered)}; the warning above says why): "
                f"{'; '.join(hosts[:3])}{'; ...' if len(hosts) > 3 else ''}; serve "
                "where it runs, or make it run here, to continue them"
            )
        if misfits:
            store.close()
            raise UsageError(
                f"serve: {len(misfits)} queued or running job(s) no longer fit the service: "
                f"block of {args.cluster} ({'; '.join(misfits[:3])}"
                f"{'; ...' if len(misfits) > 3 else ''}): start with the cluster file they "
                f"were submitted under ({data / CONFIG_FILE} is the last one) and cancel them, "
                "or keep its limits"
            )
        _save_config(data, config, base_dir)
        where = "simulated, " if args.simulate else ""
        print(f"marlaas: starting {config.name} ({where}policy {config.policy}); data in "
              f"{data}, operator key in {data / OPERATOR_KEY_FILE}", file=sys.stderr,
              flush=True)  # fmt: skip
        if args.ray is not None:  # Ray started (or joined) here, on the main thread
            from marlaas.ray_cluster import ray_session

            stack.enter_context(ray_session(args.ray))
        try:
            runner.start()
        except BaseException as err:
            raise _driver_stopped(err, args.cluster, store.url) from None
        app = create_app(runner, data, max_streams)
        server = uvicorn.Server(server_config(
            app, args.host, args.port, connection_limit(max_streams), log_level=args.log_level,
            access_log=args.log_level == "debug", max_per_address=args.max_per_address,
        ))  # fmt: skip
        runner.when_stopped(lambda: setattr(server, "should_exit", True))
        listening.listen(server.config.backlog)  # uvicorn accepts them once it has started
        port = listening.getsockname()[1]  # --port 0: the one the system gave
        print(f"marlaas: serving on http://{args.host}:{port} (API docs at /docs)",
              file=sys.stderr, flush=True)  # fmt: skip
        try:
            server.run(sockets=[listening])
        finally:
            runner.stop()
            store.close()
        if runner.error is not None:
            raise _driver_stopped(runner.error, args.cluster, store.url) from None
        return 0
    finally:
        listening.close()
        stack.close()
        unlock(data, lock)


def _driver_stopped(err: BaseException, cluster: str, url: str) -> BaseException:
    """What ``serve`` exits with when its driver stopped on ``err``: for a policy that raised
    (or returned what is not a key), one line naming the policy, the call and what it raised,
    and what to do (every job is kept at its last durable step, and continues on the next
    start); for the job store's database (at ``url``) that failed (its disk full, its server
    gone), one line too, where it was SQLAlchemy's traceback; any other error as it is."""
    from sqlalchemy.exc import SQLAlchemyError

    from marlaas.policy_path import PolicyError

    if isinstance(err, SQLAlchemyError):
        from marlaas.service.db import failed_database

        return failed_database(
            url, err, "the service stopped: every job is kept at its last durable step and "
            "continues when the service starts again: see to the database (its disk, its "
            "server), then serve again"
        )  # fmt: skip
    if not isinstance(err, PolicyError):
        return err
    return UsageError(
        f"serve: the service stopped: {err}. Every job is kept at its last durable step and "
        f"continues when the service starts again: fix the policy, or serve {cluster} "
        "--policy NAME with another"
    )


def _ensure_descriptors(asked: int | None) -> int:
    """The event streams the service takes at once (``asked``: --max-streams; None: the
    default), after letting this process open their connections + :data:`RESERVED_DESCRIPTORS`
    files: the soft ``RLIMIT_NOFILE`` is raised to that, within the hard one. The connection
    limit is there so that clients cannot take the descriptors the database and the adapters
    need; under a soft limit of 1,024 (many systems') a ``--max-streams`` of 500 or more let
    them take every one (EMFILE on the database, on an adapter's save). A hard limit too low
    for an asked --max-streams is one line; the default is lowered to what it allows, saying
    so (a hard limit of 1,024 allows 240 streams, not 256: refusing it refused the plain
    ``marlaas serve`` on such a host), and refused only where it allows none."""
    import resource

    from marlaas.service import connections as bounds  # read when called

    default = bounds.MAX_STREAMS
    max_streams = default if asked is None else asked
    needed = bounds.connection_limit(max_streams) + RESERVED_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return max_streams
    if hard != resource.RLIM_INFINITY and hard < needed:
        room = max_streams - (needed - hard)  # the streams the hard limit leaves room for
        if asked is None and room >= 1:
            print(f"marlaas: warning: serve: --max-streams {room} (not {default}): this "
                  f"process may open {hard:,} files (ulimit -Hn), and each stream's connection "
                  f"is one of them", file=sys.stderr)  # fmt: skip
            max_streams, needed = room, hard
        else:
            cause = "--max-streams"
            if asked is None:  # the figure the constant holds: the text follows it
                cause = f"the default --max-streams ({default})"
            connections = bounds.connection_limit(max_streams)
            raise UsageError(
                f"serve: {connections:,} connections ({cause}) and {RESERVED_DESCRIPTORS} "
                f"files of the service's own need {needed:,} file descriptors; this process "
                f"may open {hard:,} (ulimit -Hn): raise the limit, or give a smaller "
                "--max-streams"
            )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return max_streams


def _listening_socket(host: str, port: int) -> socket.socket:
    """The service's TCP socket (:func:`marlaas.service.server.listening_socket`), bound
    before anything starts (uvicorn would bind it only once the jobs resumed, and exit with
    its own code): a port in use is one line."""
    from marlaas.service.server import listening_socket

    try:
        return listening_socket(host, port)
    except OSError as err:
        raise UsageError(f"serve: cannot listen on {host}:{port} ({err.strerror or err})") from None


def _data_folder(path: str, create: bool = True) -> Path:
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


def _write_once(path: Path, text: str) -> None:
    """Write ``text`` to a new owner-only file (an existing one is kept)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _base_model(config, base_dir: Path) -> dict:
    from marlaas.executors.backends import model_dir_of
    from marlaas.executors.resume import base_model_identity

    return base_model_identity(config.base_model.name, model_dir_of(config, base_dir))


def _check_environments(config, cluster: str):
    """``config`` with the environments a real service offers: one that
    ``service.environments`` lists and that cannot run on this host (``python_exec`` without
    its sandbox) is refused, as ``marlaas train`` refuses such a workload (every job naming it
    was taken, 201, and failed at its first step); where the cluster file lists none, the
    default ones that cannot run are left out, saying so (a job naming one is then 422)."""
    from marlaas.envs import resolve_env

    listed = "environments" in config.service.model_fields_set
    offered = []
    for name in config.service.environments:
        try:
            resolve_env(name).check_runtime()
        except RuntimeError as err:
            why = " ".join(str(err).split())
            if listed:
                raise UsageError(
                    f"serve: {cluster}: service.environments names {name!r}, which cannot run "
                    f"on this host ({why}); remove it from the list, or serve where it runs"
                ) from None
            print(f"marlaas: warning: serve: environment {name!r} is not offered: it cannot "
                  f"run on this host ({why})", file=sys.stderr)  # fmt: skip
            continue
        offered.append(name)
    if offered == config.service.environments:
        return config
    service = config.service.model_copy(update={"environments": offered})
    return config.model_copy(update={"service": service})


def _check_base_model(data: Path, config, base_dir: Path) -> None:
    """Refuse a base model other than the one the data folder's adapters were trained on
    (or one that is not there)."""
    from marlaas.output.errors import OutputError

    now = _base_model(config, base_dir)
    path = data / BASE_MODEL_FILE
    if path.is_file():
        try:
            before = json.loads(path.read_text())
        except ValueError:
            raise OutputError(f"{path}: damaged (not JSON); restore it") from None
        if before != now:
            raise OutputError(
                f"{data}: its adapters were trained on base model {before.get('base_model')!r} "
                f"(config SHA-256 {str(before.get('base_model_config'))[:12]}...), not "
                f"{now['base_model']!r} ({str(now['base_model_config'])[:12]}...); serve that "
                "model, or another --data folder"
            )


def _record_base_model(data: Path, config, base_dir: Path) -> None:
    """Record the base model the data folder's adapters are trained on (once)."""
    from marlaas.atomic import write_durably

    path = data / BASE_MODEL_FILE
    if not path.is_file():
        write_durably(path, json.dumps(_base_model(config, base_dir)) + "\n")


def _save_config(data: Path, config, base_dir: Path) -> None:
    from marlaas.atomic import write_durably

    plain = config.model_dump()
    model = plain["base_model"].get("path")
    if model is not None:
        plain["base_model"]["path"] = str((base_dir / model).resolve())
    write_durably(data / CONFIG_FILE, json.dumps(plain, indent=1) + "\n")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", help="cluster file: a workload file without jobs, with an "
                        "optional service: block (see traces/service/tiny.yaml)")  # fmt: skip
    _data_arguments(parser)
    parser.add_argument("--policy", help="ordering, in place of the cluster file's: a bundled "
                        "policy's name, or your own by import path pkg.module:Class "
                        "(docs/policies.md)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=bounded_int(0, 65_535), default=8000,
                        help="TCP port to listen on")  # fmt: skip
    parser.add_argument("--simulate", action="store_true", help="the simulator on the wall "
                        "clock instead of a model: try a policy against live traffic")  # fmt: skip
    parser.add_argument("--speed", type=positive_float(MAX_SPEED), default=1.0,
                        help="--simulate: simulated seconds per wall second (at most "
                        f"{MAX_SPEED:g})")  # fmt: skip
    parser.add_argument("--cost", metavar="PROFILE", help="--simulate: cost profile (a "
                        "bundled name or a file from marlaas calibrate)")  # fmt: skip
    parser.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto",
                        help="generation backend of the real executor (auto: vLLM if it "
                        "imports)")  # fmt: skip
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="run every inference engine, trainer and a pool of environments "
                        "as Ray actors (the scheduler stays here): no ADDRESS starts a local "
                        "cluster, `auto` joins this machine's, HOST:PORT that head "
                        "(docs/ray.md)")  # fmt: skip
    from marlaas.service import connections  # the figures, from where they are defined

    per_key, streams = connections.MAX_STREAMS_PER_CALLER, connections.MAX_STREAMS
    parser.add_argument("--max-streams", type=bounded_int(1, 1_000_000), metavar="N",
                        help="event streams (GET /v1/jobs/{id}/events) open at once, of every "
                        f"tenant together; one more is 429 (default: {streams}; each key "
                        f"holds {per_key} at most; the operator's are not counted); the "
                        f"server keeps N + {connections.connection_limit(0)} connections "
                        "open at most")  # fmt: skip
    parser.add_argument("--max-connections-per-address", type=bounded_int(1, 1_000_000),
                        metavar="N", dest="max_per_address", help="connections open at once "
                        "from one client address; one more is 503, closed unread (default: no "
                        "such bound; not behind a reverse proxy, whose address every "
                        "connection has: bound them there)")  # fmt: skip
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        default="info", help="the service's log (stderr); debug also logs "
                        "every request and the libraries' chatter")  # fmt: skip
    parser.set_defaults(func=_serve)


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, type=path_arg, help="the service's data "
                        "folder (adapters, keys' secret, the SQLite database)")  # fmt: skip
    parser.add_argument("--db", metavar="URL", help="database URL (default: SQLite in --data; "
                        "e.g. postgresql+psycopg://user@host/db)")  # fmt: skip


def _open_store(args: argparse.Namespace, with_keys: bool = True, read_only: bool = False):
    """The job store of ``--data`` (made, for ``tenants add``) on ``--db``; ``with_keys``
    False: without the keys' secret; ``read_only``: for a command that only reads, which
    makes, migrates and writes nothing (:class:`~marlaas.service.store.JobStore`)."""
    require_service_stack(("sqlalchemy", "alembic"))
    created = not Path(args.data).exists()
    data = _data_folder(args.data, create=not read_only)
    return _store_in(data, args.db, created, with_keys, read_only)


def _store_in(data: Path, db: str | None, created: bool, with_keys: bool = True,
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


def _tenants(args: argparse.Namespace) -> int:
    from marlaas.core.spec_fields import check_name, shown_name
    from marlaas.service.store import TenantError, new_tenant_name

    if args.action != "list":  # the arguments are checked before the data folder is touched
        if args.name is None:
            raise UsageError(f"tenants {args.action}: give the tenant's NAME")
        try:
            check_name(args.name)
        except ValueError as err:
            raise UsageError(
                f"tenants {args.action}: tenant name {shown_name(args.name)}: {err}"
            ) from None
    if args.action in ("list", "revoke"):
        given = [flag for flag, value in (("--max-active-jobs", args.max_active_jobs),
                                          ("--max-queued-jobs", args.max_queued_jobs))
                 if value is not None]  # fmt: skip
        if given:
            raise UsageError(f"tenants {args.action}: {given[0]} is for tenants add and "
                             "tenants quota")  # fmt: skip
    if args.action != "add":  # they make nothing
        if not Path(args.data).exists():
            raise UsageError(f"tenants {args.action}: {args.data}: no such data folder "
                             "(`marlaas tenants add` or `marlaas serve` makes one)")  # fmt: skip
        _data_folder(args.data, create=False)  # one of ours
    if args.action == "list":
        _list_tenants(args)
        return 0
    if args.action == "add" and not Path(args.data).exists():
        try:  # nothing stored there: a new tenant, refused before the folder is made
            new_tenant_name(args.name)
        except TenantError as err:
            raise UsageError(f"tenants add: {err}") from None
    from marlaas.service.db import DB_FILE

    if args.action != "add" and args.db is None and not (Path(args.data) / DB_FILE).exists():
        # revoke, quota: they make neither the database nor the keys' secret
        raise UsageError(f"tenants {args.action}: no tenant named {args.name!r} ({args.data} "
                         "has no database yet)")  # fmt: skip
    if args.action == "quota" and args.max_active_jobs is args.max_queued_jobs is None:
        raise UsageError("tenants quota: give --max-active-jobs or --max-queued-jobs (a number, "
                         "or 'default' for the cluster file's); one left out is kept")  # fmt: skip
    store = _open_store(args)
    try:
        quota = _quota_given(args, store)
        if args.action == "add":
            key = store.add_tenant(args.name, quota)
            print(f"tenant {args.name} added; its API key (shown once, keep it):",
                  file=sys.stderr)  # fmt: skip
            print(key)
        elif args.action == "quota":
            store.set_quota(args.name, quota)
            print(
                f"tenant {args.name}: at most {_limit(quota.max_active_jobs, 'active')} and "
                f"{_limit(quota.max_queued_jobs, 'queued')} (from its next request)"
            )
        else:
            store.revoke_tenant(args.name)
            print(f"tenant {args.name}: key revoked")
    except TenantError as err:
        raise UsageError(f"tenants {args.action}: {err}") from None
    finally:
        store.close()
    return 0


def _quota_given(args: argparse.Namespace, store):
    """The quotas the flags name, a TenantSpec (``default``: the cluster file's, None); for
    ``quota``, one left out is the tenant's own as it stands (it was set back to the cluster
    file's)."""
    from marlaas.core.tenant_spec import TenantSpec

    kept = TenantSpec()
    if args.action == "quota":
        kept = next((t.quota for t in store.tenants() if t.name == args.name), kept)
    active, queued = args.max_active_jobs, args.max_queued_jobs
    return TenantSpec(
        max_active_jobs=kept.max_active_jobs if active is None else _or_none(active),
        max_queued_jobs=kept.max_queued_jobs if queued is None else _or_none(queued),
    )


def _or_none(value: int | str) -> int | None:
    """A quota flag's value: a number, or None for ``default`` (the cluster file's)."""
    return None if value == QUOTA_DEFAULT else int(value)


QUOTA_DEFAULT = "default"
"""A quota flag's value that stands for the cluster file's quota."""


def _quota_flag(low: int, high: int):
    """An argparse ``type``: an integer in [low, high], or ``default``."""
    number = bounded_int(low, high)

    def parse(text: str) -> int | str:
        if text == QUOTA_DEFAULT:
            return text
        try:
            return number(text)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{err}, nor {QUOTA_DEFAULT!r}") from None

    parse.__name__ = "quota"
    return parse


def _list_tenants(args: argparse.Namespace) -> None:
    """``tenants list``: it only reads, so it opens the job store read-only (it migrated the
    database, and made it and the keys' secret in a data folder that had none); the secret is
    checked where there is one (a damaged or missing one is the operator's to hear of)."""
    from marlaas.service.db import DB_FILE

    counts, tenants = {}, []
    if args.db is not None or (Path(args.data) / DB_FILE).exists():  # else none: not made
        store = _open_store(args, read_only=True)
        try:
            counts, tenants = store.job_counts(), store.tenants()
        finally:
            store.close()
    from marlaas.service.tenant_names import shown_tenant

    names = [shown_tenant(t.name) + (" (revoked)" if t.revoked else "") for t in tenants]
    width = max([24, *map(len, names)])  # every row's columns line up under the longest
    print(f"{'tenant':<{width}s} {'active':>6s} {'queued':>6s}  jobs")
    for tenant, name in zip(tenants, names, strict=True):
        quota = tenant.quota
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(counts.get(tenant.name, {}).items()))
        print(f"{name:<{width}s} {_limit(quota.max_active_jobs):>6s} "
              f"{_limit(quota.max_queued_jobs):>6s}  {jobs or '-'}")  # fmt: skip


def _limit(value: int | None, what: str = "") -> str:
    """A tenant's quota as listed (``-``: the cluster file's); with ``what``, in words."""
    if what:
        return f"the cluster file's {what}" if value is None else f"{value} {what}"
    return "-" if value is None else str(value)


def _tenants_arguments(parser: argparse.ArgumentParser) -> None:
    from marlaas.core.limits import MAX_JOBS

    parser.add_argument("action", choices=("add", "list", "quota", "revoke"), help="add a "
                        "tenant (its API key printed once), list them, set one's quotas (its "
                        "key kept), or revoke one's key")  # fmt: skip
    parser.add_argument("name", nargs="?", help="the tenant (add, quota, revoke)")
    _data_arguments(parser)
    parser.add_argument("--max-active-jobs", type=_quota_flag(1, MAX_JOBS), metavar="N",
                        help="add, quota: its jobs admitted at once, or 'default': the "
                        "cluster file's (quota: left out, kept as it is)")  # fmt: skip
    parser.add_argument("--max-queued-jobs", type=_quota_flag(0, MAX_JOBS), metavar="N",
                        help="add, quota: its jobs waiting at once, or 'default': the "
                        "cluster file's (quota: left out, kept as it is)")  # fmt: skip
    parser.set_defaults(func=_tenants)


def _traffic(args: argparse.Namespace) -> int:
    from marlaas.atomic import write_durably
    from marlaas.core.limits import MAX_GROUP_TURNS, MAX_JOBS
    from marlaas.out_folder import claim_file
    from marlaas.service.config import ServiceConfig, load_named_policy
    from marlaas.service.traffic import is_traffic_file, traffic_workload, traffic_yaml

    saved = _data_folder(args.data, create=False) / CONFIG_FILE  # read only: nothing made
    if not saved.is_file():
        raise UsageError(f"traffic: {args.data} has no {CONFIG_FILE}; has it been served?")
    text = saved.read_bytes()
    plain = None
    with suppress(ValueError):  # not JSON: said below, as damaged
        plain = json.loads(text)
    if isinstance(plain, dict):  # a policy by import path is loaded before it is checked
        load_named_policy(plain.get("policy"), str(saved))
    try:
        config = ServiceConfig.model_validate_json(text)
    except ValueError as err:  # pydantic's ValidationError: not JSON, or not a cluster file
        from marlaas.core.validation_message import format_validation_error

        raise UsageError(
            f"traffic: {saved}: damaged ({format_validation_error(err, 'config')}); `marlaas "
            "serve` writes it again (the cluster file the service runs with)"
        ) from None
    from marlaas.service.db import DB_FILE

    if args.db is None and not (Path(args.data) / DB_FILE).exists():  # opening it makes it
        from marlaas.core.workload import WorkloadError

        raise WorkloadError("the service has had no submissions yet: no traffic to write")
    store = _open_store(args, with_keys=False, read_only=True)  # it reads: nothing is written
    try:
        workload, left_out, unkept = traffic_workload(store, config)
    finally:
        store.close()
    with claim_file(args.out, "traffic workload", is_traffic_file) as path:
        write_durably(path, traffic_yaml(workload))
    if left_out:
        print(f"marlaas: warning: traffic: the oldest {left_out:,} submissions are left out: "
              f"a workload holds at most {MAX_JOBS:,} jobs and {MAX_GROUP_TURNS:,} group-turns "
              "in all (the newest that fit are written)", file=sys.stderr)  # fmt: skip
    if unkept:
        print(f"marlaas: warning: traffic: {unkept:,} older refused submissions are left out: "
              "the service keeps the spec of each tenant's newest refused ones only (service: "
              f"refused_specs_kept, {config.service.refused_specs_kept})",
              file=sys.stderr)  # fmt: skip
    print(f"wrote {args.out} ({len(workload.jobs)} jobs, {len(workload.tenants)} tenants); "
          f"replay it: marlaas simulate {args.out} --out RUN")  # fmt: skip
    return 0


def _traffic_arguments(parser: argparse.ArgumentParser) -> None:
    _data_arguments(parser)
    parser.add_argument("--out", required=True, type=path_arg, help="workload file to write")
    parser.set_defaults(func=_traffic)


COMMANDS = (
    ("serve", SERVE_HELP, _serve_arguments),
    ("tenants", TENANTS_HELP, _tenants_arguments),
    ("traffic", TRAFFIC_HELP, _traffic_arguments),
    *tenant_cli.COMMANDS,
)
"""(name, help line, function adding the command's arguments and ``func``)."""
