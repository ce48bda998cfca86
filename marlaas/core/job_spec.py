"""A tenant's job: its RL loop, environment, dataset, and prompt and response lengths."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from marlaas.core import limits as L
from marlaas.core.distributions import Distribution
from marlaas.core.spec_fields import (
    JOB_NAME,
    Amount,
    Count,
    StrictSpec,
    at_most,
    check_name,
    printable,
    tail_at_most,
)


class RLSettings(StrictSpec):
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
    minibatches: Count(L.MAX_PROMPTS_PER_STEP) = 1
    """Optimizer steps per training step (decoupled PPO, marlaas.executors.grpo): the step's
    prompt groups split into this many minibatches of whole groups, one optimizer step each,
    the ratio to the step's starting policy clipped at 1 +- clip_eps. The adapter version
    still goes up by one per step. At most prompts_per_step; 1: one optimizer step."""
    clip_eps: Amount(L.MAX_CLIP_EPS, positive=True) = 0.2
    """PPO clip of the ratio pi / pi_prox (pi_prox: the policy the training step started
    from); acts only with minibatches > 1."""
    clip_eps_high: Amount(L.MAX_CLIP_EPS_HIGH, positive=True) | None = None
    """The clip's upper side alone, 1 + clip_eps_high, for the tokens with a positive
    advantage (DAPO's clip-higher, Yu et al. 2025, takes 0.28 with clip_eps 0.2: a rare token
    the task rewards may rise further in one step; at 10, no upper side in practice). Acts
    only with minibatches > 1, as clip_eps. None: clip_eps."""
    lr_staleness_damping: Amount(L.MAX_LR_STALENESS_DAMPING) = 0.0
    """A late step moves less: each optimizer step's learning rate is divided by
    1 + lr_staleness_damping x the mean over its samples' tokens of their staleness beyond one
    version [versions] (one version behind is the pipeline's normal state; staleness-aware SGD,
    Zhang et al., IJCAI 2016, divides by max(1, staleness): 1 here). 0: the learning rate
    whatever the staleness."""
    resample_alike: Count(L.MAX_PROMPTS_PER_STEP, low=0) = 0
    """DAPO's dynamic sampling (Yu et al. 2025): up to this many prompt groups per training
    step are sampled in place of groups whose samples all earned the same reward (every GRPO
    advantage 0: such a group teaches nothing). A group is dropped only while its step has
    resamples left; past them it trains as it is. 0: every group trains (plain GRPO)."""

    @model_validator(mode="after")
    def _minibatches(self) -> RLSettings:
        if self.minibatches > self.prompts_per_step:
            raise ValueError(
                f"minibatches ({self.minibatches}) must be at most prompts_per_step "
                f"({self.prompts_per_step}): a minibatch holds whole prompt groups"
            )
        if self.resample_alike and self.group_size == 1:
            raise ValueError(
                f"resample_alike ({self.resample_alike}) needs group_size 2 or more: a group "
                "of one sample is always alike, and every step would draw all its resamples"
            )
        return self


DEFAULT_ENV_TIMEOUT_S = 600.0
"""A real run's default bound on one environment call [s] (EnvSpec.timeout_s)."""


class EnvSpec(StrictSpec):
    """The job's environment: what a real run calls, and how long its steps wait."""

    name: str = "arithmetic"
    """Registered environment name or ``package.module:Class`` (see marlaas.envs)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the environment (validated on load)."""
    latency_s: Distribution = Field(default_factory=lambda: {"dist": "constant", "value": 0})
    """Per-sample latency of one environment step beyond its own computation [s]: a remote
    verifier, a tool call. The simulator waits it; a real run waits it too (a seeded sample
    per sample and step) on top of the environment's own time. At most a day
    (MAX_LATENCY_S): a lognormal's p99.99 (median x e^(3.72 sigma)), its draws untruncated."""
    observation_tokens: Count(L.MAX_TOKENS, low=0) = 0
    """Tokens an environment step appends to the context (multi-turn)."""
    alike_groups: Amount(1.0) = 0.0
    """The simulator's chance that a group's samples all earn the same reward (what
    rl.resample_alike drops), drawn per group; a real run observes it, and a replay repeats
    the real run's. Measure it from a real run's rewards (all-right and all-wrong groups)."""
    timeout_s: Amount(L.MAX_ENV_TIMEOUT_S, positive=True) = DEFAULT_ENV_TIMEOUT_S
    """A real run's bound on one call of the environment, ``reset`` or ``step`` [s]
    (latency_s, waited after the step, is not counted): a call that takes longer fails the
    group's work with one line naming the environment, the call, the job and this bound, and
    is retried as other failed work (after 4 failures in a row the run stops, exit status 2;
    under the service the job ends failed). Each job's calls run on a thread of their own, so
    a call that blocks its thread (``time.sleep`` in ``async def``) is given up at the bound
    too while the other jobs go on; the blocked thread runs on until its call returns
    (docs/real-runs.md). The simulator does not model it: its environments take latency_s.
    At most a day."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value) if ":" not in value else printable(value, 1000)

    @field_validator("latency_s")
    @classmethod
    def _latency(cls, dist):
        return tail_at_most(dist, L.MAX_LATENCY_S, "s")


MAX_HELDOUT = 0.9
"""Largest held-out fraction of a dataset's rows (the rest train)."""


class DatasetSpec(StrictSpec):
    """A job's prompts from a local file (a real run's; the simulator draws lengths only).

    Read by :mod:`marlaas.datasets` (never downloaded): JSONL, Parquet or CSV, or a folder an
    HF ``datasets.Dataset.save_to_disk`` wrote. Each row is one problem: the prompt text and
    the reference answer its environment checks (``env: {name: math}`` and the like).
    """

    path: str
    """The file or folder, relative to the workload file."""
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    heldout: Amount(MAX_HELDOUT, positive=True) | str = 0.1
    """The held-out split ``marlaas evaluate`` scores and training never sees: a fraction of
    the rows (taken in the seed's order), or a second file of the same columns."""

    @field_validator("heldout", mode="before")
    @classmethod
    def _heldout(cls, value):
        """A fraction or a path, else one problem saying so (the union's two halves would
        each say why the value is not theirs: "...heldout.str: Input should be a valid
        string" for a fraction out of range)."""
        if isinstance(value, str):
            return value
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and 0 < value <= MAX_HELDOUT:  # NaN and the infinities fail it
            return value
        raise ValueError(
            f"a fraction of the rows (above 0, at most {MAX_HELDOUT:g}) or a file path"
        )

    @field_validator("path", "heldout")
    @classmethod
    def _path(cls, value):
        """A path of printable characters, not blank (an empty one would name the workload
        file's own folder)."""
        if not isinstance(value, str):
            return value
        if not value.strip():
            raise ValueError("must not be empty")
        return printable(value, 4096)

    @field_validator("prompt_column", "answer_column")
    @classmethod
    def _column(cls, value: str) -> str:
        return check_name(value)

    @model_validator(mode="after")
    def _columns_apart(self) -> DatasetSpec:
        """The prompt and the answer are two columns (one would be the other's answer)."""
        if self.prompt_column == self.answer_column:
            raise ValueError(
                f"prompt_column and answer_column are both {self.prompt_column[:80]!r}; the "
                "answer must be a column of its own"
            )
        return self


class JobSpec(StrictSpec):
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
    close to the group's (marlaas.sim.turn_draws), so their correlation is kept."""
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
        return at_most(dist, L.MAX_TOKENS, "tokens")
