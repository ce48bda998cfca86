"""Log-probs of a micro-batch's completion tokens under a causal LM: through the decoder's
hidden states and a plain output layer, a chunk of positions at a time
(:mod:`marlaas.executors.logprobs`), or from the full logits (the reference, and the way for
heads that are not a plain Linear); the tokens laid out padded or as a prefix tree
(:mod:`marlaas.executors.token_layout`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from marlaas.executors.logprobs import token_logprobs
from marlaas.executors.rollout import TrainSample
from marlaas.executors.token_layout import Layout, predicting, windowed

log = logging.getLogger(__name__)


def chunked_logprobs(
    causal_lm, head: torch.nn.Linear, chunk: Sequence[TrainSample], place: Layout, device
):
    """(log-probs [B, Cmax], mask [B, Cmax]) of the completion tokens of a micro-batch laid
    out as ``place`` (:func:`marlaas.executors.token_layout.layout`).

    The decoder's hidden states, then lm_head -> logsumexp -> gather on the completion
    positions only, a chunk of positions at a time (marlaas.executors.logprobs): the
    [B, L, vocab] logits of the whole micro-batch never exist. ``head``: the model's output
    layer, which :func:`plain_head` found plain.
    """
    hidden = causal_lm.get_decoder()(
        input_ids=place.ids, attention_mask=place.attention_mask,
        position_ids=place.position_ids, use_cache=False,
    ).last_hidden_state  # fmt: skip
    targets = _long([t for s in chunk for t in s.completion_ids], device)
    flat = token_logprobs(predicting(hidden, place), head.weight, targets, head.bias)
    return _per_sample(flat, chunk, device)


def full_logits_logprobs(model, chunk: Sequence[TrainSample], place: Layout, device):
    """The same as :func:`chunked_logprobs` from the model's full logits."""
    logits = model(
        input_ids=place.ids, attention_mask=place.attention_mask,
        position_ids=place.position_ids, use_cache=False,
    ).logits.float()  # fmt: skip
    picked = predicting(logits, place)  # [completion tokens, vocab]
    targets = _long([t for s in chunk for t in s.completion_ids], device)
    flat = picked.gather(1, targets[:, None]).squeeze(1) - picked.logsumexp(dim=1)
    return _per_sample(flat, chunk, device)


def _per_sample(flat: torch.Tensor, chunk: Sequence[TrainSample], device):
    """(log-probs [B, Cmax], mask [B, Cmax]) from the completion tokens' log-probs in order."""
    lengths = [len(s.completion_ids) for s in chunk]
    rows = torch.repeat_interleave(torch.arange(len(chunk)), torch.tensor(lengths)).to(device)
    slots = torch.tensor([t for c in lengths for t in range(c)], dtype=torch.long, device=device)
    shape = (len(chunk), max(lengths))
    logp = torch.zeros(shape, device=device).index_put((rows, slots), flat)
    mask = torch.zeros(shape, device=device)
    mask[rows, slots] = 1.0
    return logp, mask


@torch.no_grad()
def plain_head(causal_lm, pad_id: int) -> torch.nn.Linear | None:
    """The output layer when the model's logits are exactly ``lm_head(decoder hidden states)``
    (checked once on a few tokens: some models scale or softcap them after lm_head), else
    None."""
    head = causal_lm.get_output_embeddings()
    if type(head) is not torch.nn.Linear or not hasattr(causal_lm, "get_decoder"):
        return None
    device = head.weight.device
    ids = torch.tensor([[pad_id, 1, 2, 3]], device=device) % head.weight.shape[0]
    was_training = causal_lm.training
    causal_lm.eval()
    try:
        logits = causal_lm(input_ids=ids).logits.float()
        mine = head(causal_lm.get_decoder()(input_ids=ids).last_hidden_state).float()
    finally:
        causal_lm.train(was_training)
    return head if torch.allclose(logits, mine, rtol=1e-4, atol=1e-4) else None


@torch.no_grad()
def tree_matches(model, logprobs) -> bool:
    """Whether the prefix-tree layout may be used for ``model``: its attention is not windowed
    (:func:`marlaas.executors.token_layout.windowed`) and ``logprobs(chunk, tree)`` (a
    trainer's completion log-probs of a micro-batch, ``tree``: the prefix-tree layout allowed)
    gives the padded layout's log-probs with the tree, in eval mode, on a few tokens whose
    samples share beginnings (checked once: a model whose attention does not take a custom
    mask gives others). A tree forward that fails is a warning, and the padded layout."""
    if windowed(getattr(model, "config", None)):
        return False
    probe = [
        TrainSample((1, 2, 3, 4, 5, 6), (7, 8), (0.0, 0.0), 0.0, 0, 0),
        TrainSample((1, 2, 3, 4, 5, 6), (9, 10, 11), (0.0, 0.0, 0.0), 0.0, 0, 0),
        TrainSample((1, 2, 3), (12,), (0.0,), 0.0, 1, 0),
    ]
    was_training = model.training
    model.eval()
    try:
        padded, mask = logprobs(probe, False)
        try:
            tree, _ = logprobs(probe, True)
        except Exception as exc:  # an attention that refuses a [1, 1, N, N] mask
            log.warning("prefix-tree layout off: the model's forward pass refused it (%s)", exc)
            return False
    finally:
        model.train(was_training)
    tol = 1e-4 if padded.dtype == torch.float32 and _dtype(model) == torch.float32 else 5e-2
    return torch.allclose(padded * mask, tree * mask, rtol=tol, atol=tol)


def _dtype(model) -> torch.dtype:
    return next(model.parameters()).dtype


def _long(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)


def pad_rows(rows: Sequence[Sequence[float]], width: int, device) -> torch.Tensor:
    """Rows of floats (a micro-batch's sampling log-probs) as a [B, width] tensor, zero-padded."""
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out
