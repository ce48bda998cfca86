"""The cluster file of ``marlaas serve``: a workload file with no ``jobs:`` (they come from
tenants), and a ``service:`` block with what every engine is built to hold and which
environments tenants may use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from marlaas.core import limits as L
from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.scheduling import SchedulingSpec
from marlaas.core.spec_fields import Amount, Count, StrictSpec, check_name, check_policy
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.validation_message import format_validation_error
from marlaas.core.workload import BaseModelSpec, Workload, WorkloadError, parse_workload
from marlaas.envs.registry import env_names
from marlaas.envs.sandbox import (
    MEMORY_MB_BOUNDS,
    OUTPUT_BYTES_BOUNDS,
    PROCESSES_BOUNDS,
    SandboxCaps,
)

DEFAULT_ENVIRONMENTS = ("arithmetic", "calculator", "python_exec", "target_char")
# The sandbox's own bounds (:class:`marlaas.envs.sandbox.SandboxLimits`) bound the caps a
# ``service:`` block may set on what a tenant's job asks of it.
SANDBOX_CAPS = (
    ("memory_mb", "max_sandbox_memory_mb", " MiB"),
    ("max_processes", "max_sandbox_processes", ""),
    ("max_output_bytes", "max_sandbox_output_bytes", " bytes"),
)
"""(the sandbox's limit, the ``service:`` field that caps it, its unit as written)."""


class ServiceLimits(StrictSpec):
    """The ``service:`` block: the envelope every tenant's job must fit."""

    max_lora_rank: Count(L.MAX_LORA_RANK) = 16
    """The largest LoRA rank a job may ask for (the engines are built for it)."""
    max_sequence_tokens: Count(L.MAX_TOKENS) = 2048
    """The longest sequence a job's episode may reach [tokens]: its longest prompt, every
    turn's response and observation (the engines' KV cache is sized for it)."""
    max_env_step_s: Amount(L.MAX_LATENCY_S + L.MAX_ENV_TIMEOUT_S, positive=True) = 900.0
    """The longest one environment step of a job may hold the environment workers it takes
    [s]: its ``env.timeout_s`` plus its declared ``env.latency_s`` at its longest (a
    lognormal's p99.99). Work in flight ends before a job does, so this also bounds how long
    another tenant's job waits behind such a step, and a cancelled job in ``cancelling``
    (a job with a day's latency took every worker for that day)."""
    max_sandbox_memory_mb: Count(MEMORY_MB_BOUNDS[1], low=MEMORY_MB_BOUNDS[0]) = 2048
    """The most address space a job's sandboxed code may ask for, per process [MiB]
    (``python_exec``'s ``memory_mb``, default 512; the sandbox's own bounds are 64 and
    65,536: below 64, no job could run there):
    every environment worker runs one such process at a time on the service's host."""
    max_sandbox_processes: Count(PROCESSES_BOUNDS[1]) = 64
    """The most processes and threads a job's sandboxed code may ask for at once
    (``python_exec``'s ``max_processes``, default 32; the sandbox's own bound is 4,096)."""
    max_sandbox_output_bytes: Count(OUTPUT_BYTES_BOUNDS[1], low=OUTPUT_BYTES_BOUNDS[0]) = (
        8 * 1024 * 1024
    )
    """The most output (stdout and stderr) a job's sandboxed code may ask to have read
    [bytes], held in the service's memory (``python_exec``'s ``max_output_bytes``, default
    1 MiB; the sandbox's own bound is 256 MiB)."""
    refused_specs_kept: Count(L.MAX_JOBS, low=0) = 16
    """The refused submissions (a quota) of each tenant whose job spec the store keeps, the
    newest: an older one keeps its row and reason (up to :attr:`refused_kept`), and
    ``marlaas traffic`` leaves it out. Each spec may be 1 MiB."""
    refused_kept: Count(L.MAX_JOBS, low=1) = 1000
    """The refused submissions (a quota) of each tenant the store keeps at all, the newest:
    an older one is deleted (its row, reason and events; its id is then 404) as each new
    refusal is recorded, and when the service starts. A tenant's refusals have no other
    bound: one that submits in a loop past its quota added a row and two events each time."""
    environments: list[str] = Field(default_factory=lambda: list(DEFAULT_ENVIRONMENTS))
    """The environments tenants may name (registered names only: a tenant never names an
    import path)."""

    def sandbox_caps(self) -> SandboxCaps:
        """The ``max_sandbox_*`` caps as the sandbox enforces them on every sandbox the
        service's environments make (:func:`marlaas.envs.sandbox.cap_sandboxes`): those a
        job's spec asks for are checked at its submission, and those an environment makes
        otherwise (a user's environment holding a ``python_exec``) where it makes them."""
        caps = {field: getattr(self, cap) for field, cap, _ in SANDBOX_CAPS}
        names = tuple((field, f"this service's {cap}") for field, cap, _ in SANDBOX_CAPS)
        return SandboxCaps(**caps, names=names)

    @field_validator("environments")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        for name in names:
            if ":" in name:
                raise ValueError(f"{name!r}: list registered environment names, not import paths")
            check_name(name)
        return names


class ServiceConfig(StrictSpec):
    """What ``marlaas serve CLUSTER.yaml`` runs: the cluster, base model, policy and
    mechanism of a workload file, without its jobs."""

    name: str = "service"
    seed: Count(L.MAX_SEED, low=0) = 0
    policy: str = "fair"
    base_model: BaseModelSpec = Field(default_factory=BaseModelSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    service: ServiceLimits = Field(default_factory=ServiceLimits)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        return check_policy(name)

    def workload(self, jobs: list[JobSpec], tenants: dict[str, TenantSpec]) -> Workload:
        """A workload file of this cluster with ``jobs`` (the service's traffic, replayed by
        ``marlaas simulate``) and the tenants' quotas."""
        data = self.model_dump(exclude={"service"})
        data["jobs"] = [job.model_dump() for job in jobs]
        data["tenants"] = {name: quota.model_dump() for name, quota in tenants.items()}
        return parse_workload(data, source=f"{self.name} traffic")


def load_named_policy(name: object, source: str) -> None:
    """Register the policy ``name`` if it is an import path (``pkg.module:Class``) before the
    schema checks it: what is wrong with it is a WorkloadError from ``source``, one line."""
    from marlaas.policy_path import PolicyLoadError, load_policy

    if isinstance(name, str):
        try:
            load_policy(name)
        except PolicyLoadError as err:
            raise WorkloadError(f"{source}: {err}") from None


def load_config(path: str | Path, policy: str | None = None) -> tuple[ServiceConfig, Path]:
    """The cluster file at ``path`` and the folder its relative paths start from; ``policy``
    (``serve --policy``) replaces the file's. A policy named by import path
    (``pkg.module:Class``, docs/policies.md) is loaded and checked first, as a workload
    file's is."""
    from marlaas.workload_file import read_yaml

    data: Any = read_yaml(path, what="cluster")  # "no such cluster file"
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: a cluster file must be a mapping")
    if "jobs" in data or "arrivals" in data:
        raise WorkloadError(
            f"{path}: jobs: a service's jobs come from its tenants (marlaas submit); give "
            "`marlaas serve` a cluster file without jobs: or arrivals:"
        )
    if policy is not None:
        data = {**data, "policy": policy}
    load_named_policy(data.get("policy"), str(path) if policy is None else "--policy")
    try:
        config = ServiceConfig.model_validate(data)
    except ValidationError as err:
        raise WorkloadError(format_validation_error(err, str(path))) from None
    known = env_names()
    missing = [name for name in config.service.environments if name not in known]
    if missing:
        raise WorkloadError(
            f"{path}: service.environments: {missing} are not registered environments "
            f"(known: {known})"
        )
    return config, Path(path).resolve().parent
