"""The service's HTTP API (FastAPI; OpenAPI at ``/docs``), its dashboard and its metrics.

Every ``/v1`` route but ``/v1/health`` needs ``Authorization: Bearer KEY``: a tenant's key
(its own jobs only; another tenant's job is 404, its existence not revealed) or the
operator's (``DATA/operator.key``: every job, no submissions). A missing or wrong key is 401,
logged without the key. A job spec is checked by :mod:`marlaas.service.requests` (422 naming
the field; a body over 1 MiB is 413); the scheduler's quotas answer 429 with the reason. A key
holds at most :data:`MAX_STREAMS_PER_CALLER` event streams open at once, and the service at
most :data:`MAX_STREAMS` (``serve --max-streams``) of every tenant together: one more is 429. A
stream whose key is revoked ends with a ``refused`` event.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, BinaryIO

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import ClientDisconnect

from marlaas import strict_json
from marlaas.core.ascii_digits import ascii_digits
from marlaas.drive.inbox import InboxClosedError
from marlaas.service import MAX_ID
from marlaas.service import store as S
from marlaas.service.connections import MAX_STREAMS, MAX_STREAMS_PER_CALLER
from marlaas.service.requests import JobRequestError, job_from_request
from marlaas.service.runner import ServiceRunner

log = logging.getLogger("marlaas.service")

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body taken [bytes]; larger is 413."""
EVENT_POLL_S = 0.5
"""How often an event stream looks for new events (and that its key is still valid) [s]."""
MAX_LOGGED_PATH_CHARS, MAX_LOGGED_REASON_CHARS = 200, 300
"""How much of a refused request's path and reason its log line shows [characters]."""
STREAM_PING_S = 15
"""How often an event stream sends a comment line when it has no event to send [s]: it keeps
proxies from closing it, and it is what a client that vanished fails to acknowledge (the
server then drops its connection, and its place, ``server.UNACKED_S`` later)."""
REFUSED_EVENT = "refused"
"""The event that ends a stream whose key was revoked (its data: ``{status, detail}``)."""
OPERATOR_KEY_FILE = "operator.key"
MAX_DETAIL_CHARS = 2000
"""Longest refusal a 422 answers with [characters]: a spec's huge value is not echoed whole."""
SKIPPED_FILES = ("optimizer.pt",)
"""What an adapter download leaves out: the optimizer state is the trainer's."""
DOWNLOAD_CHUNK_BYTES = 1 << 20
"""How much of an adapter's file a download reads at a time [bytes]."""

JobId = Annotated[int, PathParam(ge=1, le=MAX_ID)]


@dataclass(frozen=True)
class Caller:
    """Who made a request: a tenant, or the operator (``tenant`` None)."""

    tenant: S.TenantView | None

    @property
    def tenant_id(self) -> int | None:
        """The tenant's id; None for the operator, who sees every job."""
        return None if self.tenant is None else self.tenant.id


class Metrics:
    """The Prometheus series of one service (a registry of its own)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.queued = Gauge("marlaas_jobs_queued", "Jobs waiting for admission",
                            registry=self.registry)  # fmt: skip
        self.running = Gauge("marlaas_jobs_running", "Jobs admitted", registry=self.registry)
        self.utilization = Gauge("marlaas_pool_utilization", "Fraction of a pool's devices "
                                 "busy", ["pool"], registry=self.registry)  # fmt: skip
        self.latency = Histogram("marlaas_request_seconds", "HTTP request latency [s]",
                                 ["method", "route", "status"], registry=self.registry)  # fmt: skip


def parameter_errors(errors) -> str:
    """FastAPI's validation errors as one line: ``job_id in the path: Input should be greater
    than or equal to 1 (got '0')``, several joined by '; '."""
    parts = []
    for error in errors:
        where, *names = error.get("loc", ()) or ("request",)
        name = ".".join(str(n) for n in names) or str(where)
        given = str(error.get("input", ""))[:40]
        parts.append(f"{name} in the {where}: {error.get('msg', 'invalid')} (got {given!r})")
    return "; ".join(parts)


def create_app(runner: ServiceRunner, data_dir: Path, max_streams: int = MAX_STREAMS) -> FastAPI:
    """The API over ``runner`` (its store holds the jobs); ``max_streams``: the event streams
    it holds open at once, of every tenant together."""
    store = runner.store
    operator_key = (Path(data_dir) / OPERATOR_KEY_FILE).read_text().strip()
    metrics = Metrics()
    streams = OpenStreams(MAX_STREAMS_PER_CALLER, max_streams)
    app = FastAPI(title="MARLaaS", version="1", summary="Multi-tenant RL fine-tuning")
    app.state.store, app.state.operator_key, app.state.streams = store, operator_key, streams
    app.state.runner = runner

    @app.exception_handler(RequestValidationError)
    async def invalid_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        """A path or query parameter a route refuses: 422 with one line naming it, the shape
        of every other refusal (FastAPI's own is a list of objects)."""
        del request
        return JSONResponse({"detail": parameter_errors(exc.errors())}, 422)

    @app.middleware("http")
    async def timed(request: Request, call_next):
        """Time the request, labelled by what the API serves, never by the client's text: a
        route's template (``other`` for any path no route has) and a method one of the routes
        answers (``other`` for the rest): a label per path or method a client makes up would
        be a new series each, and ``/metrics`` would grow without bound."""
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "other")
        method = request.method if request.method in served_methods else "other"
        metrics.latency.labels(method, path, str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response

    def job_of(who: Caller, job_id: int) -> dict:
        job = store.job(job_id, who.tenant_id)
        if job is None:
            asker = "the operator" if who.tenant is None else f"tenant {who.tenant.name!r}"
            log.warning("404 job %d for %s: no such job of theirs", job_id, asker)
            raise HTTPException(404, f"no job {job_id}")
        job["versions"] = _versions(runner, job)
        return job

    @app.get("/v1/health")
    def health() -> dict:
        """Whether the driver runs (no key needed)."""
        if runner.error is not None:
            return JSONResponse({"status": "error", "error": runner.error_line}, 503)
        return {"status": "ok" if runner.ready.is_set() else "starting",
                "simulated": runner.simulate}  # fmt: skip

    @app.post("/v1/jobs", status_code=201)
    async def submit(request: Request, who: Who) -> dict:
        """Submit a job spec (the workload schema; the tenant comes from the key)."""
        if who.tenant is None:
            raise HTTPException(403, "the operator's key submits no jobs: use a tenant's key")
        body = await _read_body(request)
        try:
            spec = job_from_request(_json(body), who.tenant.name, runner.config)
        except JobRequestError as err:
            detail = _cut(str(err))
            _refused(request, 422, detail)
            raise HTTPException(422, detail) from None
        try:
            job_id, state, reason = await run_in_threadpool(runner.submit, who.tenant, spec)
        except InboxClosedError:
            why = "the service is stopping and takes no more jobs: submit again once it is back"
            _refused(request, 503, why)
            raise HTTPException(503, why) from None
        if state == S.REFUSED:
            _refused(request, 429, reason)
            raise HTTPException(429, reason)
        return {"id": job_id, "state": state}

    @app.get("/v1/jobs")
    def list_jobs(who: Who) -> list[dict]:
        """Your jobs, newest first: every queued or running one and the newest 1,000 that
        ended (the operator's key: every tenant's)."""
        jobs = store.jobs(who.tenant_id)
        for job in jobs:
            job["versions"] = _versions(runner, job)
        return jobs

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: JobId, who: Who) -> dict:
        """One job: state, steps, rewards per step, fetchable versions."""
        return job_of(who, job_id)

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202)
    def cancel(job_id: JobId, who: Who) -> dict:
        """Cancel a job: its work in flight finishes and is discarded."""
        job_of(who, job_id)
        if not runner.cancel(job_id):
            job = job_of(who, job_id)
            live = job["state"] in ("queued", "running")
            state = "being cancelled" if live and job["cancel_requested"] else job["state"]
            raise HTTPException(409, f"job {job_id} is {state}; nothing to cancel")
        return {"id": job_id, "state": "cancelling"}

    @app.get("/v1/jobs/{job_id}/events")
    async def events(job_id: JobId, request: Request, who: Who):
        """Server-sent events as the job's steps finish and its state changes (reconnect
        with Last-Event-ID)."""
        from sse_starlette import EventSourceResponse

        await run_in_threadpool(job_of, who, job_id)
        last, allowed = _last_event_id(request), _key_still_valid(request, who)
        slot = streams.open(who, request)  # nothing after it raises: the stream releases it
        stream = _stream(store, job_id, last, allowed, slot)
        return EventSourceResponse(stream, ping=STREAM_PING_S)

    @app.get("/v1/jobs/{job_id}/adapters/{version}")
    def adapter(job_id: JobId, version: Annotated[int, PathParam(ge=0, le=10**6)],
                who: Who) -> Response:  # fmt: skip
        """The PEFT folder of an adapter version as a .tar.gz (PeftModel.from_pretrained
        loads it unpacked)."""
        job = job_of(who, job_id)
        if version not in job["versions"]:
            raise HTTPException(404, f"job {job_id} has no adapter version {version} to fetch "
                                f"(versions: {job['versions']})")  # fmt: skip
        try:  # opened before the answer: a file removed meanwhile is sent whole all the same
            files = _open_files(runner.adapter_path(job_id, version))
        except OSError as err:
            raise HTTPException(404, f"job {job_id}'s adapter version {version} is no longer "
                                f"there ({err.strerror or err})") from None  # fmt: skip
        name = f"job{job_id}-v{version}.tar.gz"
        return StreamingResponse(
            _tar_gz(files, f"job{job_id}-v{version}"),
            media_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.get("/v1/cluster")
    def cluster(who: Who) -> dict:
        """The cluster now: pools' utilization, jobs queued and running, the policy."""
        del who
        return {
            "name": runner.config.name, "policy": runner.config.policy,
            "simulated": runner.simulate, "utilization": runner.utilization,
            "queued": runner.queued, "running": runner.running, "clock_s": runner.now(),
            "lag_s": runner.lag_s,
        }  # fmt: skip

    @app.get("/metrics")
    def prometheus() -> Response:
        """Prometheus metrics: queue length, running jobs, pool utilization, latency."""
        metrics.queued.set(runner.queued)
        metrics.running.set(runner.running)
        for pool, value in runner.utilization.items():
            metrics.utilization.labels(pool).set(value)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    def dashboard() -> str:
        """The dashboard: every job of the key's holder, live (the key in the page's #key=)."""
        return resources.files("marlaas.service").joinpath("dashboard.html").read_text()

    served_methods = frozenset(m for r in app.routes for m in getattr(r, "methods", None) or ())
    return app


def bearer_key(request: Request) -> str:
    """The API key of ``request``'s ``Authorization: Bearer KEY`` header ('' without one)."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def caller(request: Request) -> Caller:
    """Who sent ``request``, by its API key; 401 without a valid one."""
    key = bearer_key(request)
    if not key:
        _refused(request, 401, "no API key")
        raise HTTPException(401, "an API key is needed: Authorization: Bearer KEY",
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
    state = request.app.state
    if hmac.compare_digest(key.encode(), state.operator_key.encode()):
        return Caller(None)
    tenant = state.store.authenticate(key)
    if tenant is None:
        _refused(request, 401, "unknown or revoked API key")
        raise HTTPException(401, "unknown or revoked API key",
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
    state.runner.take_quota(tenant)  # `tenants quota`, `tenants add`: from its next request
    return Caller(tenant)


Who = Annotated[Caller, Depends(caller)]


def _refused(request: Request, status: int, why: str) -> None:
    """Log a refused request in one line: the path and the reason are the client's text, so
    their control characters are escaped (a terminal escape or a NUL sent percent-encoded
    reaches no log) and each is cut."""
    client = request.client.host if request.client else "?"
    log.warning("%d %s %s from %s: %s", status, request.method,
                _loggable(request.url.path, MAX_LOGGED_PATH_CHARS), client,
                _loggable(" ".join(why.split()), MAX_LOGGED_REASON_CHARS))  # fmt: skip


def _loggable(text: str, limit: int) -> str:
    """``text`` with each character that is not printable escaped (``\\x1b``), cut to
    ``limit`` characters."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[: limit + 1])
    return shown if len(shown) <= limit else shown[:limit] + "..."


async def _read_body(request: Request) -> bytes:
    """The request's body: 413 past :data:`MAX_BODY_BYTES`, 408 when the client went before
    it came whole (cut by the server's deadline, :mod:`marlaas.service.server`, included)."""
    declared = request.headers.get("content-length")
    if declared is not None and ascii_digits(declared) and int(declared) > MAX_BODY_BYTES:
        _refused(request, 413, f"{declared} bytes")
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES:,} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                _refused(request, 413, f"over {size} bytes")
                raise HTTPException(413, f"the body is over {MAX_BODY_BYTES:,} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or cut by the server's deadline (408 sent, logged)
        raise HTTPException(408, "the body did not arrive whole") from None
    return b"".join(chunks)


def _json(body: bytes):
    """The body as JSON, or JobRequestError: not JSON, nested deeper than the decoder's
    recursion allows, or an object with a key twice (as workload files refuse them)."""
    try:
        return strict_json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise JobRequestError(f"the body is not JSON ({err})") from None


def _last_event_id(request: Request) -> int:
    """The ``Last-Event-ID`` a reconnecting client sends: an event id, ASCII digits up to
    :data:`~marlaas.service.MAX_ID` (0 for anything else: a header is Latin-1, where
    ``'\u00b2'.isdigit()`` holds too)."""
    value = request.headers.get("last-event-id", "0").strip()
    digits = ascii_digits(value) and len(value) <= len(str(MAX_ID))
    return int(value) if digits and int(value) <= MAX_ID else 0


def _key_still_valid(request: Request, who: Caller):
    """A check, for a long-lived answer (an event stream), that the key that opened it is
    still accepted: a tenant's key revoked (``tenants revoke``) ends the stream it opened."""
    if who.tenant is None:
        return lambda: True  # the operator's key is read once, at start, and never revoked
    store, key, tenant_id = request.app.state.store, bearer_key(request), who.tenant.id

    def valid() -> bool:
        tenant = store.authenticate(key)
        return tenant is not None and tenant.id == tenant_id

    return valid


class OpenStreams:
    """The event streams each caller (a tenant, or the operator) has open, at most ``limit``
    at once, and at most ``total_limit`` of every tenant together: each stream polls the
    database, so one tenant's hundreds, or many tenants' dozens, would slow every other
    tenant's requests. The operator's streams are not counted in the total, so tenants
    cannot shut the operator out."""

    def __init__(self, limit: int, total_limit: int = MAX_STREAMS) -> None:
        self.limit, self.total_limit = limit, total_limit
        self.counts: dict[int | None, int] = {}
        self.total = 0
        """Streams open, of every tenant (the sum of ``counts`` but the operator's)."""
        self.lock = threading.RLock()
        """Held to count: a slot dropped unstarted is released by the garbage collector,
        on whichever thread it runs, this one included while it holds the lock (reentrant:
        a collection inside :meth:`open` must not wait for itself)."""

    def open(self, who: Caller, request: Request) -> StreamSlot:
        """A slot for a new stream of ``who``; 429 when it has ``limit`` open already, or the
        service ``total_limit``."""
        with self.lock:
            held = self.counts.get(who.tenant_id, 0)
            tenant = who.tenant_id is not None
            if held < self.limit and (not tenant or self.total < self.total_limit):
                self.counts[who.tenant_id] = held + 1
                self.total += tenant
                return StreamSlot(self, who.tenant_id)
        if held >= self.limit:
            why = f"{self.limit} event streams of this key are open already: close one"
        else:
            why = (f"{self.total_limit} event streams of every tenant together are open on "
                   "this service already (its limit): try again later")  # fmt: skip
        why += " (or poll GET /v1/jobs/{id})"
        _refused(request, 429, why)
        raise HTTPException(429, why)


class StreamSlot:
    """One open event stream's place in :class:`OpenStreams`, given back once: when the
    stream ends, or when a stream that never started is dropped."""

    def __init__(self, streams: OpenStreams, holder: int | None) -> None:
        self.streams, self.holder, self.held = streams, holder, True

    def release(self) -> None:
        """Give the place back (a second call does nothing)."""
        with self.streams.lock:
            if self.held:
                self.held = False
                self.streams.total -= self.holder is not None
                counts = self.streams.counts
                counts[self.holder] -= 1
                if not counts[self.holder]:
                    del counts[self.holder]

    __del__ = release


async def _stream(store: S.JobStore, job_id: int, last: int, allowed=lambda: True,
                  slot: StreamSlot | None = None):  # fmt: skip
    """The job's events after ``last``, as they come, until it has ended (its state is read
    before its events: the event of its end is written with the state, so it is not missed).
    When ``allowed()`` turns False (the key was revoked), a ``refused`` event ends it. Its
    ``slot`` is released when it ends, however it ends (the client gone included)."""
    try:
        async for event in _events(store, job_id, last, allowed):
            yield event
    finally:
        if slot is not None:
            slot.release()


async def _events(store: S.JobStore, job_id: int, last: int, allowed):
    """:func:`_stream`'s events."""

    def poll(after: int) -> tuple[bool, str | None, list[tuple]]:
        """(the key still valid, the job's state, its events after ``after``): one trip to
        the thread pool a poll."""
        if not allowed():
            return False, None, []
        return True, store.job_state(job_id), store.events_after(job_id, after)

    while True:
        valid, state, events = await run_in_threadpool(poll, last)
        if not valid:
            log.warning("job %d's event stream ended: its key was revoked", job_id)
            yield {"event": REFUSED_EVENT, "data": json.dumps({"status": 401,
                   "detail": "unknown or revoked API key"})}  # fmt: skip
            return
        for event_id, kind, body in events:
            last = event_id
            yield {"id": str(event_id), "event": kind, "data": json.dumps(body)}
        if not events:
            if state is None or state in S.ENDED:
                return
            await asyncio.sleep(EVENT_POLL_S)


def _versions(runner: ServiceRunner, job: dict) -> list[int]:
    """The adapter versions of ``job`` a tenant can fetch: durable ones on disk."""
    return [v for v in runner.adapter_versions(job["id"]) if v <= job["step"]]


def _open_files(folder: Path) -> list[tuple[str, BinaryIO]]:
    """``folder``'s files a download sends (not :data:`SKIPPED_FILES`, nor links), by name,
    each opened: the download reads them as it goes, and a file removed after this (a restart
    dropping a version) is still read whole. OSError when one cannot be opened."""
    files: list[tuple[str, BinaryIO]] = []
    try:
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink() and path.name not in SKIPPED_FILES:
                files.append((path.name, open(path, "rb")))  # noqa: SIM115 (closed by _tar_gz)
    except OSError:
        for _, handle in files:
            handle.close()
        raise
    return files


def _tar_gz(files: list[tuple[str, BinaryIO]], root: str) -> Iterator[bytes]:
    """``files`` (name, open file) as a .tar.gz, each under ``root/``, made as it is sent, a
    chunk at a time: a download holds :data:`DOWNLOAD_CHUNK_BYTES` of the service's memory,
    not the whole adapter (a rank-64 adapter of a 7B model is hundreds of MB, and every
    tenant's downloads at once were held whole). It closes the files. A file that shrank
    meanwhile ends the answer short: the client finds the archive cut, and says so."""
    gzip = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    try:
        for name, handle in files:
            stat = os.fstat(handle.fileno())
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
            yield gzip.compress(info.tobuf(tarfile.GNU_FORMAT))
            left = info.size
            while left:
                block = handle.read(min(DOWNLOAD_CHUNK_BYTES, left))
                if not block:
                    raise OSError(f"{handle.name}: shrank as it was sent")
                left -= len(block)
                yield gzip.compress(block)
            yield gzip.compress(bytes(-info.size % tarfile.BLOCKSIZE))
        yield gzip.compress(bytes(2 * tarfile.BLOCKSIZE)) + gzip.flush()  # the archive's end
    finally:
        for _, handle in files:
            handle.close()


def _cut(text: str) -> str:
    """``text``, cut to :data:`MAX_DETAIL_CHARS` saying how much was cut."""
    if len(text) <= MAX_DETAIL_CHARS:
        return text
    return f"{text[:MAX_DETAIL_CHARS]}... ({len(text) - MAX_DETAIL_CHARS:,} more characters)"
