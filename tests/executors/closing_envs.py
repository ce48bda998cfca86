"""Environments that count their ``close()`` calls (loaded by import path in the tests of
marlaas.executors.env_instances), and a real executor's backends faked with no model: an engine
that samples one token per sequence, a trainer that counts versions."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import ClassVar

from marlaas.envs import Environment, StepResult
from marlaas.executors.rollout import Completion, TrainStats

CLOSED: dict[int, int] = {}
"""id(instance) -> how many times its close() was called, for every instance made since the
last :func:`forget` (0: never)."""
MADE: list[Environment] = []
"""Every instance made since the last :func:`forget` (kept alive: ids stay unique)."""
_LOCK = threading.Lock()


def forget() -> None:
    """Start counting afresh (a workload's load makes an instance to check its options)."""
    with _LOCK:
        CLOSED.clear()
        MADE.clear()


def closes() -> list[int]:
    """How many times each instance made was closed, in the order they were made."""
    with _LOCK:
        return [CLOSED[id(env)] for env in MADE]


class Counted(Environment):
    """Reward 1 at once, one turn; counts its closes. Option ``fail``: its step raises."""

    options = ("fail",)

    def __init__(self, args=None) -> None:
        super().__init__(args)
        with _LOCK:
            MADE.append(self)
            CLOSED[id(self)] = 0

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        if self.args.get("fail"):
            raise RuntimeError("this step fails")
        return StepResult("", 1.0, True)

    async def close(self) -> None:
        with _LOCK:
            CLOSED[id(self)] += 1


class RaisesOnClose(Counted):
    """A close that raises (after counting)."""

    async def close(self) -> None:
        await super().close()
        raise OSError("the server is gone")


class HangsOnClose(Counted):
    """A close that never returns (after counting): it awaits forever."""

    async def close(self) -> None:
        await super().close()
        await asyncio.sleep(3600)


class BlocksOnClose(Counted):
    """A close that blocks its thread (after counting) until ``release`` is set."""

    release = threading.Event()

    async def close(self) -> None:
        await super().close()
        self.release.wait(30.0)


class FailsToBuild(Counted):
    """Its third instance cannot be made."""

    def __init__(self, args=None) -> None:
        if len(MADE) % 3 == 2:
            raise ValueError("no third one")
        super().__init__(args)


class SlowToBuild(Counted):
    """A constructor that takes ``BUILD_S`` of its thread (a blocking connect) before it is
    made."""

    BUILD_S = 0.2
    building = threading.Event()
    """Set when one starts to be made."""

    def __init__(self, args=None) -> None:
        self.building.set()
        time.sleep(self.BUILD_S)
        super().__init__(args)


class HeldToBuild(Counted):
    """A constructor that holds its thread (a blocking connect) until ``release`` is set, at
    most ``HOLD_S``: a test gives up on its making while it is held, whatever the machine's
    pace, and releases it after."""

    HOLD_S = 30.0
    release = threading.Event()
    building = threading.Event()
    """Set when one starts to be made."""

    def __init__(self, args=None) -> None:
        self.building.set()
        self.release.wait(self.HOLD_S)
        super().__init__(args)


class Overlaps(Counted):
    """Option ``fail`` ("reset" or "step"): that call of a group's first instance (of 2)
    raises at once; every other call takes 0.2 s (a process started, a file written). Records
    in ``OVERLAPS`` a close that came while one of its calls ran, and a call that ended after
    its close."""

    OVERLAPS: ClassVar[list[str]] = []
    CALL_S = 0.2

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.first = len(MADE) % 2 == 1
        self.busy = 0
        self.closed = False

    async def reset(self, seed: int) -> str:
        return await self._call("reset")

    async def step(self, action: str) -> StepResult:
        await self._call("step")
        return StepResult("", 1.0, True)

    async def _call(self, what: str) -> str:
        if self.first and self.args.get("fail") == what:
            raise RuntimeError(f"this {what} fails")
        self.busy += 1
        try:
            await asyncio.sleep(self.CALL_S)
        finally:
            self.busy -= 1
        if self.closed:
            self.OVERLAPS.append(f"{what} ended after its close")
        return "go"

    async def close(self) -> None:
        if self.busy:
            self.OVERLAPS.append("close while a call ran")
        self.closed = True
        await super().close()


class SlowToCancel(Overlaps):
    """A step that takes 10 s and, when cancelled, takes ``CALL_S`` to clean up (a process
    stopped) before it ends."""

    async def step(self, action: str) -> StepResult:
        self.busy += 1
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            await asyncio.sleep(self.CALL_S)
            raise
        finally:
            self.busy -= 1
        return StepResult("", 1.0, True)


# ------------------------------------------------------------------- backends with no model
class ByteTokenizer:
    """One token per character, no chat template."""

    chat_template = None
    eos_token = ""

    def __call__(self, text: str, add_special_tokens: bool = True):
        return type("Encoded", (), {"input_ids": [ord(c) % 256 for c in text]})()


class OneTokenEngine:
    """Samples one token per sequence; holds what it was told to publish."""

    def __init__(self) -> None:
        self.tokenizer = ByteTokenizer()
        self.held: set[tuple[str, int]] = set()

    async def generate(self, adapter, version, prompts, n, max_new_tokens, temperature, seed):
        await asyncio.sleep(0)
        return [[Completion(tuple(p), (97,), (-0.1,), "a", "stop") for _ in range(n)]
                for p in prompts]  # fmt: skip

    async def publish(self, adapter: str, version: int, adapter_dir: str) -> None:
        self.held.add((adapter, version))

    async def retire(self, adapter: str, version: int) -> None:
        self.held.discard((adapter, version))

    async def resident(self) -> set[tuple[str, int]]:
        return set(self.held)

    async def close(self) -> None:
        return None


class CountingTrainer:
    """A trainer that writes empty adapter folders and counts each job's versions."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}

    @property
    def jobs(self) -> list[str]:
        return list(self.versions)

    def write_initial_adapter(self, job, rank, alpha, seed, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def add_job(self, job, rank, alpha, lr, *, init_dir, version, **_settings) -> None:
        self.versions[job] = version

    def version(self, job: str) -> int:
        return self.versions[job]

    def remove_job(self, job: str) -> None:
        self.versions.pop(job, None)

    def train_step(self, job: str, samples) -> TrainStats:
        self.versions[job] += 1
        return TrainStats(job, self.versions[job], 0.0, len(samples), len(samples), 1.0, 1.0,
                          1.0, 0.0, 0.0)  # fmt: skip

    def save_adapter(self, job, version, path: Path, overwrite=False, optimizer=False) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return path

    def interrupt(self) -> None:
        return None


class FakeBackends:
    """The :class:`~marlaas.executors.placement.Backends` of one engine and one trainer of
    the cluster, with no model; environments made in this process."""

    kind = "local"

    def __init__(self) -> None:
        from marlaas.envs import make_env

        self.engines: dict = {}
        self.trainers: dict = {}
        self.tokenizer = ByteTokenizer()
        self.make_env = make_env

    async def open(self, sizing, cluster, max_model_len: int, seed: int) -> None:
        self.engines = {engine.name: OneTokenEngine() for engine in cluster.engines}
        self.trainers = {trainer.name: CountingTrainer() for trainer in cluster.trainers}

    def owns(self, engine: str) -> bool:
        return True

    async def close(self) -> None:
        return None


def model_dir(tmp_path: Path) -> Path:
    """A folder whose config.json gives the model's context (no weights: nothing loads)."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    return folder
