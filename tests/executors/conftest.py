"""Shared fixtures for the executor tests: one tiny model, one trainer with two adapters."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A freshly built tiny Llama (~0.3 M parameters) and its byte tokenizer."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from marlaas.executors.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


def randomize_adapter(trainer, job: str, seed: int, scale: float = 0.3) -> None:
    """Give `job`'s LoRA weights random values, so that adapters visibly differ."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in trainer._jobs[job].params:
            p.copy_(torch.randn(p.shape, generator=gen) * scale)


@pytest.fixture(scope="session")
def two_adapters(tiny_model_dir, tmp_path_factory):
    """(trainer, {job: adapter folder}) with two random, different adapters "A" and "B" (v0)."""
    pytest.importorskip("peft")
    from marlaas.executors.peft_trainer import PeftTrainer

    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=8)
    root = tmp_path_factory.mktemp("adapters")
    dirs = {}
    for i, job in enumerate(("A", "B")):
        trainer.add_job(job, rank=8, alpha=16, seed=i)
        randomize_adapter(trainer, job, seed=100 + i)
        dirs[job] = trainer.save_adapter(job, 0, root / job / "v0")
    return trainer, dirs


@pytest.fixture(scope="session")
def vllm_generator(tiny_model_dir):
    """One in-process vLLM engine for the whole session (engine start: ~5-10 s on 2 cores)."""
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # not installed, or a broken install (e.g. torchvision present)
        pytest.skip(f"vllm not importable: {exc}")
    import asyncio

    from marlaas.executors.vllm_generator import VLLMGenerator

    gen = VLLMGenerator(tiny_model_dir, max_loras=2, max_lora_rank=8, max_model_len=128)
    yield gen
    asyncio.run(gen.close())
