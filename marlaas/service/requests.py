"""What a tenant may submit: a job spec in the workload schema, checked against the service's
envelope before it reaches the scheduler.

A tenant names only what the operator registered: an environment from
``service.environments`` (never an import path), no file of any kind (a ``trace``
distribution names a file on the server), no base model or data folder. The tenant and the
job's times are the service's to set. A job that could never fit the cluster, or is larger
than the engines were built for, is refused here with the reason (HTTP 422).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from marlaas import strict_json
from marlaas.core.distributions import largest
from marlaas.core.feasibility import why_infeasible
from marlaas.core.job_spec import JobSpec
from marlaas.core.limits import MAX_GROUP_TURNS
from marlaas.core.validation_message import format_validation_error
from marlaas.core.workload import group_turns
from marlaas.service.config import SANDBOX_CAPS, ServiceConfig, ServiceLimits

SET_BY_SERVICE = ("tenant", "weight", "arrival_s", "cancel_after_s")
"""Fields of a job spec a tenant may not set: the tenant comes from the API key (and its share
weight is the operator's to give), the times from when the request comes."""


class JobRequestError(ValueError):
    """A job spec a tenant may not submit, with the field and the reason."""


def job_from_request(body: Any, tenant: str, config: ServiceConfig) -> JobSpec:
    """The job ``tenant`` asked for in ``body`` (a JSON object), or JobRequestError."""
    if not isinstance(body, dict):
        raise JobRequestError(f"a job spec must be a JSON object, got {type(body).__name__}")
    for key in SET_BY_SERVICE:
        if key in body:
            raise JobRequestError(f"{key}: set by the service, not by the job spec")
    where = strict_json.non_finite(body, "job")
    if where is not None:  # anywhere: env.args too, which no schema types
        raise JobRequestError(f"{where.removeprefix('job.')}: not a finite number (JSON "
                              "carries no NaN or infinity)")  # fmt: skip
    _no_files(body, "")
    if body.get("dataset") is not None:
        raise JobRequestError("dataset: a tenant's job cannot name a file on the server "
                              "(datasets are for workload files)")  # fmt: skip
    try:
        job = JobSpec.model_validate({**body, "tenant": tenant})
    except ValidationError as err:
        raise JobRequestError(format_validation_error(err, "job")) from None
    check_envelope(job, config)
    return job


def check_envelope(job: JobSpec, config: ServiceConfig) -> None:
    """JobRequestError unless ``job`` fits the service: one of its environments, within its
    engines' rank and sequence length, and able to fit the cluster at all (a job the store
    holds is checked again when a restarted service, perhaps with another cluster file,
    submits it again)."""
    limits = config.service
    if job.env.name not in limits.environments:
        raise JobRequestError(
            f"env.name: {job.env.name!r} is not one of this service's environments "
            f"{limits.environments}"
        )
    _check_env_args(job, limits)
    step_s = job.env.timeout_s + largest(job.env.latency_s, tail=True)
    if step_s > limits.max_env_step_s:
        raise JobRequestError(
            f"env: one step may take {step_s:,g} s (timeout_s {job.env.timeout_s:,g} s + "
            f"latency_s at its longest {step_s - job.env.timeout_s:,g} s); this service's "
            f"max_env_step_s is {limits.max_env_step_s:,g} s"
        )
    if job.lora_rank > limits.max_lora_rank:
        raise JobRequestError(
            f"lora_rank: {job.lora_rank} is above this service's max_lora_rank "
            f"({limits.max_lora_rank})"
        )
    from marlaas.executors.backends import longest_sequence

    longest = longest_sequence([job])
    if longest > limits.max_sequence_tokens:
        raise JobRequestError(
            f"rl: an episode reaches {longest:,} tokens (prompt, turns, responses and "
            f"observations); this service's engines hold {limits.max_sequence_tokens:,}"
        )
    work = group_turns(job)
    if work > MAX_GROUP_TURNS:  # no workload holds it: the service's traffic could not
        raise JobRequestError(
            f"rl: {work:,} group-turns (steps x (prompts_per_step + resample_alike) x turns); "
            f"at most {MAX_GROUP_TURNS:,}, the most a workload holds (marlaas traffic writes "
            "this service's submissions as one)"
        )
    reason = why_infeasible(job, config.cluster)
    if reason is not None:
        raise JobRequestError(reason)


def _no_files(node: Any, where: str) -> None:
    """Refuse a ``trace`` distribution or any ``path`` anywhere in the spec: a tenant cannot
    name a file on the server."""
    if isinstance(node, dict):
        if node.get("dist") == "trace" or "path" in node:
            raise JobRequestError(
                f"{where or 'job'}: a tenant's job cannot name a file on the server "
                "(trace distributions and paths are for workload files)"
            )
        for key, value in node.items():
            _no_files(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _no_files(value, f"{where}[{i}]")


def _check_env_args(job: JobSpec, limits: ServiceLimits) -> None:
    from marlaas.envs import EnvLoadError, check_env, resolve_env

    try:
        check_env(job.env.name, job.env.args)
    except (EnvLoadError, ValueError, TypeError) as err:
        raise JobRequestError(f"env.args: {' '.join(str(err).split())}") from None
    _check_sandbox(job, limits)
    if resolve_env(job.env.name).needs_dataset:
        raise JobRequestError(
            f"env.name: {job.env.name!r} checks a dataset's answers, and a "
            "service job has no dataset (datasets are for workload files)"
        )


def _check_sandbox(job: JobSpec, limits: ServiceLimits) -> None:
    """Refuse a job whose environment runs code in the sandbox with limits above the
    service's caps (``max_sandbox_*``): a tenant set ``python_exec``'s memory up to 64 GiB a
    process and 4,096 processes, on the service's host. The limits are the environment's
    own (its defaults included, which a cap lowered below them refuses too), read from the
    instance the spec makes (its constructor has no side effects), and from the environments
    it holds (a user's environment wrapping a ``python_exec``). Limits an environment makes
    only as it runs are refused where the sandbox is made
    (:meth:`~marlaas.service.config.ServiceLimits.sandbox_caps`)."""
    from marlaas.envs import resolve_env

    env = resolve_env(job.env.name)(job.env.args)
    for where, asked in _sandbox_limits(env, ""):
        for field, cap_field, unit in SANDBOX_CAPS:
            value, cap = getattr(asked, field), getattr(limits, cap_field)
            if value <= cap:
                continue
            if not where:  # the environment's own: named by its option
                given = "" if field in (job.env.args or {}) else " (the environment's default)"
                raise JobRequestError(
                    f"env.args.{field}: {value:,}{unit}{given} is above this service's "
                    f"{cap_field} ({cap:,}{unit})"
                )
            raise JobRequestError(
                f"env: {job.env.name!r} holds an environment (its {where}) whose sandbox's "
                f"{field}, {value:,}{unit}, is above this service's {cap_field} "
                f"({cap:,}{unit})"
            )


MAX_HELD_DEPTH = 3
"""How deep :func:`_sandbox_limits` looks into the environments an environment holds."""


def _sandbox_limits(env: object, where: str, depth: int = 0):
    """(where, SandboxLimits) of ``env`` (its ``limits``: where is ``""``) and of the
    environments it holds in its attributes (directly, or in a list, tuple or dict), as
    ``attribute.limits``."""
    from marlaas.envs.base import Environment
    from marlaas.envs.sandbox import SandboxLimits

    own = getattr(env, "limits", None)
    if isinstance(own, SandboxLimits):
        yield where, own
    if depth >= MAX_HELD_DEPTH:
        return
    for name, value in vars(env).items() if hasattr(env, "__dict__") else ():
        values = value.values() if isinstance(value, dict) else value
        held = values if isinstance(value, list | tuple | dict) else [value]
        for item in held:
            if isinstance(item, Environment) and item is not env:
                path = f"{where}.{name}" if where else name
                yield from _sandbox_limits(item, path, depth + 1)
