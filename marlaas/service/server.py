"""The HTTP server under the service's API: uvicorn, with the bounds that keep a client that
does not do its part from holding a connection, an event stream's place or the server's file
descriptors for long. uvicorn itself sets none of them:

- **a request arrives whole in** :data:`REQUEST_READ_S`, counted from its first byte (a new
  connection's, from its opening), and one more second for each :data:`BODY_BYTES_PER_S`
  bytes of a body the app reads, as long as no :data:`REQUEST_READ_S` pass without a byte.
  Past it the client gets 408 and its connection is closed (a connection that sent nothing
  is closed without an answer): a client that sends its request a byte at a time
  (slowloris) holds nothing longer, and a large body on a slow link is still read. The clock
  runs only while the server waits on the client: not while a request is answered (an event
  stream, a download), nor for a request sent behind it (pipelined) until its turn.
- **what the server sends is acknowledged within** :data:`UNACKED_S` (``TCP_USER_TIMEOUT``,
  set on the listening socket; Linux gives every accepted socket its listener's). A client
  whose machine vanished without closing its connection, or that stopped reading, loses it
  then, instead of after the kernel's retransmissions (about 15 minutes): an event stream
  pings every ``STREAM_PING_S``, so a dead client's stream ends, and its place is given
  back, within ``STREAM_PING_S + UNACKED_S``.
- **at most** ``max_connections`` **open at once**: one more is answered 503 and closed at
  once, unread, so that clients cannot take the file descriptors the database and the
  adapters need.
- **at most** ``max_per_address`` **open at once from one client address** where it is set
  (``serve --max-connections-per-address``; none by default: behind a reverse proxy, every
  connection comes from the proxy's address): one more is answered 503 and closed at once,
  unread, so that one client cannot take every place of ``max_connections`` and keep the
  others out.

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
new connection: from its opening) [s], and the longest wait for a byte of it; a body has
longer (:data:`BODY_BYTES_PER_S`). Past it, 408 and the connection closed."""
BODY_BYTES_PER_S = 1024.0
"""The slowest a body may come, on average [bytes/s]: each this many of its bytes give the
request one more second. The largest (a 1 MiB job spec) is read whole in 30 + 1024 s on a
link as slow as 8 kbit/s; at a fixed 30 s it was cut (408) on any link under 280 kbit/s."""
UNACKED_S = 45.0
"""How long data the server sent may stay unacknowledged before the kernel drops the
connection [s] (``TCP_USER_TIMEOUT``): a client gone without a word, or one that stopped
reading, is cut then."""
SHUTDOWN_GRACE_S = 5.0
"""How long a stopping server (SIGTERM, Ctrl-C) lets the answers in progress finish [s];
then it cuts them: an adapter download to a client that reads slowly, or not at all, held the
stop for as long as that client liked (45 s for one that stopped reading; for one that reads a
little, until the whole adapter went)."""


def listening_socket(host: str, port: int, unacked_s: float = UNACKED_S) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening) on which data sent may stay
    unacknowledged ``unacked_s`` at most: the kernel then drops the connection, and every
    connection accepted on it inherits the bound (Linux; elsewhere it is the kernel's own,
    minutes). OSError when it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _bound_unacknowledged(sock, unacked_s)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _bound_unacknowledged(sock: socket.socket, unacked_s: float) -> None:
    """Set ``TCP_USER_TIMEOUT`` on ``sock`` where the system has it; where it refuses it (a
    kernel or sandbox without it: gVisor, some WSL versions), one warning, and the service
    runs without the bound: it is a safeguard, not a reason not to serve."""
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only
    if user_timeout is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, user_timeout, round(unacked_s * 1000))  # [ms]
    except OSError as err:
        log.warning("the system refused TCP_USER_TIMEOUT (%s): a client gone without closing "
                    "its connection keeps its event stream until the kernel gives up on it "
                    "(about 15 minutes)", err.strerror or err)  # fmt: skip


def server_config(app, host: str, port: int, max_connections: int, log_level: str = "info",
                  access_log: bool = False, read_s: float = REQUEST_READ_S,
                  body_rate: float = BODY_BYTES_PER_S,
                  base: type[asyncio.Protocol] = AutoHTTPProtocol,
                  max_per_address: int | None = None) -> uvicorn.Config:  # fmt: skip
    """uvicorn's settings for the service's ``app``: a request read whole in ``read_s`` (a
    body: one more second for each ``body_rate`` bytes), at most ``max_connections`` open at
    once (and ``max_per_address`` from one client address, where it is set), idle
    connections kept :data:`KEEP_ALIVE_S`, the answers in progress when it stops cut after
    :data:`SHUTDOWN_GRACE_S`; ``base``: uvicorn's HTTP protocol to bound (h11's or
    httptools', the one uvicorn picks)."""
    protocol = bounded_protocol(base, read_s, max_connections, body_rate, max_per_address)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                          access_log=access_log, timeout_keep_alive=KEEP_ALIVE_S,
                          timeout_graceful_shutdown=SHUTDOWN_GRACE_S, http=protocol)  # fmt: skip


def bounded_protocol(base: type[asyncio.Protocol], read_s: float, max_connections: int,
                     body_rate: float = BODY_BYTES_PER_S,
                     max_per_address: int | None = None) -> type[asyncio.Protocol]:  # fmt: skip
    """uvicorn's HTTP protocol ``base`` with :class:`RequestDeadline`'s bounds."""
    fields = {"read_s": read_s, "max_connections": max_connections, "body_rate": body_rate,
              "max_per_address": max_per_address}  # fmt: skip
    return type(f"Bounded{base.__name__}", (RequestDeadline, base), fields)


class RequestDeadline:
    """What uvicorn's HTTP protocols (h11's and httptools' alike) lack: a deadline to read
    each request, at most ``max_connections`` open at once, and at most ``max_per_address``
    of them from one client address (None: no such bound). A mixin, put before the
    protocol class (:func:`bounded_protocol`); it reads the state both keep: ``cycle``, the
    request being answered (made once its headers are in; its ``more_body`` turns False once
    its body is, ``response_started`` and ``response_complete`` as it is answered), ``flow``
    and httptools' ``pipeline`` (requests parsed behind the one being answered).

    The clock runs only while the server waits on the client for a request: from a new
    connection's opening, or a request's first byte, until the request is whole; not while
    the request is answered, nor while a request sent early (pipelined) waits behind a
    response, nor on an idle kept-alive connection (uvicorn closes that one). A request has
    ``read_s``, and one more second for each ``body_rate`` bytes of its body that came, as
    long as no ``read_s`` pass without a byte (mod_reqtimeout's rule): a large body on a slow
    link is read, a body sent slower than ``body_rate`` is cut. Past it: 408 when something
    came, and the connection closed."""

    read_s: float = REQUEST_READ_S
    body_rate: float = BODY_BYTES_PER_S
    max_connections: int | None = None
    max_per_address: int | None = None
    _timer: asyncio.TimerHandle | None = None
    _since = 0.0
    """When the clock started (monotonic) [s]."""
    _last = 0.0
    """When a byte last came, or the server last held the client back (monotonic) [s]."""
    _body = 0
    """The bytes of the body being read that came since the clock started."""
    _heard = False
    """Whether some of the request being read has come (408 then, else a silent close)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self._refuse_connection()
        elif self.max_per_address is not None and self._from_here() > self.max_per_address:
            self._refuse_address()
        else:
            self._start_clock(heard=False)

    def data_received(self, data: bytes) -> None:
        in_body = self._reading_body()
        super().data_received(data)
        if self._answering() or self.transport.is_closing():
            self._stop_clock()
            return
        if self._timer is None:
            self._start_clock(heard=True)
        self._heard, self._last = True, self.loop.time()
        if in_body:
            self._body += len(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._timer is None and self._reading_body() and not self.transport.is_closing():
            self._start_clock(heard=True)  # a pipelined request whose body is still coming

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def _answering(self) -> bool:
        """Whether a request came whole (or was answered early) and its response is not
        complete: the app works on it, the response is being sent, or a pipelined request
        waits behind it (httptools parses it, h11 keeps it unread)."""
        if getattr(self, "pipeline", None):
            return True
        cycle = self.cycle
        return (cycle is not None and not cycle.response_complete
                and (cycle.response_started or not cycle.more_body))  # fmt: skip

    def _reading_body(self) -> bool:
        """Whether the app is reading the body of the request being answered."""
        cycle = self.cycle
        return (cycle is not None and cycle.more_body and not cycle.response_started
                and not getattr(self, "pipeline", None))  # fmt: skip

    def _start_clock(self, heard: bool) -> None:
        self._since = self._last = self.loop.time()
        self._body, self._heard = 0, heard
        self._timer = self.loop.call_later(self.read_s, self._too_slow)

    def _stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        """The clock rang: wait on for a body that keeps coming, or while the server itself
        holds the client back (the app has not read what came); else 408 unless nothing
        came, and the connection closed (an app still reading the body reads that the
        client went)."""
        self._timer = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return  # closed, or handed over (a WebSocket)
        if self._answering():
            return
        now = self.loop.time()
        if self.flow.read_paused and self._reading_body():
            self._last = now  # uvicorn stopped reading until the app reads: not the client's
            self._since += self.read_s
        allowed = self._since + self.read_s + self._body / self.body_rate
        until = min(allowed, self._last + self.read_s)
        if now < until:
            self._timer = self.loop.call_later(until - now, self._too_slow)
            return
        cycle = self.cycle
        answered = cycle is not None and cycle.response_complete and cycle.more_body
        if self._heard and not answered:  # (answered: its body still came; it has its answer)
            rate = f"{self.body_rate:g} bytes/s"
            self._answer(408, f"the request did not arrive whole within {self.read_s:g} s "
                         f"(a body: as long as it comes at {rate} or more)")  # fmt: skip
            log.warning("408 from %s: no whole request in time; connection closed",
                        self._peer())  # fmt: skip
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def _refuse_connection(self) -> None:
        """One connection past ``max_connections``: 503, closed before anything is read."""
        log.warning("503 to %s: %d connections are open, the most this service keeps; "
                    "this one is closed", self._peer(), self.max_connections)  # fmt: skip
        self._answer(503, f"the service holds {self.max_connections} connections open "
                     "already (its limit): try again later")  # fmt: skip
        self.transport.close()

    def _from_here(self) -> int:
        """The connections open from this one's client address, this one included (a count
        over every open connection: at most ``max_connections``, once per connection)."""
        host = self.client[0] if self.client else None
        return sum(1 for other in self.connections
                   if (other.client[0] if other.client else None) == host)  # fmt: skip

    def _refuse_address(self) -> None:
        """One connection past ``max_per_address`` from its address: 503, closed unread."""
        log.warning("503 to %s: it holds %d connections open, the most one address may; this "
                    "one is closed", self._peer(), self.max_per_address)  # fmt: skip
        self._answer(503, f"your address holds {self.max_per_address} connections open "
                     "already (the service's limit per address): close one, or try again "
                     "later")  # fmt: skip
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
