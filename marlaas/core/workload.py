"""The workload: tenants' jobs, the base model, the cluster, the mechanism, the policy, the seed.

Plain data validated by pydantic models that forbid unknown fields; reading it from a YAML
file (and resolving the trace files it names) is :mod:`marlaas.workload_file`'s job, so the
core never touches a file. Errors are collected into one :class:`WorkloadError` whose message
names each bad field by its path (``jobs[2].rl.steps``) with the value and the reason. Units
are in the field names (``_s`` seconds, ``_ms`` milliseconds, ``tokens``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from marlaas.core import limits as L
from marlaas.core.distributions import Distribution, largest
from marlaas.core.scheduling import SchedulingSpec


class WorkloadError(ValueError):
    """A workload file or override that is missing, unreadable or invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )


def Count(high: int, low: int = 1):
    """An int in [low, high] (the bound comes from marlaas.core.limits)."""
    return Annotated[int, Field(ge=low, le=high)]


def Amount(high: float, low: float = 0.0, positive: bool = False):
    """A finite float in [low, high] (> low when ``positive``)."""
    return Annotated[float, Field(gt=low, le=high) if positive else Field(ge=low, le=high)]


JOB_NAME = r"^[A-Za-z0-9_-]+$"
"""Job names are folder and adapter names in real runs: letters, digits, - and _."""


def check_policy(name: str) -> str:
    """A registered policy's name (ValueError naming the known ones otherwise)."""
    from marlaas.core.policies import UnknownPolicyError, get_policy

    try:
        get_policy(name)
    except UnknownPolicyError as err:
        raise ValueError(str(err)) from None
    return name


def check_name(value: str) -> str:
    """A name: 1..MAX_NAME_CHARS printable characters, not only spaces."""
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > L.MAX_NAME_CHARS:
        raise ValueError(f"at most {L.MAX_NAME_CHARS} characters (got {len(value)})")
    if not value.isprintable():
        raise ValueError("must hold printable characters only (no newlines or escapes)")
    return value


class RLSettings(_Strict):
    """The RL loop of one job (GRPO-style: groups of samples per prompt)."""

    steps: Count(L.MAX_STEPS) = 20
    """Training steps (adapter versions) the job runs."""
    prompts_per_step: Count(L.MAX_PROMPTS_PER_STEP) = 8
    """Prompt groups consumed by one training step."""
    group_size: Count(L.MAX_GROUP_SIZE) = 8
    """Samples per prompt (the GRPO group size)."""
    max_new_tokens: Count(L.MAX_TOKENS) = 1024
    """Cap on generated tokens per turn and sample [tokens]."""
    max_prompt_tokens: Count(L.MAX_TOKENS) | None = None
    """Cap on a prompt [tokens]: a longer one drawn from prompt_tokens is truncated to it
    (verl's max_prompt_length). None: the longest prompt_tokens can give (its largest value;
    a lognormal's p99.99). Every group's KV reservation must fit an engine at this length."""
    turns: Count(L.MAX_TURNS) = 1
    """Generation turns per episode; each turn is followed by one environment step."""
    max_staleness: Count(L.MAX_STALENESS, low=0) = 1
    """How many adapter versions a training sample may lag the trainer (0 = on-policy)."""
    temperature: Amount(L.MAX_TEMPERATURE) = 1.0
    learning_rate: Amount(L.MAX_LEARNING_RATE, positive=True) = 1e-4


class EnvSpec(_Strict):
    """The job's environment: what a real run calls, and how long its steps wait."""

    name: str = "arithmetic"
    """Registered environment name or ``package.module:Class`` (see marlaas.envs)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the environment (validated on load)."""
    latency_s: Distribution = Field(default_factory=lambda: {"dist": "constant", "value": 0})
    """Per-sample latency of one environment step beyond its own computation [s]: a remote
    verifier, a tool call. The simulator waits it; a real run waits it too (a seeded sample
    per sample and step) on top of the environment's own time."""
    observation_tokens: Count(L.MAX_TOKENS, low=0) = 0
    """Tokens an environment step appends to the context (multi-turn)."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value) if ":" not in value else _printable(value, 1000)

    @field_validator("latency_s")
    @classmethod
    def _latency(cls, dist):
        return _at_most(dist, L.MAX_LATENCY_S, "s")


class DatasetSpec(_Strict):
    """A job's prompts from a local file (a real run's; the simulator draws lengths only).

    Read by :mod:`marlaas.datasets` (never downloaded): JSONL, Parquet or CSV, or a folder an
    HF ``datasets.Dataset.save_to_disk`` wrote. Each row is one problem: the prompt text and
    the reference answer its environment checks (``env: {name: math}`` and the like).
    """

    path: str
    """The file or folder, relative to the workload file."""
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    heldout: Amount(0.9, positive=True) | str = 0.1
    """The held-out split ``marlaas evaluate`` scores and training never sees: a fraction of
    the rows (taken in the seed's order), or a second file of the same columns."""

    @field_validator("path", "heldout")
    @classmethod
    def _path(cls, value):
        return _printable(value, 4096) if isinstance(value, str) else value

    @field_validator("prompt_column", "answer_column")
    @classmethod
    def _column(cls, value: str) -> str:
        return check_name(value)


class JobSpec(_Strict):
    """One tenant's RL fine-tuning job on the shared base model."""

    name: Annotated[str, Field(max_length=L.MAX_NAME_CHARS, pattern=JOB_NAME)]
    """Letters, digits, - and _ (it names the job's adapter folders)."""
    tenant: str
    weight: Amount(L.MAX_WEIGHT, positive=True) = 1.0
    """Share weight used by weighted policies (priority, fair)."""
    arrival_s: Amount(L.MAX_ARRIVAL_S) = 0.0
    """Submission time [s] after the run's start."""
    cancel_after_s: Amount(L.MAX_ARRIVAL_S) | None = None
    """The tenant cancels the job this long after its arrival [s] (None: never): work of it
    in flight then finishes and is discarded (``cancelled`` in the event log), and whatever
    it held is freed. For studying tenants who give up, in both worlds."""
    deadline_s: Amount(L.MAX_ARRIVAL_S, positive=True) | None = None
    """The job should finish this long after its arrival [s] (None: its tenant's
    ``job_deadline_s``, else none). Data only: no policy reads it; the metrics count the
    jobs that miss it and ``marlaas plan`` sizes a cluster to meet it."""
    lora_rank: Count(L.MAX_LORA_RANK) = 16
    rl: RLSettings = Field(default_factory=RLSettings)
    prompt_tokens: Distribution = Field(default_factory=lambda: {"dist": "constant", "value": 256})
    """Prompt length [tokens], drawn once per group (its samples share the prompt, as in
    GRPO), the same for a (seed, job, group) in every run (marlaas.core.prompts), truncated
    at rl.max_prompt_tokens; it sizes the group's KV reservation and simulated prefill."""
    response_tokens: Distribution = Field(
        default_factory=lambda: {"dist": "lognormal", "median": 300, "sigma": 0.8}
    )
    """Response length per sample and turn [tokens], truncated at rl.max_new_tokens. When
    both are ``trace`` distributions of one file (same path and format), they are drawn as
    pairs: a group's samples' responses come from the trace's requests whose prompts are
    close to the group's (marlaas.core.prompts), so their correlation is kept."""
    env: EnvSpec = Field(default_factory=EnvSpec)
    dataset: DatasetSpec | None = None
    """Where the job's prompts and reference answers come from (None: the environment draws
    its own prompts from a seed)."""

    @model_validator(mode="before")
    @classmethod
    def _no_model_per_job(cls, data: Any) -> Any:
        if isinstance(data, dict) and ({"model_dir", "base_model"} & data.keys()):
            raise ValueError(
                "model_dir/base_model: every job shares one base model; declare it once, "
                "at the top level, as base_model: {name: ..., path: ...}"
            )
        return data

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_name(value)

    @field_validator("prompt_tokens", "response_tokens")
    @classmethod
    def _tokens(cls, dist):
        return _at_most(dist, L.MAX_TOKENS, "tokens")


class BaseModelSpec(_Strict):
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


class PoolSpec(_Strict):
    """A pool of identical devices with one role."""

    name: Annotated[str, Field(max_length=L.MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9_.-]+$")]
    """Letters, digits, ., - and _ (device names are ``pool/index``)."""
    role: Literal["inference", "training"]
    devices: Count(L.MAX_DEVICES)
    devices_per_trainer: Count(L.MAX_DEVICES) = 1
    """Training pools: devices that one trainer spans; a step is data-parallel over them (one
    device under ``shared_compute``: :meth:`marlaas.core.cluster.Cluster.step_devices`)."""

    @model_validator(mode="after")
    def _whole_trainers(self) -> PoolSpec:
        if self.role == "training" and self.devices % self.devices_per_trainer:
            raise ValueError(
                f"devices ({self.devices}) must be a multiple of devices_per_trainer "
                f"({self.devices_per_trainer})"
            )
        return self


class EngineSpec(_Strict):
    """Capacity of one inference engine (one device)."""

    max_seqs: Count(L.MAX_ENGINE_SEQS) = 256
    """Running sequences in one continuous batch (vLLM max_num_seqs)."""
    kv_tokens: Count(L.MAX_KV_TOKENS) = 120_000
    """KV-cache budget [tokens]; a group reserves context + max_new_tokens per sample.
    Default: 80 GB H100 minus ~14 GB of 7B fp16 weights at 0.5 MB of KV per token."""
    adapter_slots: Count(L.MAX_ADAPTER_SLOTS) = 8
    """Adapter versions resident at once (vLLM max_loras)."""
    prefix_caching: bool = False
    """A group's samples share their prompt's KV cache (vLLM ``enable_prefix_caching``, which
    the real engines are built with exactly when this is set): the scheduler reserves a
    group's prompt once instead of once per sample, and the simulator prefills it once.
    Off: every sample holds and prefills its own copy (and the real engines cache nothing)."""


class TrainerSpec(_Strict):
    """Capacity of one trainer."""

    adapter_slots: Count(L.MAX_ADAPTER_SLOTS) = 8
    """Jobs whose adapter and optimizer state stay resident (others are swapped in)."""


class ClusterSpec(_Strict):
    """Devices and their roles, plus environment workers."""

    pools: list[PoolSpec] = Field(
        default_factory=lambda: [
            {"name": "rollout", "role": "inference", "devices": 6},
            {"name": "train", "role": "training", "devices": 2},
        ]
    )
    engine: EngineSpec = Field(default_factory=EngineSpec)
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    env_workers: Count(L.MAX_ENV_WORKERS) = 512
    """Concurrent environment calls (one per sample)."""
    shared_compute: bool = False
    """Every pool runs on one processor (one CPU, or one GPU holding an engine and a trainer):
    generation and training take turns, and engines share the processor's speed. Both worlds
    model it: the scheduler never overlaps them, the simulator slows engines that run at once."""

    @model_validator(mode="after")
    def _has_both_roles(self) -> ClusterSpec:
        roles = {p.role for p in self.pools}
        if roles != {"inference", "training"}:
            raise ValueError("needs at least one inference pool and one training pool")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        if self.total_devices > L.MAX_DEVICES:
            raise ValueError(f"{self.total_devices} devices in all; at most {L.MAX_DEVICES:,}")
        return self

    @property
    def total_devices(self) -> int:
        """Devices over all pools."""
        return sum(p.devices for p in self.pools)


class TenantSpec(_Strict):
    """One tenant's quotas (a workload's ``tenants:``, a service's ``marlaas tenants add``):
    each replaces the scheduling block's tenant_max_* for this tenant (unset: that one)."""

    max_active_jobs: Count(L.MAX_JOBS) | None = None
    """Jobs of this tenant admitted at once; its others wait."""
    max_queued_jobs: Count(L.MAX_JOBS, low=0) | None = None
    """Jobs of this tenant that may wait for admission at once; its newest beyond are refused."""

    job_deadline_s: Amount(L.MAX_ARRIVAL_S, positive=True) | None = None
    """The tenant's target for each of its jobs that sets no ``deadline_s`` of its own: done
    this long after the job's arrival [s] (a batch workload's data, read by the metrics and
    ``marlaas plan``; the service keeps quotas only)."""

    def active_or(self, default: int | None) -> int | None:
        """max_active_jobs, or ``default`` where it is unset."""
        return default if self.max_active_jobs is None else self.max_active_jobs

    def queued_or(self, default: int | None) -> int | None:
        """max_queued_jobs, or ``default`` where it is unset."""
        return default if self.max_queued_jobs is None else self.max_queued_jobs


class PricesSpec(_Strict):
    """What devices cost, for ``marlaas plan`` [currency units per device-hour]: a pool's own
    price, else its device kind's (the cost profile's name, e.g. ``h100-7b``), else the
    default."""

    device_hour: Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True) = 1.0
    """Default price of one device for one hour."""
    pools: dict[str, Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True)] = Field(
        default_factory=dict
    )
    """Price per device-hour by pool name."""
    profiles: dict[str, Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True)] = Field(
        default_factory=dict
    )
    """Price per device-hour by device kind: the name of the cost profile simulated."""
    currency: str = "USD"
    source: str = "assumption"
    """Where the numbers come from (a price list and its date, or ``assumption``)."""

    @field_validator("currency", "source")
    @classmethod
    def _text(cls, value: str) -> str:
        return _printable(value, 1000)

    def device_hour_price(self, pool: str, profile: str | None = None) -> float:
        """The price of one device of ``pool`` for one hour, simulated with ``profile``."""
        if pool in self.pools:
            return self.pools[pool]
        return self.profiles.get(profile or "", self.device_hour)


class ArrivalsSpec(_Strict):
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


class Workload(_Strict):
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
    tenant_max_active_jobs and tenant_max_queued_jobs)."""
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
                raise ValueError(f"tenant name {name!r}: {err}") from None
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
        work = sum(j.rl.steps * j.rl.prompts_per_step * j.rl.turns for j in self.jobs)
        if work > L.MAX_GROUP_TURNS:
            raise ValueError(
                f"jobs: {work:,} group-turns in all (steps x prompts_per_step x turns, summed "
                f"over jobs); at most {L.MAX_GROUP_TURNS:,} fit one run"
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
            _set_path(data, key.split("."), value, key)
        return data


def _at_most(dist, bound: float, unit: str):
    """``dist`` when its values stay within ``bound`` (a lognormal: its median)."""
    if largest(dist) > bound:
        raise ValueError(f"values up to {largest(dist):g} {unit}; at most {bound:g} {unit}")
    return dist


def _printable(value: str, limit: int) -> str:
    if len(value) > limit or not value.isprintable():
        raise ValueError(f"at most {limit} printable characters")
    return value


def _set_path(node: Any, parts: list[str], value: Any, full: str) -> None:
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        targets = node if head == "*" else [_list_item(node, head, full)]
        for item in targets:
            if rest:
                _set_path(item, rest, value, full)
            else:
                raise WorkloadError(f"{full}: cannot replace a whole list item")
        return
    if not isinstance(node, dict) or head not in node:
        raise WorkloadError(f"{full}: unknown field {head!r}")
    if rest:
        _set_path(node[head], rest, value, full)
    else:
        node[head] = value


def _list_item(items: list, key: str, full: str) -> Any:
    if key.isdigit() and int(key) < len(items):
        return items[int(key)]
    for item in items:
        if isinstance(item, dict) and item.get("name") == key:
            return item
    raise WorkloadError(f"{full}: no list item {key!r}")


MAX_PROBLEMS_SHOWN = 5
"""Problems named in one error line; the rest are counted."""


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line naming each problem (the first few): ``source: jobs[2].rl.steps: Input should
    be greater than 0 (got -3); ...``."""
    problems: dict[tuple[str, str], list[str]] = {}
    for problem in err.errors():
        path = shape = ""  # shape: the path with every list index as [*]
        for part in problem["loc"]:
            if isinstance(part, int):
                path, shape = path + f"[{part}]", shape + "[*]"
            elif not str(part).startswith(("function-", "tagged-union")):
                path += f".{part}" if path else str(part)
                shape += f".{part}" if shape else str(part)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown field"
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {_short_repr(got)})"
        problems.setdefault((shape, message + shown), []).append(path)
    lines = []
    for (_, message), paths in problems.items():
        alike = f" (and {len(paths) - 1} more like it)" if len(paths) > 1 else ""
        lines.append(f"{paths[0]}: {message}{alike}" if paths[0] else message + alike)
    more = len(lines) - MAX_PROBLEMS_SHOWN
    text = "; ".join(lines[:MAX_PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return f"{source}: {text}"


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
        raise WorkloadError(format_validation_error(err, source)) from None
