"""The trainer's forward + backward pass over a micro-batch of GRPO groups: right-padded rows
against the prefix tree (each group's prompt read once: marlaas.executors.token_layout).

    python benchmarks/bench_prefix_tree.py                      # SmolLM2 if prepared, else tiny
    python benchmarks/bench_prefix_tree.py --model models/tiny --prompt 200
    python -m pytest benchmarks/bench_prefix_tree.py --benchmark-enable -s

A micro-batch of ``--groups`` groups of ``--group-size`` samples, each group one prompt of
``--prompt`` tokens, each sample its own completion of 4 to ``--completion`` tokens (drawn,
seeded). Printed per layout: tokens the forward pass reads, the median seconds of a forward +
backward pass into the LoRA weights over ``--rounds`` rounds [s], and the ratio padded / tree
(both measured in the same run, one after the other, alternating: the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.rollout import TrainSample  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def micro_batch(groups: int, group_size: int, prompt: int, completion: int, vocab: int,
                seed: int = 0) -> list[TrainSample]:  # fmt: skip
    """``groups`` x ``group_size`` samples: one random prompt per group, own completions."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for g in range(groups):
        head = tuple(torch.randint(3, vocab, (prompt,), generator=gen).tolist())
        for _ in range(group_size):
            n = int(torch.randint(4, completion + 1, (1,), generator=gen))
            tail = tuple(torch.randint(3, vocab, (n,), generator=gen).tolist())
            out.append(TrainSample(head, tail, (-1.0,) * n, 0.0, g, 0))
    return out


def _pass(trainer, chunk, tree: bool) -> tuple[float, int]:
    """Seconds of one forward + backward pass, and the tokens it read."""
    start = time.perf_counter()
    logp, mask, read = trainer._layout_logprobs(chunk, tree)
    (logp * mask).sum().backward()
    return time.perf_counter() - start, read


def compare(model: Path, groups=2, group_size=8, prompt=54, completion=16, rounds=5) -> dict:
    """Median seconds of a pass each way [s], the tokens each reads, and padded / tree."""
    from marlaas.executors.peft_trainer import PeftTrainer

    trainer = PeftTrainer(model, micro_batch_size=groups * group_size)
    trainer.add_job("A", seed=0)
    vocab = trainer.model.get_input_embeddings().weight.shape[0]
    chunk = micro_batch(groups, group_size, prompt, completion, vocab)
    trainer._activate("A")
    trainer.model.train()
    times: dict[bool, list[float]] = {False: [], True: []}
    read = {}
    try:
        for tree in (False, True):  # warm-up
            _pass(trainer, chunk, tree)
        for _ in range(rounds):
            for tree in (False, True):
                seconds, read[tree] = _pass(trainer, chunk, tree)
                times[tree].append(seconds)
    finally:
        trainer._deactivate("A")
    padded_s, tree_s = statistics.median(times[False]), statistics.median(times[True])
    return {"model": model.name, "samples": len(chunk), "padded_tokens": read[False],
            "tree_tokens": read[True], "padded_s": padded_s, "tree_s": tree_s,
            "ratio": padded_s / tree_s}  # fmt: skip


def _default_model(tmp: Path) -> Path:
    smollm2 = REPO / "models" / "smollm2"
    if (smollm2 / "config.json").exists():
        return smollm2
    from marlaas.executors.models import build_tiny_model

    tiny = REPO / "models" / "tiny"
    return tiny if (tiny / "config.json").exists() else build_tiny_model(tmp / "tiny", seed=0)


def _print(row: dict) -> None:
    print(f"{row['model']}: {row['samples']} samples; padded {row['padded_tokens']} tokens "
          f"{row['padded_s']:.3f} s, tree {row['tree_tokens']} tokens {row['tree_s']:.3f} s; "
          f"padded / tree {row['ratio']:.2f}x")  # fmt: skip


def test_prefix_tree_vs_padded(benchmark, tmp_path):
    row = benchmark.pedantic(lambda: compare(_default_model(tmp_path), rounds=3), rounds=1)
    benchmark.extra_info.update(row)
    _print(row)
    assert row["tree_tokens"] < row["padded_tokens"]


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=54, help="prompt tokens per group")
    parser.add_argument("--completion", type=int, default=16, help="longest completion")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or _default_model(Path(tmp))
        _print(compare(model, args.groups, args.group_size, args.prompt, args.completion,
                       args.rounds))  # fmt: skip
