"""The simulator's cost model: how long each kind of work takes on the modelled hardware.

A workload file may carry it (``cost:``); only the simulator reads it. The scheduler core
never sees a cost: it decides what runs where, the cost model decides how long it takes.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from marlaas.core.plain_numbers import refuse_bool

MAX_ITERATION_MS = 60_000.0
"""Largest per-iteration cost of decoding [ms] (a minute)."""
MAX_FIXED_S = 86_400.0
"""Largest fixed cost of one piece of work [s] (a day)."""
MIN_DECODE_BASE_MS = 1e-6
"""The floor calibrate and refine give a fitted decode_base_ms [ms]: an iteration takes some
time (decode_base_ms > 0). It need not take one the clock can tell from nothing: a group whose
time left is below the clock's resolution ends at its wake-up (EngineModel.pop_finished)."""
MIN_RATE, MAX_RATE = 1.0, 1e12
"""Throughputs [tokens/s]: at least 1 (a smaller one makes times that overflow)."""

Ms = Annotated[float, Field(ge=0, le=MAX_ITERATION_MS)]
PositiveMs = Annotated[float, Field(gt=0, le=MAX_ITERATION_MS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_FIXED_S)]
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]


class CostModel(BaseModel):
    """Latency model of one engine and one trainer device; the defaults are the ``h100-7b``
    profile (a 7B-class model, bf16, on H100-80GB), derived from published measurements:
    marlaas/sim/profiles/h100-7b.yaml carries each number's source and arithmetic
    ([S1] Vidur's H100/A100 kernel profiles, [S3] Punica, [S8] vLLM's sleep-mode measurements;
    docs/cost-profiles.md). GPU kernel time only: host overhead of the serving loop is not in.

    Prefill of P prompt tokens = prefill_base_ms + P / prefill_tokens_per_s. Decode iteration
    time = decode_base_ms + decode_per_seq_ms * running sequences
    + decode_per_kv_token_ms * context tokens in the batch + decode_per_adapter_ms * distinct
    adapters in the batch. Training step = train_overhead_s + :func:`train_work` /
    (train_tokens_per_s * devices), with devices = 1 when the cluster declares shared compute
    (one processor). Profiles for other hardware are in
    marlaas/sim/profiles/ (``--cost NAME``); ``marlaas calibrate`` fits one from real runs.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool(cls, value, info)

    decode_base_ms: PositiveMs = 6.0
    """Per decode iteration [ms]: 32 layers' weight reads at batch 1 [S1][S2] (fit intercept)."""
    decode_per_seq_ms: Ms = 0.026
    """Per running sequence and iteration [ms]: the linear ops' growth with batch [S1][S2]."""
    decode_per_kv_token_ms: Ms = 0.000154
    """Per context token held by the batch, per iteration [ms]: attention's KV reads [S2]."""
    decode_per_adapter_ms: Ms = 0.035
    """Per distinct LoRA adapter in the batch, per iteration [ms]: reading its ~80 MB of
    weights, as Punica's SGMV measurements scale [S3][S4]."""
    prefill_base_ms: Ms = 4.46
    """Fixed cost of a prefill [ms]: one engine step reading the weights however short the
    prompts (a group's prompts are prefilled together). Fitted with the rate below to the
    measured prefill of every prompt length from 1 to 2,048 tokens [S1][S2]
    (benchmarks/prefill_profile.py); ``calibrate`` fits both from real runs."""
    prefill_tokens_per_s: Rate = 42_443.0
    """Prompt tokens per second on top of the fixed cost [tokens/s]: linear ops and attention
    at prompt length [S1][S2]."""
    adapter_load_s: Seconds = 0.08
    """Loading one LoRA adapter version into an engine [s]: host-side setup dominates;
    assumption. On a shared processor (``cluster.shared_compute``) the decoding engines wait
    for it: the real executor adds a LoRA on the one thread its in-process engines step on."""
    train_tokens_per_s: Rate = 12_500.0
    """LoRA forward + backward on the frozen base, per device [tokens/s] [S1][S2], checked
    against published LoRA throughput [S5][S6][S7]."""
    train_shares_prompts: bool = False
    """Whether the trainer reads a group's prompt once for all its samples (MARLaaS's PEFT
    trainer: marlaas.executors.token_layout): a step's work is then its tokens less the
    prompt's repeats (Train.shared_tokens). False: each sample read whole, as a right-padded
    trainer does; the published profiles keep False, the arithmetic they were derived with.
    ``calibrate`` sets it from the runs' train rows."""
    train_overhead_s: Seconds = 0.2
    """Fixed per training step [s] (optimizer step, launches, host syncs); assumption."""
    train_rank_scale: Annotated[float, Field(ge=1, le=1e6)] = 1800.0
    """Rank at which LoRA doubles the step's compute (FLOP ratio); assumption."""
    train_forward_share: Annotated[float, Field(ge=0, le=1)] = 0.5
    """A no-grad forward pass's compute per token as a share of a training step's (forward +
    backward) [fraction]: what a step of several minibatches adds for the log-probs of its
    starting policy (:func:`train_work`). 0.5: the frozen base's forward GEMMs are 2 of the 4
    x 6.48 GFLOP per token of forward + activation gradients (the h100-7b profile's
    train_rank_scale arithmetic); about 1/3 where activation checkpointing recomputes the
    forward in the backward pass (the real trainer's default); assumption."""
    trainer_swap_s: Seconds = 0.12
    """Moving a job's adapter and AdamW state onto a trainer [s] (~480 MB over PCIe);
    assumption."""
    sync_s: Seconds = 0.07
    """Publishing a new adapter version (device to host, save, send) [s]; assumption."""
    colocated_switch_s: Seconds = 1.4
    """Colocated placement: putting the engine to sleep and waking it around a training step
    [s] [S8]."""
    adapter_load_wait_iterations: Annotated[float, Field(ge=0, le=1_000)] = 0.0
    """Decode iterations an adapter load waits for when engines on its processor are
    decoding (vLLM adds a LoRA between two engine steps) [iterations]; 0 for the published
    profiles, where the load itself dominates; calibrated on CPUs, where it does not."""
    overlap_decode_slowdown: Annotated[float, Field(ge=1, le=100)] = 2.0
    """On a processor where training overlaps generation (cluster.shared_compute: overlap):
    how many times slower engines decode while a training step runs; 2 (with
    ``overlap_train_slowdown`` 2) is a processor with nothing to spare, on which running them
    at once gains nothing over taking turns; ``calibrate`` fits both from such runs."""
    overlap_train_slowdown: Annotated[float, Field(ge=1, le=100)] = 2.0
    """On such a processor: how many times slower a training step runs while engines
    decode."""
    engine_warmup_s: Seconds = 0.0
    """An engine's warm-up [s]: its first generation, done when the engine is built, before
    the run's clock starts (in both worlds: marlaas.executors.warmup); a real run's summary
    records it, no run charges it to its first batch [S8]."""

    def engines_at_speed(self, slower: float) -> CostModel:
        """These costs with the engines ``slower`` times as slow (2: their work takes twice as
        long; 0.5: half): every engine time (:data:`ENGINE_TIMES`) times it, the prefill rate
        over it, each kept within its bounds; training, syncs and the model's shape (its
        ratios, counts and slowdowns) unchanged. A replay charges a run's engines the speed
        its engines' yardstick measured (marlaas.twin.replay): the yardstick times the
        engines, not the trainer, and on docs/twin-log.md's sittings 4-6 charging the trainer the
        same speed moved the replays further from the real runs (77 of 108 within 10%, against
        84 with the engines alone, both before adapter loads paused the engines)."""
        if not 0 < slower < float("inf"):
            raise ValueError(f"a speed ratio is a positive number, not {slower!r}")
        bounds = type(self).model_fields
        update = {}
        for name in ENGINE_TIMES + ENGINE_RATES:
            value = getattr(self, name)
            value = value * slower if name in ENGINE_TIMES else value / slower
            low, high = _bounds(bounds[name])
            update[name] = min(max(value, low), high)
        return self.model_validate({**self.model_dump(), **update})


ENGINE_TIMES = ("decode_base_ms", "decode_per_seq_ms", "decode_per_kv_token_ms",
                "decode_per_adapter_ms", "prefill_base_ms", "adapter_load_s")  # fmt: skip
"""The engines' times: what engines ``slower`` times as slow multiply
(:meth:`CostModel.engines_at_speed`)."""
ENGINE_RATES = ("prefill_tokens_per_s",)
"""The engines' throughputs: what such engines divide."""


def _bounds(field) -> tuple[float, float]:
    """(lowest, highest) value a CostModel field accepts (its ge or gt, just above a gt, and
    its le)."""
    low, high = 0.0, float("inf")
    for rule in field.metadata:
        if getattr(rule, "ge", None) is not None:
            low = rule.ge
        if getattr(rule, "gt", None) is not None:
            low = rule.gt + 1e-9
        if getattr(rule, "le", None) is not None:
            high = rule.le
    return low, high


def train_work(
    cost: CostModel,
    tokens: float,
    lora_rank: int,
    minibatches: int = 1,
    proximal_pass: bool = True,
) -> float:
    """A training step's compute in the tokens of ``train_tokens_per_s`` (a LoRA forward +
    backward pass each): its ``tokens`` (prompt + completion: what a forward pass reads) x
    (1 + lora_rank / train_rank_scale) x (1 + train_forward_share x (minibatches - 1) /
    minibatches). The last term, with ``proximal_pass``, is the no-grad forward pass of a step
    of several minibatches (marlaas.executors.peft_trainer): the log-probs of the policy it
    starts from, for the samples past its first minibatch (whose are its own forward pass's).
    A stale step makes it; a step of staleness 0 has them from sampling and makes none, unless
    the engines sample in another dtype than the trainer's
    (``EngineSpec.reuses_sampling_logprobs``). Its extra optimizer steps are not charged: an
    AdamW step on a LoRA adapter is under a millisecond (the h100-7b profile's
    train_overhead_s arithmetic), and train_overhead_s stays once per step."""
    prox = cost.train_forward_share * (minibatches - 1) / minibatches if proximal_pass else 0.0
    return tokens * (1 + lora_rank / cost.train_rank_scale) * (1 + prox)
