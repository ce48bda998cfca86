"""Mechanism settings, and the named presets that make the baselines.

The policy only orders jobs; how the mechanism runs them is set here: where generation and
training run (``placement``), how many jobs are admitted at once, a global step barrier, and a
cap on every job's staleness bound. The usual baselines are presets of these settings, not
other code or other policies:

==========  ============================================================================
preset      settings
==========  ============================================================================
sequential  ``placement: colocated, max_active_jobs: 1, staleness_cap: 0``: one job at a
            time, synchronous on-policy RL on every device (jobs trained one after another)
sync        ``placement: colocated, barrier: true, staleness_cap: 0``: every job at once,
            synchronous, a global step barrier (multi-tenant, not asynchronous)
==========  ============================================================================

A field the workload sets itself and a preset sets otherwise is an error naming both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from marlaas.core.limits import MAX_JOBS, MAX_STALENESS
from marlaas.core.plain_numbers import plain_number
from marlaas.core.validation_message import short_repr

PRESETS: dict[str, dict[str, Any]] = {
    "sequential": {"placement": "colocated", "max_active_jobs": 1, "staleness_cap": 0},
    "sync": {"placement": "colocated", "barrier": True, "staleness_cap": 0},
}
"""Preset name -> the mechanism settings it fixes."""

DEFAULTS: dict[str, Any] = {
    "placement": "disaggregated",
    "max_active_jobs": None,
    "barrier": False,
    "staleness_cap": None,
    "max_queued_jobs": None,
    "tenant_max_active_jobs": None,
    "tenant_max_queued_jobs": None,
}
"""The settings of a workload that neither sets a field nor names a preset."""


@dataclass(frozen=True)
class Mechanism:
    """The mechanism settings in force for a run (defaults <- preset <- workload)."""

    placement: str
    """disaggregated: the pools keep their roles; colocated: every device both generates and
    trains, time-shared (one trainer spans all devices)."""
    max_active_jobs: int | None
    """Jobs admitted at once (None: all that have arrived)."""
    barrier: bool
    """No job generates for step k+1 before every job trained and published step k."""
    staleness_cap: int | None
    """Upper bound on every job's rl.max_staleness (None: keep each job's)."""
    max_queued_jobs: int | None = None
    """Jobs that may wait for admission at once, cluster-wide (None: no bound); the newest
    submissions beyond it are refused."""
    tenant_max_active_jobs: int | None = None
    """Jobs of one tenant admitted at once (None: no quota); its others wait."""
    tenant_max_queued_jobs: int | None = None
    """Jobs of one tenant that may wait for admission at once (None: no quota); its newest
    submissions beyond it are refused."""
    preset: str | None = None
    """The preset these settings came from, if any."""

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain data (for a run's summary)."""
        return {
            "preset": self.preset,
            "placement": self.placement,
            "max_active_jobs": self.max_active_jobs,
            "barrier": self.barrier,
            "staleness_cap": self.staleness_cap,
            "max_queued_jobs": self.max_queued_jobs,
            "tenant_max_active_jobs": self.tenant_max_active_jobs,
            "tenant_max_queued_jobs": self.tenant_max_queued_jobs,
        }


class SchedulingSpec(BaseModel):
    """The workload's ``scheduling:`` block. Unset fields take the preset's value, else the
    default (disaggregated, every arrived job admitted, no barrier, each job's own bound)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return plain_number(cls, value, info)

    preset: str | None = None
    """A named preset of the settings below: sequential or sync (see the module docstring)."""
    placement: Literal["disaggregated", "colocated"] | None = None
    """disaggregated: the pools keep their roles; colocated: every device both generates and
    trains, time-shared (one trainer spans all devices)."""
    max_active_jobs: Annotated[int, Field(gt=0, le=MAX_JOBS)] | None = None
    """Jobs admitted at once (unset: all that have arrived)."""
    barrier: bool | None = None
    """A global step barrier: no job generates for step k+1 before every job trained and
    published (synced) step k."""
    staleness_cap: Annotated[int, Field(ge=0, le=MAX_STALENESS)] | None = None
    """Upper bound applied to every job's rl.max_staleness (unset: keep each job's)."""
    max_queued_jobs: Annotated[int, Field(ge=0, le=MAX_JOBS)] | None = None
    """Jobs that may wait for admission at once, cluster-wide (unset: no bound). After each
    admission round the newest submissions beyond it are refused (0: a job that cannot be
    admitted at once is refused)."""
    tenant_max_active_jobs: Annotated[int, Field(gt=0, le=MAX_JOBS)] | None = None
    """Jobs of one tenant admitted at once (unset: no quota); its other jobs wait."""
    tenant_max_queued_jobs: Annotated[int, Field(ge=0, le=MAX_JOBS)] | None = None
    """Jobs of one tenant that may wait for admission at once (unset: no quota); its newest
    submissions beyond it are refused."""

    @model_validator(mode="after")
    def _preset_agrees(self) -> SchedulingSpec:
        if self.preset is None:
            return self
        if self.preset not in PRESETS:
            raise ValueError(
                f"preset: unknown preset {short_repr(self.preset)}; choose one of: "
                f"{', '.join(PRESETS)}"
            )
        for key, value in PRESETS[self.preset].items():
            own = getattr(self, key)
            if own is not None and own != value:
                raise ValueError(
                    f"{key}: the workload sets {own!r} but preset {self.preset!r} sets "
                    f"{value!r}; drop one of them"
                )
        return self

    def resolve(self) -> Mechanism:
        """The settings in force: the workload's own, else the preset's, else the defaults."""
        preset = PRESETS.get(self.preset or "", {})
        values = {
            key: own if (own := getattr(self, key)) is not None else preset.get(key, default)
            for key, default in DEFAULTS.items()
        }
        return Mechanism(**values, preset=self.preset)
