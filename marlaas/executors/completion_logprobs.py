"""Log-probs of a micro-batch's completion tokens under a causal LM: through the decoder's
hidden states and a plain output layer, a chunk of positions at a time
(:mod:`marlaas.executors.logprobs`), or from the full [B, L, vocab] logits (the reference,
and the way for heads that are not a plain Linear)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from marlaas.executors.logprobs import token_logprobs
from marlaas.executors.rollout import TrainSample


def batch_ids(chunk: Sequence[TrainSample], pad_id: int, device: torch.device):
    """(input ids [B, L], attention mask [B, L]): prompt + completion, right-padded."""
    seqs = [list(s.prompt_ids) + list(s.completion_ids) for s in chunk]
    length = max(map(len, seqs))
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, seq in enumerate(seqs):
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
    return ids.to(device), attn.to(device)


def chunked_logprobs(
    causal_lm, head: torch.nn.Linear, chunk: Sequence[TrainSample], pad_id: int, device
):
    """(log-probs [B, Cmax], mask [B, Cmax]) of the completion tokens of a micro-batch.

    The decoder's hidden states, then lm_head -> logsumexp -> gather on the completion
    positions only, a chunk of positions at a time (marlaas.executors.logprobs): the
    [B, L, vocab] logits of the whole micro-batch never exist. ``head``: the model's output
    layer, which :func:`plain_head` found plain.
    """
    ids, attn = batch_ids(chunk, pad_id, device)
    decoder = causal_lm.get_decoder()
    hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
    rows, cols, targets, slots = [], [], [], []
    for i, s in enumerate(chunk):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        # Token t of the completion (position P+t) is predicted by the state at P+t-1.
        rows += [i] * c
        cols += range(p - 1, p - 1 + c)
        targets += s.completion_ids
        slots += range(c)
    as_long = lambda v: torch.tensor(v, dtype=torch.long, device=device)  # noqa: E731
    rows, cols, slots = as_long(rows), as_long(cols), as_long(slots)
    flat = token_logprobs(hidden[rows, cols], head.weight, as_long(targets), head.bias)
    cmax = max(len(s.completion_ids) for s in chunk)
    logp = torch.zeros((len(chunk), cmax), device=device).index_put((rows, slots), flat)
    mask = torch.zeros((len(chunk), cmax), device=device)
    mask[rows, slots] = 1.0
    return logp, mask


def full_logits_logprobs(model, chunk: Sequence[TrainSample], pad_id: int, device):
    """The same as :func:`chunked_logprobs` from the model's full [B, L, vocab] logits."""
    ids, attn = batch_ids(chunk, pad_id, device)
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits.float()
    cmax = max(len(s.completion_ids) for s in chunk)
    # Token t of the completion (position P+t) is predicted by the logits at P+t-1.
    index = torch.zeros((len(chunk), cmax), dtype=torch.long, device=device)
    mask = torch.zeros((len(chunk), cmax), device=device)
    for i, s in enumerate(chunk):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        index[i, :c] = torch.arange(p - 1, p - 1 + c)
        mask[i, :c] = 1.0
    picked = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[-1]))
    targets = torch.zeros_like(index)
    for i, s in enumerate(chunk):
        targets[i, : len(s.completion_ids)] = torch.tensor(s.completion_ids)
    logp = picked.gather(2, targets[:, :, None]).squeeze(2) - picked.logsumexp(dim=2)
    return logp * mask, mask


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


def pad_rows(rows: Sequence[Sequence[float]], width: int, device) -> torch.Tensor:
    """Rows of floats (a micro-batch's sampling log-probs) as a [B, width] tensor, zero-padded."""
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out
