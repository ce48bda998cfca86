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

SPEED = 0.1
"""The simulated clock at a tenth of the wall's pace: a group turn takes about 140 s, far
past :data:`ENDED_WITHIN_S`, so that a cancel that waited for the groups cannot pass."""
ENDED_WITHIN_S = 60.0
"""How long the test waits for the cancelled job to end [s]: a bound for a loaded machine,
not a measure of speed."""


def test_a_cancel_during_a_long_generation_ends_the_job_at_once(tmp_path):
    served = serve(tmp_path / "data", speed=SPEED)
    try:
        client = served.client(served.key("alice"))
        job = client.submit(LONG_JOB)["id"]
        assert wait_for(lambda: client.job(job)["state"] == "running", 10)
        time.sleep(1.0)  # its first groups decode
        assert client.cancel(job)["state"] == "cancelling"
        # ended before its groups would have: they were stopped (a timeout here otherwise)
        assert client.wait(job, 0.05, ENDED_WITHIN_S)["state"] == "cancelled"
    finally:
        served.stop()
