"""benchmarks/service_load.py scaled down, on the simulated service in this process: clients
poll while tenants submit and a run trains; no request fails, and a quota's refusals are
counted as refusals (429), not failures. Latency is printed by the benchmark, not asserted
here: machines are noisy."""

from __future__ import annotations

import asyncio

import httpx

from benchmarks.service_load import Load, cancel_live, run_load
from tests.service.conftest import JOB, serve

LONG = {**JOB, "name": "long", "rl": {**JOB["rl"], "steps": 2000}}
"""A job that trains for minutes at the test service's speed."""


def test_clients_polling_while_tenants_submit_get_no_failed_request(tmp_path):
    service = serve(tmp_path / "data")
    try:
        keys = [service.key(f"load{i}", max_active_jobs=2, max_queued_jobs=5) for i in range(4)]
        trainer = service.client(service.key("trainer"))
        training = trainer.submit(LONG)["id"]
        tight = service.key("tight", max_active_jobs=1, max_queued_jobs=0)
        assert service.client(tight).submit(LONG)["state"] == "running"  # its only slot
        small = {**JOB, "rl": {**JOB["rl"], "steps": 1}}
        load = Load(clients=8, submissions=20, duration_s=3.0, poll_s=0.02, spec=small)

        async def scenario():
            recorder, taken, _ = await run_load(service.url, service.operator_key,
                                                [*keys, tight], load)  # fmt: skip
            return recorder, taken, await cancel_live(recorder, taken)

        recorder, taken, states = asyncio.run(scenario())
        assert recorder.failures == 0, recorder.samples
        kinds = recorder.summary()
        assert kinds["submit"]["requests"] == 20 and kinds["submit"]["refused"] == {"429": 4}
        assert len(taken) == 16 and sum(states.values()) == 16
        assert set(states) <= {"queued", "running", "done"}
        for kind in ("list", "list-all", "get", "cluster"):
            assert kinds[kind]["requests"] > 0 and kinds[kind]["failures"] == 0, kind
        assert trainer.job(training)["state"] == "running"  # it trained all along
    finally:
        service.stop()


def test_a_request_fails_unless_answered_2xx_or_refused_as_expected_for_its_kind():
    from benchmarks.service_load import Recorder, call

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(int(request.url.path.strip("/")), json={})

    async def requests(recorder: Recorder) -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer),
                                     base_url="http://test") as http:  # fmt: skip
            for kind, path in [("get", "/200"), ("submit", "/201"), ("submit", "/429"),
                               ("cancel", "/409"), ("get", "/429"), ("submit", "/500"),
                               ("get", "/404"), ("get", "/down")]:  # fmt: skip
                await call(http, recorder, kind, "GET", path)

    recorder = Recorder()
    asyncio.run(requests(recorder))
    kinds = recorder.summary()
    assert recorder.failures == 4 and len(recorder.samples) == 4
    assert kinds["get"]["requests"] == 4 and kinds["get"]["failures"] == 3
    assert kinds["submit"] == {**kinds["submit"], "requests": 3, "failures": 1,
                               "refused": {"429": 1}}  # fmt: skip
    assert kinds["cancel"]["refused"] == {"409": 1} and kinds["cancel"]["failures"] == 0
