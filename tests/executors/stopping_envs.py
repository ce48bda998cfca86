"""Environments whose close holds or interrupts a run's stop (loaded by import path in the
tests of marlaas.executors.episode_runner's close), counted as tests.executors.closing_envs
counts them: a close is counted when it is called."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import ClassVar

from marlaas.interrupts import Interrupted
from tests.executors.closing_envs import Counted


class ClosesSlowly(Counted):
    """A close that takes ``CLOSE_S`` (a process stopped, a file flushed), awaiting; the
    instances whose close ran to its end are in ``ENDED``."""

    CLOSE_S = 0.2
    ENDED: ClassVar[set[int]] = set()
    """id() of each instance whose close returned."""

    async def close(self) -> None:
        await super().close()
        await asyncio.sleep(self.CLOSE_S)
        self.ENDED.add(id(self))


class InterruptedOnClose(Counted):
    """A close that raises the run's interruption (after counting): option ``raises``,
    ``SIGINT`` (KeyboardInterrupt, the default) or ``SIGTERM`` (Interrupted)."""

    options = ("raises",)

    async def close(self) -> None:
        await super().close()
        if self.args.get("raises") == "SIGTERM":
            raise Interrupted(15)
        raise KeyboardInterrupt


class SlowToMakeSlowToClose(ClosesSlowly):
    """A constructor that takes ``MAKE_S`` of its thread (a blocking connect; set
    ``building`` when it starts), and a close that takes ``CLOSE_S``."""

    MAKE_S = 0.6
    CLOSE_S = 0.8
    building = threading.Event()

    def __init__(self, args=None) -> None:
        self.building.set()
        time.sleep(self.MAKE_S)
        super().__init__(args)
