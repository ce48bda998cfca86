"""``marlaas serve``: checks the cluster file, the host and the data folder before anything
is written, then runs the driver (:mod:`marlaas.service.runner`) and the HTTP server
(:mod:`marlaas.service.app`) until it is stopped. Its libraries (FastAPI, uvicorn,
SQLAlchemy) are imported inside the command; without them it says what to install."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from contextlib import ExitStack
from pathlib import Path

from marlaas.run_options import bounded_int, positive_float, profile_arg
from marlaas.service.data_folder import (
    BASE_MODEL_FILE,
    CONFIG_FILE,
    data_arguments,
    data_folder,
    make_data_folder,
    open_to_others,
    store_in,
)
from marlaas.service.stack import require_service_stack
from marlaas.terminal import UsageError

SERVE_HELP = "run MARLaaS as a service: tenants submit jobs over HTTP"

MAX_SPEED = 1e6
"""The fastest --simulate clock [simulated seconds per wall second]: a year of work in 32 s."""

RESERVED_DESCRIPTORS = 512
"""File descriptors ``serve`` keeps for itself beyond its connections: the database's, the
adapters' and the model's files, the engines', trainers' and environments' own."""


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
    if args.cost is not None:
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
    data = data_folder(args.data, create=False)  # every check before anything is written
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
        store = store_in(data, args.db, created)  # first: if it fails, nothing is written
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
    data_arguments(parser)
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
    parser.add_argument("--cost", type=profile_arg, metavar="PROFILE", help="--simulate: "
                        "cost profile (a bundled name or a file from calibrate)")  # fmt: skip
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
