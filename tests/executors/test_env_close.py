"""A real run closes every environment instance it made exactly once (Environment.close):
when its group is trained, when its job finishes, is cancelled or fails, and when the run
stops (its end, Ctrl-C). Environments had no way to release what they hold (a subprocess, a
connection, a temporary folder): it leaked with every episode. A close that raises or hangs is
one warning naming the environment and the job, and the run goes on. No model: the engine and
the trainer are faked (tests.executors.closing_envs)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Train
from marlaas.drive import RunError, drive
from marlaas.drive.inbox import Cancel, Inbox, Submit, workload_inbox
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.env_instances import CLOSE_TIMEOUT_S, close_envs, new_envs
from marlaas.executors.real import RealExecutor
from marlaas.interrupts import Interrupted
from marlaas.workload_file import load_workload
from tests.executors import closing_envs
from tests.executors.closing_envs import BlocksOnClose, FakeBackends, closes, model_dir

ENVS = "tests.executors.closing_envs"

WORKLOAD = """\
name: closing
seed: 0
policy: fair
base_model: {{name: fake, path: {model}}}
cluster:
  pools:
    - {{name: rollout, role: inference, devices: 1}}
    - {{name: train, role: training, devices: 1}}
  engine: {{max_seqs: 64, kv_tokens: 8192, adapter_slots: 4}}
  trainer: {{adapter_slots: 4}}
  env_workers: 64
  shared_compute: true
jobs:
{jobs}
"""

JOB = """\
  - name: {name}
    tenant: {name}
    lora_rank: 8
    rl: {{steps: {steps}, prompts_per_step: 2, group_size: 2, max_new_tokens: 1,
         max_staleness: 1}}
    prompt_tokens: {{dist: constant, value: 2}}
    response_tokens: {{dist: constant, value: 1}}
    env: {{name: "{env}", args: {args}, timeout_s: {timeout_s}}}
"""


def workload(tmp_path, jobs: dict[str, str], steps: int = 3, timeout_s: float = 5.0,
             args: dict[str, str] | None = None):  # fmt: skip
    """A workload of one job per entry of ``jobs`` (name -> class of closing_envs); its
    options from ``args`` (name -> a YAML mapping). Counting starts after it is loaded."""
    model = model_dir(tmp_path)
    text = WORKLOAD.format(model=model, jobs="".join(
        JOB.format(name=name, steps=steps, env=f"{ENVS}:{cls}", timeout_s=timeout_s,
                   args=(args or {}).get(name, "{}"))
        for name, cls in jobs.items()
    ))  # fmt: skip
    path = tmp_path / "w.yaml"
    path.write_text(text)
    loaded = load_workload(path)
    closing_envs.forget()  # loading made an instance of each to check its options
    return loaded


def executor_of(loaded, scheduler, tmp_path) -> RealExecutor:
    return RealExecutor(EngineSizing.of_workload(loaded), scheduler.cluster,
                        store=AdapterStore(tmp_path / "adapters"), backends=FakeBackends(),
                        model_dir=model_dir(tmp_path))  # fmt: skip


def run(tmp_path, loaded, inbox=None, **drive_options):
    """Drive ``loaded`` on a real executor with fake backends; the run's result."""
    scheduler = Scheduler.for_workload(loaded)
    with executor_of(loaded, scheduler, tmp_path) as executor:
        return drive(scheduler, executor, inbox or workload_inbox(loaded), **drive_options)


def closed_once() -> bool:
    made = closes()
    return bool(made) and made == [1] * len(made)


def test_every_environment_is_closed_once_when_its_job_finishes(tmp_path):
    result = run(tmp_path, workload(tmp_path, {"a": "Counted", "b": "Counted"}))
    assert {o.state for o in result.jobs.values()} == {"finished"}
    assert len(closes()) >= 2 * 3 * 2 * 2  # jobs x steps x prompts x samples
    assert closed_once(), closes()


def test_a_cancelled_jobs_environments_are_closed_once(tmp_path):
    loaded = workload(tmp_path, {"a": "Counted", "b": "Counted"}, steps=20)
    inbox = Inbox()
    for job in loaded.jobs:
        inbox.put(Submit(job), 0.0)

    def cancel_a(decision, event, now):
        if isinstance(decision, Train) and decision.job == "a" and event.ok:
            inbox.put(Cancel("a"))
            inbox.put(Cancel("b"))
            inbox.close()

    result = run(tmp_path, loaded, inbox, observers=[cancel_a])
    assert {o.state for o in result.jobs.values()} == {"cancelled"}
    assert closed_once(), closes()


def test_a_failed_jobs_environments_are_closed_once_and_the_others_go_on(tmp_path):
    """Under the service a job whose work keeps failing ends failed (it is cancelled)."""
    loaded = workload(tmp_path, {"bad": "Counted", "good": "Counted"},
                      args={"bad": "{fail: true}"})  # fmt: skip
    failed = []
    result = run(tmp_path, loaded, on_job_failed=lambda job, why: failed.append(job))
    assert set(failed) == {"bad"} and result.jobs["good"].state == "finished"
    assert closed_once(), closes()


def test_a_batch_run_stopped_by_failing_work_closes_every_environment_once(tmp_path):
    loaded = workload(tmp_path, {"bad": "Counted"}, args={"bad": "{fail: true}"})
    with pytest.raises(RunError, match="this step fails"):
        run(tmp_path, loaded)
    assert closed_once(), closes()


@pytest.mark.parametrize("signal", [KeyboardInterrupt, lambda: Interrupted(15)],
                         ids=["SIGINT", "SIGTERM"])  # fmt: skip
def test_ctrl_c_and_sigterm_close_every_environment_once(tmp_path, signal):
    loaded = workload(tmp_path, {"a": "Counted", "b": "Counted"}, steps=20)

    def interrupt(decision, event, now):
        if isinstance(decision, Train) and event.ok:
            raise signal()  # as the signal handler raises it in the main thread

    with pytest.raises((KeyboardInterrupt, Interrupted)):
        run(tmp_path, loaded, observers=[interrupt])
    assert closed_once(), closes()


def test_a_close_that_raises_is_one_warning_and_the_run_goes_on(tmp_path, caplog):
    loaded = workload(tmp_path, {"a": "RaisesOnClose", "b": "Counted"})
    with caplog.at_level(logging.WARNING, logger="marlaas.real"):
        result = run(tmp_path, loaded)
    assert {o.state for o in result.jobs.values()} == {"finished"}
    assert closed_once(), closes()
    warned = {r.getMessage() for r in caplog.records if "close()" in r.getMessage()}
    assert warned == {
        f"environment {ENVS}:RaisesOnClose of job 'a': close() raised OSError: the server is "
        "gone (4 of 4 instances); the run goes on"  # a step's groups: 2 prompts x 2 samples
    }


@pytest.mark.parametrize("cls", ["HangsOnClose", "BlocksOnClose"])
def test_a_close_that_hangs_is_given_up_at_its_bound_and_the_run_goes_on(tmp_path, caplog, cls):
    """A close that awaits forever, or blocks its job's thread, is given up at the job's
    env.timeout_s; the run ends, and so do the other jobs. (Behind one that blocks the job's
    thread, the job's later closes wait, and are given up at the bound before they start, as
    its later steps would be.)"""
    BlocksOnClose.release.clear()
    loaded = workload(tmp_path, {"a": cls, "b": "Counted"}, steps=2, timeout_s=0.3)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="marlaas.real"):
            result = run(tmp_path, loaded)
    finally:
        BlocksOnClose.release.set()
    assert time.monotonic() - started < 20.0
    assert {o.state for o in result.jobs.values()} == {"finished"}
    if cls == "HangsOnClose":
        assert closed_once(), closes()
    else:
        assert 1 in closes() and set(closes()) <= {0, 1}, closes()
    warned = [r.getMessage() for r in caplog.records if "close()" in r.getMessage()]
    assert warned and all(
        m.startswith(f"environment {ENVS}:{cls} of job 'a': close() did not return within "
                     "0.3 s") for m in warned
    ), warned  # fmt: skip


def test_a_close_is_bounded_even_where_the_jobs_calls_are_not(caplog):
    from tests.executors.closing_envs import HangsOnClose

    closing_envs.forget()
    env = HangsOnClose()
    with caplog.at_level(logging.WARNING, logger="marlaas.real"):
        failed = asyncio.run(asyncio.wait_for(close_envs([env], "j", None, None),
                                              CLOSE_TIMEOUT_S + 5))  # fmt: skip
    assert failed == 1 and closes() == [1]
    assert caplog.records[-1].getMessage() == (
        f"environment {ENVS}:HangsOnClose of job 'j': close() did not return within "
        f"{CLOSE_TIMEOUT_S:g} s; the run goes on"
    )


def test_a_close_that_is_no_coroutine_is_named(caplog):
    class Plain(closing_envs.Counted):
        def close(self):  # not async: the interface says async def
            return None

    closing_envs.forget()
    with caplog.at_level(logging.WARNING, logger="marlaas.real"):
        assert asyncio.run(close_envs([Plain()], "j", 1.0, None)) == 1
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith(
            "Plain of job 'j': close() returned NoneType, not a coroutine (declare it async def); "
            "the run goes on"
        )
    )


def test_environments_made_before_one_that_cannot_be_made_are_closed(tmp_path):
    loaded = workload(tmp_path, {"a": "FailsToBuild"})
    spec = loaded.jobs[0]
    with pytest.raises(ValueError, match="no third one"):
        asyncio.run(new_envs(lambda name, args: closing_envs.FailsToBuild(args), spec, 4, None))
    assert closes() == [1, 1]


def test_environments_made_after_their_making_was_given_up_are_closed(tmp_path, monkeypatch):
    """A group's constructors run on the job's thread, where a blocking one cannot be
    interrupted: the making given up at the job's env.timeout_s, or cancelled (an
    AbortGeneration of a cancelled job's first turn), goes on there, and the instances it
    made are closed once, on that thread (they were dropped with the lost value, never
    closed: a process of their own each, leaked); it makes no more after the one it is in.

    Held, not timed: each constructor holds until the making was given up (its bound counted
    from the first one's start, at 0.5 s, could pass before it began on a loaded machine, and
    0.2 s constructors could all end before it); the closer waits for the making to end."""
    from marlaas.executors import env_instances
    from marlaas.executors.env_contract import EnvTimeoutError
    from marlaas.executors.env_instances import Closings
    from marlaas.executors.env_loops import EnvLoop

    made = closing_envs.HeldToBuild
    made.release.set()  # (the workload's load makes one)
    spec = workload(tmp_path, {"a": "HeldToBuild"}, timeout_s=0.5).jobs[0]
    made.release.clear()
    made.building.clear()
    bounded, closer = env_instances.bounded, env_instances._close_when_made

    async def bounded_once_building(work, timeout_s, what):  # the making's bound
        assert await asyncio.to_thread(made.building.wait, 30.0), "no constructor began"
        return await bounded(work, timeout_s, what)

    def released_once_given_up(making, *args):  # the closer of a making given up
        made.release.set()  # its constructor goes on, and makes the instance it was making

        async def once_made():
            await asyncio.wait({making}, timeout=30.0)
            assert making.done(), "the making given up did not end once released"
            await closer(making, *args)

        return once_made()

    monkeypatch.setattr(env_instances, "bounded", bounded_once_building)
    monkeypatch.setattr(env_instances, "_close_when_made", released_once_given_up)
    loop = EnvLoop("marlaas-env-a")

    async def given_up() -> None:
        with pytest.raises(EnvTimeoutError, match="__init__"):  # held in its first of 4
            await new_envs(lambda name, args: made(args), spec, 4, loop)
        assert closes() == [1]  # made after it was given up, closed before it raised
        made.release.clear()
        made.building.clear()
        closings = Closings()
        making = asyncio.ensure_future(
            new_envs(lambda name, args: made(args), spec, 2, loop, closings)
        )
        assert await asyncio.to_thread(made.building.wait, 30.0), "no constructor began"
        making.cancel()  # held in its first of 2
        with pytest.raises(asyncio.CancelledError):
            await making
        await closings.finish()  # in their background

    try:
        asyncio.run(given_up())
        assert closes() == [1, 1]  # one made after each making was given up; no more
    finally:
        made.release.set()
        loop.stop()
        assert loop.join(10.0)


def test_a_job_cancelled_while_its_environments_are_made_closes_each_once(tmp_path):
    """The cancel's AbortGeneration cancels the first turns while their constructors run on
    the job's thread (2 groups x 2 samples x 0.2 s from about t=0; the cancel at 0.3 s):
    those made still are closed, once."""
    loaded = workload(tmp_path, {"a": "SlowToBuild"}, steps=20)
    inbox = Inbox()
    inbox.put(Submit(loaded.jobs[0]), 0.0)
    inbox.put(Cancel("a"), 0.3)
    inbox.close()
    result = run(tmp_path, loaded, inbox)
    assert result.jobs["a"].state == "cancelled"
    assert closed_once(), closes()


@pytest.mark.parametrize("threads", [True, False], ids=["env-threads", "run-loop"])
@pytest.mark.parametrize("fail", ["reset", "step"])
def test_a_close_waits_for_the_other_calls_of_its_group(fail, threads):
    """A group's calls run at once: when one fails, its siblings still running are cancelled
    and waited for before the failure goes on, so that no close (nor a retry) runs beside a
    call of the same instance (a sibling's reset went on after the group's closes: its
    process, started after its close, leaked)."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.work import EnvStep, Generate
    from marlaas.executors.env_contract import EnvCallError
    from marlaas.executors.episode_runner import EpisodeRunner
    from tests.episode_fakes import CharFormat, OneTokenEngine

    closing_envs.forget()
    closing_envs.Overlaps.OVERLAPS.clear()
    env = {"name": f"{ENVS}:Overlaps", "args": {"fail": fail}, "timeout_s": 5.0}
    runner = EpisodeRunner({"a": JobSpec(name="a", tenant="a", env=env)}, CharFormat(),
                           max_model_len=4096, seed=0, env_threads=threads)  # fmt: skip
    runner.admit("a", 0)

    async def scenario() -> None:
        first = Generate(1, "a", 0, 0, 0, "e", 0, 2, 0, 4)
        with pytest.raises(EnvCallError, match=f"this {fail} fails"):
            await runner.generate(first, OneTokenEngine())
            await runner.env_step(EnvStep(2, "a", 0, 0, 0, 2, True))
        runner.release_job("a")  # the job failed
        assert await runner.close() == []
        await asyncio.sleep(2 * closing_envs.Overlaps.CALL_S)  # a call left running ends

    asyncio.run(scenario())
    assert closing_envs.Overlaps.OVERLAPS == []
    assert closed_once(), closes()


@pytest.mark.parametrize("threads", [True, False], ids=["env-threads", "run-loop"])
def test_a_close_waits_for_a_call_given_up_on_to_end(threads):
    """A step given up at its bound is cancelled, and ends at its own pace (its cleanup takes
    0.2 s): the close of its instance, queued meanwhile on its loop, runs after it, not beside
    it (it ran at once, while the step still stopped its process). The bound is the step's
    10 s by far and the reset's 0.2 s by a loaded machine's margin (at 0.3 s, the reset on a
    new thread of the job's was given up now and then beside two busy processes)."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.work import EnvStep, Generate
    from marlaas.executors.env_contract import EnvTimeoutError
    from marlaas.executors.episode_runner import EpisodeRunner
    from tests.episode_fakes import CharFormat, OneTokenEngine

    closing_envs.forget()
    closing_envs.Overlaps.OVERLAPS.clear()
    env = {"name": f"{ENVS}:SlowToCancel", "timeout_s": 2.0}
    runner = EpisodeRunner({"a": JobSpec(name="a", tenant="a", env=env)}, CharFormat(),
                           max_model_len=4096, seed=0, env_threads=threads)  # fmt: skip
    runner.admit("a", 0)

    async def scenario() -> None:
        await runner.generate(Generate(1, "a", 0, 0, 0, "e", 0, 2, 0, 4), OneTokenEngine())
        with pytest.raises(EnvTimeoutError, match="step"):
            await runner.env_step(EnvStep(2, "a", 0, 0, 0, 2, True))
        runner.release_job("a")  # the job failed
        assert await runner.close() == []

    asyncio.run(scenario())
    assert closing_envs.Overlaps.OVERLAPS == []
    assert closed_once(), closes()


def test_evaluate_closes_each_episodes_environment_once(monkeypatch):
    """``marlaas evaluate`` closes each held-out episode's environment, a failed one's too."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.executors import evaluate as evaluation
    from tests.episode_fakes import CharFormat, OneTokenEngine
    from tests.executors.test_env_threads import NoAdapters

    monkeypatch.setattr(evaluation, "ChatFormat", lambda tokenizer, template: CharFormat())
    spec = JobSpec(name="j", tenant="t", env={"name": f"{ENVS}:Counted"})
    closing_envs.forget()
    rows = asyncio.run(evaluation.evaluate(None, NoAdapters(), OneTokenEngine(), prompts=3,
                                           jobs=[spec]))  # fmt: skip
    assert list(rows["correct"]) == [3] and closes() == [1, 1, 1]
    failing = JobSpec(name="f", tenant="t", env={"name": f"{ENVS}:Counted", "args": {"fail": True}})
    closing_envs.forget()
    with pytest.raises(Exception, match="this step fails"):
        asyncio.run(evaluation.evaluate(None, NoAdapters(), OneTokenEngine(), prompts=2,
                                        jobs=[failing]))  # fmt: skip
    assert closes() == [1, 1]
