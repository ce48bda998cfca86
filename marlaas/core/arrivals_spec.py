"""Where a workload's job arrivals come from: an arrivals CSV or a request trace."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from marlaas.core import limits as L
from marlaas.core.spec_fields import Amount, StrictSpec


class ArrivalsSpec(StrictSpec):
    """Job arrivals taken from a file (see marlaas.traces.arrivals): an arrivals CSV (one
    row per job, with its size), or a request trace whose timestamps become arrivals."""

    path: str
    """The file, relative to the workload file."""
    format: Literal["jobs", "azure", "burstgpt", "mooncake", "csv"] = "jobs"
    """jobs: an arrivals CSV (tenant, submit_s or submit_time, size, job); else a request
    trace in that format, whose first N timestamps (relative to the earliest) are the N jobs'
    arrivals, in workload order."""
    match: Literal["job", "tenant"] = "job"
    """Arrivals CSV: job: a row names its job; tenant: a tenant's k-th row goes to its k-th
    job."""
    time_scale: Amount(L.MAX_TIME_SCALE) = 1.0
    """Factor on the file's times (0 = every job at once)."""

    @model_validator(mode="after")
    def _match_for_jobs(self) -> ArrivalsSpec:
        if self.format != "jobs" and self.match != "job":
            raise ValueError(
                f"match: {self.match!r} is for an arrivals CSV (format: jobs); the jobs of a "
                f"request trace ({self.format}) arrive at its requests' times in workload order"
            )
        return self
