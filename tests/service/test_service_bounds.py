"""The server's bounds on clients that do not do their part (:mod:`marlaas.service.server`):
a client that stops acknowledging what it is sent loses its connection, and its event
stream's place, ``UNACKED_S`` later; a request that does not arrive whole within
``REQUEST_READ_S`` is 408 and its connection closed; a connection past the service's limit is
503 and closed. Each test starts its own service on loopback with its bounds shortened."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.service.conftest import JOB, serve

LONG_JOB = {**JOB, "rl": {**JOB["rl"], "steps": 100_000}}
"""A job still running, and sending step events, long after its test has ended."""
SHORT_S = 1.0
"""A test's shortened bound [s]: the read deadline, or the unacknowledged time."""
CUT_WITHIN_S = 15.0
"""How long a test waits for a bound to act [s]: the bound, the kernel's probe backoff (a
zero-window probe at 0.2, 0.6, 1.4, 3 s...) and a loaded machine's delay; without the bound,
nothing happens in it."""


def protocols():
    """uvicorn's HTTP protocols the bounds are put on: h11's, and httptools' where it is
    installed (uvicorn's pick then)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    bases = [pytest.param(H11Protocol, id="h11")]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return bases
    return [*bases, pytest.param(HttpToolsProtocol, id="httptools")]


def address(service) -> tuple[str, int]:
    url = urlsplit(service.url)
    return url.hostname, url.port


def wait_for(condition, timeout_s: float) -> bool:
    """Whether ``condition()`` turned true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends on ``sock`` until it closes it; AssertionError when it is
    still open after ``timeout_s``."""
    sock.settimeout(timeout_s)
    received = b""
    try:
        while chunk := sock.recv(65_536):
            received += chunk
    except TimeoutError:
        raise AssertionError(f"still open after {timeout_s:g} s; got {received[:200]!r}") from None
    except ConnectionResetError:
        pass
    return received


def trickle(sock: socket.socket, data: bytes, every_s: float = 0.1) -> None:
    """Send ``data`` a byte every ``every_s``, until the server answers or closes."""
    import select

    for byte in data:
        sock.sendall(bytes([byte]))
        if select.select([sock], [], [], every_s)[0]:
            return


def test_every_accepted_connection_inherits_the_listening_sockets_unacknowledged_bound():
    from marlaas.service.server import listening_socket

    if not hasattr(socket, "TCP_USER_TIMEOUT"):
        pytest.skip("TCP_USER_TIMEOUT is Linux's")
    with listening_socket("127.0.0.1", 0, unacked_s=2.5) as listening:
        listening.listen()
        with socket.create_connection(listening.getsockname()) as client:
            accepted, _ = listening.accept()
            with accepted:
                bound_ms = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
            del client
    assert bound_ms == 2500


def test_a_client_that_stops_acknowledging_loses_its_event_stream_and_its_place(tmp_path):
    """A client whose machine vanished, or that stopped reading, held its stream's place
    until the kernel gave up on it: about 15 minutes of retransmissions, and never while its
    kernel still answers with a zero window. Here the client stops reading with a tiny
    receive buffer: the server's sends stall, unacknowledged, and the connection is dropped
    ``UNACKED_S`` later (``TCP_USER_TIMEOUT`` bounds zero-window probing too)."""
    if not hasattr(socket, "TCP_USER_TIMEOUT"):
        pytest.skip("TCP_USER_TIMEOUT is Linux's")
    service = serve(tmp_path / "data", unacked_s=SHORT_S)
    streams = service.app.state.streams
    key = service.key("alice")
    client = service.client(key)
    job = client.submit(LONG_JOB)["id"]
    stalled = socket.socket()
    try:
        assert wait_for(lambda: client.job(job)["step"] >= 30, 60)  # events to fill its buffer
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's least
        stalled.connect(address(service))
        stalled.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: marlaas\r\n"
                        f"Authorization: Bearer {key}\r\n\r\n".encode())  # fmt: skip
        assert wait_for(lambda: streams.total == 1, 10)
        assert wait_for(lambda: streams.total == 0, CUT_WITHIN_S), "the place is still held"
        assert not streams.counts
        with httpx.stream("GET", f"{service.url}/v1/jobs/{job}/events", timeout=30,
                          headers={"Authorization": f"Bearer {key}"}) as reading:  # fmt: skip
            assert reading.status_code == 200  # a client that reads keeps its stream
            assert wait_for(lambda: streams.total == 1, 10)
            time.sleep(3 * SHORT_S)
            assert streams.total == 1
    finally:
        stalled.close()
        service.client(service.operator_key).cancel(job)
        service.stop()


def test_a_client_whose_machine_vanished_loses_its_event_stream_and_its_place(tmp_path):
    """The defect as it happens: the client's machine goes without a FIN or a RST, and the
    server's sends go unacknowledged. Unprivileged, in a network namespace of its own
    (``unshare -rn``) whose loopback is taken down under an open stream."""
    import shutil
    import subprocess
    import sys

    if not hasattr(socket, "TCP_USER_TIMEOUT") or not shutil.which("ip"):
        pytest.skip("needs Linux's TCP_USER_TIMEOUT and ip(8)")
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("no unprivileged network namespaces here (unshare -rn)")
    data = str(tmp_path / "data")
    code = f"from tests.service.test_service_bounds import vanish; vanish({data!r})"
    done = subprocess.run(["unshare", "-rn", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "place given back" in done.stdout, done.stdout


def vanish(data: str) -> None:
    """In a network namespace of its own: a stream opened, loopback taken down, and the
    stream's place given back within :data:`CUT_WITHIN_S` (an AssertionError if not)."""
    import subprocess

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    service = serve(Path(data), unacked_s=SHORT_S)
    streams, key = service.app.state.streams, service.key("alice")
    job = service.client(key).submit(LONG_JOB)["id"]
    try:
        with socket.create_connection(address(service)) as client:
            client.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: marlaas\r\n"
                           f"Authorization: Bearer {key}\r\n\r\n".encode())  # fmt: skip
            assert client.recv(100).startswith(b"HTTP/1.1 200 OK") and streams.total == 1
            subprocess.run(["ip", "link", "set", "lo", "down"], check=True)  # it vanishes
            assert wait_for(lambda: streams.total == 0, CUT_WITHIN_S), "the place is held"
            print("place given back")
    finally:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        service.client(service.operator_key).cancel(job)
        service.stop()


@pytest.mark.parametrize("base", protocols())
def test_a_request_not_sent_whole_in_time_is_408_and_its_connection_closed(tmp_path, base):
    """uvicorn waits for a request's headers and body without a deadline: a client that
    sends them a byte at a time (slowloris) held its connection, and a connection that sent
    nothing too, for as long as it liked."""
    service = serve(tmp_path / "data", read_s=SHORT_S, base=base)
    key = service.key("alice")
    headers = f"POST /v1/jobs HTTP/1.1\r\nHost: marlaas\r\nAuthorization: Bearer {key}\r\n"
    try:
        with socket.create_connection(address(service)) as slow_headers:
            started = time.monotonic()
            trickle(slow_headers, headers.encode())  # past the deadline before its end
            answer = read_until_closed(slow_headers, CUT_WITHIN_S)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert b"did not arrive whole within 1 s" in answer
            assert time.monotonic() - started < CUT_WITHIN_S
        with socket.create_connection(address(service)) as slow_body:
            slow_body.sendall(f"{headers}Content-Length: 1000\r\n\r\n{{".encode())
            answer = read_until_closed(slow_body, CUT_WITHIN_S)  # the app was reading it
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        with socket.create_connection(address(service)) as silent:
            assert read_until_closed(silent, CUT_WITHIN_S) == b""  # nothing came: no answer
        assert service.client(key).jobs() == []  # the slow body made no job
        with httpx.Client(base_url=service.url, timeout=30) as http:  # a prompt client is served
            assert http.get("/v1/health").status_code == 200
            time.sleep(2 * SHORT_S)  # idle on its kept-alive connection: not a slow request
            assert http.get("/v1/health").status_code == 200
    finally:
        service.stop()


def test_a_connection_past_the_limit_is_503_and_closed_before_anything_is_read(tmp_path):
    service = serve(tmp_path / "data", max_connections=3)
    held = [socket.create_connection(address(service)) for _ in range(3)]
    try:
        with socket.create_connection(address(service)) as one_more:
            answer = read_until_closed(one_more, CUT_WITHIN_S)
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert b"3 connections open already" in answer
        held.pop().close()  # a place is given back

        def served() -> bool:
            try:
                return httpx.get(f"{service.url}/v1/health", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_for(served, 10)
    finally:
        for sock in held:
            sock.close()
        service.stop()
