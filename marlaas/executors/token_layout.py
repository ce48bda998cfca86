"""Where a micro-batch's tokens go in the trainer's forward pass: one right-padded row per
sample, or every sample in one row as a prefix tree, each shared beginning computed once.

A GRPO group's samples share their prompt, and a multi-turn episode's later turns begin with
its earlier ones, so most of a micro-batch's tokens are repeats: the quality workload's steps
read 8 x 54 prompt tokens for 8 x 12 completion tokens. The tree layout puts each distinct
prefix's tokens once in a single row, in the order they were first met (a parent before its
children); a token sees itself and its ancestors only (an attention mask of the tree) at its
depth as its position, so its hidden state is exactly the one the padded layout computes for
it, and gradients from every sample that shares it add up in it. This is the shared-prefix
forward of "Prefix Grouper" (Liu et al., 2025, arXiv:2506.05433), generalised from one prompt
per group to any common beginnings (a chat template's system prompt, earlier turns).

The tree is used when it saves at least :data:`MIN_SAVED` of the padded layout's tokens, has
at most :data:`MAX_TREE_TOKENS` tokens (its mask is [tokens x tokens]) and costs no more than
the padded rows counting attention (:func:`cost`: a short prompt shared by long answers is
cheaper padded, its one row's attention scores outnumbering the padded rows'). A model whose
attention sees a window of the tokens before (:func:`windowed`: the tree's mask would widen
it) is given the padded layout, and the trainer checks once that the model computes the same
log-probs both ways (one whose attention ignores a custom mask does not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from marlaas.executors.rollout import TrainSample

MIN_SAVED = 0.1
"""Least share of the padded layout's real tokens the tree must save to be used."""
ATTENTION_TOKENS = 1024
"""Tokens seen at which a token's attention scores weigh about as much as the rest of its
work in a layer: SmolLM2-135M keeps about 9k floats a token per layer besides them (hidden 576,
MLP 1,536) and 9 scores per token seen; a 7B Llama about 66k and 32."""
MAX_TREE_TOKENS = 4096
"""Most tokens a tree layout holds: its attention mask is this squared, in the model's dtype
(64 MiB at float32)."""


@dataclass(frozen=True)
class Layout:
    """A micro-batch's forward-pass inputs and where each completion token is predicted."""

    ids: torch.Tensor
    """Input ids [rows, length]."""
    attention_mask: torch.Tensor
    """[rows, length] padding mask, or the tree's [1, 1, length, length] additive mask."""
    position_ids: torch.Tensor | None
    """[1, length] token depths for the tree; None for the padded layout."""
    rows: torch.Tensor
    cols: torch.Tensor
    """The hidden state (row, column) that predicts each completion token, samples in order,
    each sample's tokens in order ([completion tokens] each)."""
    tokens: int
    """Tokens the forward pass reads (the padded layout's without its padding)."""


def predicting(states: torch.Tensor, place: Layout) -> torch.Tensor:
    """The rows of ``states`` [rows, length, ...] (hidden states, logits) that predict each
    completion token, in ``place``'s order: [completion tokens, ...].

    On a CPU through ``index_select`` on the flattened positions: in a tree a prompt's last
    token predicts the first completion token of every sample of its group, and advanced
    indexing's backward pass adds those gradients in an order that depends on the thread count
    there (a float32 step then differs in the last bits between a trainer on one thread and on
    two), where ``index_select``'s adds them in index order. On a GPU ``index_select``'s
    backward adds them with atomics in no fixed order, and advanced indexing's is kept."""
    if states.device.type != "cpu":
        return states[place.rows, place.cols]
    flat = place.rows * states.shape[1] + place.cols
    return torch.index_select(states.reshape(-1, *states.shape[2:]), 0, flat)


def sequences(chunk: Sequence[TrainSample]) -> list[list[int]]:
    """Each sample's prompt + completion."""
    return [list(s.prompt_ids) + list(s.completion_ids) for s in chunk]


def padded_layout(chunk: Sequence[TrainSample], pad_id: int, device) -> Layout:
    """One right-padded row per sample."""
    seqs = sequences(chunk)
    length = max(map(len, seqs))
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), length), dtype=torch.long)
    rows, cols = [], []
    for i, (seq, s) in enumerate(zip(seqs, chunk, strict=True)):
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        p, c = len(s.prompt_ids), len(s.completion_ids)
        rows += [i] * c
        cols += range(p - 1, p - 1 + c)  # token t of the completion: predicted at P + t - 1
    return Layout(ids.to(device), attn.to(device), None, _long(rows, device), _long(cols, device),
                  sum(map(len, seqs)))  # fmt: skip


@dataclass(frozen=True)
class PrefixTree:
    """The distinct prefixes of some token sequences: node ``n`` is token ``tokens[n]`` after
    the prefix of node ``parent[n]`` (-1: the first token), ``depth[n]`` tokens in; nodes in
    the order they were first met, so a parent comes before its children."""

    tokens: list[int]
    parent: list[int]
    depth: list[int]
    paths: list[list[int]]
    """Each sequence's nodes, token by token."""

    @classmethod
    def of(cls, seqs: Sequence[Sequence[int]]) -> PrefixTree:
        """The tree of ``seqs``."""
        tokens: list[int] = []
        parent: list[int] = []
        depth: list[int] = []
        children: dict[tuple[int, int], int] = {}
        paths = []
        for seq in seqs:
            node, path = -1, []
            for token in seq:
                child = children.get((node, token))
                if child is None:
                    child = len(tokens)
                    children[(node, token)] = child
                    tokens.append(token)
                    parent.append(node)
                    depth.append(len(path))
                node = child
                path.append(node)
            paths.append(path)
        return cls(tokens, parent, depth, paths)

    def ancestry(self) -> np.ndarray:
        """[nodes, nodes] bool: row n is true at n and at each of its ancestors."""
        n = len(self.tokens)
        seen = np.zeros((n, n), dtype=bool)
        for node, up in enumerate(self.parent):
            if up >= 0:
                seen[node] = seen[up]
            seen[node, node] = True
        return seen


def tree_layout(
    chunk: Sequence[TrainSample], device, dtype: torch.dtype, tree: PrefixTree | None = None
) -> Layout:
    """Every sample in one row as its prefix tree (see the module's docstring)."""
    tree = tree or PrefixTree.of(sequences(chunk))
    seen = torch.from_numpy(tree.ancestry())
    mask = torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, torch.finfo(dtype).min)
    cols = []
    for s, path in zip(chunk, tree.paths, strict=True):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        cols += path[p - 1 : p - 1 + c]
    return Layout(
        _long([tree.tokens], device), mask[None, None].to(device), _long([tree.depth], device),
        torch.zeros(len(cols), dtype=torch.long, device=device), _long(cols, device),
        len(tree.tokens),
    )  # fmt: skip


def layout(chunk: Sequence[TrainSample], pad_id: int, device, dtype, allow_tree: bool) -> Layout:
    """The tree layout where it is allowed and worth it (module docstring), else the padded."""
    if allow_tree:
        seqs = sequences(chunk)
        total, longest = sum(map(len, seqs)), max(map(len, seqs))
        tree = PrefixTree.of(seqs)
        n = len(tree.tokens)
        cheaper = cost(1, n) <= cost(len(seqs), longest)
        if n <= min(MAX_TREE_TOKENS, (1 - MIN_SAVED) * total) and cheaper:
            return tree_layout(chunk, device, dtype, tree)
    return padded_layout(chunk, pad_id, device)


def cost(rows: int, length: int) -> float:
    """A forward pass's work over ``rows`` rows of ``length`` tokens, in tokens: each token's
    layers, plus its attention scores (one per token it may see) in units of
    :data:`ATTENTION_TOKENS`."""
    return rows * (length + length * length / ATTENTION_TOKENS)


def windowed(config) -> bool:
    """Whether a model's attention sees only a window of the tokens before each (a sliding
    window on any layer, or chunked attention), by its config or its text model's: transformers
    takes a custom mask as it is, so the tree's would widen the window."""
    for part in (config, getattr(config, "text_config", None)):
        if part is None:
            continue
        if getattr(part, "attention_chunk_size", None):
            return True
        if getattr(part, "sliding_window", None) and getattr(part, "use_sliding_window", True):
            return True
        if "sliding_attention" in (getattr(part, "layer_types", None) or ()):
            return True
    return False


def _long(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)
