"""A policy that raises on its Nth key call (``RAISE_AT_KEY`` in the environment; the load's
probe key counts as the first), on the first key of the job named ``RAISE_FOR_JOB``, or on
every key once the file ``RAISE_WHEN_FILE`` names exists: a policy by import path that fails
while a service runs."""

from __future__ import annotations

import os

from marlaas.core.policies import JobView, Policy

RAISE_AT_ENV, RAISE_FOR_ENV, RAISE_WHEN_ENV = "RAISE_AT_KEY", "RAISE_FOR_JOB", "RAISE_WHEN_FILE"


class RaiseOnNthKey(Policy):
    """Arrival order; the Nth key call, a key of the job named, or every key once the file
    named exists, raises RuntimeError."""

    idea = "arrival order, until its Nth key raises"
    source = "tests"
    calls = 0
    """Key calls so far, in this process."""

    def key(self, job: JobView) -> tuple:
        RaiseOnNthKey.calls += 1
        if RaiseOnNthKey.calls == int(os.environ.get(RAISE_AT_ENV, "0")):
            raise RuntimeError(f"key call {RaiseOnNthKey.calls} fails")
        if job.name == os.environ.get(RAISE_FOR_ENV):
            raise RuntimeError(f"job {job.name} fails")
        if os.environ.get(RAISE_WHEN_ENV) and os.path.exists(os.environ[RAISE_WHEN_ENV]):
            raise RuntimeError("told to fail")
        return (job.arrival_s, job.index)
