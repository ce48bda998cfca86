"""Log-probs of chosen tokens without the full-vocabulary logits: lm_head, logsumexp and gather,
chunk by chunk of positions, in the forward and again in the backward pass.

The plain way, ``log_softmax(lm_head(h))[target]``, materialises a [positions, vocab] fp32
tensor, keeps it for the backward pass and allocates its gradient too: for SmolLM2's 49,152
tokens that is 196 KB per position, ~0.5 GB for a 16 x 154-token micro-batch (measured peak of
a training step: docs/real-runs.md). Here only ``chunk`` positions' logits exist at any time
(``chunk`` x vocab x 4 bytes, 12 MiB for 64 positions of a 49k vocabulary); the backward pass
recomputes them from the saved hidden states (one more lm_head matmul per chunk), as fused
linear cross-entropy kernels do::

    logp[i]   = h[i] . W[t_i] + b[t_i] - logsumexp_v(h[i] . W[v] + b[v])
    dlogp/dz  = onehot(t_i) - softmax(z_i)              (z_i = the logits of position i)
    dh[i]     = g[i] * (W[t_i] - softmax(z_i) @ W)      dW += g[:, None] * (onehot - softmax)^T h
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK = 64
"""Positions per lm_head chunk: 64 x 49,152 x 4 bytes = 12 MiB of logits for SmolLM2."""


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """log softmax(hidden @ weight.T + bias)[targets], computed ``chunk`` positions at a time.

    hidden [N, H], weight [V, H], targets [N] (long), bias [V] or None -> log-probs [N] in
    float32 (the matmul runs in the inputs' dtype, the softmax in float32). Differentiable in
    ``hidden``, ``weight`` and ``bias``.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden [N, H] and targets [N], got {hidden.shape}, {targets.shape}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return _ChunkedLogprobs.apply(hidden, weight, bias, targets, chunk)


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            logits = _logits(hidden[rows], weight, bias)  # [n, V] fp32
            lse[rows] = torch.logsumexp(logits, dim=1)
            out[rows] = logits.gather(1, targets[rows, None]).squeeze(1) - lse[rows]
            del logits
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            rows = slice(start, start + ctx.chunk)
            h = hidden[rows]
            # d logp / d logits = onehot(target) - softmax, times the incoming gradient
            grad_z = _logits(h, weight, bias).sub_(lse[rows, None]).exp_()  # softmax [n, V]
            grad_z.neg_().scatter_add_(1, targets[rows, None], torch.ones_like(lse[rows, None]))
            grad_z.mul_(grad_out[rows, None].float())
            if need_h:
                grad_h[rows] = (grad_z.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w += grad_z.t() @ h.float()
            if need_b:
                grad_b += grad_z.sum(0)
            del grad_z
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None


def _logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    z = h @ weight.t()
    if bias is not None:
        z = z + bias
    return z.float()
