"""Generation backends: two adapters in one batch, seeding, and log-probs that match training."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

PROMPTS = ["hello", "What is 2+2?"]


async def _mixed(gen):
    """Concurrent calls for adapter A, adapter B and the base model."""
    return await asyncio.gather(
        gen.generate("A", 0, PROMPTS, n=3, max_new_tokens=12, temperature=1.0, seed=7),
        gen.generate("B", 0, PROMPTS, n=3, max_new_tokens=12, temperature=1.0, seed=7),
        gen.generate(None, 0, PROMPTS[:1], n=1, max_new_tokens=12, temperature=0.0),
    )


def _check_groups(groups, adapter, version, n=3):
    assert len(groups) == len(PROMPTS) and all(len(g) == n for g in groups)
    for g in groups:
        for c in g:
            assert c.adapter == adapter and c.version == version
            assert len(c.logprobs) == len(c.completion_ids) <= 12
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert c.finish_reason in ("stop", "length")


def _check_logprobs(trainer, groups, job, atol):
    comps = [c for g in groups for c in g]
    ref = trainer.logprobs(job, [c.prompt_ids for c in comps], [c.completion_ids for c in comps])
    for c, r in zip(comps, ref, strict=True):
        assert c.logprobs == pytest.approx(r, abs=atol)


@pytest.fixture(scope="module")
def hf_generator(tiny_model_dir, two_adapters):
    from marlaas.executors.hf_generator import HFGenerator

    _, dirs = two_adapters
    gen = HFGenerator(tiny_model_dir)

    async def publish():
        for job, d in dirs.items():
            await gen.publish(job, 0, d)

    asyncio.run(publish())
    return gen


def test_hf_two_adapters_in_one_batch(hf_generator, two_adapters):
    trainer, _ = two_adapters
    before = hf_generator.batches_run
    a, b, base = asyncio.run(_mixed(hf_generator))
    assert hf_generator.batches_run == before + 1  # the three calls shared one mixed batch
    _check_groups(a, "A", 0)
    _check_groups(b, "B", 0)
    assert base[0][0].adapter is None and base[0][0].version == -1
    assert [c.completion_ids for c in a[0]] != [c.completion_ids for c in b[0]]
    _check_logprobs(trainer, a, "A", atol=1e-4)
    _check_logprobs(trainer, b, "B", atol=1e-4)
    _check_logprobs(trainer, base, None, atol=1e-4)


def test_hf_seeded_and_batch_independent(hf_generator):
    async def alone():
        return await hf_generator.generate("A", 0, PROMPTS, 3, 12, 1.0, seed=7)

    a_mixed = asyncio.run(_mixed(hf_generator))[0]
    a_alone = asyncio.run(alone())
    assert [[c.completion_ids for c in g] for g in a_mixed] == [
        [c.completion_ids for c in g] for g in a_alone
    ]


def test_hf_publish_retire(hf_generator, two_adapters):
    _, dirs = two_adapters

    async def go():
        await hf_generator.publish("A", 5, dirs["A"])
        assert ("A", 5) in hf_generator.published()
        with pytest.raises(ValueError, match="already published"):
            await hf_generator.publish("A", 5, dirs["A"])
        await hf_generator.retire("A", 5)
        with pytest.raises(KeyError, match="not published"):
            await hf_generator.generate("A", 5, ["x"], 1, 4)

    asyncio.run(go())


def test_hf_base_rows_use_no_adapter_before_during_and_after_retires(tiny_model_dir, two_adapters):
    """What evaluate does: base, then publish + trained + retire, job after job."""
    from marlaas.executors.hf_generator import HFGenerator

    trainer, dirs = two_adapters
    gen = HFGenerator(tiny_model_dir)

    async def base():
        return await gen.generate(None, 0, PROMPTS, 2, 8, temperature=1.0, seed=3)

    async def go():
        first = await base()
        await gen.publish("A", 0, dirs["A"])
        await gen.publish("B", 0, dirs["B"])
        await gen.retire("A", 0)  # the active adapter goes; B stays
        with_b = await base()
        await gen.retire("B", 0)  # the last adapter goes
        after = await base()
        return first, with_b, after

    first, with_b, after = asyncio.run(go())
    ids = [[c.completion_ids for c in g] for g in first]
    assert [[c.completion_ids for c in g] for g in with_b] == ids
    assert [[c.completion_ids for c in g] for g in after] == ids
    _check_logprobs(trainer, with_b, None, atol=1e-4)


@pytest.mark.slow
def test_vllm_two_adapters_in_one_batch_and_logprobs_match_hf(vllm_generator, two_adapters):
    trainer, dirs = two_adapters

    async def go():
        for job, d in dirs.items():
            await vllm_generator.publish(job, 0, d)
        try:
            return await _mixed(vllm_generator)
        finally:
            for job in dirs:
                await vllm_generator.retire(job, 0)

    seen = len(vllm_generator.meter.steps)
    a, b, base = asyncio.run(go())
    _check_groups(a, "A", 0)
    _check_groups(b, "B", 0)
    # the engine's steps, measured: every token after a request's first was one decoding step
    # of it; its prompt was prefilled once at most (prefix caching); A and B shared steps
    steps = vllm_generator.meter.steps[seen:]
    completions = [c for groups in (a, b, base) for g in groups for c in g]
    assert sum(s.decoding for s in steps) == sum(len(c.completion_ids) - 1 for c in completions)
    assert 0 < sum(s.prefill_tokens for s in steps) <= sum(len(c.prompt_ids) for c in completions)
    assert sum(s.prefills for s in steps) >= 3  # three generate calls, each a group
    assert max(s.adapters for s in steps) == 2 and all(s.duration_s > 0 for s in steps)
    assert [c.completion_ids for c in a[0]] != [c.completion_ids for c in b[0]]
    # vLLM's sampled-token log-probs equal HF+PEFT's on the same tokens (fp32; measured ~1e-6).
    _check_logprobs(trainer, a, "A", atol=1e-3)
    _check_logprobs(trainer, b, "B", atol=1e-3)
    _check_logprobs(trainer, base, None, atol=1e-3)


@pytest.mark.slow
def test_vllm_versions_and_errors(vllm_generator, two_adapters):
    _, dirs = two_adapters

    async def go():
        await vllm_generator.publish("A", 1, dirs["A"])
        await vllm_generator.publish("A", 2, dirs["B"])  # a new version with other weights
        one, two = await asyncio.gather(
            vllm_generator.generate("A", 1, ["abc"], 2, 8, 1.0, seed=3),
            vllm_generator.generate("A", 2, ["abc"], 2, 8, 1.0, seed=3),
        )
        assert [c.completion_ids for c in one[0]] != [c.completion_ids for c in two[0]]
        assert {c.version for c in one[0]} == {1} and {c.version for c in two[0]} == {2}
        again = await vllm_generator.generate("A", 1, ["abc"], 2, 8, 1.0, seed=3)
        assert [c.completion_ids for c in again[0]] == [c.completion_ids for c in one[0]]
        with pytest.raises(ValueError, match="already published"):
            await vllm_generator.publish("A", 1, dirs["A"])
        await vllm_generator.retire("A", 1)
        await vllm_generator.retire("A", 2)
        assert vllm_generator.published() == []
        with pytest.raises(KeyError, match="not published"):
            await vllm_generator.generate("A", 1, ["abc"], 1, 4)

    asyncio.run(go())
