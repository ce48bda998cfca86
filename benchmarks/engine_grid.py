"""One vLLM engine alone: milliseconds per decode iteration by running sequences and adapters.

Run: ``python benchmarks/engine_grid.py [--model models/tiny] [--rank 8] [--tokens 32]``
(under a minute on the tiny model on 2 cores, a few minutes on SmolLM2). Four seeded adapters
of ``--rank`` are made with the trainer and published to one in-process vLLM engine (four
LoRA slots). For every batch of 4, 12, 24 and 48 sequences, spread evenly over 1, 2 and 4
adapters, the engine generates ``--tokens`` tokens per sequence from one 32-token prompt
(each adapter's calls at once: one batch) three times; printed: the median wall time over the
longest sequence's tokens [ms per iteration], prefill included.

What it is for: the engine model's terms (marlaas/sim/engine_model.py: per iteration, per
running sequence, per distinct adapter) measured on one engine with nothing beside it, to
hold against what ``marlaas calibrate`` fits from real runs (docs/twin-log.md, "The twelve runs
again"), and a check that no batch shape falls off a cliff (it found the LoRA layout memo too
small for three rank-16 adapters on SmolLM2: docs/real-runs.md). Wall-clock time on a shared
machine: read the spread of the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from marlaas.executors.peft_trainer import PeftTrainer
from marlaas.executors.vllm_generator import VLLMGenerator

ADAPTERS = ("a", "b", "c", "d")
SEQUENCES = (4, 12, 24, 48)
SPREADS = (1, 2, 4)
REPEATS = 3
PROMPT = list(range(1, 33))


async def grid(model: Path, folder: Path, rank: int, tokens: int) -> dict:
    """(sequences, adapters) -> median ms per iteration."""
    trainer = PeftTrainer(model)
    for seed, name in enumerate(ADAPTERS):
        trainer.write_initial_adapter(name, rank, 2 * rank, seed, folder / name)
    engine = VLLMGenerator(model, max_loras=len(ADAPTERS), max_lora_rank=rank,
                           max_model_len=512, max_num_seqs=max(SEQUENCES))  # fmt: skip
    for name in ADAPTERS:
        await engine.publish(name, 0, folder / name)
    await engine.generate(ADAPTERS[0], 0, [PROMPT], 4, tokens, 1.0, 0)  # warm
    out = {}
    for sequences in SEQUENCES:
        for spread in SPREADS:
            per_iteration = []
            for repeat in range(REPEATS):
                start = time.perf_counter()
                groups = await asyncio.gather(*[
                    engine.generate(name, 0, [PROMPT], sequences // spread, tokens, 1.0,
                                    100 + repeat)
                    for name in ADAPTERS[:spread]
                ])  # fmt: skip
                longest = max(len(c.completion_ids) for g in groups for c in g[0])
                per_iteration.append((time.perf_counter() - start) / max(longest, 1))
            out[sequences, spread] = 1e3 * statistics.median(per_iteration)
            print(f"{sequences:3d} sequences, {spread} adapter(s): "
                  f"{out[sequences, spread]:.2f} ms per iteration", flush=True)  # fmt: skip
    await engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/tiny"))
    parser.add_argument("--rank", type=int, choices=(8, 16, 32), default=8)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per sequence")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = asyncio.run(grid(args.model, Path(tmp), args.rank, args.tokens))
    print("\n| sequences | " + " | ".join(f"{s} adapter(s)" for s in SPREADS) + " |")
    print("|---" * (len(SPREADS) + 1) + "|")
    for sequences in SEQUENCES:
        cells = " | ".join(f"{table[sequences, s]:.2f}" for s in SPREADS)
        print(f"| {sequences} | {cells} |")


if __name__ == "__main__":
    main()
