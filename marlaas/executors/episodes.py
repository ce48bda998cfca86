"""Episode state of one prompt group: its samples' contexts, turns, rewards and environments.

A group is one prompt (from ``env.reset``) sampled ``group_size`` times; every sample is an
episode with its own environment instance and its own token context. Turn 0 generates all
samples of the one prompt (``n = group_size``); later turns continue each live sample from its
own context (prompt, earlier completions and environment observations). Each generated turn
becomes one training sample: prompt = the context before the turn, completion = the turn's
tokens, reward = the episode's total reward, group id = (group, turn), so the GRPO advantage
compares samples that reached the same turn of the same prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from marlaas.datasets import Problem
from marlaas.envs.base import Environment, StepResult
from marlaas.executors.rollout import Completion, TrainSample

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
) -> tuple[GroupEpisode, list[int]]:
    """Reset every sample's environment on the dataset's ``problem`` when the job has a
    dataset, else with the group's ``seed``; (episode, prompt ids)."""
    if problem is None:
        prompts = await asyncio.gather(*(env.reset(seed) for env in envs))
    else:
        prompts = await asyncio.gather(*(env.reset_problem(problem) for env in envs))
    ids = fmt.prompt(prompts[0])
    samples = [Sample(env=env, context=list(ids)) for env in envs]
    return GroupEpisode(job, group, version, samples, prompts[0]), ids


def add_completions(samples: Sequence[Sample], completions: Sequence[Completion]) -> int:
    """Append each sample's new completion to its context; returns the tokens generated."""
    tokens = 0
    for sample, c in zip(samples, completions, strict=True):
        sample.turns.append(Turn(len(sample.context), c))
        sample.context.extend(c.completion_ids)
        sample.action = c
        tokens += len(c.completion_ids)
    return tokens


async def step_envs(episode: GroupEpisode, last_turn: bool, fmt: ChatFormat) -> tuple[int, float]:
    """Run the environment step of every sample that has an action; (observation tokens, mean
    reward of the group). On the last turn every episode ends, whatever the environment says.

    All steps run concurrently; the group's state changes only when all of them succeeded.
    """
    acting = [s for s in episode.samples if not s.done and s.action is not None]
    results: list[StepResult] = await asyncio.gather(*(s.env.step(s.action.text) for s in acting))
    added = 0
    for sample, result in zip(acting, results, strict=True):
        sample.reward += float(result.reward)
        sample.info = dict(result.info)
        stopped = sample.action.finish_reason == "stop"
        sample.action = None
        sample.done = result.done or last_turn
        if not sample.done:
            obs = fmt.observation(result.observation, stopped)
            sample.context.extend(obs)
            added += len(obs)
    if last_turn:
        for sample in episode.samples:
            sample.done = True
    return added, episode.mean_reward
