"""Ctrl-C and SIGTERM carried as a value (marlaas.executors.env_loops.outcome) always reach
the run: an interruption that lands in an environment call given up on, whose caller has
moved on (its bound passed, or it was cancelled), was the result of a task no one read, and the
run went on (before the value, asyncio let it out of the event loop from that task). Counted in
loop iterations, not timed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Train
from marlaas.drive import drive
from marlaas.drive.inbox import workload_inbox
from marlaas.envs.base import Environment, StepResult
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.env_contract import EnvTimeoutError, bounded
from marlaas.executors.env_instances import close_envs, new_envs
from marlaas.executors.real import RealExecutor
from marlaas.interrupts import Interrupted
from marlaas.workload_file import load_workload
from tests.executors import test_env_close
from tests.executors.closing_envs import FakeBackends, OneTokenEngine, model_dir

CLOSING = "tests.executors.closing_envs"
STOPPING = "tests.executors.stopping_envs"


async def interrupted_as_cancelled(started: asyncio.Event, ended: asyncio.Event, exc) -> None:
    """A call that runs until cancelled, and whose cleanup then meets the signal's exception
    (the handler raises it in whatever the main thread runs: here, this call's cleanup)."""
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        ended.set()
        raise exc from None


async def a_few_turns() -> None:
    """Let the loop run the callbacks of what just ended (no time waited)."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_an_interruption_in_a_call_given_up_at_its_bound_ends_the_loop(exc):
    async def run() -> str:
        started, ended = asyncio.Event(), asyncio.Event()
        with pytest.raises(EnvTimeoutError):
            await bounded(interrupted_as_cancelled(started, ended, exc), 0.01, lambda: "step()")
        await ended.wait()
        await a_few_turns()
        return "the run went on"

    with pytest.raises(type(exc)):
        asyncio.run(run())


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_an_interruption_in_a_call_whose_caller_was_cancelled_ends_the_loop(exc):
    async def run() -> str:
        started, ended = asyncio.Event(), asyncio.Event()
        work = interrupted_as_cancelled(started, ended, exc)
        caller = asyncio.ensure_future(bounded(work, 3600, lambda: "step()"))
        await started.wait()
        caller.cancel()  # its group failed, or an AbortGeneration
        with pytest.raises(asyncio.CancelledError):
            await caller
        await ended.wait()
        await a_few_turns()
        return "the run went on"

    with pytest.raises(type(exc)):
        asyncio.run(run())


class Closes(Environment):
    """An environment whose close does what ``close_with`` does."""

    def __init__(self, close_with) -> None:
        super().__init__({})
        self.close_with = close_with

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        return StepResult("", 0.0, True, {})

    async def close(self) -> None:
        await self.close_with()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_close_is_raised_when_its_closes_are_cancelled(exc):
    """One close met Ctrl-C (kept for the others to end first: env_instances._close) and the
    closes were cancelled while another still ran (the run's loop ending, a cancelled making's
    caller): the interruption is raised, not the cancellation (a gather of the closes raised
    the cancellation, and the Ctrl-C a close had kept was lost with its value)."""

    async def run() -> None:
        interrupted, holding = asyncio.Event(), asyncio.Event()

        async def interrupt() -> None:
            interrupted.set()
            raise exc

        async def hold() -> None:
            holding.set()
            await asyncio.Event().wait()

        envs = [Closes(interrupt), Closes(hold)]
        closing = asyncio.ensure_future(close_envs(envs, "j", 3600, None))
        await interrupted.wait()
        await holding.wait()
        await a_few_turns()  # the interrupted close has ended
        closing.cancel()
        await closing

    with pytest.raises(type(exc)):
        asyncio.run(run())


def test_ctrl_c_in_a_constructor_is_raised_when_the_making_is_cancelled_while_closing():
    """Ctrl-C met in a group's second constructor (made on the run's loop: under Ray) while the
    first instance is closed again, and the making cancelled meanwhile (an AbortGeneration of
    its Generate): Ctrl-C goes on, not the cancellation (the close's cancellation replaced it,
    and the Generate, aborted, came back done: the run went on)."""

    async def run() -> None:
        holding = asyncio.Event()

        async def hold() -> None:
            holding.set()
            await asyncio.Event().wait()

        made: list[Environment] = []

        def make(name: str, args: dict) -> Environment:
            if made:
                raise KeyboardInterrupt
            made.append(Closes(hold))
            return made[0]

        spec = SimpleNamespace(name="j", env=SimpleNamespace(name="x", args={}, timeout_s=60))
        making = asyncio.ensure_future(new_envs(make, spec, 2, None))
        await holding.wait()
        making.cancel()
        await making

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run())


class EngineGone(OneTokenEngine):
    """An engine this run did not build (a service's, passed in), whose actor is gone at the
    stop: its retire fails."""

    async def retire(self, adapter: str, version: int) -> None:
        raise RuntimeError("engine e0: its Ray actor died")


class SharedEngineBackends(FakeBackends):
    """Fake backends whose engines were passed in (the run leaves them without its adapters),
    whose retire fails; they note their close."""

    closed = False

    async def open(self, sizing, cluster, max_model_len: int, seed: int) -> None:
        await super().open(sizing, cluster, max_model_len, seed)
        self.engines = {name: EngineGone() for name in self.engines}

    def owns(self, engine: str) -> bool:
        return False

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("env", [f"{CLOSING}:Counted", f"{STOPPING}:InterruptedOnClose"],
                         ids=["closes", "its-closes-interrupted"])  # fmt: skip
def test_ctrl_c_at_a_stop_whose_adapters_cannot_be_retired_stays_ctrl_c(env, tmp_path):
    """Ctrl-C stops a run whose engines were passed in (its closes raise it again, as a signal
    landing in them would, or not), and the retire of an adapter it loaded fails at the stop
    (the engine's actor gone): the run ends as interrupted, its backends closed. The retire's
    RuntimeError, raised in the stop's ``finally`` after the closes' Ctrl-C, or out of the
    executor's ``__exit__`` after the block's, replaced Ctrl-C (the run ended as failed), and
    the backends were left open."""
    jobs = test_env_close.JOB.format(name="a", steps=20, env=env, timeout_s=5.0, args="{}")
    path = tmp_path / "w.yaml"
    path.write_text(test_env_close.WORKLOAD.format(model=model_dir(tmp_path), jobs=jobs))
    loaded = load_workload(path)
    scheduler = Scheduler.for_workload(loaded)
    backends = SharedEngineBackends()
    executor = RealExecutor(EngineSizing.of_workload(loaded), scheduler.cluster,
                            store=AdapterStore(tmp_path / "adapters"), backends=backends,
                            model_dir=model_dir(tmp_path))  # fmt: skip

    def interrupt(decision, event, now):
        if isinstance(decision, Train) and event.ok:
            raise KeyboardInterrupt  # as the signal handler raises it in the main thread

    with pytest.raises(KeyboardInterrupt), executor:
        drive(scheduler, executor, workload_inbox(loaded), observers=[interrupt])
    assert backends.closed
