"""What a real vLLM engine with prefix caching takes from its cache: a group's later samples
the prompt's whole blocks short of its last token (the core's ``shared_prefix``, which the
scheduler reserves once and the simulator prefills once), never another adapter's."""

from __future__ import annotations

import asyncio

import pytest

from marlaas.core.cluster_spec import PREFIX_BLOCK_TOKENS, shared_prefix
from marlaas.core.workload import parse_workload

pytest.importorskip("torch")
pytest.importorskip("peft")


def _caching_engine(model_dir):
    """An in-process engine built the way a run with prefix caching builds it."""
    pytest.importorskip("vllm")
    from marlaas.executors.backends import EngineSizing, make_generator

    workload = parse_workload({
        "jobs": [{"name": "j", "tenant": "t", "rl": {"steps": 1, "group_size": 4}}],
        "cluster": {"pools": [{"name": "r", "role": "inference", "devices": 1},
                              {"name": "t", "role": "training", "devices": 1}],
                    "engine": {"max_seqs": 16, "adapter_slots": 2, "prefix_caching": True}},
    })  # fmt: skip
    return make_generator("vllm", model_dir, EngineSizing.of_workload(workload), 256)


@pytest.mark.slow
def test_a_groups_later_samples_take_the_prompts_whole_blocks_from_the_cache(
    tiny_model_dir, two_adapters, vllm_generator
):
    """Also: closing this engine leaves the session's other in-process engine working (vLLM's
    shutdown tears down the process's distributed state unless it is the last engine)."""
    _, dirs = two_adapters
    lengths = (PREFIX_BLOCK_TOKENS - 7, PREFIX_BLOCK_TOKENS + 1, 2 * PREFIX_BLOCK_TOKENS + 22)

    async def go():
        engine = _caching_engine(tiny_model_dir)
        try:
            for job, folder in dirs.items():
                await engine.publish(job, 0, folder)
            prompts = [[65 + (i + n) % 26 for i in range(n)] for n in lengths]
            # two groups of each prompt at once, one per adapter, then A's again
            a, b = await asyncio.gather(*[engine.generate(job, 0, prompts, 4, 4, 1.0, seed=1)
                                          for job in dirs])  # fmt: skip
            again = await engine.generate("A", 0, prompts, 4, 4, 1.0, seed=2)
            return a, b, again
        finally:
            await engine.close()

    a, b, again = asyncio.run(go())
    [[after]] = asyncio.run(vllm_generator.generate(None, -1, ["abc"], 1, 4, 1.0, seed=0))
    assert after.num_tokens >= 1
    for n, group_a, group_b, group_again in zip(lengths, a, b, again, strict=True):
        for group in (group_a, group_b):  # one sample computes it, the others share it
            assert sorted(c.cached_tokens for c in group) == [0] + [shared_prefix(n)] * 3, n
        assert [c.cached_tokens for c in group_again] == [shared_prefix(n)] * 4, n
