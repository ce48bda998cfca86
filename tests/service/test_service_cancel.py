"""A cancel during a long generation ends the job at once: the service's scheduler stops the
job's groups on the engines (AbortGeneration) instead of letting them decode to their end."""

from __future__ import annotations

import time

from tests.service.conftest import JOB, serve, wait_for

LONG_JOB = {
    **JOB,
    "rl": {**JOB["rl"], "steps": 2, "max_new_tokens": 1900},
    "response_tokens": {"dist": "constant", "value": 1900},
}
"""A job whose groups decode 1,900 tokens each: about 14 simulated s per group turn on the
test cluster's cost model (two groups of 4 samples on an engine)."""


def test_a_cancel_during_a_long_generation_ends_the_job_at_once(tmp_path):
    served = serve(tmp_path / "data", speed=1.0)  # the simulated clock at the wall's pace
    try:
        client = served.client(served.key("alice"))
        job = client.submit(LONG_JOB)["id"]
        assert wait_for(lambda: client.job(job)["state"] == "running", 10)
        time.sleep(1.0)  # its first groups decode (they take about 14 s)
        cancelled_at = time.monotonic()
        assert client.cancel(job)["state"] == "cancelling"
        assert client.wait(job, 0.05, 10)["state"] == "cancelled"
        assert time.monotonic() - cancelled_at < 3.0  # not when its groups would have ended
    finally:
        served.stop()
