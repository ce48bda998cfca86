"""``--ray`` as a hostile user meets it: environments that break their contract, hang or end
their actor's process; a run stopped while a training step is in flight; a job with a
dataset; a sweep whose policy raises or ends its worker. Each behaves as it does in process
(marlaas.executors.env_contract, the process pool of marlaas.sweep), on a local Ray cluster this
module starts (no model: dummy actors and environments, a few seconds each)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

import ray

from marlaas.core.policies import JobView, Policy
from marlaas.datasets.problems import Problem
from marlaas.envs import make_env
from marlaas.envs.base import Environment, StepResult
from marlaas.executors import ray_actors
from marlaas.executors.env_contract import EnvCallError, EnvResultError, EnvTimeoutError
from marlaas.executors.episodes import start_group, step_envs
from marlaas.executors.ray_actors import (
    EnvActor,
    EnvActorDied,
    EnvPool,
    RemoteEnv,
    TrainerForwarder,
)
from marlaas.executors.ray_backends import RayBackends
from marlaas.ray_cluster import ray_session
from tests.executors.test_env_contract import Chars, episode

SMALL = Path(__file__).resolve().parents[2] / "traces" / "small.yaml"
FAST = ["--set=jobs.*.rl.steps=2", "--set=jobs.*.rl.prompts_per_step=2"]
HERE = "tests.executors.test_ray_audit"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the module (2 logical CPUs); this module's environments and
    actors travel by value (pytest imports it under a name the actors cannot import)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with ray_session(None, num_cpus=2):
            yield
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def pool(actors: int = 1, concurrency: int = 2) -> EnvPool:
    """A pool of environment actors, as RayBackends makes it."""
    return EnvPool([EnvActor.options(num_cpus=0, max_concurrency=concurrency).remote()
                    for _ in range(actors)])  # fmt: skip


class Misbehaves(Environment):
    """``args["mode"]`` picks what its reset or step does wrong."""

    async def reset(self, seed: int) -> str:
        if self.args.get("mode") == "reset raises":
            raise ValueError("reset boom")
        return "go"

    async def step(self, action: str):
        mode = self.args.get("mode")
        if mode == "exit":
            sys.exit(3)
        if mode == "os._exit":
            os._exit(5)
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "block":
            time.sleep(3600)  # holds the actor's thread: no cancellation reaches it
        return StepResult("", 1.0, True, {"pid": os.getpid()})


class PlainStep(Misbehaves):
    def step(self, action: str):  # not async: the interface says async def
        return StepResult("", 1.0, True)


def remote(env_pool: EnvPool, cls=Misbehaves, mode: str | None = None) -> RemoteEnv:
    """An episode's environment, run in ``env_pool``."""
    return RemoteEnv(env_pool, cls({"mode": mode}))


def step_one(env: Environment, timeout_s: float = 20.0):
    """(observation tokens, mean reward) of one step of a one-sample group."""
    group = episode(env)
    return asyncio.run(step_envs(group, last_turn=False, fmt=Chars(), timeout_s=timeout_s)), group


def test_a_sync_step_and_sys_exit_are_the_in_process_errors_and_the_actor_lives(ray_cluster):
    """The contract checks of a call in process hold in the actor: a ``def step`` is
    EnvResultError (not Ray's "can't be used in 'await' expression"), and ``sys.exit`` in a
    step is EnvResultError, not the end of the actor (it once died and restarted)."""
    envs = pool()
    (_, _), group = step_one(remote(envs))
    pid = group.samples[0].info["pid"]
    with pytest.raises(EnvResultError, match=r"PlainStep: step\(\) returned StepResult, not a "
                       r"coroutine \(declare it async def\)$"):  # fmt: skip
        step_one(remote(envs, PlainStep))
    with pytest.raises(EnvResultError, match=r"Misbehaves: step\(\) raised SystemExit\(3\); an "
                       "environment must not end the process"):  # fmt: skip
        step_one(remote(envs, mode="exit"))
    (_, _), group = step_one(remote(envs))
    assert group.samples[0].info["pid"] == pid  # the same actor process: it did not die


def test_a_reset_error_is_the_environments_own_not_rays_traceback(ray_cluster):
    """What a ``reset`` raised in the actor is raised as in process (as ``step``'s was): an
    EnvCallError naming the environment, the call and the ValueError with its message, not
    RayTaskError(ValueError) and its traceback."""
    env = remote(pool(), mode="reset raises")
    with pytest.raises(EnvCallError) as err:
        asyncio.run(start_group("j", 0, 0, [env], 1, Chars(), timeout_s=20))
    name = f"{Misbehaves.__module__}:Misbehaves"
    assert str(err.value) == f"environment {name}: reset() raised ValueError: reset boom"


def test_a_job_with_a_dataset_resets_on_its_problem_in_the_actors(ray_cluster):
    """``reset_problem`` runs the user's environment in the actor (the proxy once answered
    "RemoteEnv draws its own prompts; it takes no dataset" to every dataset job)."""
    env = RemoteEnv(pool(), make_env("exact_match", {}))
    prompt = asyncio.run(env.reset_problem(Problem("Say the word: apple", "apple")))
    assert "apple" in prompt
    result = asyncio.run(env.step("apple"))
    assert result.reward == 1.0 and result.done


def test_a_hung_step_given_up_on_is_cancelled_in_the_actor(ray_cluster):
    """A step past its ``env.timeout_s`` is EnvTimeoutError and is cancelled in the actor,
    so that the actor serves the next step (it once kept each hung call, and an actor of
    N concurrent calls stopped answering after N hangs)."""
    envs = pool(concurrency=1)
    with pytest.raises(EnvTimeoutError, match=r"step\(\) of job 'j' did not return within 1 s"):
        step_one(remote(envs, mode="hang"), timeout_s=1.0)
    started = time.monotonic()
    (_, reward), _ = step_one(remote(envs), timeout_s=20.0)
    assert reward == 1.0 and time.monotonic() - started < 15


class BlocksItsThread(Environment):
    """A step that tells the test it began (it writes its actor's pid to the file named by
    ``args["began"]``), then blocks the actor's thread (``time.sleep``: no cancellation
    reaches it)."""

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        Path(self.args["began"]).write_text(str(os.getpid()))
        time.sleep(3600)
        return StepResult("", 1.0, True)


class CountsItsCalls:
    """An actor's handle that sets ``second`` once a second call was sent to the actor."""

    def __init__(self, actor) -> None:
        self.actor, self.sent, self.second = actor, 0, threading.Event()
        self.call = SimpleNamespace(remote=self._remote)

    def _remote(self, *args):
        ref = self.actor.call.remote(*args)
        self.sent += 1
        if self.sent == 2:
            self.second.set()
        return ref


WAIT_S = 120.0
"""How long a condition of the tests below is waited for before they fail [s] (no test
waits that long unless what it checks is broken)."""


def test_a_step_that_blocks_its_actors_thread_is_given_up_on_and_the_actor_restarts(
    ray_cluster, monkeypatch, tmp_path
):
    """A step that blocks the actor's thread (``time.sleep`` in an async step) never sees its
    cancellation; the actor is killed once the grace has passed, and Ray restarts it: the
    step queued behind the blocked one does not wait behind it for good (they once did): it
    fails as on a dead actor (the run retries it), or, sent as the actor was killed, is
    served by the restarted actor; and the next is served.

    Counted, not timed: the step is given up on once it has begun in the actor (given up at
    a 1 s bound, a step that had not begun on a loaded host was cancelled before it ran, and
    nothing was killed), and the kill is held until the next step was sent (a test process
    starved past the grace sent it to the restarted actor, which served it: "DID NOT RAISE
    EnvActorDied", ci81 at a 1 s grace; 3 s did not rule it out)."""
    held = CountsItsCalls(pool(concurrency=1).actors[0])
    envs = EnvPool([held])
    kill = ray_actors._kill_if_stuck

    def kill_once_the_next_step_is_sent(actor, ref) -> None:
        held.second.wait(WAIT_S)
        kill(actor.actor, ref)

    monkeypatch.setattr(ray_actors, "_kill_if_stuck", kill_once_the_next_step_is_sent)
    monkeypatch.setattr(ray_actors, "ENV_CANCEL_GRACE_S", 0.5)  # the blocked step never ends
    began = tmp_path / "began"
    blocked = RemoteEnv(envs, BlocksItsThread({"began": str(began)}))

    async def give_up_once_begun() -> None:
        group = episode(blocked)
        step = asyncio.ensure_future(step_envs(group, False, Chars(), timeout_s=WAIT_S))
        deadline = time.monotonic() + WAIT_S
        while not began.exists() and not step.done():
            assert time.monotonic() < deadline, "the step did not begin in its actor"
            await asyncio.sleep(0.05)
        step.cancel()  # given up on, as at its bound or when its group fails
        with pytest.raises(asyncio.CancelledError):
            await step

    asyncio.run(give_up_once_begun())
    blocked_pid = int(began.read_text())
    try:
        (_, reward), group = step_one(remote(envs), timeout_s=WAIT_S)
    except EnvActorDied as err:  # queued behind the blocked step, when its actor was killed
        assert "Misbehaves: the Ray actor running its step" in str(err)
    else:  # sent as the actor was killed: Ray sent it to the restarted actor
        assert reward == 1.0 and group.samples[0].info["pid"] != blocked_pid
    assert served_once_restarted(envs) == 1.0


def test_an_environment_that_ends_its_actor_is_named_and_the_actor_restarts(ray_cluster):
    """``os._exit`` in a step ends the actor's process: one error naming the environment and
    the call (the work is retried, as any failed work); Ray restarts the actor."""
    envs = pool()
    name = f"{Misbehaves.__module__}:Misbehaves"
    with pytest.raises(RuntimeError, match=rf"^environment {name}: the Ray actor running its "
                       r"step\(\) died \("):  # fmt: skip
        step_one(remote(envs, mode="os._exit"))
    assert served_once_restarted(envs) == 1.0


def served_once_restarted(envs: EnvPool, within_s: float = 60.0) -> float:
    """The reward of a step served by ``envs``'s actor once Ray has restarted it: a call while
    it restarts fails as on a dead actor (a run retries it), and is tried again here."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            (_, reward), _ = step_one(remote(envs), timeout_s=within_s)
            return reward
        except RuntimeError as err:
            if "is restarting" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class HoldsALock(Environment):
    """An environment whose state does not pickle: a lock, made in ``__init__`` or, with
    ``args["later"]``, in ``reset`` (in the actor)."""

    def __init__(self, args=None) -> None:
        super().__init__(args)
        if not self.args.get("later"):
            self.lock = threading.Lock()

    async def reset(self, seed: int) -> str:
        self.lock = threading.Lock()
        return "go"

    async def step(self, action: str) -> StepResult:
        return StepResult("", 1.0, True)


def test_a_state_that_does_not_pickle_names_the_job_environment_and_attribute():
    """An environment whose state does not pickle, under ``--ray``: one EnvStateError naming
    the job, the environment, the call and the attribute that did not pickle, before anything
    is sent to an actor (no cluster needed: the stub pickles its arguments as Ray's
    ``.remote`` does, which raises TypeError). It was Ray's TypeError, "Could not serialize the
    argument <...HoldsALock object at 0x...>" and a page of its serialization checker."""
    sent = []
    actor = SimpleNamespace(call=SimpleNamespace(remote=lambda *a: sent.append(sends(a))))
    env = RemoteEnv(EnvPool([actor]), HoldsALock({}))
    with pytest.raises(EnvResultError) as err:
        asyncio.run(start_group("j", 0, 0, [env], 1, Chars(), timeout_s=20))
    assert type(err.value).__name__ == "EnvStateError" and not sent
    name = f"{HoldsALock.__module__}:HoldsALock"
    assert str(err.value) == (
        f"job 'j': environment {name}: reset(): its state cannot be pickled to "
        "travel to its Ray actor (attribute 'lock': TypeError: cannot pickle '_thread.lock' "
        "object); an environment run on Ray must pickle: create such an object in each call, "
        "or leave it out in __getstate__"
    )


def sends(arguments: tuple) -> bytes:
    """What Ray's ``.remote`` does first with a call's arguments: pickle them."""
    return ray.cloudpickle.dumps(arguments)


class LeavesOutItsLock(HoldsALock):
    """Leaves its lock out of the state it pickles, as the error advises, but holds a socket."""

    def __init__(self, args=None) -> None:
        super().__init__(args)
        import socket

        self.connection = socket.socket()

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "lock"}


def test_the_attribute_named_is_one_of_the_state_the_environment_pickles():
    env = LeavesOutItsLock({})
    try:
        actor = SimpleNamespace(call=SimpleNamespace(remote=lambda *a: sends(a)))
        with pytest.raises(EnvResultError, match="attribute 'connection': TypeError: cannot "
                           "pickle 'socket' object"):  # fmt: skip
            asyncio.run(start_group("j", 0, 0, [RemoteEnv(EnvPool([actor]), env)], 1, Chars()))
    finally:
        env.connection.close()


class RefusesToPickle(HoldsALock):
    """Its own ``__reduce__`` refuses (PicklingError, not TypeError)."""

    def __init__(self, args=None) -> None:
        super().__init__({"later": True})

    def __reduce__(self):
        import pickle

        raise pickle.PicklingError("not this one")


def test_a_pickling_error_other_than_a_type_error_is_the_same_error():
    actor = SimpleNamespace(call=SimpleNamespace(remote=lambda *a: sends(a)))
    env = RemoteEnv(EnvPool([actor]), RefusesToPickle())
    with pytest.raises(EnvResultError, match=r"reset\(\): its state cannot be pickled to "
                       r"travel to its Ray actor \(PicklingError: not this one\)"):  # fmt: skip
        asyncio.run(start_group("j", 0, 0, [env], 1, Chars()))


def test_a_state_that_stops_pickling_in_the_actor_is_named_too(ray_cluster):
    """The same when the state stops pickling in the actor (a lock made in ``reset``): it
    was Ray's bare TypeError("cannot pickle '_thread.lock' object"), naming nothing. A
    TypeError the environment raises itself is raised as it is."""
    env = RemoteEnv(pool(), HoldsALock({"later": True}))
    with pytest.raises(EnvResultError) as err:
        asyncio.run(start_group("j", 0, 0, [env], 1, Chars(), timeout_s=20))
    name = f"{HoldsALock.__module__}:HoldsALock"
    assert str(err.value) == (
        f"job 'j': environment {name}: reset(): the state it left cannot be "
        "pickled to travel back from its Ray actor (TypeError: cannot pickle '_thread.lock' "
        "object); an environment run on Ray must pickle: create such an object in each call, "
        "or leave it out in __getstate__"
    )
    raises = RemoteEnv(pool(), RaisesTypeError({}))
    with pytest.raises(EnvCallError, match=r"RaisesTypeError: reset\(\) raised TypeError: my "
                       "own TypeError$"):  # fmt: skip
        asyncio.run(start_group("j", 0, 0, [raises], 1, Chars(), timeout_s=20))


class RaisesTypeError(Environment):
    """Its reset raises a TypeError of its own."""

    async def reset(self, seed: int) -> str:
        raise TypeError("my own TypeError")

    async def step(self, action: str) -> StepResult:
        return StepResult("", 1.0, True)


@ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=2)
class SlowTrainer:
    """A TrainerActor whose every call takes 60 s."""

    def get_incarnation(self) -> str:
        return "first"

    def call(self, incarnation: str, method: str, *args, **kwargs):
        time.sleep(60)


def test_closing_the_backends_ends_a_training_call_in_flight_at_once(ray_cluster):
    """Ctrl-C or SIGTERM of a ``--ray`` run while a training step runs on a thread: the
    backends end the actors, and the step's call fails at once (it once waited 300 s for a
    restart that never came, and the stopped run hung that long)."""
    backends = RayBackends(Path("."), "hf", env_workers=1)
    actor = SlowTrainer.options(num_cpus=0).remote()
    forwarder = TrainerForwarder("train/0", actor, ray.get(actor.get_incarnation.remote()))
    backends.trainers["train/0"], backends.actors["train/0"] = forwarder, actor
    raised: list[BaseException] = []

    def train() -> None:
        try:
            forwarder.train("job", [])
        except BaseException as err:
            raised.append(err)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    time.sleep(1.0)  # the call is running in the actor
    started = time.monotonic()
    asyncio.run(backends.close())
    thread.join(20)
    assert not thread.is_alive(), "the training call still waits for its ended actor"
    assert time.monotonic() - started < 20
    assert type(raised[0]).__name__ == "ActorEnded"
    assert "train/0: its Ray actor was ended" in str(raised[0])


class Boom(Policy):
    """Its key raises for every job of a run (not for the probe job of its loading)."""

    def key(self, job: JobView) -> tuple:
        if job.name != "probe":
            raise RuntimeError("boom")
        return (job.index,)


class Dies(Policy):
    """Its key ends the process for every job of a run (not for the probe job)."""

    def key(self, job: JobView) -> tuple:
        if job.name != "probe":
            os._exit(3)
        return (job.index,)


def sweep(policy: str, out: Path) -> int:
    """``marlaas sweep`` of small.yaml, fair and ``policy``, on the module's cluster."""
    from marlaas.cli import main

    return main(["sweep", str(SMALL), "--policies", f"fair,{HERE}:{policy}", "--seeds", "0",
                 *FAST, "--quiet", "--ray", "--out", str(out)])  # fmt: skip


def test_sweep_on_ray_a_policys_error_is_its_one_line(ray_cluster, tmp_path, capsys):
    """A policy that raises in a Ray task: the process pool's one line naming the policy, the
    method and the job (it was Ray's traceback, ANSI colours and all, on one line)."""
    assert sweep("Boom", tmp_path / "s") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"marlaas: error: policy '{HERE}:Boom': key(job 'math-a') raised "
                   "RuntimeError: boom")  # fmt: skip


def test_sweep_on_ray_a_worker_that_dies_is_one_line_naming_the_run(ray_cluster, tmp_path, capsys):
    """A policy that ends its Ray worker's process: one line naming the run, as the process
    pool says it, at once (it was an uncaught WorkerCrashedError, after Ray ran the task
    three more times)."""
    started = time.monotonic()
    assert sweep("Dies", tmp_path / "s") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"marlaas: error: a Ray task failed while it ran run jobs4-{HERE}:Dies"
                          "-seed0 (workload small-4x8, policy ")  # fmt: skip
    assert "WorkerCrashedError" in err
    assert time.monotonic() - started < 40


@pytest.mark.parametrize("address", [":", "host:abc", "localhost:0", "ray://:1"])
def test_a_malformed_address_is_one_line_before_ray_starts(address, tmp_path, capfd):
    """``--ray`` of no HOST:PORT: one line saying what an address is, before Ray is asked
    (Ray logged a traceback for ``:`` and then refused it; ``ray://:1`` timed out after a
    minute)."""
    from marlaas.cli import main

    started = time.monotonic()
    args = ["sweep", str(SMALL), "--policies", "fifo", "--ray", address, "--out", str(tmp_path)]
    assert main(args) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [f"marlaas: error: --ray {address}: not a cluster address (give `auto`, "
                   "HOST:PORT, ray://HOST:PORT, or nothing for a local cluster)"]  # fmt: skip
    assert time.monotonic() - started < 10


class SlowToOpen:
    """Backends whose ``open`` waits (for a placement group, say), then starts actors; its
    ``close`` takes a while too (Ray's kills); records what ``open`` did after ``close``."""

    kind = "ray"

    def __init__(self) -> None:
        self.engines: dict = {}
        self.trainers: dict = {}
        self.tokenizer = SimpleNamespace(chat_template=None, eos_token="")
        self.make_env = make_env
        self.closed = False
        self.started_after_close = False

    async def open(self, sizing, cluster, max_model_len: int, seed: int) -> None:
        await asyncio.sleep(0.2)  # Ctrl-C lands here
        self.started_after_close = self.closed  # the actors it would start now

    async def close(self) -> None:
        self.closed = True
        await asyncio.sleep(0.5)


def test_ctrl_c_while_the_actors_start_stops_the_setup_before_closing(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Ctrl-C while a ``--ray`` run starts its actors: the setup is cancelled before the
    backends close, so it starts no actor after (it went on during the close and failed on
    the removed placement group: "unhandled exception during asyncio.run() shutdown", a
    traceback, before the run's own line)."""
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.real import RealExecutor

    backends = SlowToOpen()
    executor = RealExecutor(None, None, store=AdapterStore(tmp_path / "adapters"),
                            backends=backends, model_dir=tiny_model_dir)  # fmt: skip
    real_runner = asyncio.Runner

    class CtrlCRunner(real_runner):
        """asyncio.Runner whose loop gets a Ctrl-C (as marlaas.interrupts raises it) 0.1 s
        into the setup."""

        def run(self, coro, **kwargs):
            if getattr(coro, "__name__", "") == "_setup":
                self.get_loop().call_later(0.1, _interrupt)
            return super().run(coro, **kwargs)

    monkeypatch.setattr(asyncio, "Runner", CtrlCRunner)
    with pytest.raises(KeyboardInterrupt):
        executor.open()
    assert backends.closed and not backends.started_after_close


def _interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("address", ["ray://head", "ray://[::1]", "auto"])
def test_a_client_address_without_a_port_is_left_to_ray(address):
    """``ray://HOST`` (an IPv6 host in brackets too) takes the Ray client's default port:
    not refused as malformed."""
    from marlaas.ray_cluster import _check_reachable

    assert _check_reachable(address) is None


class ClosesInActor(Misbehaves):
    """Its close records the process it ran in (``mode`` "close raises": it raises)."""

    closed_in: int | None = None

    async def close(self) -> None:
        self.closed_in = os.getpid()
        if self.args.get("mode") == "close raises":
            raise OSError("the sandbox is gone")


def test_a_close_runs_in_the_actor_and_what_it_raises_is_a_warning(ray_cluster, caplog):
    """Under Ray an environment's close runs in the pool's actors, as its other calls; what it
    raises is one warning naming the environment and the job, as in process."""
    from marlaas.executors.env_instances import close_envs

    envs = pool()
    closing, raising = remote(envs, ClosesInActor), remote(envs, ClosesInActor, "close raises")
    with caplog.at_level("WARNING", logger="marlaas.real"):
        assert asyncio.run(close_envs([closing], "j", 20.0, None)) == 0
        assert asyncio.run(close_envs([raising], "j", 20.0, None)) == 1
    assert closing.env.closed_in not in (None, os.getpid())  # an actor's process
    name = f"{ClosesInActor.__module__}:ClosesInActor"
    assert caplog.records[-1].getMessage() == (
        f"environment {name} of job 'j': close() raised OSError: the sandbox is gone; the run "
        "goes on"
    )


class DiesOnFirstClose(Misbehaves):
    """Its first close ends its actor's process (``args["marker"]``, a file, says whether it
    came before); the next one writes "closed" there."""

    async def close(self) -> None:
        marker = Path(self.args["marker"])
        if not marker.exists():
            marker.write_text("died")
            os._exit(7)
        marker.write_text("closed")


def test_a_close_whose_actor_died_is_made_again_in_a_live_one(ray_cluster, tmp_path, caplog):
    """An actor that dies during a close leaves the environment's state as it was before it
    (only a call that returned brings its state back): the close is made again, in the pool's
    next actor (the dead one restarted), as a step on a dead actor is retried; it was one
    warning, and what the state named (a remote sandbox) was never released."""
    from marlaas.executors.env_instances import close_envs

    marker = tmp_path / "closed"
    env = RemoteEnv(pool(), DiesOnFirstClose({"marker": str(marker)}))
    with caplog.at_level("WARNING", logger="marlaas.real"):
        assert asyncio.run(close_envs([env], "j", 30.0, None)) == 0
    assert marker.read_text() == "closed"
    assert not [r for r in caplog.records if "close()" in r.getMessage()]


class SlowToCancel(Environment):
    """Its first step (of all its copies) takes an hour; cancelled, it takes 1 s to stop
    what it started. Each call notes its start (a step numbered by the copy of the state it
    runs on) and such a stop in ``args["journal"]``, a file (the copies run in the actors'
    processes)."""

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.steps = 0

    def note(self, what: str) -> None:
        with open(self.args["journal"], "a") as journal:
            journal.write(f"{what}\n")

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        first = not Path(self.args["journal"]).exists()  # the first step of any copy
        self.steps += 1
        self.note(f"step {self.steps} starts")
        if first:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await asyncio.sleep(1.0)
                self.note("step 1 stopped")
                raise
        return StepResult("", 1.0, True)

    async def close(self) -> None:
        self.note("close")


@pytest.mark.parametrize("then", ["close", "step"])
def test_a_call_given_up_on_has_ended_in_its_actor_before_the_instances_next_call(
    ray_cluster, tmp_path, then
):
    """Each call runs on a copy of the environment's state in an actor: a step given up on
    (once it has begun there) runs on in its actor until its cancellation has ended there,
    and the instance's next call (its close, a retried step) waits for it, as in process a
    close waits for the calls given up on (test_env_close). Made at once, it ran in another
    actor beside the given-up copy, on the state from before it: two copies of one
    environment at once."""
    from marlaas.executors.env_contract import env_call
    from marlaas.executors.env_instances import close_envs

    journal = tmp_path / "journal"
    env = RemoteEnv(pool(actors=2), SlowToCancel({"journal": str(journal)}))

    async def scenario() -> None:
        for _ in range(2):  # each actor started (a call sent before would wait for it)
            await env.reset(0)
        step = asyncio.ensure_future(env_call(env, "step", lambda: env.step("x"), "j", WAIT_S))
        deadline = time.monotonic() + WAIT_S
        while not journal.exists() and not step.done():  # given up at a 1 s bound, a step
            assert time.monotonic() < deadline, "the step did not begin in its actor"
            await asyncio.sleep(0.05)  # not begun yet on a loaded host was never run
        step.cancel()  # given up on, as at its bound or when its group fails
        with pytest.raises(asyncio.CancelledError):
            await step
        if then == "close":
            assert await close_envs([env], "j", 20.0, None) == 0
        else:
            result = await env_call(env, "step", lambda: env.step("x"), "j", 20.0, None)
            assert result.reward == 1.0

    asyncio.run(scenario())
    after = "close" if then == "close" else "step 1 starts"  # the state from before the step
    assert journal.read_text().splitlines() == ["step 1 starts", "step 1 stopped", after]


def test_a_next_call_given_up_while_it_waits_for_a_given_up_one_leaves_no_error_unread():
    """A close (or a retried step) given up on while it waited for the instance's call given
    up on before it to end in its actor (RemoteEnv._given_up_ended): that call's end
    (TaskCancelledError, the actor killed) is read, not reported by asyncio as "Future
    exception was never retrieved" with its traceback once collected (no cluster needed: the
    given-up call's ref is a stub)."""
    import concurrent.futures
    import gc

    async def scenario() -> list[str]:
        ended: concurrent.futures.Future = concurrent.futures.Future()  # Ray's, of the ref
        reported: list[str] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        env = RemoteEnv(EnvPool([]), Misbehaves({}))
        env._given_up = SimpleNamespace(future=lambda: ended)  # a step given up on before
        close = asyncio.ensure_future(env.close())
        for _ in range(3):  # waiting for the step given up on to end in its actor
            await asyncio.sleep(0)
        close.cancel()  # given up on at its bound
        with pytest.raises(asyncio.CancelledError):
            await close
        ended.set_exception(RuntimeError("TaskCancelledError: the step was cancelled"))
        for _ in range(3):  # its end handed to this loop
            await asyncio.sleep(0)
        gc.collect()
        return reported

    assert asyncio.run(scenario()) == []


def test_a_call_given_up_on_is_waited_for_by_the_next_even_when_giving_it_up_fails():
    """RemoteEnv noted the call given up on only after the pool had given it up (cancelled in
    its actor, a thread started to kill a stuck one): a give_up that raised (no thread could
    start) left it unnoted, and the instance's next call ran beside the given-up copy (no
    cluster needed: the actor and the ref are stubs)."""

    class FailsToGiveUp(EnvPool):
        def give_up(self, actor, ref) -> None:
            raise RuntimeError("can't start new thread")

    async def scenario():
        ref = asyncio.get_running_loop().create_future()  # the call, as awaited
        actor = SimpleNamespace(call=SimpleNamespace(remote=lambda *args: ref))
        env = RemoteEnv(FailsToGiveUp([actor]), Misbehaves({}))
        step = asyncio.ensure_future(env.step("x"))
        await asyncio.sleep(0)  # sent: awaiting the actor's answer
        step.cancel()  # given up on at its bound
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await step
        return env._given_up is ref

    assert asyncio.run(scenario())
