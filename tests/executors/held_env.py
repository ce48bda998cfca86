"""An environment that holds a real run at a point the test chooses: the tests that signal or
kill ``marlaas train`` after its first durable steps need it still training then, on any
machine. A wait of a fixed time per step (an env latency) only makes that likely: a test
process starved on a loaded machine could see a fast run end first, and the signal find no
run (the run trained to its end, exit 0) or the kill find a finished one."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

from marlaas.envs.target_char import TargetCharEnv

HOLD_POLL_S = 0.02
"""How often a held step looks for its release file [s]."""
HELD_ORPHAN_EXIT = 3
"""The exit status of a held run whose parent (the test) ended without releasing it. The
tests release and kill their runs in a ``finally``; this is for a test process killed
outright, whose ``finally`` never ran."""


class HeldTargetChar(TargetCharEnv):
    """``target_char``, except that each step past the first ``after`` steps taken in this
    process waits until the file ``release`` exists (then scores as ``target_char``). Steps
    are counted over every instance of the process, whatever its job."""

    options = (*TargetCharEnv.options, "release", "after")
    _taken = itertools.count()  # next() is atomic: instances step on their jobs' threads

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.release = Path(self._arg("release", "", str))
        self.after: int = self._arg("after", 0, int, 0, 10**6)

    async def step(self, action: str):
        if next(HeldTargetChar._taken) >= self.after:
            parent = os.getppid()
            while not self.release.exists():
                if os.getppid() != parent:  # the test process is gone (killed): no release
                    os._exit(HELD_ORPHAN_EXIT)  # will come, and a held run would wait for ever
                await asyncio.sleep(HOLD_POLL_S)
        return await super().step(action)
