"""One vLLM engine generating for one adapter or for three at once: seconds per batch.

Run: ``python benchmarks/engine_lora.py [--model models/smollm2] [--rounds 2]`` (about a
minute a round on 2 cores). Three rank-8 adapters are made with the trainer (seeded, their B
matrices random so that LoRA changes the output), published to one in-process vLLM engine
(4 LoRA slots), and each round times three batches of the same prompts, 16 new tokens per
sequence with the end-of-sequence token ignored (so every batch does the same work):

- ``one x 48``: 6 prompts x 8 samples of one adapter;
- ``three x 16``: 2 prompts x 8 samples of each adapter, the three calls at once (one batch);
- ``one x 16``: 2 prompts x 8 samples of one adapter.

Printed: each batch's seconds per round and their median [s], and ``three x 16`` over three
``one x 16`` batches, what generating the tenants together saves against one after another.
Wall-clock time on a shared machine: compare runs made one after the other, and read the
spread. docs/real-runs.md ("A LoRA linear layer is two matrix products") has its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch

from marlaas.executors.peft_trainer import PeftTrainer
from marlaas.executors.vllm_generator import VLLMGenerator

ADAPTERS = ("a", "b", "c")
PROMPTS = [f"Question {i}: what is {i} plus {2 * i + 1}? Explain briefly." for i in range(6)]
NEW_TOKENS = 16


class _FixedLength(VLLMGenerator):
    """Every sequence generates exactly :data:`NEW_TOKENS` tokens."""

    def _params(self, max_new_tokens, temperature, seed):
        params = super()._params(max_new_tokens, temperature, seed)
        params.ignore_eos, params.min_tokens = True, max_new_tokens
        return params


def _adapters(model: Path, folder: Path) -> dict[str, Path]:
    """Three seeded rank-8 adapters whose B matrices are random (PEFT starts them at 0)."""
    trainer = PeftTrainer(model)
    out = {}
    for seed, name in enumerate(ADAPTERS):
        trainer.add_job(name, rank=8, seed=seed)
        with torch.no_grad():
            for p in trainer.adapter_parameters(name):
                p.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(seed))
        out[name] = trainer.save_adapter(name, 0, folder / name)
        trainer.remove_job(name)
    return out


async def _rounds(model: Path, folders: dict[str, Path], rounds: int) -> dict[str, list[float]]:
    engine = _FixedLength(model, max_loras=4, max_lora_rank=8, max_model_len=512,
                          max_num_seqs=64)  # fmt: skip
    for name, folder in folders.items():
        await engine.publish(name, 0, folder)

    async def batch(parts):
        start = time.perf_counter()
        await asyncio.gather(*[
            engine.generate(name, 0, PROMPTS[:prompts], 8, NEW_TOKENS, 0.7, seed=s)
            for s, (name, prompts) in enumerate(parts)
        ])  # fmt: skip
        return time.perf_counter() - start

    cases = {"one x 48": [("a", 6)], "three x 16": [(n, 2) for n in ADAPTERS],
             "one x 16": [("a", 2)]}  # fmt: skip
    for parts in cases.values():  # warm the engine's kernels for these shapes
        await batch(parts)
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, parts in cases.items():
            times[name].append(await batch(parts))
    await engine.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/smollm2"))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = asyncio.run(_rounds(args.model, _adapters(args.model, Path(tmp)), args.rounds))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:10s} {' '.join(f'{x:6.2f}' for x in t)}   median {medians[name]:.2f} s")
    print(f"three x 16 / (3 x one x 16): {medians['three x 16'] / (3 * medians['one x 16']):.2f}")


if __name__ == "__main__":
    main()
