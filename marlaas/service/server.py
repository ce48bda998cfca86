"""The HTTP server under the service's API: uvicorn, with the bounds that keep a client that
does not do its part from holding a connection, an event stream's place or the server's file
descriptors for long. uvicorn itself sets none of them:

- **a request arrives whole in** :data:`REQUEST_READ_S`, its headers and its body, counted
  from its first byte (a new connection's, from its opening). Past it the client gets 408 and
  its connection is closed (a connection that sent nothing is closed without an answer): a
  client that sends its request a byte at a time (slowloris) holds nothing longer.
- **what the server sends is acknowledged within** :data:`UNACKED_S` (``TCP_USER_TIMEOUT``,
  set on the listening socket; Linux gives every accepted socket its listener's). A client
  whose machine vanished without closing its connection, or that stopped reading, loses it
  then, instead of after the kernel's retransmissions (about 15 minutes): an event stream
  pings every ``STREAM_PING_S``, so a dead client's stream ends, and its place is given
  back, within ``STREAM_PING_S + UNACKED_S``.
- **at most** ``max_connections`` **open at once**: one more is answered 503 and closed at
  once, unread, so that clients cannot take the file descriptors the database and the
  adapters need.

``serve`` and the service's tests start their server with :func:`listening_socket` and
:func:`server_config`, so that the tests run the server that serves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

log = logging.getLogger("marlaas.service")

KEEP_ALIVE_S = 30
"""How long the server keeps an idle connection [s]: well above a client's own expiry (httpx:
5 s), so that a client never reuses a connection the server is closing."""
REQUEST_READ_S = 30.0
"""How long a client has to send a whole request, headers and body, from its first byte (a
new connection: from its opening) [s]; past it, 408 and the connection closed. A job spec
(at most 1 MiB) takes well under it on any link a tenant's program would use."""
UNACKED_S = 45.0
"""How long data the server sent may stay unacknowledged before the kernel drops the
connection [s] (``TCP_USER_TIMEOUT``): a client gone without a word, or one that stopped
reading, is cut then."""
OTHER_CONNECTIONS = 256
"""Connections the server keeps open for requests, beyond its event streams' places (every
tenant's ``max_streams`` and the operator's own)."""


def listening_socket(host: str, port: int, unacked_s: float = UNACKED_S) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening) on which data sent may stay
    unacknowledged ``unacked_s`` at most: the kernel then drops the connection, and every
    connection accepted on it inherits the bound (Linux; elsewhere it is the kernel's own,
    minutes). OSError when it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only
        if user_timeout is not None:
            sock.setsockopt(socket.IPPROTO_TCP, user_timeout, round(unacked_s * 1000))  # [ms]
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def connection_limit(max_streams: int) -> int:
    """Connections open at once for a service of ``max_streams`` event streams: each stream
    holds one, the operator's 16 are not counted in ``max_streams``, and requests need
    :data:`OTHER_CONNECTIONS` more."""
    from marlaas.service.app import MAX_STREAMS_PER_CALLER

    return max_streams + MAX_STREAMS_PER_CALLER + OTHER_CONNECTIONS


def server_config(app, host: str, port: int, max_connections: int, log_level: str = "info",
                  access_log: bool = False, read_s: float = REQUEST_READ_S,
                  base: type[asyncio.Protocol] = AutoHTTPProtocol) -> uvicorn.Config:  # fmt: skip
    """uvicorn's settings for the service's ``app``: a request read whole in ``read_s``, at
    most ``max_connections`` open at once, idle connections kept :data:`KEEP_ALIVE_S`;
    ``base``: uvicorn's HTTP protocol to bound (h11's or httptools', the one uvicorn picks)."""
    protocol = bounded_protocol(base, read_s, max_connections)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                          access_log=access_log, timeout_keep_alive=KEEP_ALIVE_S,
                          http=protocol)  # fmt: skip


def bounded_protocol(base: type[asyncio.Protocol], read_s: float,
                     max_connections: int) -> type[asyncio.Protocol]:  # fmt: skip
    """uvicorn's HTTP protocol ``base`` with :class:`RequestDeadline`'s bounds."""
    fields = {"read_s": read_s, "max_connections": max_connections}
    return type(f"Bounded{base.__name__}", (RequestDeadline, base), fields)


class RequestDeadline:
    """What uvicorn's HTTP protocols (h11's and httptools' alike) lack: a deadline of
    ``read_s`` to read each request whole, and at most ``max_connections`` open at once. A
    mixin, put before the protocol class (:func:`bounded_protocol`); it reads the state both
    keep: ``cycle``, the request being answered, made once its headers are in, whose
    ``more_body`` turns False once its body is."""

    read_s: float = REQUEST_READ_S
    max_connections: int | None = None
    _timer: asyncio.TimerHandle | None = None
    _before = None
    """The request cycle there was when the clock started: the one being read is a newer one."""
    _heard = False
    """Whether some of the request being read has come (408 then, else a silent close)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self._refuse_connection()
        else:
            self._start_clock()

    def data_received(self, data: bytes) -> None:
        if self._timer is None:
            self._start_clock()
        self._heard = True
        super().data_received(data)
        if self._timer is not None and self._request_in():
            self._stop_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def _start_clock(self) -> None:
        self._before, self._heard = self.cycle, False
        self._timer = self.loop.call_later(self.read_s, self._too_slow)

    def _stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _request_in(self) -> bool:
        """Whether the request being read has come whole: a cycle newer than the clock's
        (its headers are in) whose body is in too."""
        return self.cycle is not self._before and not self.cycle.more_body

    def _too_slow(self) -> None:
        """The deadline passed: 408 unless nothing came or the answer has begun; the
        connection closed (an app still reading the body reads that the client went)."""
        self._timer = None
        if self.transport.is_closing() or self._request_in():  # (a pipelined request is read
            return  # once the one before it was answered)
        cycle = self.cycle if self.cycle is not self._before else None
        if self._heard and (cycle is None or not cycle.response_started):
            self._answer(408, f"the request did not arrive whole within {self.read_s:g} s")
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        if self._heard:
            log.warning("408 from %s: no whole request within %g s; connection closed",
                        self._peer(), self.read_s)  # fmt: skip
        self.transport.close()

    def _refuse_connection(self) -> None:
        """One connection past ``max_connections``: 503, closed before anything is read."""
        log.warning("503 to %s: %d connections are open, the most this service keeps; "
                    "this one is closed", self._peer(), self.max_connections)  # fmt: skip
        self._answer(503, f"the service holds {self.max_connections} connections open "
                     "already (its limit): try again later")  # fmt: skip
        self.transport.close()

    def _answer(self, status: int, detail: str) -> None:
        """Write a whole response of ``status`` with ``{"detail": ...}`` (as the API's
        refusals), that closes the connection."""
        from http import HTTPStatus

        body = json.dumps({"detail": detail}).encode()
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode()]
        lines += [name + b": " + value for name, value in self.server_state.default_headers]
        lines += [b"content-type: application/json", b"content-length: %d" % len(body),
                  b"connection: close", b"", body]  # fmt: skip
        self.transport.write(b"\r\n".join(lines))

    def _peer(self) -> str:
        return self.client[0] if self.client else "?"
