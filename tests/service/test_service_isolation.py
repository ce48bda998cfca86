"""Tenants kept apart, and a hostile client kept out: a key revoked while its event stream
runs ends the stream; a refused request's path reaches the log with its control characters
escaped; a new data folder (every tenant's adapters and specs) is its owner's only."""

from __future__ import annotations

import logging
import stat
import threading

import httpx
import pytest

from marlaas.cli import main
from marlaas.client import ServiceError
from marlaas.service.data_folder import open_to_others
from tests.service.conftest import JOB, wait_for

STREAM_END_S = 10.0
"""How long a revoked key's stream may take to end [s] (it checks every 0.5 s)."""
LONG_JOB = {**JOB, "rl": {**JOB["rl"], "steps": 100_000}}
"""A job that is still running long after the test has ended its stream."""


def follow(client, job_id: int, seen: list, ended: list) -> threading.Thread:
    """Follow ``job_id``'s events on a thread: each event into ``seen``; how it ended (None,
    or the ServiceError) into ``ended``."""

    def run() -> None:
        try:
            for event in client.events(job_id, reconnect_s=0):
                seen.append(event)
            ended.append(None)
        except ServiceError as err:
            ended.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_key_revoked_while_its_event_stream_runs_ends_the_stream_with_401(service):
    alice = service.client(service.key("alice"))
    bob = service.client(service.key("bob"))
    a, b = alice.submit(LONG_JOB), bob.submit(LONG_JOB)
    seen_a, ended_a, seen_b, ended_b = [], [], [], []
    follow(alice, a["id"], seen_a, ended_a)
    follow(bob, b["id"], seen_b, ended_b)
    assert wait_for(lambda: any(e.kind == "step" for e in seen_a), 30)
    service.store.revoke_tenant("alice")
    try:
        assert wait_for(lambda: ended_a, STREAM_END_S), "alice's stream ran on after revoke"
        assert isinstance(ended_a[0], ServiceError) and ended_a[0].status == 401
        assert "revoked" in ended_a[0].detail
        count = len(seen_b)  # bob's key stands: his stream goes on
        assert wait_for(lambda: len(seen_b) > count, 30) and not ended_b
    finally:
        operator = service.client(service.operator_key)
        for job in (a, b):
            operator.cancel(job["id"])


def test_a_refused_requests_path_is_logged_with_its_control_characters_escaped(service, caplog):
    hostile = "/v1/jobs/%1B[31mred%07%00" + "x" * 5000
    with caplog.at_level(logging.WARNING, logger="marlaas.service"):
        response = httpx.get(service.url + hostile)
    assert response.status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "marlaas.service"]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "\\x1b[31mred\\x07\\x00" in line
    assert all(c.isprintable() for c in line), repr(line)
    assert len(line) < 600


def test_a_new_data_folder_is_its_owners_only(tmp_path, capsys):
    data = tmp_path / "new" / "data"
    assert main(["tenants", "add", "alice", "--data", str(data)]) == 0
    capsys.readouterr()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert open_to_others(data) is None


def test_a_data_folder_others_may_read_is_warned_of(tmp_path):
    """A folder made before ``serve`` keeps its mode; its adapters are as open as it is."""
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    warning = open_to_others(data)
    assert warning is not None and "mode 755" in warning and f"chmod 700 {data}" in warning


@pytest.mark.parametrize("path", ["/v1/jobs/1", "/v1/jobs/1/events", "/v1/jobs/1/adapters/0"])
def test_another_tenants_job_and_a_job_that_does_not_exist_answer_alike(service, path):
    alice = service.client(service.key("alice"))
    bob_key = service.key("bob")
    job = alice.submit(JOB)
    assert job["id"] == 1
    headers = {"Authorization": f"Bearer {bob_key}"}
    theirs = httpx.get(service.url + path, headers=headers)
    missing = httpx.get(service.url + path.replace("/1", "/999", 1), headers=headers)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace("1", "N") == missing.json()["detail"].replace("999", "N")
    cancel = httpx.post(f"{service.url}/v1/jobs/1/cancel", headers=headers)
    assert cancel.status_code == 404
    assert alice.job(1)["cancel_requested"] is False


def test_one_key_holds_at_most_its_share_of_event_streams_and_a_closed_one_frees_its_place(
    service,
):
    from contextlib import ExitStack

    from marlaas.service.app import MAX_STREAMS_PER_CALLER

    alice_key, bob_key = service.key("alice"), service.key("bob")
    a = service.client(alice_key).submit(LONG_JOB)
    b = service.client(bob_key).submit(LONG_JOB)
    limits = httpx.Limits(max_connections=4 * MAX_STREAMS_PER_CALLER)
    http = httpx.Client(base_url=service.url, timeout=30, limits=limits)

    def stream(stack: ExitStack, key: str, job_id: int) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return stack.enter_context(http.stream("GET", f"/v1/jobs/{job_id}/events",
                                               headers=headers))  # fmt: skip

    try:
        with ExitStack() as stack:
            held = [stream(stack, alice_key, a["id"]) for _ in range(MAX_STREAMS_PER_CALLER)]
            assert [r.status_code for r in held] == [200] * MAX_STREAMS_PER_CALLER
            with ExitStack() as one_more:
                refused = stream(one_more, alice_key, a["id"])
                assert refused.status_code == 429
                assert "event streams" in refused.read().decode()
            assert stream(stack, bob_key, b["id"]).status_code == 200  # bob's own share
            held[0].close()  # its place is given back
            assert wait_for(lambda: stream(stack, alice_key, a["id"]).status_code == 200, 10)
    finally:
        http.close()
        operator = service.client(service.operator_key)
        for job in (a, b):
            operator.cancel(job["id"])


def test_a_last_event_id_of_no_ascii_digits_streams_from_the_start_and_frees_its_place(service):
    """``'\\u00b2'.isdigit()`` holds: a Latin-1 superscript two as Last-Event-ID was a 500
    with a traceback, and it held one of the key's places until the garbage collector ran."""
    from marlaas.service.app import MAX_STREAMS_PER_CALLER

    key = service.key("alice")
    job = service.client(key).submit(LONG_JOB)
    url = f"/v1/jobs/{job['id']}/events"
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            for _ in range(MAX_STREAMS_PER_CALLER + 2):
                headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": b"\xb2"}
                with http.stream("GET", url, headers=headers) as odd:
                    assert odd.status_code == 200
                    assert next(odd.iter_lines()).startswith(("event:", "id:", ":"))
            headers = {"Authorization": f"Bearer {key}"}
            with http.stream("GET", url, headers=headers) as normal:
                assert normal.status_code == 200
    finally:
        service.client(service.operator_key).cancel(job["id"])


@pytest.mark.parametrize("last", ["2147483648", "999999999999999999"])
def test_a_last_event_id_past_every_id_streams_from_the_start(service, last):
    """No event's id is past 2^31 - 1: on PostgreSQL (INTEGER ids) such a Last-Event-ID was
    a 200 whose stream ended at once with a traceback in the log ("integer out of range");
    on SQLite it waited for events that could never come."""
    key = service.key("alice")
    client = service.client(key)
    job = client.submit(JOB)["id"]
    client.wait(job, 0.1, 60)
    everything = [event.id for event in client.events(job)]
    headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": last}
    url = f"{service.url}/v1/jobs/{job}/events"
    with httpx.stream("GET", url, headers=headers, timeout=30) as answer:
        assert answer.status_code == 200
        ids = [int(line[3:]) for line in answer.iter_lines() if line.startswith("id:")]
    assert ids == everything and len(ids) >= 5


def test_the_service_holds_at_most_max_streams_of_every_key_together_and_frees_each_place(
    tmp_path, db_url
):
    """The per-key cap alone let 16 streams per key poll the database, however many keys:
    ``--max-streams`` bounds them all. A place is given back as a key's own is: the client
    gone, its key revoked, its job ended; a refused stream holds none of either."""
    from contextlib import ExitStack

    from tests.service.conftest import serve

    served = serve(tmp_path / "data", db_url, max_streams=3)
    streams = served.app.state.streams
    keys = {name: served.key(name) for name in ("alice", "bob", "carol", "dave")}
    jobs = {name: served.client(key).submit(LONG_JOB)["id"] for name, key in keys.items()}
    http = httpx.Client(base_url=served.url, timeout=30, limits=httpx.Limits(max_connections=20))

    def stream(stack: ExitStack, name: str) -> httpx.Response:
        key = served.operator_key if name == "operator" else keys[name]
        return stack.enter_context(http.stream(
            "GET", f"/v1/jobs/{jobs.get(name, jobs['alice'])}/events",
            headers={"Authorization": f"Bearer {key}"},
        ))  # fmt: skip

    def refused(name: str) -> str:
        with ExitStack() as one_more:
            response = stream(one_more, name)
            assert response.status_code == 429, (name, response.status_code)
            return response.read().decode()

    try:
        with ExitStack() as stack:
            held = {name: stream(stack, name) for name in ("alice", "bob", "carol")}
            assert [r.status_code for r in held.values()] == [200, 200, 200]
            for name in ("dave", "bob"):  # a new key, one holding one
                detail = refused(name)
                assert "3 event streams of every tenant together are open on this" in detail
            with ExitStack() as operators:  # the operator is not shut out, nor counted
                assert stream(operators, "operator").status_code == 200
                assert (streams.total, streams.counts) == (3, {1: 1, 2: 1, 3: 1, None: 1})
            assert wait_for(lambda: None not in streams.counts, 10)
            assert (streams.total, streams.counts) == (3, {1: 1, 2: 1, 3: 1})
            held["alice"].close()  # the client gone: its place is given back
            assert wait_for(lambda: streams.total == 2, 10)
            assert stream(stack, "dave").status_code == 200
            served.store.revoke_tenant("bob")  # his stream ends (refused): its place too
            assert wait_for(lambda: streams.total == 2, STREAM_END_S)
            assert b"event: refused" in held["bob"].read()
            served.client(keys["carol"]).cancel(jobs["carol"])  # her job ends: her place too
            assert wait_for(lambda: streams.total == 1, 30)
            assert b"cancelled" in held["carol"].read()
            assert (streams.total, streams.counts) == (1, {4: 1})
            more = [stream(stack, "alice") for _ in range(2)]  # the places are there again
            assert [r.status_code for r in more] == [200, 200] and "3 event" in refused("alice")
        assert wait_for(lambda: streams.total == 0 and not streams.counts, 10)
    finally:
        http.close()
        operator = served.client(served.operator_key)
        for name in ("alice", "dave"):
            operator.cancel(jobs[name])
        served.stop()
