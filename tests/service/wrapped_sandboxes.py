"""Users' environments that make a code sandbox of their own choosing, for the tests of the
service's sandbox caps (a module of its own: Ray's actors import them by it)."""

from __future__ import annotations

from marlaas.envs.base import Environment, StepResult
from marlaas.envs.python_exec import PythonExecEnv
from marlaas.envs.sandbox import SandboxLimits, run_python

ASKED_MB = 4096
"""The address space these environments give their sandboxes [MiB]: above the caps here."""


class WrapsPythonExec(Environment):
    """A user's environment holding a ``python_exec`` inside it, with its own ``memory_mb``:
    the service's check of a job's ``env.args`` never saw it."""

    options = ("memory_mb",)

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.inner = PythonExecEnv({"memory_mb": self._arg("memory_mb", ASKED_MB, int)})

    async def reset(self, seed: int) -> str:
        return await self.inner.reset(seed)

    async def step(self, action: str) -> StepResult:
        return await self.inner.step(action)


class MakesItsSandbox(Environment):
    """A user's environment that makes its sandbox's limits as it runs (none are there to see
    when it is made): only where the sandbox is made can they be checked."""

    async def reset(self, seed: int) -> str:
        return "print 1"

    async def step(self, action: str) -> StepResult:
        result = await run_python("print(1)", {}, SandboxLimits(memory_mb=ASKED_MB))
        return StepResult("", float(result.stdout.strip() == b"1"), True, {})
