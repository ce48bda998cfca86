"""The simulator's cost model: how long each kind of work takes on the modelled hardware.

A workload file may carry it (``cost:``); only the simulator reads it. The scheduler core
never sees a cost: it decides what runs where, the cost model decides how long it takes.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_ITERATION_MS = 60_000.0
"""Largest per-iteration cost of decoding [ms] (a minute)."""
MAX_FIXED_S = 86_400.0
"""Largest fixed cost of one piece of work [s] (a day)."""
MIN_RATE, MAX_RATE = 1.0, 1e12
"""Throughputs [tokens/s]: at least 1 (a smaller one makes times that overflow)."""

Ms = Annotated[float, Field(ge=0, le=MAX_ITERATION_MS)]
PositiveMs = Annotated[float, Field(gt=0, le=MAX_ITERATION_MS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_FIXED_S)]
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]


class CostModel(BaseModel):
    """Latency model of a 7B-class model on an H100-class GPU (defaults, all documented).

    Decode iteration time = decode_base_ms + decode_per_seq_ms * running sequences
    + decode_per_kv_token_ms * context tokens in the batch + decode_per_adapter_ms * distinct
    adapters in the batch. Training step = train_overhead_s + tokens * (1 + lora_rank /
    train_rank_scale) / (train_tokens_per_s * devices).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )

    decode_base_ms: PositiveMs = 6.0
    """Weights read once per iteration: ~14 GB fp16 at ~3 TB/s is ~5 ms, plus overhead."""
    decode_per_seq_ms: Ms = 0.03
    """Per running sequence (sampling, GEMM rows) [ms]; assumption from vLLM batch scaling."""
    decode_per_kv_token_ms: Ms = 0.00015
    """KV read per context token: 0.5 MB at ~3.3 TB/s = 0.15 us."""
    decode_per_adapter_ms: Ms = 0.3
    """Extra per distinct LoRA adapter in the batch (Punica/S-LoRA SGMV); assumption."""
    prefill_tokens_per_s: Rate = 20_000.0
    """~14 GFLOP per token at ~300 TFLOP/s effective."""
    adapter_load_s: Seconds = 0.2
    """Loading one LoRA adapter version into an engine (host to GPU plus setup)."""
    train_tokens_per_s: Rate = 8_000.0
    """LoRA forward+backward per device: ~42 GFLOP/token at ~35% MFU."""
    train_overhead_s: Seconds = 1.0
    """Fixed per training step (optimizer step, log-prob pass bookkeeping)."""
    train_rank_scale: Annotated[float, Field(ge=1, le=1e6)] = 256.0
    """Rank at which LoRA doubles the step's compute; assumption."""
    trainer_swap_s: Seconds = 2.0
    """Moving a job's adapter and optimizer state onto a trainer."""
    sync_s: Seconds = 0.5
    """Publishing a new adapter version to the engines (save + transfer)."""
    colocated_switch_s: Seconds = 3.0
    """Colocated placement: offloading the engine and back around a training step."""
