"""Held-out evaluation: greedy accuracy of the base model and of each job's trained adapter.

Prompts come from ``env.reset(seed)`` with seeds at 2**32 and above, which training never uses
(training seeds are below 2**31). Each episode runs greedily (temperature 0) for the job's
``rl.turns`` turns. Accuracy: the environment's ``info["correct"]`` when it reports one, else
reward >= 1.
"""

from __future__ import annotations

import asyncio

import pandas as pd
from tqdm import tqdm

from marlaas.core.workload import Workload
from marlaas.envs import make_env
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.episodes import ChatFormat, add_completions, start_group, step_envs

HELD_OUT_SEED = 2**32


async def evaluate(
    workload: Workload,
    store: AdapterStore,
    generator,
    prompts: int = 50,
    chat_template: bool | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per job and model (``base``, ``trained``): accuracy and mean reward on
    ``prompts`` held-out episodes. ``progress``: a bar per job on stderr (episodes done)."""
    fmt = ChatFormat(generator.tokenizer, chat_template)
    rows = []
    for spec in workload.jobs:
        latest = store.latest(spec.name)
        targets = [("base", None, -1)]
        if latest is not None:
            await generator.publish(spec.name, latest, str(store.path(spec.name, latest)))
            targets.append(("trained", spec.name, latest))
        bar = tqdm(total=prompts * len(targets), desc=spec.name, unit="episode",
                   disable=not progress)  # fmt: skip
        for label, adapter, version in targets:
            bar.set_postfix_str(label, refresh=False)
            episodes = await asyncio.gather(*(
                _counted(_episode(spec, i, adapter, version, generator, fmt), bar)
                for i in range(prompts)
            ))  # fmt: skip
            correct = [c for c, _ in episodes]
            rewards = [r for _, r in episodes]
            rows.append({
                "job": spec.name, "tenant": spec.tenant, "env": spec.env.name, "model": label,
                "version": version, "prompts": prompts,
                "accuracy": sum(correct) / prompts, "mean_reward": sum(rewards) / prompts,
            })  # fmt: skip
        bar.close()
        if latest is not None:
            await generator.retire(spec.name, latest)
    return pd.DataFrame(rows)


async def _counted(episode, bar):
    result = await episode
    bar.update()
    return result


async def _episode(spec, i: int, adapter, version: int, generator, fmt) -> tuple[bool, float]:
    env = make_env(spec.env.name, spec.env.args)
    episode, _ = await start_group(spec.name, i, version, [env], HELD_OUT_SEED + i, fmt)
    sample = episode.samples[0]
    turns = spec.rl.turns
    for turn in range(turns):
        if sample.done:
            break
        [[completion]] = await generator.generate(
            adapter, version, [sample.context], 1, spec.rl.max_new_tokens, temperature=0.0,
            seed=i,
        )  # fmt: skip
        add_completions([sample], [completion])
        await step_envs(episode, turn == turns - 1, fmt)
    info = sample.info
    correct = bool(info["correct"]) if "correct" in info else sample.reward >= 1.0
    return correct, sample.reward


def accuracy_table(frame: pd.DataFrame) -> pd.DataFrame:
    """job x (base, trained) accuracy, with the change."""
    table = frame.pivot_table(index=["job", "tenant", "env"], columns="model", values="accuracy")
    if "trained" in table and "base" in table:
        table["change"] = table["trained"] - table["base"]
    return table.reset_index()
