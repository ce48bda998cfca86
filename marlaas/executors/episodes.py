"""Episode state of one prompt group: its samples' contexts, turns, rewards and environments.

A group is one prompt (from ``env.reset``) sampled ``group_size`` times; every sample is an
episode with its own environment instance and its own token context. Turn 0 generates all
samples of the one prompt (``n = group_size``); later turns continue each live sample from its
own context (prompt, earlier completions and environment observations). Each generated turn
becomes one training sample: prompt = the context before the turn, completion = the turn's
tokens, reward = the episode's total reward, group id = (group, turn), so the GRPO advantage
compares samples that reached the same turn of the same prompt. Each environment call is
made under the environment-call contract (:mod:`marlaas.executors.env_contract`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from marlaas.datasets import Problem
from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_contract import checked_step, env_call, env_reset
from marlaas.executors.env_loops import EnvLoop
from marlaas.executors.rollout import Completion, TrainSample

T = TypeVar("T")

_PLACEHOLDER = "@@MARLAAS_RESPONSE@@"
ALIKE_TOLERANCE = 1e-9
"""Rewards closer than this are alike (GRPO's advantage, (r - mean) / (std + eps), is then 0
to the float's precision)."""


class ChatFormat:
    """Turns environment text into token ids: the chat template when the tokenizer has one.

    ``prompt(text)``: the user message with the assistant turn opened for generation.
    ``observation(text, stopped)``: what closes the assistant turn and adds the observation as
    the next user message, ready for the next assistant turn (a text diff of two renderings of
    the template, so it works for any template). Without a template the text is used as is.
    """

    def __init__(self, tokenizer, use_template: bool | None = None) -> None:
        self.tokenizer = tokenizer
        has_template = bool(getattr(tokenizer, "chat_template", None))
        self.use_template = has_template if use_template is None else use_template
        self.eos_text = tokenizer.eos_token or ""

    def prompt(self, text: str) -> list[int]:
        """Token ids of the first prompt of an episode."""
        if not self.use_template:
            return list(self.tokenizer(text).input_ids)
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        return self._encode(rendered)

    def observation(self, text: str, stopped: bool) -> list[int]:
        """Token ids appended after a completion (``stopped``: it ended with the eos token)."""
        if not self.use_template:
            return self._encode(text)
        head = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _PLACEHOLDER}]
        before = self.tokenizer.apply_chat_template(head, tokenize=False)
        after = self.tokenizer.apply_chat_template(
            [*head, {"role": "user", "content": text}], add_generation_prompt=True,
            tokenize=False,
        )  # fmt: skip
        cut = before.index(_PLACEHOLDER) + len(_PLACEHOLDER)
        suffix = after[cut:]
        if stopped and self.eos_text and suffix.startswith(self.eos_text):
            suffix = suffix[len(self.eos_text) :]  # the completion already holds the eos token
        return self._encode(suffix)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)


@dataclass
class Turn:
    """One generated turn of one sample."""

    context_len: int
    """Tokens of the sample's context before this turn."""
    completion: Completion


@dataclass
class Sample:
    """One episode: an environment instance and the token context the model has seen."""

    env: Environment
    context: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    """Sum of the environment's step rewards so far."""
    done: bool = False
    info: dict = field(default_factory=dict)
    """The environment's info of the last step (e.g. ``correct``)."""
    action: Completion | None = None
    """The latest completion, waiting for its environment step."""


@dataclass
class GroupEpisode:
    """All samples of one prompt group of one job."""

    job: str
    group: int
    version: int
    """Adapter version the group is sampled with (the same on every turn)."""
    samples: list[Sample]
    prompt: str = ""
    loop: EnvLoop | None = None
    """The loop its environments' calls run on (the job's thread of its own:
    :mod:`marlaas.executors.env_loops`); None: the caller's loop."""

    @property
    def live(self) -> list[Sample]:
        """Samples whose episode goes on."""
        return [s for s in self.samples if not s.done]

    @property
    def mean_reward(self) -> float:
        """Mean episode reward over the group's samples."""
        return sum(s.reward for s in self.samples) / len(self.samples)

    @property
    def all_alike(self) -> bool:
        """Whether every sample's episode earned the same reward (every GRPO advantage 0)."""
        first = self.samples[0].reward
        return all(abs(s.reward - first) <= ALIKE_TOLERANCE for s in self.samples)

    def train_samples(self) -> list[TrainSample]:
        """One training sample per generated turn (empty completions are skipped)."""
        out = []
        for sample in self.samples:
            for t, turn in enumerate(sample.turns):
                c = turn.completion
                if not c.completion_ids:
                    continue
                out.append(
                    TrainSample(
                        prompt_ids=tuple(sample.context[: turn.context_len]),
                        completion_ids=c.completion_ids, logprobs=c.logprobs,
                        reward=sample.reward, group_id=f"{self.group}/{t}", version=self.version,
                    )
                )  # fmt: skip
        return out


async def start_group(
    job: str,
    group: int,
    version: int,
    envs: Sequence[Environment],
    seed: int,
    fmt: ChatFormat,
    problem: Problem | None = None,
    timeout_s: float | None = None,
    loop: EnvLoop | None = None,
) -> tuple[GroupEpisode, list[int]]:
    """Reset every sample's environment on the dataset's ``problem`` when the job has a
    dataset, else with the group's ``seed``, each call within ``timeout_s`` [s] (the job's
    ``env.timeout_s``; None: unbounded), on ``loop`` (the job's thread of its own; None: this
    loop), which the group's later steps use too; (episode, prompt ids)."""
    if problem is None:
        calls = [(env, "reset", partial(env.reset, seed)) for env in envs]
    else:
        calls = [(env, "reset_problem", partial(env.reset_problem, problem)) for env in envs]
    prompts = await _together(
        [env_reset(env, method, call, job, timeout_s, loop) for env, method, call in calls]
    )
    ids = fmt.prompt(prompts[0])
    samples = [Sample(env=env, context=list(ids)) for env in envs]
    return GroupEpisode(job, group, version, samples, prompts[0], loop), ids


async def _together(calls: Sequence[Awaitable[T]]) -> list[T]:
    """The values of a group's environment ``calls``, run at once. When one fails, those
    still running are cancelled and waited for before its error is raised, and so they are
    when this is cancelled: no call outlives its group's, so that a close or a retry of the
    same instance never runs beside it (``asyncio.gather`` left them running: a sibling's
    reset went on after the group's closes, its process started after its close). Each ends
    at once when cancelled (:func:`~marlaas.executors.env_contract.env_call` does not wait
    for a call given up on)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    failed: list[asyncio.Future] = []  # in the order they failed

    def note(task: asyncio.Future) -> None:
        if not task.cancelled() and task.exception() is not None:
            failed.append(task)

    for task in tasks:
        task.add_done_callback(note)
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        left = [task for task in tasks if not task.done()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)
    if failed:
        return failed[0].result()  # raises the first error
    return [task.result() for task in tasks]


def add_completions(samples: Sequence[Sample], completions: Sequence[Completion]) -> int:
    """Append each sample's new completion to its context; returns the tokens generated."""
    tokens = 0
    for sample, c in zip(samples, completions, strict=True):
        sample.turns.append(Turn(len(sample.context), c))
        sample.context.extend(c.completion_ids)
        sample.action = c
        tokens += len(c.completion_ids)
    return tokens


async def step_envs(
    episode: GroupEpisode,
    last_turn: bool,
    fmt: ChatFormat,
    max_model_len: int | None = None,
    timeout_s: float | None = None,
) -> tuple[int, float]:
    """Run the environment step of every sample that has an action, each within
    ``timeout_s`` [s] (the job's ``env.timeout_s``; None: unbounded: :func:`env_call`), on
    the episode's loop; (observation tokens, mean reward of the group). On the last turn
    every episode ends, whatever the environment says;
    so does one whose observation leaves no room for a next turn within ``max_model_len``
    (its observation is not added: an environment's observation longer than the context
    once stalled the run, the scheduler waiting for KV room no engine would ever have).

    All steps run concurrently; the group's state changes only when all of them succeeded
    and every result is a valid StepResult (:func:`checked_step`).
    """
    acting = [s for s in episode.samples if not s.done and s.action is not None]
    job, loop = episode.job, episode.loop
    results: list[StepResult] = await _together(
        [
            env_call(s.env, "step", partial(s.env.step, s.action.text), job, timeout_s, loop)
            for s in acting
        ]
    )
    results = [checked_step(s.env, r) for s, r in zip(acting, results, strict=True)]
    observations = []  # what each sample's context gets next (None: its episode ends)
    for sample, result in zip(acting, results, strict=True):
        stopped = sample.action.finish_reason == "stop"
        ends = result.done or last_turn
        observations.append(None if ends else fmt.observation(result.observation, stopped))
    added = 0
    for sample, result, obs in zip(acting, results, observations, strict=True):
        sample.reward += float(result.reward)
        sample.info = dict(result.info)
        sample.action = None
        room = max_model_len is None or len(sample.context) + len(obs or ()) + 1 < max_model_len
        sample.done = obs is None or not room  # no room left for another turn: it ends here
        if not sample.done:
            sample.context.extend(obs)
            added += len(obs)
    if last_turn:
        for sample in episode.samples:
            sample.done = True
    return added, episode.mean_reward
