"""An environment of the user's that breaks its contract (marlaas.envs.base.Environment) is
one clear error naming it, and the group's state is left as it was: a NaN reward once
trained the job's adapters into NaN weights (the run then failed in generation, "probability
tensor contains nan"), a string reward was read as a number, a ``def step`` gave "unhashable
type: 'dict'", and an observation longer than the context stalled the run."""

from __future__ import annotations

import asyncio

import pytest

from marlaas.envs.base import Environment, StepResult
from marlaas.executors.episodes import (
    EnvResultError,
    GroupEpisode,
    Sample,
    start_group,
    step_envs,
)
from marlaas.executors.rollout import Completion


class Chars:
    """A chat format of one token per character, no template (what the runner needs)."""

    def prompt(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def observation(self, text: str, stopped: bool) -> list[int]:
        return [ord(c) for c in text]


class Scripted(Environment):
    """Answers each step with the StepResult (or anything else) it was given."""

    def __init__(self, answer) -> None:
        super().__init__({})
        self.answer = answer

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str):
        return self.answer


class PlainStep(Scripted):
    def step(self, action: str):  # not async: the interface says async def
        return StepResult("", 1.0, True)


class NumberPrompt(Scripted):
    async def reset(self, seed: int):
        return 42


def episode(*envs: Environment) -> GroupEpisode:
    samples = []
    for env in envs:
        sample = Sample(env=env, context=[1, 2, 3])
        sample.action = Completion(prompt_ids=(1, 2, 3), completion_ids=(4,), logprobs=(-0.1,),
                                   text="x", finish_reason="stop")  # fmt: skip
        samples.append(sample)
    return GroupEpisode("j", 0, 0, samples)


GOOD = StepResult("ok", 0.5, False)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (StepResult("", float("nan"), True), r"the reward float nan; a reward is a finite"),
        (StepResult("", float("inf"), True), r"the reward float inf"),
        (StepResult("", None, True), r"the reward NoneType None"),
        (StepResult("", "1.0", True), r"the reward str '1.0'"),
        (StepResult(12345, 0.1, False), r"the observation int 12345, not text"),
        (StepResult("", 0.1, True, info=[1]), r"the info list, not a dict"),
        (None, r"step\(\) returned NoneType None, not a StepResult"),
        (("", 1.0, True, {}), r"returned tuple .*not a StepResult"),
    ],
)
def test_a_bad_step_result_is_one_error_and_changes_nothing(bad, message):
    group = episode(Scripted(GOOD), Scripted(GOOD), Scripted(bad))
    with pytest.raises(EnvResultError, match=rf"environment .*:Scripted: .*{message}"):
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
    for sample in group.samples:  # the good samples' results were not applied either
        assert (sample.reward, sample.context, sample.done) == (0.0, [1, 2, 3], False)
        assert sample.action is not None  # a retried step acts again


def test_a_step_that_is_not_a_coroutine_is_named():
    group = episode(PlainStep(None))
    with pytest.raises(EnvResultError, match=r"PlainStep: step\(\) returned StepResult, not a "
                       r"coroutine \(declare it async def\)"):  # fmt: skip
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))


def test_a_prompt_that_is_not_text_is_named():
    with pytest.raises(EnvResultError, match=r"NumberPrompt: reset\(\) returned int 42, not the "
                       "prompt text"):  # fmt: skip
        asyncio.run(start_group("j", 0, 0, [NumberPrompt(None)], 1, Chars()))


def test_valid_results_still_score():
    group = episode(Scripted(GOOD), Scripted(StepResult("", 1, True)))
    added, mean = asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
    assert (added, mean) == (2, 0.75)
    assert group.samples[0].context == [1, 2, 3, ord("o"), ord("k")]
    assert [s.done for s in group.samples] == [False, True]


def test_an_observation_beyond_the_context_ends_the_episode():
    """Its tokens are not added (the scheduler would wait for KV room no engine has: "the run
    stalled"); a sample whose observation fits goes on."""
    long = StepResult("y" * 600, 0.1, False)
    group = episode(Scripted(long), Scripted(GOOD))
    added, _ = asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), max_model_len=512))
    assert added == 2
    ended, going = group.samples
    assert (ended.done, ended.context, ended.reward) == (True, [1, 2, 3], 0.1)
    assert (going.done, len(going.context)) == (False, 5)
