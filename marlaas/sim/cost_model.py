"""The simulator's cost model: how long each kind of work takes on the modelled hardware.

A workload file may carry it (``cost:``); only the simulator reads it. The scheduler core
never sees a cost: it decides what runs where, the cost model decides how long it takes.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


class CostModel(BaseModel):
    """Latency model of a 7B-class model on an H100-class GPU (defaults, all documented).

    Decode iteration time = decode_base_ms + decode_per_seq_ms * running sequences
    + decode_per_kv_token_ms * context tokens in the batch + decode_per_adapter_ms * distinct
    adapters in the batch. Training step = train_overhead_s + tokens * (1 + lora_rank /
    train_rank_scale) / (train_tokens_per_s * devices), with devices = 1 when the cluster
    declares shared compute (one processor). Profiles for other hardware are in
    marlaas/sim/profiles/ (``--cost NAME``); ``marlaas calibrate`` fits one from real runs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

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
    engine_warmup_s: NonNegFloat = 0.0
    """Extra time of an engine's first generation (lazy initialisation, first kernels) [s];
    0 for an engine warmed up before the run."""
