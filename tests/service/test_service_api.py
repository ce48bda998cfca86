"""The service's API over real HTTP on loopback, on SQLite and on PostgreSQL: tenants submit,
watch, cancel; keys, other tenants' jobs, quotas and bad requests get the right answer and
change nothing."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import httpx
import pytest

from marlaas.client import ServiceError
from tests.service.conftest import JOB


def rows(store) -> dict[str, int]:
    """Row counts of every table (to show a refused request changed nothing)."""
    from sqlalchemy import text

    with store.engine.connect() as connection:
        count = "SELECT COUNT(*) FROM {}"
        tables = ("tenants", "jobs", "job_events", "steps", "work_records")
        return {table: connection.execute(text(count.format(table))).scalar() for table in tables}


def test_two_tenants_submit_and_each_sees_only_its_own_jobs(service):
    bob_key = service.key("bob")
    alice, bob = service.client(service.key("alice")), service.client(bob_key)
    a = alice.submit(JOB)
    b = bob.submit({**JOB, "name": "other", "rl": {**JOB["rl"], "steps": 2}})
    assert a["state"] in ("queued", "running") and b["id"] != a["id"]
    done_a, done_b = alice.wait(a["id"], 0.1, 60), bob.wait(b["id"], 0.1, 60)
    assert done_a["state"] == "done" and done_a["step"] == 3 and len(done_a["rewards"]) == 3
    assert done_b["state"] == "done" and done_b["tenant"] == "bob" and done_b["step"] == 2
    assert [j["id"] for j in alice.jobs()] == [a["id"]]
    with pytest.raises(ServiceError) as err:
        bob.job(a["id"])
    assert err.value.status == 404
    for call in (lambda: bob.cancel(a["id"]), lambda: list(bob.events(a["id"]))):
        with pytest.raises(ServiceError) as err:
            call()
        assert err.value.status == 404
    response = httpx.get(f"{service.url}/v1/jobs/{a['id']}/adapters/0",
                         headers={"Authorization": f"Bearer {bob_key}"})  # fmt: skip
    assert response.status_code == 404
    operator = service.client(service.operator_key)
    assert {j["tenant"] for j in operator.jobs()} == {"alice", "bob"}


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer wrong-key", "Basic abc"])
def test_a_missing_or_wrong_key_is_401_and_changes_nothing(service, header):
    service.key("alice")
    before = rows(service.store)
    headers = {} if header is None else {"Authorization": header}
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/1"),
                         ("POST", "/v1/jobs/1/cancel"), ("GET", "/v1/cluster")]:  # fmt: skip
        response = httpx.request(method, service.url + path, headers=headers, json=JOB)
        assert response.status_code == 401, (method, path)
        assert "wrong-key" not in response.text
    assert rows(service.store) == before


def test_a_revoked_key_is_refused(service):
    key = service.key("alice")
    client = service.client(key)
    assert client.jobs() == []
    service.store.revoke_tenant("alice")
    with pytest.raises(ServiceError) as err:
        client.jobs()
    assert err.value.status == 401


LONG_TAIL = {"dist": "lognormal", "median": 100, "sigma": 1.0}
"""An environment latency of 100 s median whose p99.99 is 4,122 s [s]."""

BAD_SPECS = [
    (b"{not json", 422, "not JSON"),
    (  # its steps took every environment worker for a day, and a cancel waited for them
        json.dumps({**JOB, "env": {"latency_s": {"dist": "constant", "value": 86400}}}).encode(),
        422,
        "env: one step may take 87,000 s (timeout_s 600 s + latency_s at its longest 86,400 s); "
        "this service's max_env_step_s is 900 s",
    ),
    (  # a lognormal's median is well within, its p99.99 (x e^3.72) is not
        json.dumps({**JOB, "env": {"timeout_s": 60, "latency_s": LONG_TAIL}}).encode(),
        422,
        "one step may take 4,182.38 s (timeout_s 60 s + latency_s at its longest 4,122.38 s)",
    ),
    (b'["a list"]', 422, "JSON object"),
    (json.dumps({**JOB, "surprise": 1}).encode(), 422, "surprise: unknown field"),
    (json.dumps({**JOB, "rl": {"steps": -3}}).encode(), 422, "rl.steps"),
    (json.dumps({**JOB, "rl": {"steps": 10**12}}).encode(), 422, "rl.steps"),
    (json.dumps({**JOB, "rl": {**JOB["rl"], "group_size": 10**6}}).encode(), 422, "group_size"),
    (json.dumps({**JOB, "tenant": "bob"}).encode(), 422, "tenant: set by the service"),
    (json.dumps({**JOB, "weight": 100}).encode(), 422, "weight: set by the service"),
    (json.dumps({**JOB, "env": {"name": "os:system"}}).encode(), 422, "not one of this service"),
    (json.dumps({**JOB, "env": {"name": "marlaas.envs.arithmetic:ArithmeticEnv"}}).encode(),
     422, "not one of this service"),
    (json.dumps({**JOB, "prompt_tokens": {"dist": "trace", "path": "/etc/passwd",
                                          "format": "csv", "column": "x"}}).encode(),
     422, "cannot name a file"),
    (json.dumps({**JOB, "env": {"name": "python_exec", "args": {"path": "/etc"}}}).encode(),
     422, "cannot name a file"),
    (json.dumps({**JOB, "lora_rank": 64}).encode(), 422, "max_lora_rank"),
    (json.dumps({**JOB, "rl": {**JOB["rl"], "max_new_tokens": 4000}}).encode(), 422, "tokens"),
    # more work than any workload holds: it was 201, and `marlaas traffic` then could not
    # write the service's submissions at all, every tenant's ("6,400,000 group-turns in all")
    (json.dumps({**JOB, "rl": {**JOB["rl"], "steps": 100_000, "prompts_per_step": 64}}).encode(),
     422, "rl: 6,400,000 group-turns (steps x (prompts_per_step + resample_alike) x turns); "
     "at most 2,000,000"),
    # vLLM samples at temperatures up to 2: such a job was 201, and failed generating
    (json.dumps({**JOB, "rl": {**JOB["rl"], "temperature": 100}}).encode(), 422,
     "rl.temperature: Input should be less than or equal to 2"),
    (json.dumps({**JOB, "name": "bad name!"}).encode(), 422, "name"),
    (b"{" + b'"name": "x", ' * 2 + b"}", 422, "not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, 422, "nested too deeply"),
    (b'{"name": "x", ' + json.dumps(JOB)[1:].encode(), 422, "duplicate key 'name'"),
    (b" " * (1024 * 1024 + 1), 413, "over"),
    # an environment's option its episodes cannot use: was 201, and the job failed on its
    # first episode (ValueError: empty range for randrange()), or held the service's memory
    (json.dumps({**JOB, "env": {"name": "arithmetic", "args": {"max_operand": -1}}}).encode(),
     422, "env.args: ArithmeticEnv: option 'max_operand' must be from 0 to 1,000,000,000"),
    (json.dumps({**JOB, "env": {"name": "target_char", "args": {"prompt_len": 10**9}}}).encode(),
     422, "env.args: TargetCharEnv: option 'prompt_len' must be from 1 to 1,048,576"),
    (json.dumps({**JOB, "env": {"name": "calculator", "args": {"max_turns": 0}}}).encode(),
     422, "env.args: CalculatorEnv: option 'max_turns' must be from 1 to 256"),
    # NaN and infinity anywhere, env.args (which no schema types) too: the store could not
    # write them (a 500 with a traceback)
    (b'{"name": "x", "env": {"name": "arithmetic", "args": {"format_bonus": NaN}}}', 422,
     "env.args.format_bonus: not a finite number"),
    (b'{"name": "x", "env": {"name": "python_exec", "args": {"tasks": [{"prompt": "p", '
     b'"func": "f", "tests": [[[1], 2]], "note": -Infinity}]}}}', 422,
     "env.args.tasks[0].note: not a finite number (JSON carries no NaN or infinity)"),
    # the sandbox's own bounds were the only ones: a tenant's code took 64 GiB a process and
    # 4,096 processes on the service's host; the operator's caps (service: max_sandbox_*)
    (json.dumps({**JOB, "env": {"name": "python_exec", "args": {"memory_mb": 65536}}}).encode(),
     422, "env.args.memory_mb: 65,536 MiB is above this service's max_sandbox_memory_mb "
     "(2,048 MiB)"),
    (json.dumps({**JOB, "env": {"name": "python_exec", "args": {"max_processes": 4096}}}).encode(),
     422, "env.args.max_processes: 4,096 is above this service's max_sandbox_processes (64)"),
    (json.dumps({**JOB, "env": {"name": "python_exec",
                                "args": {"max_output_bytes": 256 << 20}}}).encode(),
     422, "env.args.max_output_bytes: 268,435,456 bytes is above this service's "
     "max_sandbox_output_bytes (8,388,608 bytes)"),
]  # fmt: skip


def test_the_operators_sandbox_caps_bound_what_a_job_asks_and_its_defaults():
    """A job within the service's sandbox caps is taken; one above is refused naming the
    field, the value and the cap, a cap the operator lowered below the environment's default
    included (the job that sets nothing asks for the default)."""
    from marlaas.service.config import ServiceConfig
    from marlaas.service.requests import JobRequestError, job_from_request
    from tests.service.conftest import CLUSTER

    config = ServiceConfig.model_validate(CLUSTER)
    asks = {"memory_mb": 2048, "max_processes": 64, "max_output_bytes": 8 << 20}
    taken = job_from_request({**JOB, "env": {"name": "python_exec", "args": asks}}, "a", config)
    assert taken.env.args == asks
    lowered = ServiceConfig.model_validate(
        {**CLUSTER, "service": {**CLUSTER["service"], "max_sandbox_memory_mb": 256}}
    )
    with pytest.raises(JobRequestError) as refused:
        job_from_request({**JOB, "env": {"name": "python_exec"}}, "a", lowered)
    assert str(refused.value) == (
        "env.args.memory_mb: 512 MiB (the environment's default) is above this service's "
        "max_sandbox_memory_mb (256 MiB)"
    )
    with pytest.raises(ValueError, match="max_sandbox_processes"):  # the sandbox's own bound
        ServiceConfig.model_validate({**CLUSTER, "service": {"max_sandbox_processes": 5000}})


@pytest.mark.parametrize(("field", "cap"), [
    ("max_sandbox_memory_mb", 63), ("max_sandbox_memory_mb", -1), ("max_sandbox_processes", 0),
    ("max_sandbox_output_bytes", 1023), ("max_sandbox_memory_mb", 65_537),
])  # fmt: skip
def test_a_sandbox_cap_no_job_could_meet_or_past_the_sandboxs_own_bound_is_refused(field, cap):
    """A cap below what the sandbox takes at least (64 MiB of memory: python_exec refuses
    less) was taken: the service then refused every python_exec job it listed, the one that
    set nothing as 'above the cap' and the one that asked less as below the sandbox's own
    bound. The cluster file is refused, naming the field."""
    from marlaas.service.config import ServiceConfig
    from tests.service.conftest import CLUSTER

    with pytest.raises(ValueError, match=field):
        ServiceConfig.model_validate({**CLUSTER, "service": {field: cap}})


@pytest.mark.parametrize(("body", "status", "says"), BAD_SPECS)
def test_a_bad_job_spec_gets_its_4xx_naming_what_is_wrong_and_changes_nothing(
    service, body, status, says
):
    key = service.key("alice")
    before = rows(service.store)
    response = httpx.post(f"{service.url}/v1/jobs", content=body,
                          headers={"Authorization": f"Bearer {key}",
                                   "Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == status, response.text
    assert says in response.json()["detail"]
    assert rows(service.store) == before


def test_a_huge_value_in_a_bad_spec_is_not_echoed_whole(service):
    key = service.key("alice")
    body = json.dumps({**JOB, "bogus" + "x" * 900_000: 1}).encode()
    response = httpx.post(f"{service.url}/v1/jobs", content=body,
                          headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) < 2_100 and detail.endswith("more characters)"), detail[-80:]


def test_the_client_names_a_number_json_cannot_carry_and_sends_nothing(service):
    alice = service.client(service.key("alice"))
    before = rows(service.store)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"spec\.rl\.steps: not a finite number"):
            alice.submit({**JOB, "rl": {**JOB["rl"], "steps": bad}})
    assert rows(service.store) == before


def test_the_client_says_when_the_url_is_not_a_marlaas_service(tmp_path):
    """A server answering HTML or text (another service on the port) was a JSONDecodeError."""
    import http.server

    from marlaas.client import Client

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/v1/cluster":  # the service's own failure (Starlette's text 500)
                self.send_response(500)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"Internal Server Error")
                return
            found = self.path == "/v1/jobs"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain" if found else "text/html")
            self.end_headers()
            self.wfile.write(b"not json" if found else b"<html>" + b"x" * 5000 + b"</html>")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        with Client(url, "k") as client:
            for call, status, kind in ((client.jobs, 200, "text/plain"),
                                       (lambda: client.job(1), 404, "text/html")):  # fmt: skip
                with pytest.raises(ServiceError) as err:
                    call()
                assert err.value.status == status and len(str(err.value)) < 200, str(err.value)
                assert f"{url} answered {kind}, not a MARLaaS service's JSON" in str(err.value)
            with pytest.raises(ServiceError) as err:
                client.cluster()
            assert (err.value.status, err.value.detail) == (500, "Internal Server Error")
    finally:
        server.shutdown()
        server.server_close()


def test_a_huge_body_without_a_length_is_413(service):
    key = service.key("alice")

    def chunks():
        for _ in range(300):
            yield b" " * 8192

    response = httpx.post(f"{service.url}/v1/jobs", content=chunks(),
                          headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/v1/jobs/0", "job_id in the path: Input should be greater than or equal to 1"),
        ("/v1/jobs/-1", "job_id in the path: Input should be greater than or equal to 1"),
        ("/v1/jobs/abc", "job_id in the path: Input should be a valid integer"),
        ("/v1/jobs/99999999999999999999999", "job_id in the path: Input should be less than"),
        # past PostgreSQL's INTEGER: a 500 there ("integer out of range"), 404 on SQLite
        (
            "/v1/jobs/2147483648",
            "job_id in the path: Input should be less than or equal to 2147483647",
        ),
        ("/v1/jobs/4611686018427387904/events", "job_id in the path: Input should be less"),
        ("/v1/jobs/1/adapters/-1", "version in the path: Input should be greater than"),
        ("/v1/jobs/7/adapters/x", "version in the path: Input should be a valid integer"),
    ],
)
def test_a_bad_id_is_422_with_one_line_naming_it(service, path, says):
    key = service.key("alice")
    response = httpx.get(service.url + path, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail.startswith(says) and "\n" not in detail, detail


def test_quotas_are_the_schedulers_admission_429_with_the_reason(service):
    client = service.client(service.key("carol", max_active_jobs=1, max_queued_jobs=1))
    slow = {**JOB, "rl": {**JOB["rl"], "steps": 5000}}  # runs until cancelled
    first, second = client.submit(slow), client.submit(slow)
    assert first["state"] == "running" and second["state"] == "queued"
    with pytest.raises(ServiceError) as err:
        client.submit(slow)
    assert err.value.status == 429 and "carol" in err.value.detail
    refused = client.jobs()[0]
    assert refused["state"] == "refused" and "waiting for admission" in refused["reason"]
    client.cancel(first["id"])
    client.cancel(second["id"])
    assert client.wait(first["id"], 0.1, 60)["state"] == "cancelled"


def test_the_operator_submits_nothing(service):
    response = httpx.post(f"{service.url}/v1/jobs", json=JOB,
                          headers={"Authorization": f"Bearer {service.operator_key}"})  # fmt: skip
    assert response.status_code == 403


def test_a_cancelled_job_ends_cancelled_and_a_second_cancel_is_409(service):
    client = service.client(service.key("alice"))
    job = client.submit({**JOB, "rl": {**JOB["rl"], "steps": 200}})
    assert client.cancel(job["id"])["state"] == "cancelling"
    assert client.wait(job["id"], 0.1, 60)["state"] == "cancelled"
    with pytest.raises(ServiceError) as err:
        client.cancel(job["id"])
    assert err.value.status == 409
    assert f"job {job['id']} is cancelled; nothing to cancel" in str(err.value)  # not "being"


def test_events_stream_steps_and_states_and_resume_after_last_event_id(service):
    client = service.client(service.key("alice"))
    job = client.submit(JOB)
    events = list(client.events(job["id"]))
    kinds = [e.kind for e in events]
    assert kinds[0] == "state" and events[0].data["state"] == "queued"
    assert [e.data["step"] for e in events if e.kind == "step"] == [0, 1, 2]
    assert events[-1].kind == "state" and events[-1].data["state"] == "done"
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    later = list(client.events(job["id"], last_id=ids[2]))
    assert [e.id for e in later] == ids[3:]


def test_health_cluster_and_metrics(service):
    assert httpx.get(f"{service.url}/v1/health").json()["status"] == "ok"
    client = service.client(service.key("alice"))
    job = client.submit({**JOB, "rl": {**JOB["rl"], "steps": 5000}})["id"]
    deadline = time.monotonic() + 60
    while not client.cluster()["utilization"].get("rollout"):  # sampled as it runs
        assert time.monotonic() < deadline, client.cluster()
        time.sleep(0.1)
    cluster = client.cluster()
    assert set(cluster["utilization"]) == {"rollout", "train"} and cluster["running"] == 1
    assert 0 < cluster["utilization"]["rollout"] <= 1
    client.cancel(job)
    client.wait(job, 0.1, 60)
    assert client.cluster()["running"] == 0
    text = httpx.get(f"{service.url}/metrics").text
    for series in ("marlaas_jobs_queued", "marlaas_jobs_running", "marlaas_pool_utilization",
                   "marlaas_request_seconds_bucket"):  # fmt: skip
        assert series in text
    assert 'route="/v1/jobs/{job_id}"' in text


def test_the_api_is_documented_at_docs(service):
    schema = httpx.get(f"{service.url}/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/jobs/{job_id}/adapters/{version}"} <= (
        set(schema["paths"])
    )
    assert httpx.get(f"{service.url}/docs").status_code == 200


def test_concurrent_submissions_each_get_one_job(service):
    key = service.key("dave", max_active_jobs=50, max_queued_jobs=50)
    answers, errors = [], []

    def submit():
        try:
            answers.append(service.client(key).submit(JOB)["id"])
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(answers)) == 20
    client = service.client(key)
    for job_id in answers:
        assert client.wait(job_id, 0.2, 120)["state"] == "done"


SLOW_JOB = {**JOB, "rl": {**JOB["rl"], "steps": 5000}}
"""A job that runs until it is cancelled."""


def submit_at_once(service, key: str, count: int) -> tuple[list[int], list[int]]:
    """``count`` submissions of SLOW_JOB with ``key`` from as many threads at once: the ids
    accepted, and the statuses of those refused."""
    accepted, refused = [], []
    start = threading.Barrier(count)

    def submit():
        start.wait(10)
        try:
            accepted.append(service.client(key).submit(SLOW_JOB)["id"])
        except ServiceError as err:
            refused.append(err.status)

    threads = [threading.Thread(target=submit) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return accepted, refused


def test_concurrent_submissions_past_a_quota_accept_exactly_the_quota(service):
    key = service.key("dave", max_active_jobs=1, max_queued_jobs=2)  # 3 live jobs at most
    accepted, refused = submit_at_once(service, key, 8)
    assert len(accepted) == 3 and refused == [429] * 5, (accepted, refused)
    client = service.client(key)
    live = {j["id"] for j in client.jobs() if j["state"] != "refused"}
    assert live == set(accepted) and len(client.jobs()) == 8  # the 5 refused stay, refused
    assert {j["state"] for j in client.jobs() if j["id"] in live} == {"running", "queued"}
    for job_id in accepted:
        client.cancel(job_id)
    for job_id in accepted:
        assert client.wait(job_id, 0.1, 60)["state"] == "cancelled"


def test_a_tenants_quota_reaches_the_scheduler_before_any_of_its_concurrent_jobs(
    service, monkeypatch
):
    """A tenant's first submissions at once: each is judged under its quota, even when the
    quota's message is slow to enter the inbox (one submission noted the quota as sent before
    sending it, and the others, finding it noted, went ahead of it under the defaults)."""
    from marlaas.drive.inbox import SetQuota

    inbox = type(service.runner.inbox)
    put = inbox.put

    def slow_quota(self, message, *args, **kwargs):
        if isinstance(message, SetQuota):
            time.sleep(0.3)
        return put(self, message, *args, **kwargs)

    monkeypatch.setattr(inbox, "put", slow_quota)  # (its instances have no __dict__)
    key = service.key("fay", max_active_jobs=1, max_queued_jobs=0)
    accepted, refused = submit_at_once(service, key, 3)
    assert len(accepted) == 1 and refused == [429, 429], (accepted, refused)
    client = service.client(key)
    client.cancel(accepted[0])
    assert client.wait(accepted[0], 0.1, 60)["state"] == "cancelled"


def test_a_submission_the_stopping_service_cannot_take_is_503_and_leaves_nothing(service):
    """A submission while the service stops is 503 and leaves no row; a cancel then is
    recorded (202; it was a 500), so that the restart submits the job cancelled."""
    client = service.client(service.key("erin"))
    first = client.submit(JOB)  # erin's quotas reach the scheduler with her first job
    assert client.wait(first["id"], 0.1, 60)["state"] == "done"
    slow = client.submit(SLOW_JOB)
    service.runner.inbox.stop()  # as a stopping serve does: its inbox takes no more jobs
    jobs = rows(service.store)["jobs"]  # (the slow job's steps go on)
    with pytest.raises(ServiceError) as err:
        client.submit(JOB)
    assert err.value.status == 503 and "stopping" in err.value.detail
    assert rows(service.store)["jobs"] == jobs
    assert [j["id"] for j in client.jobs()] == [slow["id"], first["id"]]
    assert client.cancel(slow["id"])["state"] == "cancelling"
    live = {job_id: cancelled for job_id, _, _, cancelled, _ in service.store.live_jobs()}
    assert live == {slow["id"]: True}  # what a restart submits again: cancelled


def test_an_adapter_download_is_made_as_it_is_sent_not_held_whole(tmp_path, monkeypatch):
    """It was built whole in memory (a BytesIO, then its bytes) before a byte was sent:
    every download at once of a large adapter held all of it in the service's memory. Now
    it is read and compressed a chunk at a time."""
    import os
    import tarfile
    import tracemalloc

    from tests.service.conftest import serve

    service = serve(tmp_path / "data")
    try:
        key = service.key("alice")
        client = service.client(key)
        weights = os.urandom(24 << 20)  # incompressible: the archive is as large
        job, folder = service.job_with_adapter(key, monkeypatch, weights)
        (folder / "optimizer.pt").write_bytes(b"the trainer's")
        (folder / "empty.txt").write_bytes(b"")
        got = tmp_path / "got.tar.gz"
        tracemalloc.start()
        try:
            with httpx.stream("GET", f"{service.url}/v1/jobs/{job}/adapters/0", timeout=60,
                              headers={"Authorization": f"Bearer {key}"}) as answer, \
                    open(got, "wb") as out:  # fmt: skip
                assert answer.status_code == 200
                for chunk in answer.iter_bytes():
                    out.write(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < (8 << 20), f"{peak:,} bytes at once for a {len(weights):,}-byte adapter"
        with tarfile.open(got) as tar:
            names = tar.getnames()
            assert tar.extractfile(f"job{job}-v0/adapter_model.safetensors").read() == weights
            assert tar.extractfile(f"job{job}-v0/empty.txt").read() == b""
        root = f"job{job}-v0"
        assert names == [f"{root}/adapter_config.json", f"{root}/adapter_model.safetensors",
                         f"{root}/empty.txt"]  # fmt: skip
        fetched = client.fetch(job, tmp_path / "adapter", version=0)  # the client unpacks it
        assert (fetched / "adapter_config.json").read_text() == '{"r": 8}'
    finally:
        service.stop()


def test_an_adapter_download_cut_short_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    """Sent as it is made (ef001cf), a download whose file shrank mid-way ends short after
    its 200: the client's unpacking raised EOFError ('Compressed file ended before the
    end-of-stream marker was reached'), and `marlaas fetch` ended in a traceback."""
    from marlaas.service import app as service_app
    from tests.service.conftest import serve

    service = serve(tmp_path / "data")
    try:
        key = service.key("alice")
        client = service.client(key)
        job, folder = service.job_with_adapter(key, monkeypatch, os.urandom(3 << 20))
        made = service_app._tar_gz

        def shrinking(files, root):
            for i, chunk in enumerate(made(files, root)):
                if i == 4:  # its first MiB is read: cut the weights there
                    os.truncate(folder / "adapter_model.safetensors", 1 << 20)
                yield chunk

        monkeypatch.setattr(service_app, "_tar_gz", shrinking)
        with pytest.raises(ServiceError) as err:
            client.fetch(job, tmp_path / "adapter", version=0)
        assert err.value.status == 0
        assert f"job {job}'s adapter version 0 came cut short or damaged (" in str(err.value)
        assert "fetch it again" in str(err.value)
        assert not any((tmp_path / "adapter").iterdir())
    finally:
        service.stop()


def test_an_adapter_file_removed_while_it_is_sent_is_sent_whole(tmp_path, monkeypatch):
    """A download opened each file only when it reached it: one removed meanwhile (the
    version dropped) cut the answer short after its 200. They are opened before the answer;
    a version gone before that is a 404 saying so."""
    from marlaas.service import app as service_app
    from tests.service.conftest import serve

    service = serve(tmp_path / "data")
    try:
        key = service.key("alice")
        client = service.client(key)
        weights = os.urandom(3 << 20)
        job, folder = service.job_with_adapter(key, monkeypatch, weights)
        made = service_app._tar_gz

        def removing(files, root):
            for i, chunk in enumerate(made(files, root)):
                if i == 0:  # adapter_config.json's header: the weights are not read yet
                    shutil.rmtree(folder)
                yield chunk

        monkeypatch.setattr(service_app, "_tar_gz", removing)
        fetched = client.fetch(job, tmp_path / "adapter", version=0)
        assert (fetched / "adapter_model.safetensors").read_bytes() == weights
        assert (fetched / "adapter_config.json").read_text() == '{"r": 8}'
        with pytest.raises(ServiceError) as err:  # gone before the request
            client.fetch(job, tmp_path / "again", version=0)
        assert err.value.status == 404
        assert f"job {job}'s adapter version 0 is no longer there (" in str(err.value)
    finally:
        service.stop()
