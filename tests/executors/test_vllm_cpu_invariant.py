"""bfloat16 products whose rows do not depend on what else is in the call (vllm-cpu, AMX):
bit for bit, a row alone and among others, a column wherever it sits, a LoRA token's output
whichever adapters and slots are beside it; vLLM's own oneDNN kernel is not."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from marlaas.executors import vllm_cpu_invariant  # noqa: E402
from marlaas.executors.vllm_cpu_invariant import linear, pack  # noqa: E402

pytestmark = pytest.mark.skipif(
    not vllm_cpu_invariant.available(), reason="needs vllm-cpu's packed AMX kernel (AMX)"
)
ROWS = (1, 2, 3, 4, 5, 8, 17, 33, 100, 300)
"""Row counts that take each of the kernels' paths: oneDNN's differ from 33 rows up, the
packed kernel's at 4 rows or fewer (without the padding to MIN_ROWS)."""


def _random(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


@pytest.mark.parametrize("out, inputs", [(960, 576), (576, 1536), (4096, 576), (40, 72)])
def test_a_row_is_the_same_whatever_rows_are_beside_it(out, inputs):
    weight, x = _random(out, inputs, scale=0.05), _random(700, inputs, seed=1)
    packed, width = pack(weight)
    whole = linear(x, packed, width)
    assert whole.shape == (700, -(-out // 16) * 16) and not whole[:, out:].any()
    for rows in ROWS:
        assert torch.equal(linear(x[:rows], packed, width), whole[:rows]), rows
    reference = torch.nn.functional.linear(x.float(), weight.float())
    assert torch.allclose(whole[:, :out].float(), reference, rtol=0.02, atol=0.02)


def test_vllms_own_bfloat16_kernel_is_not_so():
    """Why the module exists: oneDNN's rows vary with the call's row count (vllm-cpu 0.32)."""
    from vllm import _custom_ops as ops

    weight, x = _random(960, 576, scale=0.05), _random(700, 576, seed=1)
    handler = ops.create_onednn_mm(weight.t(), 32)
    whole = ops.onednn_mm(handler, x, None)
    assert any(not torch.equal(ops.onednn_mm(handler, x[:rows].contiguous(), None),
                               whole[:rows]) for rows in ROWS)  # fmt: skip


def test_a_column_is_the_same_wherever_it_sits_and_whatever_zeros_lie_between():
    """What a LoRA layout of several adapters relies on: an adapter's columns of A side by side
    with others', its rows of B among others' with zeros in the inputs there."""
    rank, x = 8, _random(40, 576, seed=2)
    a = _random(rank, 576, seed=3, scale=0.05)
    alone = linear(x, *pack(torch.cat([a, torch.zeros(8, 576, dtype=a.dtype)])))[:, :rank]
    for others in (1, 3, 5):
        stacked = torch.cat([_random(rank * others, 576, seed=4, scale=0.05), a])
        assert torch.equal(linear(x, *pack(stacked))[:, rank * others : rank * (others + 1)],
                           alone)  # fmt: skip
    b, h = _random(576, rank, seed=5, scale=0.05), _random(40, rank, seed=6)
    pad = torch.nn.functional.pad
    expanded = linear(pad(h, (0, 24)), *pack(pad(b, (0, 24))))
    for offset in (8, 16, 40, 88):
        inner = offset + rank + 8
        wide_b = _random(576, inner, seed=7, scale=0.05)
        wide_b[:, offset : offset + rank] = b
        wide_h = torch.zeros(40, inner, dtype=h.dtype)
        wide_h[:, offset : offset + rank] = h
        assert torch.equal(linear(wide_h, *pack(wide_b)), expanded), offset


def test_installed_it_computes_bfloat16_layers_and_leaves_float32_ones():
    from vllm.model_executor.layers import utils

    vllm_cpu_invariant.install()
    vllm_cpu_invariant.install()  # idempotent
    assert utils.dispatch_cpu_unquantized_gemm._marlaas_invariant

    def layer(out, inputs, dtype, bias):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(_random(out, inputs, scale=0.05).to(dtype), False)
        module.bias = torch.nn.Parameter(torch.randn(out).to(dtype), False) if bias else None
        return module

    x = _random(50, 64, seed=8)
    for out, bias in ((48, False), (40, True)):  # 40: not the kernel's multiple of 16
        bf16 = layer(out, 64, torch.bfloat16, bias)
        weight = bf16.weight.detach().clone()
        b = bf16.bias.detach().float() if bias else None
        utils.dispatch_cpu_unquantized_gemm(bf16, remove_weight=True)
        assert bf16.weight.numel() == 0  # vLLM's: the packed copy is the one kept
        y = bf16.cpu_linear(x, bf16.weight, bf16.bias)
        assert y.shape == (50, out)
        reference = torch.nn.functional.linear(x.float(), weight.float(), b)
        assert torch.allclose(y.float(), reference, rtol=0.02, atol=0.05)
        for rows in (1, 3, 9):
            assert torch.equal(bf16.cpu_linear(x[:rows], None, bf16.bias), y[:rows])
    f32 = layer(48, 64, torch.float32, False)
    utils.dispatch_cpu_unquantized_gemm(f32, remove_weight=False)
    assert f32.weight.numel() and torch.allclose(
        f32.cpu_linear(x.float(), f32.weight, None), x.float() @ f32.weight.T, atol=1e-4
    )


SLOTS, RANK = 4, 8


def _vllms_add_lora_linear():
    """vLLM's own method, before vllm_cpu_kernels.install wrapped it."""
    from vllm.lora.punica_wrapper import punica_cpu

    method = punica_cpu.PunicaWrapperCPU.add_lora_linear
    return getattr(method, "__wrapped__", method)


def _lora_step(indices):
    from vllm.lora.punica_wrapper import punica_cpu

    wrapper = punica_cpu.PunicaWrapperCPU(1024, 512, "cpu")
    tokens = len(indices)
    wrapper._token_lora_indices[:tokens].copy_(torch.tensor(indices))
    wrapper.indices_len = [tokens] * 4
    wrapper._update_prefill_metadata(wrapper.token_lora_indices)
    wrapper.is_prefill = True
    return wrapper


def _stacked(by_slot, d_in, slices):
    """vLLM's stacked LoRA buffers (bfloat16 engine) with adapter ``by_slot[s]`` in slot s."""
    a = tuple(torch.zeros(SLOTS, 1, RANK, d_in, dtype=torch.bfloat16) for _ in slices)
    b = tuple(torch.zeros(SLOTS, 1, w, RANK, dtype=torch.bfloat16) for w in slices)
    for slot, seed in by_slot.items():
        for i, width in enumerate(slices):
            a[i][slot, 0] = _random(RANK, d_in, seed=seed * 10 + i, scale=0.05)
            b[i][slot, 0] = _random(width, RANK, seed=seed * 10 + 5 + i, scale=0.05)
    return a, b


@pytest.mark.parametrize("d_in, slices", [(64, (64, 32, 32)), (96, (80, 80)), (128, (48,))])
def test_a_lora_tokens_output_is_the_same_whichever_adapters_and_slots_are_beside_it(d_in, slices):
    from marlaas.executors.vllm_cpu_lora_linear import add_lora_linear

    x, y = _random(400, d_in, seed=11), _random(400, sum(slices), seed=12)
    alone_layer = _stacked({0: 1}, d_in, slices)  # adapter 1 alone, in slot 0
    mixed_layer = _stacked({2: 1, 0: 2, 3: 3}, d_in, slices)  # in slot 2, others beside
    for rows in (1, 3, 5, 16, 64):
        alone = y[:rows].clone()
        assert add_lora_linear(_lora_step([0] * rows), alone, x[:rows], *alone_layer, 2.0, slices)
        assert not torch.equal(alone, y[:rows])
        # vLLM's own (float32 products): the same up to bfloat16 rounding
        theirs = y[:rows].clone()
        vllms = _vllms_add_lora_linear()
        vllms(_lora_step([0] * rows), theirs, x[:rows], *alone_layer, 2.0, slices)
        assert torch.allclose(alone.float(), theirs.float(), rtol=0.02, atol=0.02)
        for beside in (1, 7, 30):
            indices = [2] * rows + [0, 3] * (beside // 2) + [0] * (beside % 2)
            both = torch.cat([y[:rows], y[200 : 200 + beside]]).clone()
            xs = torch.cat([x[:rows], x[200 : 200 + beside]])
            assert add_lora_linear(_lora_step(indices), both, xs, *mixed_layer, 2.0, slices)
            assert torch.equal(both[:rows], alone), (rows, beside)
