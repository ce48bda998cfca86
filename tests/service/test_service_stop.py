"""A service stopped while its jobs run: the driver returns (the jobs resume on the next
start) instead of dying with "the executor reported nothing"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.service.conftest import JOB, serve


def test_a_service_stopped_while_a_job_runs_stops_without_a_driver_error(tmp_path):
    # At one simulated second per second no completion comes with the stop's wake-up: the
    # executor's wait answers None, which a closed inbox used to take for a stalled run.
    service = serve(tmp_path / "data", speed=1.0)
    client = service.client(service.key("alice"))
    job = client.submit({**JOB, "rl": {**JOB["rl"], "steps": 2000}})["id"]
    deadline = time.monotonic() + 30
    while client.job(job)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    service.stop()  # asserts that the driver did not stop on its own
    assert not service.runner.alive
    assert service.runner.error is None


def test_an_event_stream_goes_on_through_a_stop_and_a_start_of_the_service(tmp_path, monkeypatch):
    """A service that stops (SIGTERM, Ctrl-C) ends its event streams cleanly, which the
    client took for the job's end: ``events`` returned mid-job, and ``marlaas watch`` exited
    1 ("cannot reach") at once, instead of following the job on the restarted service."""
    import threading
    from urllib.parse import urlsplit

    from sse_starlette.sse import AppStatus

    service = serve(tmp_path / "data", speed=5.0)
    key = service.key("alice")
    client = service.client(key)
    job = client.submit({**JOB, "rl": {**JOB["rl"], "steps": 100_000}})["id"]
    seen: list = []
    follower = threading.Thread(target=lambda: seen.extend(
        client.events(job, retry_s=0.1)), daemon=True)  # fmt: skip
    follower.start()
    deadline = time.monotonic() + 30
    while sum(event.kind == "step" for event in seen) < 2:
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)
    # what SIGTERM sets for the streams (uvicorn's signal handler, which a server on a
    # thread has not): each ends cleanly, as they do when `marlaas serve` stops
    monkeypatch.setattr(AppStatus, "should_exit", True)
    service.stop()
    monkeypatch.setattr(AppStatus, "should_exit", False)
    time.sleep(1)
    assert follower.is_alive(), "the stream ended with the service; the job had not"
    service = serve(tmp_path / "data", speed=5.0, port=urlsplit(service.url).port)
    try:
        before = len(seen)
        while len(seen) == before:  # it reconnected: the new service's events come
            assert time.monotonic() < deadline + 30, seen[-3:]
            time.sleep(0.05)
        service.client(key).cancel(job)
        follower.join(30)
        assert not follower.is_alive()
    finally:
        service.stop()
    ids = [event.id for event in seen]
    assert ids == sorted(set(ids))  # none twice (Last-Event-ID)
    assert (seen[-1].kind, seen[-1].data["state"]) == ("state", "cancelled")


def test_an_event_stream_that_falls_silent_is_given_up(monkeypatch):
    """A service that froze (SIGSTOP, a host gone without a word) left ``marlaas watch``
    waiting forever: the stream had no read timeout. The service pings every 15 s; a stream
    silent for STREAM_SILENCE_S is taken as lost, and a service not reached again in
    RECONNECT_S is ServiceError (status 0).

    The frozen service is a transport, not a socket served by a thread of the test: that
    thread's answer, late on a loaded machine, could come after a silence limit short enough
    for a test (0.5 s) and the event was lost. Here the stream's head and event come at once,
    then a read past the stream's read timeout raises ReadTimeout as the socket's does (one
    with no read timeout waits, as a socket would, until the test's bound)."""
    import threading

    import httpx

    from marlaas import client as client_module
    from marlaas.client import Client, ServiceError

    monkeypatch.setattr(client_module, "STREAM_SILENCE_S", 0.5, raising=False)
    monkeypatch.setattr(client_module, "RECONNECT_S", 1.0, raising=False)
    frozen_for_good = threading.Event()
    asked: list[tuple[str | None, float | None]] = []  # (Last-Event-ID, read timeout [s])

    def silent(request: httpx.Request, read_s: float | None):
        """What a frozen service's socket gives a read: nothing, until the read timeout."""
        if read_s is None:
            frozen_for_good.wait(60.0)  # no read timeout: waits (the test fails at its bound)
        raise httpx.ReadTimeout("nothing came", request=request)

    class Stream(httpx.SyncByteStream):
        """The head's event, then silence."""

        def __init__(self, request: httpx.Request, read_s: float | None) -> None:
            self.request, self.read_s = request, read_s

        def __iter__(self):
            yield b"id: 1\nevent: step\ndata: {}\n\n"
            silent(self.request, self.read_s)

    class FrozenService(httpx.BaseTransport):
        """A stream's head and one event, then nothing: the process froze (the kernel still
        takes the connections that come next, and nobody answers them)."""

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            read_s = request.extensions["timeout"]["read"]
            asked.append((request.headers.get("Last-Event-ID"), read_s))
            if len(asked) > 1:  # a reconnection: no answer
                silent(request, read_s)
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=Stream(request, read_s))  # fmt: skip

    client = Client("http://127.0.0.1:9", "k")
    client._http = httpx.Client(base_url=client.url, transport=FrozenService())
    outcome: list = []

    def follow() -> None:
        try:
            outcome.extend(client.events(1, retry_s=0.1))
        except ServiceError as err:
            outcome.append(err)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    follower.join(30)
    frozen_for_good.set()
    assert not follower.is_alive(), "still waiting on a silent stream"
    assert [event.id for event in outcome[:-1]] == [1]
    assert isinstance(outcome[-1], ServiceError) and outcome[-1].status == 0, outcome
    assert "could not reconnect within 1 s" in str(outcome[-1])
    assert asked[0] == (None, 0.5) and len(asked) > 1, asked  # silent for 0.5 s: lost
    assert set(asked[1:]) == {("1", 0.5)}, asked  # reconnected after the event it had


def test_a_download_to_a_client_that_stopped_reading_does_not_hold_the_stop(tmp_path, monkeypatch):
    """A stopping server waited for every answer in progress to finish: an adapter download
    to a client that stopped reading held SIGTERM until the kernel gave up on that client
    (45 s, ``UNACKED_S``), and one to a client that reads a little, until the whole adapter
    went. The answers still in progress SHUTDOWN_GRACE_S after the stop are cut."""
    import os
    import socket
    import threading

    from marlaas.service.server import SHUTDOWN_GRACE_S

    service = serve(tmp_path / "data")
    key = service.key("alice")
    job, _ = service.job_with_adapter(key, monkeypatch, os.urandom(64 << 20))
    host, port = service.url.removeprefix("http://").split(":")
    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((host, int(port)))
        stalled.sendall(f"GET /v1/jobs/{job}/adapters/0 HTTP/1.1\r\nHost: marlaas\r\n"
                        f"Authorization: Bearer {key}\r\n\r\n".encode())  # fmt: skip
        assert stalled.recv(12) == b"HTTP/1.1 200"  # and then it reads no more
        time.sleep(1)
        started = time.monotonic()
        stopper = threading.Thread(target=service.stop, daemon=True)
        stopper.start()
        stopper.join(SHUTDOWN_GRACE_S + 20)
        assert not stopper.is_alive(), "the server still waits on the download"
    assert time.monotonic() - started < SHUTDOWN_GRACE_S + 20


def _serve_process(cluster, data, *args: str, env: dict | None = None):
    """``marlaas serve CLUSTER --simulate`` in a process of its own, on a free port, from the
    repository's root (so that ``tests.service.raising_policy`` imports); (process, URL) once
    it serves. Its stderr is read to that line; the rest stays in the pipe."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "marlaas", "serve", str(cluster), "--data", str(data),
         "--simulate", "--speed", "50", "--port", "0", "--log-level", "warning", *args],
        cwd=root, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root), **(env or {})},
    )  # fmt: skip
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "serving on " in line:
            return process, line.split("serving on ")[1].split()[0]
    process.wait(30)
    raise AssertionError(f"serve did not start: {''.join(seen)}")


def test_a_policy_that_raises_stops_the_service_in_one_line_and_a_restart_continues(tmp_path):
    """A policy by import path whose key raised while `serve` ran killed the driver with a
    traceback in the log (and `serve` did not take a policy by import path at all: 'unknown
    policy'). Now the service stops, its log and its exit one line naming the policy, the
    call and what it raised, status 2; every job stays at its last durable step, and `serve`
    started again (here with --policy fair) continues them: each step recorded once."""
    import json
    import re
    import signal
    import subprocess

    from marlaas.client import Client, ServiceError
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore
    from tests.service.conftest import CLUSTER
    from tests.service.raising_policy import RAISE_AT_ENV

    cluster, data = tmp_path / "cluster.json", tmp_path / "data"
    cluster.write_text(json.dumps(CLUSTER))  # YAML's superset: the cluster file
    data.mkdir(mode=0o700)  # as serve and tenants add make it
    store = JobStore(database_url(data, None), data)
    try:
        key = store.add_tenant("alice")
    finally:
        store.close()
    policy = "tests.service.raising_policy:RaiseOnNthKey"
    process, url = _serve_process(cluster, data, "--policy", policy, env={RAISE_AT_ENV: "150"})
    try:
        client, submitted = Client(url, key), []
        job = {**JOB, "rl": {**JOB["rl"], "steps": 40}}
        for _ in range(3):
            try:
                submitted.append(client.submit(job)["id"])
            except ServiceError as err:  # the driver stopped meanwhile: 503, nothing kept
                assert err.status in (0, 503), err
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    logged = [line for line in lines if " ERROR " in line]
    assert len(logged) == 1 and re.fullmatch(
        r".* ERROR marlaas\.service: the driver stopped: policy '" + re.escape(policy)
        + r"': key\(job 'j\d+'\) raised RuntimeError: key call 150 fails", logged[0]
    ), err  # fmt: skip
    assert re.fullmatch(
        r"marlaas: error: serve: the service stopped: policy '" + re.escape(policy)
        + r"': key\(job 'j\d+'\) raised RuntimeError: key call 150 fails\. Every job is kept at "
        r"its last durable step and continues when the service starts again: fix the policy, "
        r"or serve \S+ --policy NAME with another", lines[-1]
    ), err  # fmt: skip
    store = JobStore(database_url(data, None), data)
    try:
        jobs = {j["id"]: j for j in store.jobs()}
        assert sorted(jobs) == submitted  # a submission the driver never answered: no row
        assert all(j["state"] in ("queued", "running") and j["step"] < 40 for j in jobs.values())
    finally:
        store.close()
    process, url = _serve_process(cluster, data, "--policy", "fair")
    try:
        client = Client(url, key)
        states = [client.wait(job_id, 0.1, 120)["state"] for job_id in submitted]
    except ServiceError as lost:  # what the service said, if it stopped
        process.kill()
        raise AssertionError(f"{lost}: {process.communicate(timeout=60)[1]}") from None
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except (subprocess.TimeoutExpired, ValueError):  # ValueError: read already
            process.kill()
            process.wait()
    assert states == ["done"] * len(submitted)
    store = JobStore(database_url(data, None), data)
    try:
        for job_id in submitted:
            assert [p["step"] for p in store.steps(job_id)] == list(range(40))
            steps = [e[2]["step"] for e in store.events_after(job_id, 0, 10_000) if e[1] == "step"]
            assert steps == list(range(40)), steps  # each step once, across the restart
    finally:
        store.close()


def test_a_submission_whose_admission_the_policy_fails_is_503_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """A policy that raised in the admission round of a submission stopped the driver while
    the request waited for the scheduler's answer: it waited its 30 s, was answered 201
    "queued" (by a service already gone), and its row stayed, a job no scheduler had seen.
    The request learns that the driver stopped: 503, and the row is removed."""
    import httpx

    from marlaas.client import ServiceError
    from marlaas.policy_path import PolicyError, load_policy
    from tests.service.conftest import CLUSTER
    from tests.service.raising_policy import RAISE_FOR_ENV

    policy = load_policy("tests.service.raising_policy:RaiseOnNthKey")
    monkeypatch.setenv(RAISE_FOR_ENV, "j2")
    service = serve(tmp_path / "data", cluster={**CLUSTER, "policy": policy})
    try:
        client = service.client(service.key("alice"))
        first = client.submit(JOB)["id"]
        started = time.monotonic()
        with pytest.raises(ServiceError) as refused:
            client.submit(JOB)
        assert refused.value.status == 503 and time.monotonic() - started < 10
        assert isinstance(service.runner.error, PolicyError)
        assert str(service.runner.error) == (
            f"policy {policy!r}: key(job 'j2') raised RuntimeError: job j2 fails"
        )
        health = httpx.get(f"{service.url}/v1/health", timeout=10)
        assert health.status_code == 503 and "job j2 fails" in health.json()["error"]
        assert [j["id"] for j in service.store.jobs()] == [first]  # j2 left nothing
    finally:
        service.server.should_exit = True
        service.thread.join(30)
        service.runner.stop(30)
        service.store.close()


def test_a_policy_that_raises_as_the_service_starts_stops_it_too(tmp_path):
    """A policy that raised on the first round after a restart (a job resumed from the store
    is keyed at once) stopped the driver before ``serve`` had told it how to stop the server:
    the driver found no one to tell, and ``serve`` went on serving, every submission 503 and
    the health 503, and never exited. Now it exits 2 with the one line, however the two
    threads run."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from marlaas.client import Client
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore
    from tests.service.conftest import CLUSTER
    from tests.service.raising_policy import RAISE_FOR_ENV

    cluster, data = tmp_path / "cluster.json", tmp_path / "data"
    cluster.write_text(json.dumps(CLUSTER))
    data.mkdir(mode=0o700)
    store = JobStore(database_url(data, None), data)
    try:
        key = store.add_tenant("alice")
    finally:
        store.close()
    process, url = _serve_process(cluster, data)
    try:
        client = Client(url, key)
        job = client.submit({**JOB, "rl": {**JOB["rl"], "steps": 100_000}})["id"]
        deadline = time.monotonic() + 30
        while client.job(job)["state"] != "running":  # resumed on the next start
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    policy = "tests.service.raising_policy:RaiseOnNthKey"
    root = Path(__file__).resolve().parents[2]
    # serve as it is, its app made 1 s slower: the driver stops while serve makes it
    slow_app = (
        "import sys, time; import marlaas.service.app as app; made = app.create_app; "
        "app.create_app = lambda *a: (time.sleep(1), made(*a))[1]; "
        "from marlaas.cli import main; sys.exit(main())"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", slow_app, "serve", str(cluster), "--data", str(data),
         "--simulate", "--speed", "50", "--port", "0", "--log-level", "warning",
         "--policy", policy],
        cwd=root, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root), RAISE_FOR_ENV: f"j{job}"},
    )  # fmt: skip
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"serve still runs with its driver stopped: {err}") from None
    assert process.returncode == 2, err
    assert f"key(job 'j{job}') raised RuntimeError" in err.strip().splitlines()[-1], err
