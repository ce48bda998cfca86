"""A service stopped while its jobs run: the driver returns (the jobs resume on the next
start) instead of dying with "the executor reported nothing"."""

from __future__ import annotations

import time

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
