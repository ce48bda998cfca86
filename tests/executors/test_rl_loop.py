"""End to end: two tenants learn their own target character with one trainer and one engine."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.envs import make_env
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.peft_trainer import PeftTrainer
from marlaas.executors.rollout import TrainSample

TARGETS = {"ta": "a", "tz": "z"}
STEPS, PROMPTS, N, MAX_NEW = 16, 4, 4, 8


async def _rl(gen, trainer, store):
    """Synchronous per-tenant RL (generate -> reward -> train -> publish), tenants concurrent."""
    envs = {job: make_env("target_char", {"target": t}) for job, t in TARGETS.items()}
    for job in TARGETS:
        trainer.add_job(job, rank=8, alpha=16, seed=0)
        await gen.publish(job, 0, store.save_from(trainer, job))
    history = {job: [] for job in TARGETS}

    async def tenant(job):
        env = envs[job]
        for step in range(STEPS):
            prompts = [await env.reset(seed=1000 * step + i) for i in range(PROMPTS)]
            version = trainer.version(job)
            groups = await gen.generate(job, version, prompts, N, MAX_NEW, 1.0, seed=step)
            samples = [
                TrainSample.from_completion(c, (await env.step(c.text)).reward, gi)
                for gi, group in enumerate(groups)
                for c in group
            ]
            stats = await asyncio.to_thread(trainer.train_step, job, samples)
            history[job].append(stats.mean_reward)
            await gen.publish(job, stats.version, store.save_from(trainer, job))
            await gen.retire(job, version)

    # Tenants run concurrently; PeftTrainer serializes their steps on its one model.
    await asyncio.gather(*(tenant(j) for j in TARGETS))
    return history


def _assert_learned(history, gen_name):
    for job, rewards in history.items():
        first, last = rewards[0], sum(rewards[-3:]) / 3
        print(f"{gen_name} {job}: reward {first:.3f} -> {last:.3f} ({len(rewards)} steps)")
        assert first < 0.2
        assert last > 0.7 and last - first > 0.6, f"{job} did not learn its target: {rewards}"


@pytest.mark.slow
def test_two_tenants_learn_their_own_target_hf(tiny_model_dir, tmp_path):
    from marlaas.executors.hf_generator import HFGenerator

    trainer = PeftTrainer(tiny_model_dir, lr=2e-2, micro_batch_size=16)
    gen = HFGenerator(tiny_model_dir)
    t0 = time.perf_counter()
    history = asyncio.run(_rl(gen, trainer, AdapterStore(tmp_path)))
    print(f"hf loop: {time.perf_counter() - t0:.1f} s")
    _assert_learned(history, "hf")


@pytest.mark.slow
def test_two_tenants_learn_their_own_target_vllm(tiny_model_dir, vllm_generator, tmp_path):
    trainer = PeftTrainer(tiny_model_dir, lr=2e-2, micro_batch_size=16)
    store = AdapterStore(tmp_path)
    t0 = time.perf_counter()
    history = asyncio.run(_rl(vllm_generator, trainer, store))
    print(f"vllm loop: {time.perf_counter() - t0:.1f} s")
    _assert_learned(history, "vllm")
    assert store.latest("ta") == STEPS and store.versions("tz")[-1] == STEPS
