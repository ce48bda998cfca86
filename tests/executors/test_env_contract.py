"""An environment of the user's that breaks its contract (marlaas.envs.base.Environment) is
one clear error naming it, and the group's state is left as it was: a NaN reward once
trained the job's adapters into NaN weights (the run then failed in generation, "probability
tensor contains nan"), a string reward was read as a number, a ``def step`` gave "unhashable
type: 'dict'", and an observation longer than the context stalled the run."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_contract import EnvCallError, EnvResultError, EnvTimeoutError
from marlaas.executors.episodes import GroupEpisode, Sample, start_group, step_envs
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
        (
            StepResult("", 1.7e308, True),
            r"the reward float 1.7e\+308; a reward is a finite "
            r"number from -1e\+100 to 1e\+100",
        ),
        (StepResult("", -1e200, True), r"the reward float -1e\+200"),
        (StepResult("", 10**400, True), r"the reward int 1000"),
        (StepResult("", "1.0", True), r"the reward str '1.0'"),
        (StepResult(12345, 0.1, False), r"the observation int 12345, not text"),
        (StepResult("", 0.1, True, info=[1]), r"the info list, not a dict"),
        (StepResult("", 0.1, "no"), r"returned done str 'no', not True or False"),
        (StepResult("", 0.1, None), r"returned done NoneType None, not True or False"),
        (
            StepResult("", 0.1, True, {"correct": "no"}),
            r"returned info\['correct'\] str 'no', "
            r"not True or False \(evaluate counts",
        ),
        (StepResult("", 0.1, True, {"correct": 0.3}), r"returned info\['correct'\] float 0.3"),
        (
            StepResult("ok\udcff", 0.1, False),
            r"an observation that is not Unicode text \(a "
            r"lone surrogate '\\udcff' at character 2\)",
        ),
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


def test_a_step_that_yields_is_told_to_return():
    """An async def with yield is an async generator: it was told 'declare it async def',
    which it is."""

    class Yields(Scripted):
        async def step(self, action: str):
            yield StepResult("", 1.0, True)

    with pytest.raises(EnvResultError, match=r"Yields: step\(\) returned async_generator, not a "
                       r"coroutine \(it yields: return the value instead\)$"):  # fmt: skip
        asyncio.run(step_envs(episode(Yields(None)), last_turn=False, fmt=Chars()))


def test_a_prompt_that_is_not_text_is_named():
    with pytest.raises(EnvResultError, match=r"NumberPrompt: reset\(\) returned int 42, not the "
                       "prompt text"):  # fmt: skip
        asyncio.run(start_group("j", 0, 0, [NumberPrompt(None)], 1, Chars()))


def test_a_prompt_that_is_not_unicode_is_named():
    """A lone surrogate has no UTF-8: the tokenizer's error was "TypeError: TextEncodeInput
    must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]"."""

    class Surrogate(Scripted):
        async def reset(self, seed: int):
            return "ab\ud800"

    says = r"Surrogate: reset\(\) returned a prompt that is not Unicode text \(a lone surrogate "
    with pytest.raises(EnvResultError, match=says + r"'\\ud800' at character 2\)"):
        asyncio.run(start_group("j", 0, 0, [Surrogate(None)], 1, Chars()))


def test_flags_of_numpy_and_0_or_1_are_done_flags():
    import numpy as np

    group = episode(Scripted(StepResult("", 1, np.bool_(True))), Scripted(StepResult("", 1, 0)))
    asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
    assert [s.done for s in group.samples] == [True, False]


def test_a_number_0_or_1_of_any_kind_is_a_flag():
    """A flag computed as a number (info['correct'] = float(ok), a numpy mean of 0/1 scores)
    was refused as 'info['correct'] float 1.0, not True or False', in training too, where
    evaluate counts it as it always did (bool(1.0)); 0.3 is still no flag."""
    import numpy as np

    group = episode(
        Scripted(StepResult("", 1.0, 1.0, {"correct": 1.0})),
        Scripted(StepResult("", 0.0, np.float64(0.0), {"correct": np.float32(0.0)})),
    )
    asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
    assert [s.done for s in group.samples] == [True, False]
    assert [bool(s.info["correct"]) for s in group.samples] == [True, False]
    for flag in (float("nan"), 0.3, 2):
        with pytest.raises(EnvResultError, match=r"info\['correct'\] .*, not True or False"):
            asyncio.run(step_envs(episode(Scripted(StepResult("", 1.0, True, {"correct": flag}))),
                                  last_turn=False, fmt=Chars()))  # fmt: skip


def test_a_correct_of_none_is_no_verdict():
    """An environment that has no verdict yet (an intermediate turn) may say
    info['correct'] = None: it was refused as 'NoneType None, not True or False' in training,
    every such step failing; evaluate then scores the episode by its reward."""
    group = episode(Scripted(StepResult("", 0.0, False, {"correct": None})))
    asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
    assert group.samples[0].info["correct"] is None and not group.samples[0].done


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


class Hangs(Scripted):
    """A step (or reset) that never returns, as a remote verifier that lost its reply."""

    async def reset(self, seed: int) -> str:
        await asyncio.sleep(3600)
        return "go"

    async def step(self, action: str):
        await asyncio.sleep(3600)


def test_a_step_that_hangs_is_one_error_within_the_jobs_bound():
    group = episode(Scripted(GOOD), Hangs(None))
    started = time.monotonic()
    with pytest.raises(EnvTimeoutError, match=r"^environment \S*test_env_contract:Hangs: "
                       r"step\(\) of job 'j' did not return within 0\.2 s \(its "
                       r"env\.timeout_s\)$"):  # fmt: skip
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=0.2))
    assert time.monotonic() - started < 5
    for sample in group.samples:  # nothing applied: a retried step acts again
        assert (sample.reward, sample.context, sample.done) == (0.0, [1, 2, 3], False)
        assert sample.action is not None


def test_a_reset_that_hangs_is_one_error_within_the_jobs_bound():
    with pytest.raises(EnvTimeoutError, match=r"Hangs: reset\(\) of job 'j' did not return "
                       r"within 0\.2 s"):  # fmt: skip
        asyncio.run(start_group("j", 0, 0, [Hangs(None)], 1, Chars(), timeout_s=0.2))


def test_a_call_within_its_bound_and_an_environments_own_timeout_are_not_the_bound():
    group = episode(Scripted(GOOD))
    assert asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=5)) == (2, 0.5)
    with pytest.raises(EnvCallError, match=r"Raises: step\(\) raised TimeoutError: the "
                       "verifier's own") as err:  # fmt: skip
        asyncio.run(step_envs(episode(Raises(TimeoutError("the verifier's own"))),
                              last_turn=False, fmt=Chars(), timeout_s=5))  # fmt: skip
    assert not isinstance(err.value, EnvTimeoutError)
    assert isinstance(err.value.__cause__, TimeoutError)


@pytest.mark.parametrize("method", ["reset", "step"])
def test_what_an_environment_raises_names_it_and_the_call(method):
    """A KeyError in a user's step once reached the run's reason as it was: "EnvStep of job
    'j' failed 4 times in a row: KeyError: 'answer'", naming neither the environment nor the
    call."""

    class Broken(Scripted):
        async def reset(self, seed: int) -> str:
            if method == "reset":
                raise KeyError("answer")
            return "go"

        async def step(self, action: str):
            raise KeyError("answer")

    says = rf"environment test_env_contract:.*Broken: {method}\(\) raised KeyError: 'answer'"
    with pytest.raises(EnvCallError, match=says):
        if method == "reset":
            asyncio.run(start_group("j", 0, 0, [Broken(None)], 1, Chars()))
        else:
            asyncio.run(step_envs(episode(Broken(None)), last_turn=False, fmt=Chars()))


def test_the_workloads_env_timeout_is_bounded_and_defaults_to_ten_minutes():
    from marlaas.core.job_spec import EnvSpec

    assert EnvSpec().timeout_s == 600.0
    assert EnvSpec(timeout_s=0.2).timeout_s == 0.2
    for bad in (0, -1, 86_401, float("inf")):
        with pytest.raises(ValueError, match="timeout_s"):
            EnvSpec(timeout_s=bad)


class Raises(Scripted):
    """A step (or reset) that raises what it was given."""

    async def reset(self, seed: int) -> str:
        raise self.answer

    async def step(self, action: str):
        raise self.answer


class PlainExit(Scripted):
    def step(self, action: str):  # not async, and it exits before it returns
        sys.exit(3)


@pytest.mark.parametrize("env", [Raises(SystemExit(3)), PlainExit(None)])
def test_an_environment_that_exits_is_one_error_not_the_runs_exit(env):
    """sys.exit(3) in a step once ended `marlaas train` with status 3, no message and
    "Task was destroyed but it is pending!"."""
    group = episode(Scripted(GOOD), env)
    name = type(env).__name__
    with pytest.raises(EnvResultError, match=rf"^environment .*:{name}: step\(\) raised "
                       r"SystemExit\(3\); an environment must not end the process"):  # fmt: skip
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=5))
    assert all(sample.reward == 0.0 and sample.action is not None for sample in group.samples)
    with pytest.raises(EnvResultError, match=r"Raises: reset\(\) raised SystemExit\('bye'\)"):
        asyncio.run(start_group("j", 0, 0, [Raises(SystemExit("bye"))], 1, Chars()))


def test_ctrl_c_inside_an_environment_is_still_ctrl_c():
    group = episode(Raises(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=5))


def test_sigterm_inside_an_environment_is_still_sigterm():
    """SIGTERM's Interrupted, raised in the main thread while a step ran there (a runner
    without env threads), was made the environment's EnvCallError, retried as its failure
    (244bc2f): the run went on, where SIGTERM stops it (status 143)."""
    from marlaas.interrupts import Interrupted

    group = episode(Raises(Interrupted(15)))
    with pytest.raises(Interrupted):
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=5))
    with pytest.raises(Interrupted):
        asyncio.run(step_envs(episode(Raises(Interrupted(15))), last_turn=False, fmt=Chars()))


def test_under_ray_an_error_names_the_users_environment_not_the_proxy():
    ray_actors = pytest.importorskip("marlaas.executors.ray_actors")
    from marlaas.envs.arithmetic import ArithmeticEnv
    from marlaas.executors.env_contract import env_name

    proxy = ray_actors.RemoteEnv(None, ArithmeticEnv({}))
    assert env_name(proxy) == "marlaas.envs.arithmetic:ArithmeticEnv"
    assert env_name(ArithmeticEnv({})) == "marlaas.envs.arithmetic:ArithmeticEnv"


def test_rewards_within_the_bound_keep_every_sum_and_advantage_finite():
    """The bound is what keeps an episode's reward (a sum over its turns), a group's mean and
    GRPO's advantages finite at the largest group and the most turns a job may have."""
    pytest.importorskip("torch")  # grpo's advantages are torch's
    import math
    from types import SimpleNamespace

    from marlaas.core import limits
    from marlaas.executors.env_contract import MAX_REWARD
    from marlaas.executors.grpo import group_advantages

    episode_reward = MAX_REWARD * limits.MAX_TURNS
    samples = [SimpleNamespace(group_id="g", reward=episode_reward * (-1) ** i)
               for i in range(limits.MAX_GROUP_SIZE)]  # fmt: skip
    assert all(math.isfinite(a) for a in group_advantages(samples))


def test_a_prompt_longer_than_the_context_names_the_environment_and_its_length():
    """It said 'j: the prompt does not fit max_model_len', naming neither the environment
    nor how long the prompt was."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.work import Generate
    from marlaas.executors.episode_runner import EpisodeError, EpisodeRunner
    from tests.episode_fakes import CharFormat, OneTokenEngine

    class LongPrompt(Scripted):
        async def reset(self, seed: int) -> str:
            return "y" * 20

    spec = JobSpec(name="j", tenant="t", env={"name": "long"})
    runner = EpisodeRunner({"j": spec}, CharFormat(), max_model_len=8, seed=0,
                           make_env=lambda name, args: LongPrompt(None))  # fmt: skip
    runner.admit("j", 0)
    with pytest.raises(EpisodeError, match=r"^j: group 0's prompt is 20 tokens \(environment "
                       r"long's reset\(\)\), and max_model_len is 8 tokens: no room to "
                       "generate$"):  # fmt: skip
        asyncio.run(runner.generate(Generate(1, "j", 0, 0, 0, "e", 0, 2, 0, 4), OneTokenEngine()))


class OwnCancel(Scripted):
    """A step that awaits an inner task of its own that was cancelled."""

    async def step(self, action: str):
        inner = asyncio.ensure_future(asyncio.sleep(10))
        inner.cancel()
        return await inner


class CancelsItself(Scripted):
    """A step that cancels the task it runs in."""

    async def step(self, action: str):
        asyncio.current_task().cancel()
        await asyncio.sleep(0)
        return GOOD


class Sleeps(Scripted):
    async def step(self, action: str):
        await asyncio.sleep(30)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is 3.11's")
@pytest.mark.parametrize("cls", [OwnCancel, CancelsItself])
def test_a_cancelled_error_of_the_environments_own_is_its_error_not_the_runs_end(cls):
    """A CancelledError a step raised, not being cancelled by the run (an inner task of its
    own that was cancelled; the step cancelled the task it runs in), went up through the run's
    loop as a cancellation: train ended in a traceback ('asyncio.exceptions.CancelledError',
    status 1). It is the environment's error, in the run's loop and on the job's own thread;
    the run's own cancellation of a call still goes through (and a call given up at its bound
    is cancelled as before: test_a_step_that_hangs_is_one_error_within_the_jobs_bound)."""
    from marlaas.executors.env_contract import env_call
    from marlaas.executors.env_loops import EnvLoop

    says = rf"{cls.__name__}: step\(\) raised CancelledError of its own"
    with pytest.raises(EnvCallError, match=says):
        asyncio.run(step_envs(episode(cls(None)), last_turn=False, fmt=Chars(),
                              timeout_s=5))  # fmt: skip
    loop = EnvLoop("marlaas-env-test")  # on the job's own thread, as a run calls it
    try:
        env = cls(None)
        with pytest.raises(EnvCallError, match=says):
            asyncio.run(env_call(env, "step", lambda: env.step("x"), "j", 5.0, loop))

        async def cancelled_by_the_run():  # the run's cancellation is still one
            slow = Sleeps(None)
            call = asyncio.ensure_future(
                env_call(slow, "step", lambda: slow.step("x"), "j", 20.0, loop)
            )
            await asyncio.sleep(0.2)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

        asyncio.run(cancelled_by_the_run())
    finally:
        loop.stop()
    assert loop.join(10.0)


def test_a_base_exception_of_the_environments_own_is_its_error_not_the_runs_end():
    """A BaseException subclass of the user's (as pytest.fail raises) went up through the
    run's loop: train ended in a traceback. Ctrl-C inside a step is still Ctrl-C
    (test_ctrl_c_inside_an_environment_is_still_ctrl_c)."""

    class Weird(BaseException):
        pass

    group = episode(Raises(Weird("odd")))
    with pytest.raises(EnvCallError, match=r"Raises: step\(\) raised Weird: odd$"):
        asyncio.run(step_envs(group, last_turn=False, fmt=Chars()))
