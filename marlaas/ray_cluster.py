"""Connect to a Ray cluster, or start a local one, for a real run, a service or a sweep.

    ray_session(None)     a local cluster of this machine, started here, stopped on exit
    ray_session("auto")   join the cluster this machine is part of (``ray start``)
    ray_session("H:P")    join the cluster whose head listens there

A cluster started here gets its own temporary folder (removed on exit), no dashboard, no usage
statistics and no auth token (``RAY_AUTH_MODE=disabled``): these are set when it starts, never
at import. When Ray is already initialised in this process (a test's cluster), it is used as
it is and left running.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from marlaas.core.ascii_digits import ascii_digits

RAY_PIP = "pip install -e '.[ray]'"
"""How to install Ray (the ``ray`` extra)."""
LOCAL_CLUSTER_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
"""Settings of a local cluster started here (a value already in the environment wins)."""
LOCAL = "local"
"""``--ray`` without an address: start a local cluster."""


class RayUnavailableError(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def require_ray(what: str = "--ray", address: str | None = None) -> None:
    """Raise RayUnavailableError, one line, before any work: without Ray (with the install
    command), or when ``address`` is a ``HOST:PORT`` where nothing answers."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise RayUnavailableError(f"{what} needs Ray: {RAY_PIP} (ray is not installed)")
    if address not in (None, LOCAL):
        _check_reachable(address)


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Ray, initialised in this process for the block (see the module docstring).

    ``num_cpus``: a local cluster's CPUs (logical: what actors may ask for; default this
    machine's count)."""
    require_ray()
    import ray

    if ray.is_initialized():
        yield
        return
    if address not in (None, LOCAL):
        _check_reachable(address)
        try:
            with _own_sigterm():
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise RayUnavailableError(
                f"--ray {address}: cannot join the cluster ({' '.join(str(err).split())[:200]})"
            ) from None
        try:
            yield
        finally:
            ray.shutdown()
        return
    for key, value in LOCAL_CLUSTER_ENV.items():
        os.environ.setdefault(key, value)
    temp_dir = tempfile.mkdtemp(prefix="marlaas-ray-")
    try:
        with _own_sigterm():
            ray.init(
                num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                _temp_dir=temp_dir, log_to_driver=False, configure_logging=False,
            )  # fmt: skip
        try:
            yield
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


HEAD_CONNECT_TIMEOUT_S = 5.0
"""How long joining a head node may take to answer at all [s] (Ray itself retries for
minutes, printing its own warnings, before it gives up on an address nothing listens on)."""


def _check_reachable(address: str) -> None:
    """RayUnavailableError, one line, at once, when ``address`` is not ``auto``, ``HOST:PORT``
    or a client's ``SCHEME://...``, or when nothing accepts a connection at its ``HOST:PORT``
    (a plain one, or a ``ray://`` one with a port). Ray's own refusal of a malformed address
    logs a traceback first (``--ray :``), and of a ``ray://`` one comes after a minute."""
    if address == "auto":
        return
    scheme, has_scheme, rest = address.rpartition("://")
    if has_scheme and scheme != "ray":
        return  # another client's scheme: left to Ray
    host, port = _host_port(rest)
    if port is None:
        if has_scheme and rest and (":" not in rest or rest.endswith("]")):
            return  # ray://HOST or ray://[IPv6]: the client's default port, left to Ray
        raise RayUnavailableError(f"--ray {address}: not a cluster address (give `auto`, "
                                  "HOST:PORT, ray://HOST:PORT, or nothing for a local "
                                  "cluster)")  # fmt: skip
    try:
        socket.create_connection((host, port), HEAD_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as err:
        raise RayUnavailableError(
            f"--ray {address}: no Ray head answers there ({' '.join(str(err).split())[:200]}); "
            "start one with `ray start --head` (docs/ray.md)"
        ) from None


MAX_PORT = 65_535
"""The largest TCP port."""


def _host_port(text: str) -> tuple[str, int | None]:
    """(host, port) of ``HOST:PORT`` (an IPv6 host in brackets); port None when ``text`` has
    no host or no port from 1 to MAX_PORT."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not ascii_digits(port) or not 0 < int(port) <= MAX_PORT:
        return host, None
    return host, int(port)


@contextmanager
def _own_sigterm() -> Iterator[None]:
    """Keep this process's SIGTERM handler: ``ray.init`` replaces it with one that exits at
    once, which would skip marlaas's own (a stopped run says how to resume; a service saves
    its state and says so)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler set outside Python, left to Ray
            signal.signal(signal.SIGTERM, previous)
