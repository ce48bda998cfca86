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
import inspect
import math
import numbers
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from marlaas.datasets import Problem
from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_loops import EnvLoop
from marlaas.executors.rollout import Completion, TrainSample
from marlaas.import_path import one_line, shown
from marlaas.interrupts import Interrupted
from marlaas.strict_json import lone_surrogate

_PLACEHOLDER = "@@MARLAAS_RESPONSE@@"
ALIKE_TOLERANCE = 1e-9
"""Rewards closer than this are alike (GRPO's advantage, (r - mean) / (std + eps), is then 0
to the float's precision)."""


MAX_REWARD = 1e100
"""The largest reward magnitude a step may give: an episode's sum of its turns' rewards, a
group's mean and the squares of GRPO's standard deviation stay finite (rewards of 1.7e308, finite,
summed to inf: the run ended in a traceback writing its journal; rewards of +-1e200 overflowed
the advantages' squares)."""


def _within(reward: numbers.Real) -> bool:
    """Whether ``reward`` is finite and at most MAX_REWARD in magnitude (an int too large for a
    float is not)."""
    try:
        value = float(reward)
    except (OverflowError, TypeError, ValueError):
        return False
    return math.isfinite(value) and abs(value) <= MAX_REWARD


class EnvResultError(TypeError):
    """An environment that broke its contract (marlaas.envs.base.Environment): a ``reset``
    that is not a coroutine or gives no text, a ``step`` that is not a coroutine or gives no
    :class:`StepResult` of a finite number as reward (at most :data:`MAX_REWARD` in magnitude),
    Unicode text as observation (a prompt too), a bool as done and a dict as info,
    or either of them raising SystemExit (``sys.exit``: an environment does not end the run).
    One line naming the environment's class and what it gave or did; the group's state is left as
    it was (a NaN reward once trained every adapter of the job into NaN weights, and an
    observation that was not text was rendered as if it were)."""


class EnvStateError(EnvResultError):
    """An environment whose state cannot be pickled, so cannot travel to or from the Ray
    actor that runs its calls (``train --ray``: marlaas.executors.ray_actors.RemoteEnv): one
    line naming the job, the environment's class, the call and what could not be pickled (it
    was Ray's TypeError, a page of its serialization checker naming neither the job nor the
    environment)."""


class EnvCallError(RuntimeError):
    """What an environment's call (``reset``, ``reset_problem``, ``step``) raised, as one line
    naming the environment's class and the call: ``environment pkg.mod:Cls: step() raised
    KeyError: 'x'`` (the run's reason once said ``EnvStep of job 'j' failed 4 times in a row:
    KeyError: 'x'``, which named neither the environment nor its call). Retried as other
    failed work."""


class EnvTimeoutError(RuntimeError):
    """An environment call (``reset``, ``step``) that did not return within its job's
    ``env.timeout_s``: one line naming the environment's class, the call, the job and the
    bound. The call is cancelled and the group's state is left as it was (a hung environment
    once hung the run for good)."""


def _env_name(env: Environment) -> str:
    """``module:Class`` of the user's environment (under Ray, the one a ``RemoteEnv`` runs
    in its actors, not the proxy)."""
    name = f"{type(env).__module__}:{type(env).__qualname__}"
    if name == REMOTE_ENV:
        return _env_name(env.env)
    return name


REMOTE_ENV = "marlaas.executors.ray_actors:RemoteEnv"
"""The proxy of an environment run in Ray's actors (named, not imported: Ray is optional)."""


async def guarded_call(env: Environment, method: str, call: Callable[[], Any]) -> Any:
    """Call and await ``call`` (``env.method(...)``). EnvResultError when it gives no
    awaitable (a plain ``def`` where the interface says ``async def``), or when it raises
    SystemExit (``sys.exit`` in an environment: raised out of the event loop it once ended
    the run with the environment's exit status, no message, and "Task was destroyed but it
    is pending!"). KeyboardInterrupt and SIGTERM's Interrupted go on as they came; what else
    it raises (a BaseException of the user's own too) is
    EnvCallError naming the environment and the call (one already named is raised as it
    is: a RemoteEnv's, whose actor named it)."""
    try:
        value = call()
        if not inspect.isawaitable(value):
            got = type(value).__name__
            fix = "declare it async def"
            if inspect.isasyncgen(value):  # an async def that yields: it was told to be one
                fix = "it yields: return the value instead"
            raise EnvResultError(f"environment {_env_name(env)}: {method}() returned {got}, "
                                 f"not a coroutine ({fix})")  # fmt: skip
        return await value
    except SystemExit as exit_:
        raise EnvResultError(f"environment {_env_name(env)}: {method}() raised "
                             f"SystemExit({shown(exit_.code)}); an environment must not end "
                             "the process (raise an exception instead)") from None  # fmt: skip
    except asyncio.CancelledError:
        if _cancelled_here():
            raise  # the call itself was cancelled: given up at its bound, or its group failed
        raise _own_cancellation(
            env, method, "an inner task or call cancelled, not this call"
        ) from None
    except (EnvResultError, EnvCallError, EnvTimeoutError):
        raise
    except BaseException as exc:  # a BaseException of the user's own too (pytest.fail's)
        if isinstance(exc, KeyboardInterrupt | Interrupted | GeneratorExit):
            raise  # Ctrl-C is Ctrl-C, SIGTERM is SIGTERM
        if f"{type(env).__module__}:{type(env).__qualname__}" == REMOTE_ENV:
            raise  # its actor named what the environment raised; the rest is Ray's, named
        raise EnvCallError(f"environment {_env_name(env)}: {method}() raised "
                           f"{one_line(exc)}") from exc  # fmt: skip


async def env_call(
    env: Environment,
    method: str,
    call: Callable[[], Any],
    job: str,
    timeout_s: float | None,
    loop: EnvLoop | None = None,
) -> Any:
    """The value of ``call`` (``env.method(...)``, checked by :func:`guarded_call`), within
    ``timeout_s`` [s] (None: unbounded); EnvTimeoutError naming the environment, the method,
    ``job`` and the bound when it takes longer. The late call is cancelled, not waited for
    (an environment that ignores its cancellation does not hold the run). ``loop``: the job's
    :class:`~marlaas.executors.env_loops.EnvLoop`, which runs the call in a thread of its own,
    so that one that blocks its thread holds neither this loop nor its bound (None: the call
    runs on this loop). An EnvStateError (the environment's state does not pickle for its
    Ray actor) is given the job's name."""
    try:
        return await _call_within(env, method, call, job, timeout_s, loop)
    except EnvStateError as err:  # raised by RemoteEnv, which does not know the job
        raise EnvStateError(f"job {job!r}: {err}") from None


async def _call_within(
    env: Environment,
    method: str,
    call: Callable[[], Any],
    job: str,
    timeout_s: float | None,
    loop: EnvLoop | None,
) -> Any:
    """:func:`env_call`'s call and its bound. A cancellation that comes back from the call,
    this task not being cancelled, is the environment's own (a step that cancelled the task
    it runs in): EnvCallError, as :func:`guarded_call` makes of an inner task's (it once went
    on to the run as a cancellation of the run: a traceback)."""
    work = guarded_call(env, method, call)
    if loop is not None:
        work = loop.call(work)
    try:
        return await bounded(work, timeout_s, lambda: f"environment {_env_name(env)}: "
                             f"{method}() of job {job!r}")  # fmt: skip
    except asyncio.CancelledError:
        if _cancelled_here():
            raise  # this call was cancelled: its group failed, or the run ends
        raise _own_cancellation(env, method, "it cancelled its own task, not the run") from None


async def bounded(work: Awaitable[Any], timeout_s: float | None, what: Callable[[], str]) -> Any:
    """The value of ``work`` within ``timeout_s`` [s] (None: unbounded); EnvTimeoutError
    ``<what()> did not return within <timeout_s> s (its env.timeout_s)`` when it takes
    longer. The late work is cancelled, not waited for."""
    if timeout_s is None:
        return await work
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise EnvTimeoutError(f"{what()} did not return within {timeout_s:g} s (its "
                              "env.timeout_s)")  # fmt: skip
    return task.result()


def _retrieve(task: asyncio.Task) -> None:
    """Done callback of an environment call's task: its exception read, so that a call given
    up on (timed out, or its group failed first) is not reported again by asyncio as "Task
    exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


async def env_reset(
    env: Environment, method: str, call: Callable[[], Any], job: str,
    timeout_s: float | None = None, loop: EnvLoop | None = None,
) -> str:  # fmt: skip
    """The prompt text of ``env``'s ``reset`` / ``reset_problem`` (``method``, called by
    ``call``), within ``timeout_s`` (:func:`env_call`, on ``loop``), checked."""
    prompt = await env_call(env, method, call, job, timeout_s, loop)
    if not isinstance(prompt, str):
        got = f"{type(prompt).__name__} {shown(prompt)}"
        raise EnvResultError(f"environment {_env_name(env)}: {method}() returned {got}, not "
                             "the prompt text")  # fmt: skip
    bad = lone_surrogate(prompt)
    if bad is not None:
        raise EnvResultError(f"environment {_env_name(env)}: {method}() returned a prompt "
                             f"that is not Unicode text ({bad})")  # fmt: skip
    return prompt


def _own_cancellation(env: Environment, method: str, what: str) -> EnvCallError:
    """The error for a CancelledError an environment's call raised while this task was not
    cancelled (:func:`_cancelled_here`): the environment's own, ``what`` saying whose."""
    return EnvCallError(f"environment {_env_name(env)}: {method}() raised CancelledError of "
                        f"its own ({what})")  # fmt: skip


def _cancelled_here() -> bool:
    """Whether the task running now was asked to cancel (a CancelledError an environment's
    call raised is then the call's own cancellation). An environment's own CancelledError (a
    task of its own that it awaited was cancelled) once ended the run in a traceback. Python
    3.10 cannot tell them apart: there, every CancelledError is the call's."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return task is None or cancelling is None or cancelling() > 0


def _is_flag(done: object) -> bool:
    """Whether ``done`` (or ``info["correct"]``) is a flag: a bool (numpy's too), or a
    number 0 or 1 of any kind (``float(ok)``, a numpy float: as ``bool`` reads it); a string
    such as ``"no"`` is not (true as a flag, it ended every episode, and counted as correct
    in ``evaluate``), nor a partial score such as 0.3."""
    numpy = sys.modules.get("numpy")  # imported by whoever made a numpy bool, if anyone
    if isinstance(done, bool) or (numpy is not None and isinstance(done, numpy.bool_)):
        return True
    return isinstance(done, numbers.Real) and done in (0, 1)


def checked_step(env: Environment, result: Any) -> StepResult:
    """``result`` of ``env.step`` when it is a StepResult of a finite real reward, a text
    observation and a dict info; else EnvResultError naming the environment and the field."""
    where = f"environment {_env_name(env)}: step()"
    if not isinstance(result, StepResult):
        raise EnvResultError(f"{where} returned {type(result).__name__} {shown(result)}, "
                             "not a StepResult")  # fmt: skip
    reward = result.reward
    if not (isinstance(reward, numbers.Real) and _within(reward)):
        raise EnvResultError(f"{where} returned the reward {type(reward).__name__} "
                             f"{shown(reward)}; a reward is a finite number from "
                             f"-{MAX_REWARD:g} to {MAX_REWARD:g}")  # fmt: skip
    if not isinstance(result.observation, str):
        raise EnvResultError(f"{where} returned the observation "
                             f"{type(result.observation).__name__} {shown(result.observation)}, "
                             "not text")  # fmt: skip
    bad = lone_surrogate(result.observation)
    if bad is not None:
        raise EnvResultError(f"{where} returned an observation that is not Unicode text "
                             f"({bad})")  # fmt: skip
    if not _is_flag(result.done):
        raise EnvResultError(f"{where} returned done {type(result.done).__name__} "
                             f"{shown(result.done)}, not True or False")  # fmt: skip
    if not isinstance(result.info, Mapping):
        raise EnvResultError(f"{where} returned the info {type(result.info).__name__}, "
                             "not a dict")  # fmt: skip
    if result.info.get("correct") is not None and not _is_flag(result.info["correct"]):
        correct = result.info["correct"]
        raise EnvResultError(f"{where} returned info['correct'] {type(correct).__name__} "
                             f"{shown(correct)}, not True or False (evaluate counts it as "
                             "the answer's verdict)")  # fmt: skip
    return result


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
    prompts = await asyncio.gather(
        *(env_reset(env, method, call, job, timeout_s, loop) for env, method, call in calls)
    )
    ids = fmt.prompt(prompts[0])
    samples = [Sample(env=env, context=list(ids)) for env in envs]
    return GroupEpisode(job, group, version, samples, prompts[0], loop), ids


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
    results: list[StepResult] = await asyncio.gather(
        *(
            env_call(s.env, "step", partial(s.env.step, s.action.text), job, timeout_s, loop)
            for s in acting
        )
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
