"""A Python client of a MARLaaS service (httpx): submit, watch, cancel and fetch jobs.

    from marlaas.client import Client
    client = Client()                       # MARLAAS_URL and MARLAAS_API_KEY
    job = client.submit({"name": "emit-a", "env": {"name": "target_char"}, ...})
    for event in client.events(job["id"]):  # server-sent events, reconnecting
        print(event)
    client.fetch(job["id"], out="adapter/")  # the newest version, a PEFT folder

A refusal of the service is a :class:`ServiceError` with its HTTP status and reason.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from marlaas import strict_json
from marlaas.core.ascii_digits import ascii_digits

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV, KEY_ENV = "MARLAAS_URL", "MARLAAS_API_KEY"
ENDED = ("done", "cancelled", "failed", "refused")
REFUSED_EVENT = "refused"
"""The event that ends a stream whose key was revoked while it ran (a ServiceError, 401)."""
STREAM_SILENCE_S = 45.0
"""How long an event stream may send nothing, not even the ping the service sends every 15 s,
before the client takes the connection as lost and reconnects [s]: a service that froze, or
a network that dropped it without a word, is not waited on forever."""
RECONNECT_S = 60.0
"""How long :meth:`Client.events` tries to reconnect to a service it lost before it gives up
(ServiceError, status 0) [s]."""


class ServiceError(RuntimeError):
    """The service refused a request (``status``: its HTTP status) or could not be reached
    (``status`` 0)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{detail} (HTTP {status})" if status else detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class Event:
    """A job's event: ``kind`` state or step, ``data`` its body, ``id`` its number."""

    id: int
    kind: str
    data: dict


class Client:
    """A service at ``url`` (default ``$MARLAAS_URL``, else http://127.0.0.1:8000) as the
    holder of ``key`` (default ``$MARLAAS_API_KEY``)."""

    def __init__(self, url: str | None = None, key: str | None = None,
                 timeout_s: float = 60.0) -> None:  # fmt: skip
        self.url = _checked_url((url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/"))
        key = key if key is not None else os.environ.get(KEY_ENV, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------- calls
    def health(self) -> dict:
        """The service's health (no key needed)."""
        return self._call("GET", "/v1/health", ok=(200, 503))

    def submit(self, spec: dict) -> dict:
        """Submit a job spec; ``{id, state}``. A number JSON cannot carry (NaN, infinity) is a
        ValueError naming its field; nothing is sent."""
        where = strict_json.non_finite(spec, "spec")
        if where is not None:
            raise ValueError(f"{where}: not a finite number (JSON carries no NaN or infinity)")
        return self._call("POST", "/v1/jobs", json=spec)

    def jobs(self) -> list[dict]:
        """Your jobs, newest first."""
        return self._call("GET", "/v1/jobs")

    def job(self, job_id: int) -> dict:
        """One job: state, step, steps, rewards, versions, reason."""
        return self._call("GET", f"/v1/jobs/{int(job_id)}")

    def cancel(self, job_id: int) -> dict:
        """Cancel a job."""
        return self._call("POST", f"/v1/jobs/{int(job_id)}/cancel")

    def cluster(self) -> dict:
        """Utilization, jobs queued and running, the policy."""
        return self._call("GET", "/v1/cluster")

    def wait(self, job_id: int, poll_s: float = 1.0, timeout_s: float | None = None) -> dict:
        """Poll until the job has ended; its last state."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["state"] in ENDED:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout_s} s")
            time.sleep(poll_s)

    def events(self, job_id: int, last_id: int = 0, retry_s: float = 1.0,
               reconnect_s: float | None = None) -> Iterator[Event]:  # fmt: skip
        """The job's events as they come, until it has ended; reconnects (Last-Event-ID)
        when the stream ends before the job has (a service that stops, SIGTERM or Ctrl-C,
        ends its streams), when the connection drops (``kill -9``) or when nothing, not even a
        ping, came for :data:`STREAM_SILENCE_S`; after ``reconnect_s`` (default
        :data:`RECONNECT_S`) without reaching the service, ServiceError (status 0). A key
        revoked while the stream runs ends it with ServiceError (401)."""
        reconnect_s = RECONNECT_S if reconnect_s is None else reconnect_s
        lost_at: float | None = None
        while True:
            headers = {"Last-Event-ID": str(last_id)} if last_id else {}
            try:
                path = f"/v1/jobs/{int(job_id)}/events"
                with self._http.stream("GET", path, headers=headers,
                                       timeout=STREAM_SILENCE_S) as response:  # fmt: skip
                    if response.status_code != 200:
                        response.read()
                        raise _error(response)
                    lost_at, ended = None, False
                    for event in _parse_sse(response.iter_lines()):
                        if event.kind == REFUSED_EVENT:  # the key was revoked mid-stream
                            raise ServiceError(
                                int(event.data.get("status", 401)),
                                str(event.data.get("detail", "key refused")),
                            )
                        last_id = event.id
                        ended = event.kind == "state" and event.data.get("state") in ENDED
                        yield event
                if ended or self.job(job_id)["state"] in ENDED:
                    return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                pass
            except ServiceError as err:
                if err.status != 0:  # a refusal; 0: self.job could not reach the service
                    raise
            now = time.monotonic()
            lost_at = now if lost_at is None else lost_at
            if now - lost_at > reconnect_s:
                raise ServiceError(0, f"lost {self.url} and could not reconnect within "
                                   f"{reconnect_s:g} s") from None  # fmt: skip
            time.sleep(retry_s)

    def fetch(self, job_id: int, out: str | Path, version: int | None = None) -> Path:
        """Download an adapter version (default: the newest) and unpack it into ``out``,
        a folder PeftModel.from_pretrained loads; returns ``out``."""
        if version is None:
            versions = self.job(job_id)["versions"]
            if not versions:
                raise ServiceError(404, f"job {job_id} has no adapter version to fetch yet")
            version = versions[-1]
        try:
            response = self._http.get(f"/v1/jobs/{int(job_id)}/adapters/{int(version)}")
        except httpx.TransportError as err:  # unreachable, or lost mid-download
            raise ServiceError(0, f"cannot fetch from {self.url}: {err}") from None
        if response.status_code != 200:
            raise _error(response)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        try:  # the whole archive is read before a file is written
            with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as tar:
                members = tar.getmembers()
                for member in members:
                    if not member.isfile():
                        continue
                    member.name = Path(member.name).name  # flat: the folder's files only
                    tar.extract(member, out, filter="data")
        except (tarfile.ReadError, EOFError, zlib.error, gzip.BadGzipFile) as err:
            # the service sends the archive as it makes it: one it could not finish ends short
            raise ServiceError(0, f"job {job_id}'s adapter version {version} came cut short or "
                               f"damaged ({err}); fetch it again") from None  # fmt: skip
        return out

    def _call(self, method: str, path: str, ok=(200, 201, 202), **kwargs):
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise ServiceError(0, f"cannot reach {self.url}: {err}") from None
        if response.status_code not in ok:
            raise _error(response)
        try:
            return response.json()
        except ValueError:
            raise ServiceError(response.status_code, _not_ours(response)) from None


def _checked_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host; else ValueError saying what is wrong."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as err:
        raise ValueError(f"{url!r} is not a URL ({err})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return url


def _not_ours(response: httpx.Response) -> str:
    """What to say of an answer that is not a MARLaaS service's JSON."""
    origin = f"{response.url.scheme}://{response.url.netloc.decode('ascii')}"
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    return (
        f"{origin} answered {kind}, not a MARLaaS service's JSON: is --url (or ${URL_ENV}) "
        "a MARLaaS service?"
    )


def _error(response: httpx.Response) -> ServiceError:
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        if response.status_code >= 500:  # the service's own failure, or a proxy's
            return ServiceError(response.status_code, " ".join(response.text.split())[:200])
        return ServiceError(response.status_code, _not_ours(response))
    if isinstance(detail, list):  # FastAPI's own validation errors
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
                           for d in detail)  # fmt: skip
    return ServiceError(response.status_code, str(detail))


def _parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    """Server-sent events from the stream's lines (comments and pings skipped)."""
    event_id, kind, data = 0, "message", []
    for line in lines:
        if not line:
            if data:
                yield Event(event_id, kind, json.loads("\n".join(data)))
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id" and ascii_digits(value):
            event_id = int(value)
        elif field == "event":
            kind = value
        elif field == "data":
            data.append(value)
