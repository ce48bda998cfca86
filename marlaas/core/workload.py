"""The workload file: tenants' jobs, the cluster, the cost model, the policy and the seed.

A workload is YAML, validated on load by pydantic models that forbid unknown fields. Errors
are collected into one :class:`WorkloadError` whose message names each bad field by its path
(``jobs[2].rl.steps``) with the value and the reason. Units are in the field names
(``_s`` seconds, ``_ms`` milliseconds, ``tokens``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from marlaas.core.distributions import Distribution


class WorkloadError(ValueError):
    """A workload file or override that is missing, unreadable or invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class RLSettings(_Strict):
    """The RL loop of one job (GRPO-style: groups of samples per prompt)."""

    steps: PositiveInt = 20
    """Training steps (adapter versions) the job runs."""
    prompts_per_step: PositiveInt = 8
    """Prompt groups consumed by one training step."""
    group_size: PositiveInt = 8
    """Samples per prompt (the GRPO group size)."""
    max_new_tokens: PositiveInt = 1024
    """Cap on generated tokens per turn and sample."""
    turns: PositiveInt = 1
    """Generation turns per episode; each turn is followed by one environment step."""
    max_staleness: NonNegInt = 1
    """How many adapter versions a training sample may lag the trainer (0 = on-policy)."""
    temperature: NonNegFloat = 1.0
    learning_rate: PositiveFloat = 1e-4


class EnvSpec(_Strict):
    """The job's environment: what a real run calls and what the simulator delays."""

    name: str = "arithmetic"
    """Registered environment name or ``package.module:Class`` (real runs)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the environment (real runs)."""
    latency_s: Distribution = Field(default_factory=lambda: {"dist": "constant", "value": 0.05})
    """Per-sample latency of one environment step [s] (simulation)."""
    observation_tokens: NonNegInt = 0
    """Tokens an environment step appends to the context (multi-turn)."""


class JobSpec(_Strict):
    """One tenant's RL fine-tuning job on the shared base model."""

    name: str
    tenant: str
    weight: PositiveFloat = 1.0
    """Share weight used by weighted policies (priority, fair)."""
    arrival_s: NonNegFloat = 0.0
    """Submission time [s] after the run's start."""
    base_model: str = "base"
    lora_rank: PositiveInt = 16
    rl: RLSettings = Field(default_factory=RLSettings)
    prompt_tokens: Distribution = Field(default_factory=lambda: {"dist": "constant", "value": 256})
    """Prompt length per prompt [tokens]; its mean sizes each group's KV reservation and the
    simulated prefill."""
    response_tokens: Distribution = Field(
        default_factory=lambda: {"dist": "lognormal", "median": 300, "sigma": 0.8}
    )
    """Response length per sample and turn [tokens], truncated at rl.max_new_tokens."""
    env: EnvSpec = Field(default_factory=EnvSpec)
    model_dir: str | None = None
    """Local folder of the base model (real runs)."""

    @field_validator("name", "tenant")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class PoolSpec(_Strict):
    """A pool of identical devices with one role."""

    name: str
    role: Literal["inference", "training"]
    devices: PositiveInt
    devices_per_trainer: PositiveInt = 1
    """Training pools: devices that one trainer spans (data parallel)."""

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

    max_seqs: PositiveInt = 256
    """Running sequences in one continuous batch (vLLM max_num_seqs)."""
    kv_tokens: PositiveInt = 120_000
    """KV-cache budget [tokens]; a group reserves context + max_new_tokens per sample.
    Default: 80 GB H100 minus ~14 GB of 7B fp16 weights at 0.5 MB of KV per token."""
    adapter_slots: PositiveInt = 8
    """Adapter versions resident at once (vLLM max_loras)."""


class TrainerSpec(_Strict):
    """Capacity of one trainer."""

    adapter_slots: PositiveInt = 8
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
    env_workers: PositiveInt = 512
    """Concurrent environment calls (one per sample)."""

    @model_validator(mode="after")
    def _has_both_roles(self) -> ClusterSpec:
        roles = {p.role for p in self.pools}
        if roles != {"inference", "training"}:
            raise ValueError("needs at least one inference pool and one training pool")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        return self

    @property
    def total_devices(self) -> int:
        """Devices over all pools."""
        return sum(p.devices for p in self.pools)


class SchedulingSpec(_Strict):
    """Mechanism settings; the baselines are configurations of these, not other code.

    A policy's own settings (``sequential``: colocated, one job, staleness 0; ``sync``:
    colocated, barrier, staleness 0) take precedence over these; a run's summary records the
    settings in force."""

    placement: Literal["disaggregated", "colocated"] = "disaggregated"
    """disaggregated: the pools keep their roles; colocated: every device both generates
    and trains, time-shared (one trainer spans all devices)."""
    max_active_jobs: PositiveInt | None = None
    """Jobs admitted at once (None = all that have arrived)."""
    barrier: bool = False
    """A global step barrier: no job generates for step k+1 before every job trained and
    published (synced) step k."""
    staleness_cap: NonNegInt | None = None
    """Upper bound applied to every job's rl.max_staleness (None = keep each job's)."""


class CostModel(_Strict):
    """Latency model of a 7B-class model on an H100-class GPU (defaults, all documented).

    Decode iteration time = decode_base_ms + decode_per_seq_ms * running sequences
    + decode_per_kv_token_ms * context tokens in the batch + decode_per_adapter_ms * distinct
    adapters in the batch. Training step = train_overhead_s + tokens * (1 + lora_rank /
    train_rank_scale) / (train_tokens_per_s * devices).
    """

    decode_base_ms: PositiveFloat = 6.0
    """Weights read once per iteration: ~14 GB fp16 at ~3 TB/s is ~5 ms, plus overhead."""
    decode_per_seq_ms: NonNegFloat = 0.03
    """Per running sequence (sampling, GEMM rows) [ms]; assumption from vLLM batch scaling."""
    decode_per_kv_token_ms: NonNegFloat = 0.00015
    """KV read per context token: 0.5 MB at ~3.3 TB/s = 0.15 us."""
    decode_per_adapter_ms: NonNegFloat = 0.3
    """Extra per distinct LoRA adapter in the batch (Punica/S-LoRA SGMV); assumption."""
    prefill_tokens_per_s: PositiveFloat = 20_000.0
    """~14 GFLOP per token at ~300 TFLOP/s effective."""
    adapter_load_s: NonNegFloat = 0.2
    """Loading one LoRA adapter version into an engine (host to GPU plus setup)."""
    train_tokens_per_s: PositiveFloat = 8_000.0
    """LoRA forward+backward per device: ~42 GFLOP/token at ~35% MFU."""
    train_overhead_s: NonNegFloat = 1.0
    """Fixed per training step (optimizer step, log-prob pass bookkeeping)."""
    train_rank_scale: PositiveFloat = 256.0
    """Rank at which LoRA doubles the step's compute; assumption."""
    trainer_swap_s: NonNegFloat = 2.0
    """Moving a job's adapter and optimizer state onto a trainer."""
    sync_s: NonNegFloat = 0.5
    """Publishing a new adapter version to the engines (save + transfer)."""
    colocated_switch_s: NonNegFloat = 3.0
    """Colocated placement: offloading the engine and back around a training step."""


class ArrivalsSpec(_Strict):
    """Job arrivals (and sizes) taken from an arrivals CSV (see marlaas.traces.arrivals)."""

    path: str
    """The CSV, relative to the workload file."""
    match: Literal["job", "tenant"] = "job"
    """job: a row names its job; tenant: a tenant's k-th row goes to its k-th job."""
    time_scale: NonNegFloat = 1.0
    """Factor on the file's submit times (0 = every job at once)."""


class Workload(_Strict):
    """A whole workload file."""

    name: str = "workload"
    seed: int = 0
    policy: str = "fifo"
    jobs: list[JobSpec]
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    cost: CostModel = Field(default_factory=CostModel)
    arrivals: ArrivalsSpec | None = None
    """Set jobs' arrival_s (and rl.steps) from an arrivals CSV when the file is loaded."""

    @model_validator(mode="before")
    @classmethod
    def _apply_arrivals(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("arrivals"), dict):
            return data
        from marlaas.traces.arrivals import apply_arrivals  # data I/O lives outside the core

        return apply_arrivals(data, (info.context or {}).get("base_dir"))

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        from marlaas.core.policies import UnknownPolicyError, get_policy

        try:
            get_policy(name)
        except UnknownPolicyError as err:
            raise ValueError(str(err)) from None
        return name

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
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> Workload:
        """A copy with dotted-path overrides applied (``scheduling.barrier=true``,
        ``jobs.*.rl.steps=5``), validated again."""
        data = self.model_dump()
        for key, value in overrides.items():
            _set_path(data, key.split("."), value, key)
        return parse_workload(data, source="overrides")


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


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line per problem: ``source: jobs[2].rl.steps: Input should be > 0 (got -3)``."""
    lines = []
    for problem in err.errors():
        path = ""
        for part in problem["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            elif not str(part).startswith(("function-", "tagged-union")):
                path += f".{part}" if path else str(part)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown field"
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"{source}: {path or '<top>'}: {message}{shown}")
    return "\n".join(lines)


def parse_workload(data: Any, source: str = "<workload>", base_dir: Path | None = None) -> Workload:
    """Validate a workload given as plain data; ``base_dir`` resolves trace paths."""
    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: a workload must be a mapping, got {type(data).__name__}")
    try:
        return Workload.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as err:
        raise WorkloadError(format_validation_error(err, source)) from None


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such workload file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise WorkloadError(f"{path}: not valid YAML ({err})") from None
    return parse_workload(data, source=str(path), base_dir=path.parent)
