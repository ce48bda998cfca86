"""A run's stop closes every environment instance left, and those still closing in the
background, at once and under one deadline (marlaas.executors.env_instances.Closings.finish).

Each close runs to its end or its bound when another is interrupted: a close that raised
Ctrl-C (or SIGTERM's Interrupted, a KeyboardInterrupt too) left the event loop at once, and the
others were cancelled half-way by the loop's end, their environments not closed; the stop's
own cancellation cancelled them too. The interruption is raised once they all ended. And no
close outlives the deadline: a given-up making's instances, closed once made, got a bound of
their own after the making's (a stop could take twice the close's bound, then the threads'
grace). Counted, not timed: which closes ran, and which were given up."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from marlaas.core.job_spec import JobSpec
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Generate, Train
from marlaas.drive import drive
from marlaas.drive.inbox import workload_inbox
from marlaas.executors import env_instances
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.episode_runner import EpisodeRunner
from marlaas.executors.real import RealExecutor
from marlaas.interrupts import Interrupted
from marlaas.workload_file import load_workload
from tests.episode_fakes import CharFormat, OneTokenEngine
from tests.executors import closing_envs, test_env_close
from tests.executors.closing_envs import FakeBackends, model_dir
from tests.executors.stopping_envs import ClosesSlowly, SlowToMakeSlowToClose

STOPPING = "tests.executors.stopping_envs"
CLOSING = "tests.executors.closing_envs"


def runner_of(envs: dict[str, dict], threads: bool) -> EpisodeRunner:
    """An episode runner of one job per entry of ``envs`` (name -> its ``env`` mapping),
    admitted; counting starts afresh."""
    specs = {job: JobSpec(name=job, tenant=job, env=env) for job, env in envs.items()}
    runner = EpisodeRunner(specs, CharFormat(), max_model_len=4096, seed=0, env_threads=threads)
    for index, job in enumerate(specs):
        runner.admit(job, index)
    closing_envs.forget()
    ClosesSlowly.ENDED.clear()
    return runner


async def first_turn(runner: EpisodeRunner, job: str, work_id: int = 1) -> None:
    """The first turn of ``job``'s group 0 (2 samples): its instances made and reset."""
    await runner.generate(Generate(work_id, job, 0, 0, 0, "e", 0, 2, 0, 4), OneTokenEngine())


def env_threads_alive(*jobs: str) -> list[str]:
    names = {f"marlaas-env-{job}" for job in jobs}
    return [t.name for t in threading.enumerate() if t.name in names and t.is_alive()]


@pytest.mark.parametrize("threads", [True, False], ids=["env-threads", "run-loop"])
@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
def test_a_close_interrupted_at_the_stop_leaves_no_other_close_behind(signal, threads):
    runner = runner_of({
        "int-a": {"name": f"{STOPPING}:InterruptedOnClose", "args": {"raises": signal}},
        "int-b": {"name": f"{STOPPING}:ClosesSlowly"},
    }, threads)  # fmt: skip

    async def stop() -> None:
        await first_turn(runner, "int-a", 1)
        await first_turn(runner, "int-b", 2)
        await runner.close()

    expected = Interrupted if signal == "SIGTERM" else KeyboardInterrupt
    with pytest.raises(expected):
        asyncio.run(stop())
    assert closing_envs.closes() == [1, 1, 1, 1]  # every instance's close ran, once
    slow = [env for env in closing_envs.MADE if isinstance(env, ClosesSlowly)]
    assert len(slow) == 2 and {id(env) for env in slow} == ClosesSlowly.ENDED  # to their ends
    assert env_threads_alive("int-a", "int-b") == []  # and the threads stopped


def test_a_close_that_raises_at_the_stop_is_one_warning_and_the_others_end(caplog):
    runner = runner_of({
        "raise-a": {"name": f"{CLOSING}:RaisesOnClose"},
        "raise-b": {"name": f"{STOPPING}:ClosesSlowly"},
    }, threads=True)  # fmt: skip

    async def stop() -> list[str]:
        await first_turn(runner, "raise-a", 1)
        await first_turn(runner, "raise-b", 2)
        return await runner.close()

    with caplog.at_level(logging.WARNING, logger="marlaas.real"):
        assert asyncio.run(stop()) == []
    assert closing_envs.closes() == [1, 1, 1, 1] and len(ClosesSlowly.ENDED) == 2
    warned = [r.getMessage() for r in caplog.records if "close()" in r.getMessage()]
    assert warned == [
        f"environment {CLOSING}:RaisesOnClose of job 'raise-a': close() raised OSError: the "
        "server is gone (2 of 2 instances); the run goes on"
    ]


def test_a_stop_cancelled_while_it_closes_lets_every_close_end_first():
    runner = runner_of({"cancel-a": {"name": f"{STOPPING}:ClosesSlowly"}}, threads=True)

    async def stop() -> None:
        await first_turn(runner, "cancel-a")
        closing = asyncio.ensure_future(runner.close())
        await asyncio.sleep(ClosesSlowly.CLOSE_S / 4)  # the closes under way
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    asyncio.run(stop())
    assert closing_envs.closes() == [1, 1] and len(ClosesSlowly.ENDED) == 2
    assert env_threads_alive("cancel-a") == []


def test_every_close_of_a_stop_ends_under_one_deadline(monkeypatch, caplog):
    """The stop's deadline is CLOSE_TIMEOUT_S (1.5 s here) from its start. A first turn's
    making (1 s, blocking its job's thread) is cancelled by the stop: the instance it makes
    is closed once made, and that close (1 s) is given up at the deadline, 0.5 s later (it
    had a bound of its own: 1.5 s, and ran to its end). Another job's closes hang: given up
    at the deadline too."""
    monkeypatch.setattr(env_instances, "CLOSE_TIMEOUT_S", 1.5)
    monkeypatch.setattr(SlowToMakeSlowToClose, "MAKE_S", 1.0)
    monkeypatch.setattr(SlowToMakeSlowToClose, "CLOSE_S", 1.0)
    runner = runner_of({
        "dl-making": {"name": f"{STOPPING}:SlowToMakeSlowToClose", "timeout_s": 60.0},
        "dl-hangs": {"name": f"{CLOSING}:HangsOnClose", "timeout_s": 60.0},
    }, threads=True)  # fmt: skip
    SlowToMakeSlowToClose.building.clear()

    async def stop() -> list[str]:
        await first_turn(runner, "dl-hangs", 1)
        making = asyncio.ensure_future(first_turn(runner, "dl-making", 2))
        while not SlowToMakeSlowToClose.building.is_set():
            await asyncio.sleep(0.01)
        making.cancel()  # the stop cancels the work in flight
        await asyncio.gather(making, return_exceptions=True)
        return await runner.close()

    with caplog.at_level(logging.WARNING, logger="marlaas.real"):
        assert asyncio.run(stop()) == []
    made = closing_envs.MADE
    assert [type(env).__name__ for env in made] == ["HangsOnClose"] * 2 + ["SlowToMakeSlowToClose"]
    assert closing_envs.closes() == [1, 1, 1]  # every close ran
    assert not ClosesSlowly.ENDED  # the made instance's close was given up
    given_up = sorted(r.getMessage() for r in caplog.records if "did not return" in r.getMessage())
    assert len(given_up) == 2, given_up
    assert given_up[0].startswith(
        f"environment {CLOSING}:HangsOnClose of job 'dl-hangs': close() did not return within "
        "1.5 s (2 of 2 instances)"
    )
    assert given_up[1].startswith(
        f"environment {STOPPING}:SlowToMakeSlowToClose of job 'dl-making': close() did not "
        "return within 0."
    )


class ClosedBackends(FakeBackends):
    """Fake backends that note their close."""

    closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_run_whose_closes_are_interrupted_at_its_stop_closes_them_all_and_its_backends(
    tmp_path,
):
    """Ctrl-C stops the run; the closes of the instances left raise it again (as a signal
    landing in them would): every other close ends first, and the backends are closed."""
    jobs = "".join(
        test_env_close.JOB.format(name=name, steps=20, env=f"{STOPPING}:{cls}", timeout_s=5.0,
                                  args="{}")
        for name, cls in {"a": "InterruptedOnClose", "b": "ClosesSlowly"}.items()
    )  # fmt: skip
    path = tmp_path / "w.yaml"
    path.write_text(test_env_close.WORKLOAD.format(model=model_dir(tmp_path), jobs=jobs))
    loaded = load_workload(path)
    scheduler = Scheduler.for_workload(loaded)
    backends = ClosedBackends()
    executor = RealExecutor(EngineSizing.of_workload(loaded), scheduler.cluster,
                            store=AdapterStore(tmp_path / "adapters"), backends=backends,
                            model_dir=model_dir(tmp_path))  # fmt: skip
    closing_envs.forget()
    ClosesSlowly.ENDED.clear()

    def interrupt(decision, event, now):
        if isinstance(decision, Train) and event.ok:
            raise KeyboardInterrupt  # as the signal handler raises it in the main thread

    with pytest.raises(KeyboardInterrupt), executor:
        drive(scheduler, executor, workload_inbox(loaded), observers=[interrupt])
    made = closing_envs.closes()
    assert made and made == [1] * len(made), made  # every instance's close ran, once
    slow = {id(env) for env in closing_envs.MADE if isinstance(env, ClosesSlowly)}
    assert slow and slow == ClosesSlowly.ENDED  # each to its end
    assert backends.closed
