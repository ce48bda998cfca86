"""Each job's environment calls run on an event loop in a thread of its own
(marlaas.executors.env_loops): an environment that blocks its thread (``time.sleep`` inside
``async def step``) once blocked the run's one loop, so that its ``env.timeout_s`` never fired
and every other job (under the service, every tenant's training) stopped with it."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from marlaas.core.job_spec import JobSpec
from marlaas.core.work import EnvStep, Generate
from marlaas.envs import make_env
from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_contract import EnvCallError, EnvResultError, EnvTimeoutError, env_call
from marlaas.executors.env_loops import EnvLoop, EnvLoops
from marlaas.executors.episode_runner import EpisodeRunner
from tests.episode_fakes import CharFormat, OneTokenEngine
from tests.system_tools import needs_bwrap

BLOCK_S = 30.0
"""How long a blocking step holds its thread at most [s] (released at the test's end)."""
RELEASE_AFTER_S = 8.0
"""A safety valve: the blocked steps are released this long after a test starts [s], so that
a run loop they block (the old code) fails the test instead of hanging it for BLOCK_S."""


class Quick(Environment):
    """Answers at once; records the thread it was built on and the thread and loop of each
    call."""

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.built_on = threading.get_ident()
        self.where: list[tuple[int, int]] = []

    def _here(self) -> None:
        self.where.append((threading.get_ident(), id(asyncio.get_running_loop())))

    async def reset(self, seed: int) -> str:
        self._here()
        return "go"

    async def step(self, action: str) -> StepResult:
        self._here()
        return StepResult("", 1.0, True)


class Blocks(Quick):
    """A step that blocks its thread (no await) until ``release`` is set, at most BLOCK_S."""

    release = threading.Event()

    async def step(self, action: str) -> StepResult:
        self.release.wait(BLOCK_S)  # as time.sleep(30) or a blocking socket read
        return StepResult("", 1.0, True)


def runner_of(envs: dict[str, type[Environment]], timeout_s: float) -> EpisodeRunner:
    """An EpisodeRunner of one job per entry of ``envs`` (job name -> environment class)."""
    specs = {
        job: JobSpec(name=job, tenant=job, env={"name": job, "timeout_s": timeout_s})
        for job in envs
    }
    runner = EpisodeRunner(specs, CharFormat(), max_model_len=4096, seed=0,
                           make_env=lambda name, args: envs[name]())  # fmt: skip
    for i, job in enumerate(envs):
        runner.admit(job, i)
    return runner


async def first_turn(runner: EpisodeRunner, job: str, work_id: int) -> None:
    """The job's group 0: its reset and its first generated turn (2 samples)."""
    await runner.generate(Generate(work_id, job, 0, 0, 0, "e", 0, 2, 0, 4), OneTokenEngine())


@pytest.fixture
def valve():
    """Blocks' steps held until the test ends (or RELEASE_AFTER_S: the safety valve)."""
    Blocks.release.clear()
    timer = threading.Timer(RELEASE_AFTER_S, Blocks.release.set)
    timer.start()
    yield
    timer.cancel()
    Blocks.release.set()


def test_a_step_that_blocks_its_thread_is_given_up_within_its_bound_while_the_run_goes_on(valve):
    runner = runner_of({"stuck": Blocks, "other": Quick}, timeout_s=0.3)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def scenario() -> tuple[float, int, tuple, int]:
        await first_turn(runner, "stuck", 1)
        await first_turn(runner, "other", 2)
        ticking = asyncio.create_task(ticker())
        started = time.monotonic()
        stuck = asyncio.create_task(runner.env_step(EnvStep(3, "stuck", 0, 0, 0, 2, True)))
        await asyncio.sleep(0.05)  # the stuck job's steps have begun (and block their thread)
        other = await runner.env_step(EnvStep(4, "other", 0, 0, 0, 2, True))
        ticks_then = ticks
        with pytest.raises(EnvTimeoutError) as err:
            await stuck
        given_up_s = time.monotonic() - started
        ticking.cancel()
        assert err.value.args[0] == (
            f"environment {__name__}:Blocks: step() of job 'stuck' did not return within "
            "0.3 s (its env.timeout_s)"
        )
        return given_up_s, ticks_then, other, ticks

    given_up_s, ticks_then, other, ticks = asyncio.run(scenario())
    assert given_up_s < RELEASE_AFTER_S  # given up on, not waited for (the valve's release)
    assert other == (0, 1.0, True)  # another job's step went on while the stuck one blocked
    assert ticks_then >= 1 and ticks >= 10  # so did the run loop: ~30 ticks in 0.3 s
    Blocks.release.set()  # its call returns: its stopped thread ends
    assert asyncio.run(runner.close()) == []


def test_a_thread_still_blocked_when_the_run_ends_is_named_and_left_behind(valve):
    runner = runner_of({"stuck": Blocks}, timeout_s=0.2)

    async def scenario() -> None:
        await first_turn(runner, "stuck", 1)
        with pytest.raises(EnvTimeoutError):
            await runner.env_step(EnvStep(2, "stuck", 0, 0, 0, 2, True))

    asyncio.run(scenario())
    loop = runner.env_loops.of("stuck")
    assert runner.env_loops.close(timeout_s=0.2) == ["marlaas-env-stuck"]
    assert loop._thread.daemon  # it does not keep the process from exiting
    Blocks.release.set()
    assert loop.join(10.0)  # its call returned: the stopped loop ends


def test_each_job_calls_its_environments_on_its_own_thread_and_loop():
    runner = runner_of({"a": Quick, "b": Quick}, timeout_s=5.0)
    run_thread = threading.get_ident()

    async def scenario() -> None:
        for i, job in enumerate(("a", "b")):
            await first_turn(runner, job, i)
            await runner.env_step(EnvStep(10 + i, job, 0, 0, 0, 2, True))

    asyncio.run(scenario())
    where = {job: {w for s in runner._episodes[(job, 0)].samples for w in s.env.where}
             for job in ("a", "b")}  # fmt: skip
    assert all(len(places) == 1 for places in where.values())  # reset and step: one loop
    (a_thread, _), (b_thread, _) = where["a"].pop(), where["b"].pop()
    assert len({a_thread, b_thread, run_thread}) == 3
    for job, thread in (("a", a_thread), ("b", b_thread)):  # built where they are called
        assert {s.env.built_on for s in runner._episodes[(job, 0)].samples} == {thread}

    async def ending() -> list[str]:
        runner.release_job("a")  # its thread ends; the other job's goes on
        return await runner.close()

    assert asyncio.run(ending()) == []


def test_without_threads_the_calls_run_on_the_callers_loop():
    """Under Ray the environments run in actors: no thread of its own is made."""
    runner = runner_of({"a": Quick}, timeout_s=5.0)
    runner.env_loops = None
    asyncio.run(first_turn(runner, "a", 0))
    [sample, _] = runner._episodes[("a", 0)].samples
    assert sample.env.where[0][0] == threading.get_ident()
    assert asyncio.run(runner.close()) == []


class Hangs(Quick):
    """A step that awaits forever, and says when it is cancelled."""

    cancelled = threading.Event()

    async def step(self, action: str) -> StepResult:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class Raises(Quick):
    """A step that raises what its args name."""

    async def step(self, action: str) -> StepResult:
        raise self.args["error"]


def test_a_call_given_up_on_is_cancelled_on_its_loop_and_errors_come_back_as_raised():
    loop = EnvLoop("marlaas-env-test")
    try:
        Hangs.cancelled.clear()
        env = Hangs()
        with pytest.raises(EnvTimeoutError, match=r"Hangs: step\(\) of job 'j' did not"):
            asyncio.run(env_call(env, "step", lambda: env.step("x"), "j", 0.2, loop))
        assert Hangs.cancelled.wait(5.0)
        bad = Raises({"error": ValueError("the verifier's own")})
        with pytest.raises(EnvCallError, match=r"step\(\) raised ValueError: the verifier's "
                           r"own$") as raised:  # fmt: skip
            asyncio.run(env_call(bad, "step", lambda: bad.step("x"), "j", 5.0, loop))
        assert type(raised.value.__cause__) is ValueError
        exits = Raises({"error": SystemExit(3)})
        with pytest.raises(EnvResultError, match=r"step\(\) raised SystemExit\(3\)"):
            asyncio.run(env_call(exits, "step", lambda: exits.step("x"), "j", None, loop))
        calls = [Quick() for _ in range(3)]  # and the loop still serves calls
        got = asyncio.run(env_call(calls[0], "reset", lambda: calls[0].reset(0), "j", 5.0, loop))
        assert got == "go"
    finally:
        loop.stop()
    assert loop.join(10.0)


def test_the_calculator_runs_its_turns_on_the_jobs_thread():
    loops = EnvLoops()
    loop = loops.of("j")

    async def episode(seed: int) -> StepResult:
        env = make_env("calculator")
        prompt = await env_call(env, "reset", lambda: env.reset(seed), "j", 5.0, loop)
        expr = prompt.split("What is ")[1].split("?")[0]
        first = await env_call(env, "step", lambda: env.step(f"CALC: {expr}"), "j", 5.0, loop)
        value = first.observation.split("RESULT: ")[1].strip()
        return await env_call(env, "step", lambda: env.step(value), "j", 5.0, loop)

    try:
        results = [asyncio.run(episode(s)) for s in range(3)]  # a new run loop each time
    finally:
        assert loops.close() == []
    assert all(r.done and r.reward == 1.0 and r.info["tool_calls"] == 1 for r in results)


@needs_bwrap
def test_the_python_sandbox_runs_its_subprocesses_from_the_jobs_thread():
    """asyncio subprocesses (the bubblewrap sandbox) from a loop that is not the main
    thread's: its good answer passes, and its timeout still kills the endless loop."""
    args = {
        "tasks": [
            {"prompt": "Write add(a, b).", "func": "add", "tests": [[[1, 2], 3], [[2, 2], 4]]},
        ],
        "timeout_s": 1.0,
    }
    loops = EnvLoops()
    loop = loops.of("code")

    async def steps() -> list[StepResult]:
        envs = [make_env("python_exec", args) for _ in range(2)]
        await asyncio.gather(*(env_call(e, "reset", lambda e=e: e.reset(0), "code", 20.0, loop)
                               for e in envs))  # fmt: skip
        good, endless = "def add(a, b):\n    return a + b", "while True:\n    pass"
        return await asyncio.gather(
            env_call(envs[0], "step", lambda: envs[0].step(good), "code", 20.0, loop),
            env_call(envs[1], "step", lambda: envs[1].step(endless), "code", 20.0, loop),
        )

    try:
        good, endless = asyncio.run(steps())
    finally:
        assert loops.close() == []
    assert good.reward == 1.0 and good.info["outcome"] == "ok"
    assert endless.reward == 0.0 and endless.info["outcome"] == "timeout"


class NoAdapters:
    """An adapter store that holds no trained version (the evaluation scores the base)."""

    def versions(self, job: str) -> list[int]:
        return []


def test_evaluate_gives_up_a_step_that_blocks_its_thread(valve, monkeypatch):
    """``marlaas evaluate`` runs a job's environments on its own thread too: a blocking step
    is an EnvTimeoutError at its bound, not an evaluation that never ends."""
    from marlaas.executors import evaluate as evaluation

    monkeypatch.setattr(evaluation, "ChatFormat", lambda tokenizer, template: CharFormat())
    monkeypatch.setattr(evaluation, "make_env", lambda name, args: Blocks())
    spec = JobSpec(name="stuck", tenant="t", env={"name": "stuck", "timeout_s": 0.3})
    said = re.escape("step() of job 'stuck' did not return within 0.3 s")
    with pytest.raises(EnvTimeoutError, match=said):  # the old code: no error (the valve let
        asyncio.run(evaluation.evaluate(None, NoAdapters(), OneTokenEngine(), prompts=1,
                                        jobs=[spec]))  # fmt: skip  # the step return at 8 s)


def test_a_new_groups_environments_are_built_within_the_bound_while_the_thread_is_blocked(
    valve,
):
    """The job's environments are built on its thread: while a step blocks it, a new group's
    constructors wait behind it, and are given up at the job's env.timeout_s like any call
    (they once waited unbounded: the group's Generate never came back, so the job neither
    failed its work nor could be cancelled, and a batch run never ended)."""
    runner = runner_of({"stuck": Blocks}, timeout_s=0.3)

    async def scenario() -> float:
        await first_turn(runner, "stuck", 1)
        with pytest.raises(EnvTimeoutError):  # group 0's step: its thread stays blocked
            await runner.env_step(EnvStep(2, "stuck", 0, 0, 0, 2, True))
        started = time.monotonic()
        with pytest.raises(EnvTimeoutError) as err:  # group 1's first turn
            await runner.generate(Generate(3, "stuck", 0, 1, 0, "e", 0, 2, 0, 4), OneTokenEngine())
        assert err.value.args[0] == (
            "environment stuck: __init__() of job 'stuck' did not return within "
            "0.3 s (its env.timeout_s)"
        )
        return time.monotonic() - started

    given_up_s = asyncio.run(scenario())
    assert given_up_s < RELEASE_AFTER_S / 2  # at its bound (0.3 s), not at the valve's release
    assert ("stuck", 1) not in runner._episodes  # a retry builds them again
    Blocks.release.set()
    assert asyncio.run(runner.close()) == []


class BuildBlocks(Quick):
    """A constructor that blocks its thread (a blocking connect) until Blocks' release."""

    def __init__(self, args=None) -> None:
        Blocks.release.wait(BLOCK_S)
        super().__init__(args)


def test_evaluate_gives_up_a_constructor_that_blocks_its_thread(valve, monkeypatch):
    """An environment built on the job's thread is given up at env.timeout_s too, not an
    evaluation waiting on it unbounded (until the valve let it go at 8 s)."""
    from marlaas.executors import evaluate as evaluation

    monkeypatch.setattr(evaluation, "ChatFormat", lambda tokenizer, template: CharFormat())
    monkeypatch.setattr(evaluation, "make_env", lambda name, args: BuildBlocks())
    spec = JobSpec(name="stuck", tenant="t", env={"name": "slow_env", "timeout_s": 0.3})
    said = re.escape("environment slow_env: __init__() of job 'stuck' did not return within 0.3")
    with pytest.raises(EnvTimeoutError, match=said):  # the old code: no error (built at 8 s)
        asyncio.run(evaluation.evaluate(None, NoAdapters(), OneTokenEngine(), prompts=2,
                                        jobs=[spec]))  # fmt: skip


class NoVerdict(Environment):
    """Rewards 1 or 0 by the episode's seed and gives no verdict (``info['correct']`` None)."""

    async def reset(self, seed: int) -> str:
        self.seed = seed
        return "go"

    async def step(self, action: str) -> StepResult:
        return StepResult("", float(self.seed % 2 == 0), True, {"correct": None})


def test_evaluate_scores_an_episode_without_a_verdict_by_its_reward(monkeypatch):
    """``info['correct'] = None`` is no verdict: the episode is correct when its reward is at
    least 1, as when the step gives no ``correct`` (it was refused as the environment's
    contract error: 'info['correct'] NoneType None, not True or False')."""
    from marlaas.executors import evaluate as evaluation

    monkeypatch.setattr(evaluation, "ChatFormat", lambda tokenizer, template: CharFormat())
    monkeypatch.setattr(evaluation, "make_env", lambda name, args: NoVerdict())
    spec = JobSpec(name="j", tenant="t", env={"name": "no-verdict"})
    rows = asyncio.run(evaluation.evaluate(None, NoAdapters(), OneTokenEngine(), prompts=4,
                                           jobs=[spec]))  # fmt: skip
    [outcomes] = rows["outcomes"]
    assert outcomes.count("1") == 2 and len(outcomes) == 4
