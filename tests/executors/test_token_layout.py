"""The trainer's token layouts: a micro-batch as its prefix tree gives the log-probs and the
gradients of right-padded rows, reads each shared beginning once, and is used only where it
pays and the model computes it exactly."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from marlaas.executors import token_layout  # noqa: E402
from marlaas.executors.rollout import TrainSample  # noqa: E402
from marlaas.executors.token_layout import PrefixTree, layout, padded_layout  # noqa: E402


def _sample(prompt, completion, group=0):
    return TrainSample(tuple(prompt), tuple(completion), (-1.0,) * len(completion), 1.0, group, 0)


GROUP = [  # one prompt, four completions of different lengths (two begin alike)
    _sample([5, 6, 7, 8, 9, 10], [20, 21, 22]),
    _sample([5, 6, 7, 8, 9, 10], [20, 21, 30, 31, 32]),
    _sample([5, 6, 7, 8, 9, 10], [40]),
    _sample([5, 6, 7, 8, 9, 10], [50, 51]),
]
TURNS = [  # a two-turn episode: the second turn's prompt is the first turn, its answer and
    # an observation; a second episode of the group shares only the first prompt
    _sample([5, 6, 7], [20, 21], group=1),
    _sample([5, 6, 7, 20, 21, 60, 61], [22, 23, 24], group=1),
    _sample([5, 6, 7], [30], group=1),
    _sample([5, 6, 7, 30, 62], [31, 32], group=1),
]
APART = [_sample([1, 2], [3, 4]), _sample([7, 8], [9])]  # nothing in common


# ------------------------------------------------------------------ the tree itself
def test_prefix_tree_holds_each_distinct_prefix_once():
    seqs = [[1, 2, 3], [1, 2, 4, 5], [1, 2, 3, 6], [7]]
    tree = PrefixTree.of(seqs)
    assert tree.tokens == [1, 2, 3, 4, 5, 6, 7]
    assert tree.parent == [-1, 0, 1, 1, 3, 2, -1]
    assert tree.depth == [0, 1, 2, 2, 3, 3, 0]
    assert tree.paths == [[0, 1, 2], [0, 1, 3, 4], [0, 1, 2, 5], [6]]
    for seq, path in zip(seqs, tree.paths, strict=True):  # a path spells its sequence
        assert [tree.tokens[n] for n in path] == seq
        assert all(tree.parent[b] == a for a, b in itertools.pairwise(path))


def test_ancestry_is_each_node_and_its_ancestors():
    tree = PrefixTree.of([s.prompt_ids + s.completion_ids for s in TURNS])
    seen = tree.ancestry()
    for node in range(len(tree.tokens)):
        up, want = node, set()
        while up >= 0:
            want.add(up)
            up = tree.parent[up]
        assert set(seen[node].nonzero()[0]) == want


def test_tree_layout_reads_the_shared_prompt_once_and_predicts_where_padding_does():
    place = layout(GROUP, 0, "cpu", torch.float32, allow_tree=True)
    padded = padded_layout(GROUP, 0, "cpu")
    assert place.ids.shape[0] == 1 and place.position_ids is not None  # one row: the tree
    assert place.tokens == 6 + 3 + 3 + 1 + 2  # the prompt once, "20 21" once
    assert padded.tokens == 4 * 6 + 3 + 5 + 1 + 2
    # each completion token is predicted by the state of the token before it, in both
    flat = place.ids[0]
    previous = [s.prompt_ids[-1:] + s.completion_ids[:-1] for s in GROUP]
    assert flat[place.cols].tolist() == [t for p in previous for t in p]
    assert padded.ids[padded.rows, padded.cols].tolist() == [t for p in previous for t in p]
    # and its position is its depth in the sequence
    depths = [len(s.prompt_ids) - 1 + t for s in GROUP for t in range(len(s.completion_ids))]
    assert place.position_ids[0, place.cols].tolist() == depths


def test_padded_where_the_tree_does_not_pay_or_would_be_too_large(monkeypatch):
    assert layout(APART, 0, "cpu", torch.float32, allow_tree=True).position_ids is None
    assert layout(GROUP, 0, "cpu", torch.float32, allow_tree=False).position_ids is None
    # a short prompt shared by long answers: the tree saves 15% of the tokens (820 of 960)
    # but its attention scores (820^2) outnumber the padded rows' (8 x 120^2)
    long_answers = [_sample(range(3, 23), range(100 * k + 30, 100 * k + 130)) for k in range(8)]
    assert layout(long_answers, 0, "cpu", torch.float32, allow_tree=True).position_ids is None
    many = [_sample(range(3, 23), [30 + k]) for k in range(64)]  # the same prompt, 64 answers
    assert layout(many, 0, "cpu", torch.float32, allow_tree=True).position_ids is not None
    monkeypatch.setattr(token_layout, "MAX_TREE_TOKENS", 10)  # the group's tree has 15
    assert layout(GROUP, 0, "cpu", torch.float32, allow_tree=True).position_ids is None


def test_windowed_attention_is_told_apart():
    transformers = pytest.importorskip("transformers")
    windowed = token_layout.windowed
    assert not windowed(transformers.LlamaConfig())
    assert windowed(transformers.MistralConfig(sliding_window=12))
    assert not windowed(transformers.MistralConfig(sliding_window=None))
    assert not windowed(transformers.Qwen2Config(use_sliding_window=False))
    assert windowed(transformers.Qwen2Config(use_sliding_window=True, sliding_window=64))


# ------------------------------------------------------------------ in the trainer
@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    pytest.importorskip("peft")
    from marlaas.executors.peft_trainer import PeftTrainer
    from tests.executors.conftest import randomize_adapter

    trainer = PeftTrainer(tiny_model_dir, activation_checkpointing=False)
    trainer.add_job("A", seed=0)
    randomize_adapter(trainer, "A", seed=3, scale=0.1)  # B matrices non-zero: gradients
    return trainer


def _logprobs_and_grads(trainer, chunk, tree: bool):
    trainer._activate("A")
    trainer.model.train()
    try:
        logp, mask, read = trainer._layout_logprobs(chunk, tree)
        grads = torch.autograd.grad((logp * mask).sum(), trainer._jobs["A"].params)
    finally:
        trainer._deactivate("A")
        trainer.model.eval()
    return logp.detach() * mask, grads, read


@pytest.mark.parametrize("chunk", [GROUP, TURNS, GROUP + TURNS], ids=["group", "turns", "both"])
def test_tree_gives_the_padded_logprobs_and_gradients(trainer, chunk):
    logp, grads, read = _logprobs_and_grads(trainer, chunk, tree=True)
    ref, ref_grads, padded_read = _logprobs_and_grads(trainer, chunk, tree=False)
    assert read < padded_read  # the tree was used
    torch.testing.assert_close(logp, ref, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5 * float(r.abs().max()))


def test_a_step_counts_the_tokens_its_forward_passes_read(trainer):
    chunk = GROUP + TURNS
    before = trainer.tokens_read
    stats = trainer.train_step("A", chunk)
    assert trainer._tree is True
    unique = len(PrefixTree.of([s.prompt_ids + s.completion_ids for s in chunk]).tokens)
    assert stats.read_tokens == unique  # one micro-batch of 8: one tree
    assert stats.sample_tokens == sum(len(s.prompt_ids) + len(s.completion_ids) for s in chunk)
    assert trainer.tokens_read - before >= unique


def transformers_config(**fields):
    return pytest.importorskip("transformers").MistralConfig(**fields)


def test_a_model_that_computes_the_tree_otherwise_gets_the_padded_layout(tiny_model_dir):
    pytest.importorskip("peft")
    from marlaas.executors.completion_logprobs import tree_matches
    from marlaas.executors.peft_trainer import PeftTrainer

    trainer = PeftTrainer(tiny_model_dir)
    trainer.add_job("A", seed=0)
    mode = trainer.model.training
    right = tree_matches(trainer.model, lambda c, t: trainer._layout_logprobs(c, t)[:2])
    assert right and trainer.model.training is mode  # left in the mode it was found

    def off_in_the_tree(chunk, tree):  # as a model that ignores the custom mask would be
        logp, mask, _ = trainer._layout_logprobs(chunk, tree)
        return logp + (0.1 if tree else 0.0), mask

    assert not tree_matches(trainer.model, off_in_the_tree)

    def refused_in_the_tree(chunk, tree):  # an attention that takes no [1, 1, N, N] mask
        if tree:
            raise ValueError("this attention takes a 2D mask only")
        return trainer._layout_logprobs(chunk, tree)[:2]

    assert not tree_matches(trainer.model, refused_in_the_tree)
    windowed = type("Windowed", (), {"config": transformers_config(sliding_window=16)})()
    assert not tree_matches(windowed, None)  # not even tried
    trainer._tree = False  # what the check found: every micro-batch padded
    stats = trainer.train_step("A", GROUP)
    assert stats.read_tokens == stats.sample_tokens
    assert stats.sample_tokens == sum(len(s.prompt_ids) + len(s.completion_ids) for s in GROUP)
