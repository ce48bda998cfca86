"""Prefix sharing within a group (cluster.engine.prefix_caching): a group's samples share
one prompt, whose whole KV blocks an engine with prefix caching (vLLM's) holds and prefills
once. The scheduler reserves them once, the simulator prefills them once, and the real
engines are built with prefix caching, in blocks of that size, exactly when the workload
declares it (tests/executors/test_prefix_blocks.py: what vLLM then takes from its cache)."""

from __future__ import annotations

import pytest

from marlaas.core.cluster_spec import PREFIX_BLOCK_TOKENS, shared_prefix
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Generate, LoadAdapter, WorkDone
from marlaas.core.workload import parse_workload
from marlaas.sim.cost_model import CostModel
from marlaas.sim.run import simulate

AZURE_PROMPT = 14_050
"""A real Azure conversation prompt [tokens] (traces/azure_conv_sample.csv's longest)."""


def azure_like(prefix_caching: bool, prompt: int = AZURE_PROMPT) -> dict:
    """One job of groups of 8 samples of a long prompt on 120,000-token engines."""
    return {
        "jobs": [{
            "name": "long", "tenant": "t",
            "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 8, "max_new_tokens": 256},
            "prompt_tokens": {"dist": "constant", "value": prompt},
            "response_tokens": {"dist": "constant", "value": 128},
        }],
        "cluster": {
            "pools": [{"name": "rollout", "role": "inference", "devices": 1},
                      {"name": "train", "role": "training", "devices": 1}],
            "engine": {"kv_tokens": 120_000, "prefix_caching": prefix_caching},
        },
    }  # fmt: skip


def test_a_long_prompt_shared_by_a_group_fits_where_eight_copies_do_not():
    """8 x 14,050 + 8 x 256 = 114,448 tokens fit 120,000 only as 8 copies just barely; at
    15,000 tokens (122,048) they do not, while one shared copy (17,048) does."""
    for prompt, alone in ((AZURE_PROMPT, True), (15_000, False)):
        for sharing in (False, True):
            spec = parse_workload(azure_like(sharing, prompt)).jobs[0]
            admission = Scheduler.for_workload(parse_workload(azure_like(sharing, prompt)))
            state = admission.submit(spec, 0.0).state
            assert state == ("queued" if sharing or alone else "refused"), (prompt, sharing)


def test_a_prompt_shares_its_whole_blocks_short_of_its_last_token():
    """vLLM caches whole blocks and computes a prompt's last token for every request."""
    block = PREFIX_BLOCK_TOKENS
    assert [shared_prefix(n) for n in (0, 1, block, block + 1, 2 * block, 2 * block + 5)] == [
        0, 0, 0, block, block, 2 * block]  # fmt: skip


def test_the_reservation_counts_a_shared_prompt_once():
    """Every group the job may run at once (2 steps of 2) fits with sharing, 16,112 tokens
    each (14,050 + 7 x 2 tokens past the last whole block + 8 x 256); without it one group
    (114,448) leaves no room for a second."""
    placed = {}
    for sharing in (True, False):
        workload = parse_workload(azure_like(sharing))
        scheduler = Scheduler.for_workload(workload)
        scheduler.submit(workload.jobs[0], 0.0)
        [load] = [d for d in scheduler.decide(0.0) if isinstance(d, LoadAdapter)]
        scheduler.on_event(WorkDone(load.work_id), 1.0)
        groups = [d for d in scheduler.decide(1.0) if isinstance(d, Generate)]
        placed[sharing] = (len(groups), scheduler.cluster.engines[0].tokens)
        assert {g.shared_tokens for g in groups} == {shared_prefix(AZURE_PROMPT) if sharing else 0}
    tail = AZURE_PROMPT - shared_prefix(AZURE_PROMPT)  # each sample's own part of the prompt
    assert placed == {True: (4, 4 * (AZURE_PROMPT + 7 * tail + 8 * 256)),
                      False: (1, 8 * (AZURE_PROMPT + 256))}  # fmt: skip


def test_the_simulator_prefills_a_shared_prompt_once():
    """With prefix caching a group's turn pays one prompt's prefill, not eight (one group
    on the engine at a time)."""
    durations = {}
    for sharing in (False, True):
        data = azure_like(sharing, 4_000)
        data["jobs"][0]["rl"].update(prompts_per_step=1, max_staleness=0)  # one at a time
        records = simulate(parse_workload(data)).records
        gen = [r.end_s - r.start_s for r in records if r.kind == "generate"]
        durations[sharing] = min(gen)
    prefill_s = 7 * shared_prefix(4_000) / CostModel().prefill_tokens_per_s  # seven fewer [s]
    assert durations[False] - durations[True] > 0.9 * prefill_s


def test_the_real_engines_cache_prefixes_exactly_when_declared(monkeypatch, tmp_path):
    """make_generator builds vLLM with enable_prefix_caching from the workload."""
    pytest.importorskip("torch")  # make_generator reads the trainer's LoRA targets (peft_trainer)
    import marlaas.executors.backends as backends

    built = {}

    class Recorder:
        def __init__(self, model_dir, **kwargs) -> None:
            built.update(kwargs["engine_kwargs"])

    import sys
    import types

    fake = types.ModuleType("marlaas.executors.vllm_generator")
    fake.VLLMGenerator = Recorder
    monkeypatch.setitem(sys.modules, "marlaas.executors.vllm_generator", fake)
    monkeypatch.setattr(backends, "kv_bytes_per_token", lambda *a: 1)
    for sharing in (False, True):
        workload = parse_workload(azure_like(sharing))
        sizing = backends.EngineSizing.of_workload(workload)
        backends.make_generator("vllm", tmp_path, sizing, 512)
        assert built["enable_prefix_caching"] is sharing
        assert built.get("block_size") == (PREFIX_BLOCK_TOKENS if sharing else None)
