"""Held-out evaluation: greedy accuracy, with its 95% Wilson interval, of the base model and of
the adapter versions asked for, per job.

Held-out problems: a job with a dataset is scored on its held-out split (marlaas.datasets,
which training never sees); otherwise prompts come from ``env.reset(seed)`` with seeds at 2**32
and above, which training never uses (training seeds are below 2**31). Each episode runs
greedily (temperature 0) for the job's ``rl.turns`` turns. Accuracy: the environment's
``info["correct"]`` when it reports one, else reward >= 1. Each row keeps its problems'
outcomes in order (``outcomes``: ``1`` right, ``0`` wrong), so that two models scored on the
same problems are compared pair by pair (:mod:`marlaas.metrics.proportions`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pandas as pd
from tqdm import tqdm

from marlaas.core.ascii_digits import ascii_digits
from marlaas.core.job_spec import JobSpec
from marlaas.core.workload import Workload
from marlaas.datasets import Problem
from marlaas.envs import Environment, make_env
from marlaas.envs.job_dataset import job_prompt_set
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.env_instances import close_envs, new_envs
from marlaas.executors.env_loops import EnvLoop, EnvLoops
from marlaas.executors.episode_runner import prompt_too_long
from marlaas.executors.episodes import (
    ChatFormat,
    add_completions,
    start_group,
    step_envs,
)
from marlaas.metrics.proportions import wilson_interval

HELD_OUT_SEED = 2**32
DEFAULT_PROMPTS = 50
"""Held-out episodes per job and model when not given, for a job without a dataset (a job with
one is scored on its whole held-out split)."""


def pick_versions(available: Sequence[int], asked: str) -> list[int]:
    """The adapter versions to score: ``asked`` is ``last``, ``all``, or a comma-separated list
    of version numbers and ``last`` (``5,10,last``). A version that is not in ``available`` is
    a ValueError naming the ones there are. Version 0, the untrained adapter, is the base
    model's equal and never picked."""
    available = [v for v in available if v > 0]
    if not available:
        return []
    if asked.strip() == "all":
        return sorted(available)
    picked = set()
    for item in (part.strip() for part in asked.split(",")):
        if item == "last":
            picked.add(max(available))
        elif ascii_digits(item) and int(item) in available:
            picked.add(int(item))
        else:
            raise ValueError(f"--versions: no adapter version {item!r}; there are "
                             f"{min(available)}..{max(available)} (or last, all)")  # fmt: skip
    return sorted(picked)


def pick_jobs(workload: Workload, asked: str | None) -> list[JobSpec]:
    """The jobs to score, in the workload's order: all of them (``asked`` None), or those
    named in the comma-separated ``asked``. A name that is not a job of the workload is a
    ValueError naming the jobs there are."""
    if asked is None:
        return list(workload.jobs)
    names = [name.strip() for name in asked.split(",")]
    jobs = {spec.name: spec for spec in workload.jobs}
    if "" in names:
        raise ValueError(f"--jobs: an empty name in {asked!r}; its jobs are {', '.join(jobs)}")
    unknown = [name for name in names if name not in jobs]
    if unknown:
        raise ValueError(f"--jobs: no job {unknown[0]!r} in the workload; its jobs "
                         f"are {', '.join(jobs)}")  # fmt: skip
    return [spec for spec in workload.jobs if spec.name in names]


def check_rows_belong(earlier: list[dict], workload: Workload) -> None:
    """Earlier evaluation rows are of ``workload``'s jobs: a row of another job (another
    workload's file) is a ValueError naming it, so that nothing is mixed."""
    names = {spec.name for spec in workload.jobs}
    foreign = sorted({row["job"] for row in earlier} - names)
    if foreign:
        raise ValueError(f"it holds rows of {foreign[0]!r}, not a job of {workload.name!r}")


def merged_evaluation(earlier: list[dict], scored: pd.DataFrame, workload: Workload) -> list[dict]:
    """An evaluation file's rows after scoring ``scored``: its jobs' rows replace their
    ``earlier`` ones, the other jobs' earlier rows stay as they were (see
    :func:`check_rows_belong`); rows in the workload's job order. A missing value is None
    (JSON null), never NaN."""
    check_rows_belong(earlier, workload)
    fresh = scored.astype(object).where(scored.notna(), None).to_dict(orient="records")
    scored_jobs = {row["job"] for row in fresh}
    rows = [row for row in earlier if row["job"] not in scored_jobs] + fresh
    order = {spec.name: i for i, spec in enumerate(workload.jobs)}
    return sorted(rows, key=lambda row: order[row["job"]])


def held_out(spec: JobSpec, prompts: int | None) -> list[Problem | int]:
    """The job's held-out problems (a dataset's, the first ``prompts`` of its split, its
    answers checked as loading checks them: the file may have changed since) or, for an
    environment that draws its own, the held-out seeds."""
    if spec.dataset is not None:
        problems = job_prompt_set(spec).heldout
        return list(problems if prompts is None else problems[:prompts])
    return [HELD_OUT_SEED + i for i in range(DEFAULT_PROMPTS if prompts is None else prompts)]


async def evaluate(
    workload: Workload,
    store: AdapterStore,
    generator,
    prompts: int | None = None,
    chat_template: bool | None = None,
    progress: bool = False,
    versions: str = "last",
    trained_at: dict[tuple[str, int], float] | None = None,
    jobs: Sequence[JobSpec] | None = None,
    max_model_len: int | None = None,
) -> pd.DataFrame:
    """One row per job (of ``jobs``, default the workload's) and model (``base``, ``trained``
    at each version of ``versions``, see :func:`pick_versions`): accuracy with its Wilson
    interval, mean reward and each problem's outcome on the job's held-out problems
    (``prompts``: the first so many).
    ``trained_at``: (job, version) -> the run's time that version was made [s] (the report
    plots accuracy against it).
    ``progress``: a bar per job on stderr (episodes done).
    ``max_model_len``: the generator's context [tokens] (None: unbounded): a turn generates
    what room is left, an episode whose context is full ends as in training, and a first
    prompt that leaves no room is :func:`prompt_too_long` (it was the engine's traceback)."""
    fmt = ChatFormat(generator.tokenizer, chat_template)
    trained_at = trained_at or {}
    rows = []
    loops = EnvLoops()  # each job's environments on a thread of their own, as in a run
    try:
        for spec in workload.jobs if jobs is None else jobs:
            rows += await _evaluate_job(
                spec, store, generator, fmt, loops.of(spec.name), prompts, progress, versions,
                trained_at, max_model_len,
            )  # fmt: skip
            loops.release(spec.name)
    finally:
        loops.close("evaluation")
    return pd.DataFrame(rows)


async def _evaluate_job(
    spec: JobSpec, store: AdapterStore, generator, fmt: ChatFormat, loop: EnvLoop,
    prompts: int | None, progress: bool, versions: str,
    trained_at: dict[tuple[str, int], float], max_model_len: int | None = None,
) -> list[dict]:  # fmt: skip
    """The rows of :func:`evaluate` for one job, its environments on ``loop``."""
    rows = []
    items = held_out(spec, prompts)
    targets = [("base", None, -1)] + [
        ("trained", spec.name, v) for v in pick_versions(store.versions(spec.name), versions)
    ]
    bar = tqdm(total=len(items) * len(targets), desc=spec.name, unit="episode",
               disable=not progress)  # fmt: skip
    for label, adapter, version in targets:
        if adapter is not None:
            await generator.publish(spec.name, version, str(store.path(spec.name, version)))
        bar.set_postfix_str(label if adapter is None else f"v{version}", refresh=False)
        episodes = await asyncio.gather(*(
            _counted(_episode(spec, i, item, adapter, version, generator, fmt, loop,
                              max_model_len), bar)
            for i, item in enumerate(items)
        ))  # fmt: skip
        correct = sum(c for c, _ in episodes)
        low, high = wilson_interval(correct, len(items))
        rows.append({
            "job": spec.name, "tenant": spec.tenant, "env": spec.env.name, "model": label,
            "version": version, "prompts": len(items), "correct": correct,
            "accuracy": correct / len(items), "ci_low": low, "ci_high": high,
            "mean_reward": sum(r for _, r in episodes) / len(items),
            "time_s": 0.0 if adapter is None else trained_at.get((spec.name, version)),
            "outcomes": "".join("1" if c else "0" for c, _ in episodes),
        })  # fmt: skip
        if adapter is not None:
            await generator.retire(spec.name, version)
    bar.close()
    return rows


async def _counted(episode, bar):
    result = await episode
    bar.update()
    return result


async def _episode(
    spec: JobSpec, i: int, item: Problem | int, adapter, version: int, generator, fmt,
    loop: EnvLoop, max_model_len: int | None = None,
) -> tuple[bool, float]:  # fmt: skip
    """One held-out episode greedily on ``adapter`` at ``version`` (None: the base model):
    (correct, reward). Its environment is made and closed on ``loop``."""
    [env] = await new_envs(make_env, spec, 1, loop)  # built where its calls run
    try:
        return await _play(env, spec, i, item, adapter, version, generator, fmt, loop,
                           max_model_len)  # fmt: skip
    finally:
        await close_envs([env], spec.name, spec.env.timeout_s, loop)


async def _play(
    env: Environment, spec: JobSpec, i: int, item: Problem | int, adapter, version: int,
    generator, fmt, loop: EnvLoop, max_model_len: int | None,
) -> tuple[bool, float]:  # fmt: skip
    """:func:`_episode`'s turns on ``env``."""
    problem, seed = (item, 0) if isinstance(item, Problem) else (None, item)
    timeout_s = spec.env.timeout_s
    episode, _ = await start_group(
        spec.name, i, version, [env], seed, fmt, problem, timeout_s, loop
    )
    sample = episode.samples[0]
    turns = spec.rl.turns
    for turn in range(turns):
        if sample.done:
            break
        room = spec.rl.max_new_tokens
        if max_model_len is not None:
            left = max_model_len - len(sample.context)
            if turn == 0 and left <= 0:
                call = f"reset_problem() of {problem.source}" if problem else f"reset({seed})"
                raise prompt_too_long(spec, f"held-out problem {i}", len(sample.context), call,
                                      max_model_len)  # fmt: skip
            if turn > 0 and left <= 1:
                break  # no room left in the context: the episode ends here, as in training
            room = min(room, left)
        [[completion]] = await generator.generate(
            adapter, version, [sample.context], 1, room, temperature=0.0, seed=i
        )
        add_completions([sample], [completion])
        await step_envs(episode, turn == turns - 1, fmt, timeout_s=timeout_s)
    info = sample.info
    verdict = info.get("correct")  # None: no verdict, as when the step gives none
    correct = bool(verdict) if verdict is not None else sample.reward >= 1.0
    return correct, sample.reward


def versions_trained_at(rewards: pd.DataFrame) -> dict[tuple[str, int], float]:
    """(job, adapter version) -> when the run made it [s], from a run's rewards.csv (its
    training step ``step`` makes version ``step + 1``)."""
    if "time_s" not in rewards:
        return {}
    rows = rewards.dropna(subset=["time_s"])
    return {
        (str(job), int(step) + 1): float(t)
        for job, step, t in zip(rows["job"], rows["step"], rows["time_s"], strict=True)
    }
