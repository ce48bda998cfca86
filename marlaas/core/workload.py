"""The workload: tenants' jobs, the base model, the cluster, the mechanism, the policy, the seed.

Plain data validated by pydantic models that forbid unknown fields; reading it from a YAML
file (and resolving the trace files it names) is :mod:`marlaas.workload_file`'s job, so the
core never touches a file. Errors are collected into one :class:`WorkloadError` whose message
names each bad field by its path (``jobs[2].rl.steps``) with the value and the reason. Units
are in the field names (``_s`` seconds, ``_ms`` milliseconds, ``tokens``).

The parts of the schema have a module each: :mod:`~marlaas.core.job_spec`,
:mod:`~marlaas.core.cluster_spec`, :mod:`~marlaas.core.tenant_spec`,
:mod:`~marlaas.core.prices_spec`, :mod:`~marlaas.core.arrivals_spec` and
:mod:`~marlaas.core.scheduling`; their building blocks are :mod:`~marlaas.core.spec_fields`,
and the one-line error message is :mod:`~marlaas.core.validation_message`'s.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from marlaas.core import limits as L
from marlaas.core.arrivals_spec import ArrivalsSpec
from marlaas.core.ascii_digits import ascii_digits
from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.prices_spec import PricesSpec
from marlaas.core.scheduling import SchedulingSpec
from marlaas.core.spec_fields import Count, StrictSpec, check_name, check_policy, shown_name
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.validation_message import closest, format_validation_error, short_repr


class WorkloadError(ValueError):
    """A workload file or override that is missing, unreadable or invalid."""


class BaseModelSpec(StrictSpec):
    """The one base model every job's adapter is trained on."""

    name: str = "base"
    """A label for reports and cost profiles."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    path: str | None = None
    """Local folder of the model (real runs; relative to the workload file's folder, else to
    the working folder). Nothing is downloaded."""


def group_turns(job: JobSpec) -> int:
    """The work the simulator models for ``job``: steps x (prompts_per_step + resample_alike)
    x turns (a workload's jobs together hold at most ``limits.MAX_GROUP_TURNS``)."""
    rl = job.rl
    return rl.steps * (rl.prompts_per_step + rl.resample_alike) * rl.turns


class Workload(StrictSpec):
    """A whole workload file."""

    name: str = "workload"
    seed: Count(L.MAX_SEED, low=0) = 0
    policy: str = "fifo"
    """The ordering policy (see marlaas.core.policies); mechanism presets are in scheduling."""
    base_model: BaseModelSpec = Field(default_factory=BaseModelSpec)
    jobs: Annotated[list[JobSpec], Field(max_length=L.MAX_JOBS)]
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    tenants: Annotated[dict[str, TenantSpec], Field(max_length=L.MAX_JOBS)] = Field(
        default_factory=dict
    )
    """Per-tenant quotas, by tenant name (a tenant not named here has the scheduling block's
    tenant_max_active_jobs and tenant_max_queued_jobs). A tenant no job names is kept, not
    refused: a service's traffic file names every registered tenant, those that never
    submitted too, and a sweep over job counts takes a workload's first N jobs."""
    prices: PricesSpec = Field(default_factory=PricesSpec)
    """Device prices (read by ``marlaas plan`` only)."""
    arrivals: ArrivalsSpec | None = None
    """Where the jobs' arrival_s (and rl.steps) came from: marlaas.workload_file applies an
    arrivals CSV when it reads the file."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, tenants: dict[str, TenantSpec]) -> dict[str, TenantSpec]:
        for name in tenants:
            try:
                check_name(name)
            except ValueError as err:
                raise ValueError(f"tenant name {shown_name(name)}: {err}") from None
        return tenants

    def deadline_of(self, job: JobSpec) -> float | None:
        """The job's deadline after its arrival [s]: its own, else its tenant's, else None."""
        if job.deadline_s is not None:
            return job.deadline_s
        tenant = self.tenants.get(job.tenant)
        return tenant.job_deadline_s if tenant is not None else None

    def deadlines_s(self) -> dict[str, float]:
        """Every job that has a deadline: {job name: deadline after its arrival [s]}."""
        deadlines = {j.name: self.deadline_of(j) for j in self.jobs}
        return {name: d for name, d in deadlines.items() if d is not None}

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        return check_policy(name)

    @model_validator(mode="after")
    def _unique_job_names(self) -> Workload:
        if not self.jobs:
            raise ValueError("jobs: at least one job is needed")
        names = [j.name for j in self.jobs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"jobs: job names must be unique, repeated: {dupes}")
        weights: dict[str, float] = {}
        for job in self.jobs:
            if weights.setdefault(job.tenant, job.weight) != job.weight:
                raise ValueError(
                    f"jobs: tenant {job.tenant!r} has jobs with different weights "
                    f"({weights[job.tenant]} and {job.weight}); a weight belongs to a tenant"
                )
        pools = {p.name for p in self.cluster.pools}
        unknown = sorted(set(self.prices.pools) - pools)
        if unknown:
            raise ValueError(f"prices.pools: no pool named {unknown[0]!r} (pools: {sorted(pools)})")
        work = sum(group_turns(j) for j in self.jobs)
        if work > L.MAX_GROUP_TURNS:
            raise ValueError(
                f"jobs: {work:,} group-turns in all (steps x (prompts_per_step + "
                f"resample_alike) x turns, summed over jobs); at most {L.MAX_GROUP_TURNS:,} "
                "fit one run"
            )
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> Workload:
        """A copy with dotted-path overrides applied (``scheduling.barrier=true``,
        ``jobs.*.rl.steps=5``), validated again."""
        return parse_workload(self.overridden(overrides), source="overrides", schema=type(self))

    def overridden(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """This workload as plain data with dotted-path overrides applied (not validated)."""
        data = self.model_dump()
        for key, value in overrides.items():
            if "" in key.split("."):
                raise WorkloadError(f"override {key!r}: a dotted path to a field, with no "
                                    "empty part (e.g. jobs.*.rl.steps)")  # fmt: skip
            _set_path(data, key.split("."), value, key)
        return data


def _set_path(node: Any, parts: list[str], value: Any, full: str, done: str = "") -> None:
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        targets = node if head == "*" else [_list_item(node, head, full)]
        for item in targets:
            if rest:
                _set_path(item, rest, value, full, f"{done}.{head}")
            else:
                raise WorkloadError(f"{full}: cannot replace a whole list item")
        return
    where = done.lstrip(".") or "the workload"
    if node is None or node == {}:  # an optional part left out, an empty mapping
        raise WorkloadError(f"{full}: {where} is {'not set' if node is None else 'empty'}; "
                            f"set it whole, e.g. {where}={{{head}: ...}}")  # fmt: skip
    if not isinstance(node, dict):
        raise WorkloadError(f"{full}: {where} is a value ({short_repr(node)}), not a mapping "
                            "of fields")  # fmt: skip
    if head == "*":
        raise WorkloadError(f"{full}: '*' stands for every item of a list, and {where} is a "
                            f"mapping (its fields: {', '.join(node) or 'none'})")  # fmt: skip
    if head not in node:
        close = closest(head, list(node))
        hint = f"did you mean {close!r}?" if close else f"known: {', '.join(node)}"
        raise WorkloadError(f"{full}: unknown field {head!r} ({hint})")
    if rest:
        _set_path(node[head], rest, value, full, f"{done}.{head}")
    else:
        node[head] = value


def _list_item(items: list, key: str, full: str) -> Any:
    """The item ``key`` names: by position (``jobs.0``) or by name (``jobs.math-a``); a digit
    string that is the position of one item and the name of another is refused (names may be
    digits: ``jobs.1`` would set one job where its writer meant the other)."""
    by_name = [item for item in items if isinstance(item, dict) and item.get("name") == key]
    if ascii_digits(key) and int(key) < len(items):
        at = items[int(key)]
        if by_name and by_name[0] is not at:
            raise WorkloadError(f"{full}: {key!r} is the position of item {at.get('name')!r} "
                                "and the name of another item, and an override cannot tell "
                                "which is meant; give the items names that are not digits "
                                "(e.g. j1)")  # fmt: skip
        return at
    if by_name:
        return by_name[0]
    raise WorkloadError(f"{full}: no list item {key!r}")


def parse_workload(
    data: Any, source: str = "<workload>", schema: type[Workload] | None = None
) -> Workload:
    """Validate a workload given as plain data (``schema``: Workload or a subclass of it)."""
    schema = schema or Workload
    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: a workload must be a mapping, got {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise WorkloadError(format_validation_error(err, source, schema)) from None
