"""cluster.engine.dtype: what the real engines compute in. The workload's setting reaches the
engine (and its KV cache's size), auto keeps float32 on a CPU and bfloat16 on a GPU, and a
bfloat16 engine on a CPU samples with LoRA adapters, seeded, with log-probs near the float32
trainer's."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest

from marlaas.core.workload import WorkloadError, parse_workload

pytest.importorskip("torch")  # make_generator reads the trainer's LoRA targets (peft_trainer)


def _workload(engine: dict) -> dict:
    return {
        "jobs": [{"name": "j", "tenant": "t", "rl": {"steps": 1, "max_new_tokens": 16},
                  "prompt_tokens": {"dist": "constant", "value": 32},
                  "response_tokens": {"dist": "constant", "value": 8}}],
        "cluster": {"pools": [{"name": "rollout", "role": "inference", "devices": 1},
                              {"name": "train", "role": "training", "devices": 1}],
                    "engine": {"max_seqs": 8, **engine}},
    }  # fmt: skip


@pytest.fixture
def built(monkeypatch):
    """make_generator's vLLM keyword arguments, with a recorder in VLLMGenerator's place."""
    import marlaas.executors.backends as backends

    seen = {}

    class Recorder:
        def __init__(self, model_dir, **kwargs) -> None:
            seen.clear()
            seen.update(kwargs)

    fake = types.ModuleType("marlaas.executors.vllm_generator")
    fake.VLLMGenerator = Recorder
    monkeypatch.setitem(sys.modules, "marlaas.executors.vllm_generator", fake)
    monkeypatch.setattr(backends, "kv_bytes_per_token", lambda _dir, width: 1000 * width)

    def build(engine: dict, device: str = "cpu") -> dict:
        sizing = backends.EngineSizing.of_workload(parse_workload(_workload(engine)))
        backends.make_generator("vllm", "unused", sizing, 512, device=device)
        return dict(seen)

    return build


def test_the_declared_dtype_reaches_the_engine_and_sizes_its_kv_cache(built):
    f32, bf16 = built({}), built({"dtype": "bfloat16"})
    assert (f32["dtype"], bf16["dtype"]) == ("float32", "bfloat16")
    assert f32["kv_cache_bytes"] == 2 * bf16["kv_cache_bytes"]  # 4 bytes a value against 2
    assert built({"dtype": "float32"}, device="cuda:0")["dtype"] == "float32"
    assert built({}, device="cuda:0")["dtype"] == "bfloat16"  # auto: bfloat16 on a GPU


def test_the_trainer_is_told_what_the_engines_sample_in():
    from marlaas.executors.backends import sampling_dtype

    assert sampling_dtype("vllm", "auto", ["cpu", "cpu"]) == "float32"
    assert sampling_dtype("vllm", "auto", ["cpu", "cuda:0"]) == "bfloat16"
    assert sampling_dtype("hf", "auto", ["cuda:0"]) == "float32"
    assert sampling_dtype("hf", "bfloat16", ["cpu"]) == "bfloat16"


@pytest.mark.parametrize("invariant_kernels", [False, True])
def test_a_run_sampling_in_bfloat16_is_told_when_its_samples_are_not_reproducible(
    caplog, monkeypatch, invariant_kernels
):
    from marlaas.executors import vllm_cpu_invariant
    from marlaas.executors.backends import sampling_dtype

    monkeypatch.setattr(vllm_cpu_invariant, "available", lambda: invariant_kernels)
    with caplog.at_level("WARNING", logger="marlaas.executors.backends"):
        assert sampling_dtype("vllm", "auto", ["cpu"]) == "float32"
        assert not caplog.records
        assert sampling_dtype("vllm", "bfloat16", ["cpu"]) == "bfloat16"
        # without vllm_cpu_invariant's kernels (no AMX) a CPU's bfloat16 rows vary with the batch
        assert len(caplog.records) == (0 if invariant_kernels else 1)
        sampling_dtype("vllm", "auto", ["cuda:0"])  # a GPU's bfloat16: never made invariant
        sampling_dtype("hf", "bfloat16", ["cpu"])  # torch's own kernels
    assert len(caplog.records) == (2 if invariant_kernels else 3)
    assert "bfloat16" in caplog.text and "not reproducible from its seed" in caplog.text


def test_an_unknown_dtype_is_refused_naming_the_field():
    with pytest.raises(WorkloadError, match=r"cluster\.engine\.dtype.*'float16'|float16.*dtype"):
        parse_workload(_workload({"dtype": "float16"}))


@pytest.mark.slow
def test_a_bfloat16_engine_on_a_cpu_samples_seeded_near_the_trainers_logprobs(
    tiny_model_dir, two_adapters
):
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # not installed, or a broken install
        pytest.skip(f"vllm not importable: {exc}")
    import torch

    if not torch.cpu._is_avx512_bf16_supported():  # vLLM's CPU kernels then emulate it
        pytest.skip("this CPU has no AVX512-BF16 (nor AMX)")
    from marlaas.executors.vllm_generator import VLLMGenerator

    trainer, dirs = two_adapters
    engine = VLLMGenerator(tiny_model_dir, max_loras=2, max_lora_rank=8, max_model_len=128,
                           dtype="bfloat16")  # fmt: skip

    async def go():
        await engine.publish("A", 0, dirs["A"])
        try:
            draw = [engine.generate("A", 0, ["hello", "What is 2+2?"], n=3, max_new_tokens=12,
                                    temperature=1.0, seed=7) for _ in range(2)]  # fmt: skip
            return [await d for d in draw]
        finally:
            await engine.retire("A", 0)
            await engine.close()

    first, second = asyncio.run(go())
    tokens = [[c.completion_ids for c in g] for g in first]
    assert tokens == [[c.completion_ids for c in g] for g in second]  # seeded
    samples = [c for g in first for c in g]
    assert all(c.completion_ids for c in samples)
    ref = trainer.logprobs("A", [c.prompt_ids for c in samples],
                           [c.completion_ids for c in samples])  # fmt: skip
    gaps = [abs(a - b) for c, r in zip(samples, ref, strict=True)
            for a, b in zip(c.logprobs, r, strict=True)]  # fmt: skip
    base = trainer.logprobs(None, [c.prompt_ids for c in samples],
                            [c.completion_ids for c in samples])  # fmt: skip
    off = [abs(a - b) for c, r in zip(samples, base, strict=True)
           for a, b in zip(c.logprobs, r, strict=True)]  # fmt: skip
    # bfloat16 keeps 8 bits of mantissa: the engine's log-probs are the float32 trainer's to
    # a few hundredths of a nat on average (measured 0.04, the largest 0.5 on this random tiny
    # model), not to float32's 1e-5 (test_generators.py); without the adapter they are 1.7 off
    mean = sum(gaps) / len(gaps)
    assert 1e-4 < mean < 0.15 and max(gaps) < 1.5
    assert sum(off) / len(off) > 10 * mean


def test_a_trainer_reuses_fresh_sampling_logprobs_only_when_computed_in_its_own_dtype(
    two_adapters,
):
    """A fresh step's proximal log-probs (its later minibatches' clip) come from the samples
    where the engines sampled in the trainer's float32, and from a forward pass otherwise."""
    from marlaas.executors.rollout import TrainSample

    trainer, _ = two_adapters
    version = trainer.version("A")
    marked = [-1.0, -2.0, -3.0]  # not what the trainer computes
    samples = [TrainSample((5, 6, 7), (8, 9, 10), tuple(marked), 1.0, 0, version)]
    computed = trainer.logprobs("A", [(5, 6, 7)], [(8, 9, 10)])[0]
    assert computed != pytest.approx(marked, abs=0.1)
    try:
        for sampled_in, expected in (("float32", marked), ("bfloat16", computed)):
            trainer.sampled_in = sampled_in
            assert trainer.proximal("A", samples, [0])[0] == pytest.approx(expected, abs=1e-6)
    finally:
        trainer.sampled_in = "float32"
