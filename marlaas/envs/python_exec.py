"""Code tasks: run the model's Python in a sandboxed subprocess and reward passed test cases."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import sys
import tempfile
from typing import Any

from marlaas.envs.base import Environment, StepResult

# (instruction, function name, [(args, expected)]); a user passes their own through args["tasks"].
DEFAULT_TASKS: list[dict[str, Any]] = [
    {
        "prompt": "Write a Python function add(a, b) that returns a + b.",
        "func": "add",
        "tests": [[[1, 2], 3], [[-4, 4], 0], [[10, 5], 15]],
    },
    {
        "prompt": "Write a Python function square(x) that returns x squared.",
        "func": "square",
        "tests": [[[3], 9], [[-2], 4], [[0], 0]],
    },
    {
        "prompt": "Write a Python function reverse(s) that returns the string s reversed.",
        "func": "reverse",
        "tests": [[["abc"], "cba"], [[""], ""], [["ab"], "ba"]],
    },
    {
        "prompt": "Write a Python function is_even(n) that returns True when n is even.",
        "func": "is_even",
        "tests": [[[2], True], [[7], False], [[0], True]],
    },
]

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)

# Runs in the child: the user's code, then the tests; the result line carries a nonce so that
# the user's code cannot fake it by printing.
_HARNESS = """
import json as _json, socket as _socket
def _no_net(*a, **k):
    raise OSError("network disabled in the sandbox")
_socket.socket = _no_net
_socket.create_connection = _no_net
_src = open({code_path!r}).read()
_g = {{"__name__": "__sandbox__"}}
exec(compile(_src, "solution.py", "exec"), _g)
_passed = 0
for _args, _want in {tests!r}:
    try:
        _passed += _g[{func!r}](*_args) == _want
    except Exception:
        pass
print({nonce!r} + _json.dumps({{"passed": int(_passed)}}))
"""


class PythonExecEnv(Environment):
    """Reward = fraction of test cases passed by the function the model writes (one turn).

    The code runs in `python -I` in a fresh temporary folder with an empty environment, its own
    process group, CPU-time / address-space / file-size / process-count limits (setrlimit), a
    wall-clock `timeout_s`, sockets disabled in the interpreter and, where the OS allows it
    (root on Linux), a private network namespace. Options: `timeout_s` (float [s], default 5),
    `memory_mb` (int [MiB] address space, default 512), `tasks` (list of
    {prompt, func, tests: [[args, expected], ...]}, default: a small built-in set).
    """

    options = ("timeout_s", "memory_mb", "tasks")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        self.timeout_s: float = float(self._arg("timeout_s", 5.0, (int, float)))
        self.memory_mb: int = self._arg("memory_mb", 512, int)
        self.tasks: list[dict[str, Any]] = self._arg("tasks", DEFAULT_TASKS, list)
        self.task: dict[str, Any] | None = None

    async def reset(self, seed: int) -> str:
        """Pick a task with `seed`; return its instruction."""
        self.task = random.Random(seed).choice(self.tasks)
        return self.task["prompt"] + " Reply with the code in a ```python block."

    async def step(self, action: str) -> StepResult:
        """Run the code against the task's tests; the episode ends after one turn."""
        if self.task is None:
            raise RuntimeError("step() before reset()")
        result = await run_sandboxed(
            extract_code(action),
            self.task["func"],
            self.task["tests"],
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
        )
        total = len(self.task["tests"])
        reward = result["passed"] / total if total else 0.0
        return StepResult("", reward, True, result)


def extract_code(text: str) -> str:
    """The first fenced code block of `text`, or the whole text when there is none."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


async def run_sandboxed(
    code: str, func: str, tests: list, *, timeout_s: float, memory_mb: int
) -> dict[str, Any]:
    """Run `code` and its tests in a limited subprocess.

    Returns {"passed": int, "outcome": ok|error|timeout|memory, "returncode": int, "stderr": str}.
    """
    nonce = f"@@{secrets.token_hex(8)}@@"
    with tempfile.TemporaryDirectory(prefix="marlaas-sbx-") as tmp:
        code_path = os.path.join(tmp, "solution.py")
        with open(code_path, "w") as f:
            f.write(code)
        harness = _HARNESS.format(code_path=code_path, tests=tests, func=func, nonce=nonce)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            harness,
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limits(timeout_s, memory_mb),
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return {"passed": 0, "outcome": "timeout", "returncode": proc.returncode, "stderr": ""}
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")[-2000:]
    for line in stdout.splitlines():
        if line.startswith(nonce):
            passed = json.loads(line[len(nonce) :])["passed"]
            return {
                "passed": passed,
                "outcome": "ok",
                "returncode": proc.returncode,
                "stderr": stderr,
            }
    outcome = "memory" if "MemoryError" in stderr else "error"
    if proc.returncode is not None and proc.returncode < 0:
        outcome = "timeout" if proc.returncode in (-9, -24) else outcome  # SIGKILL / SIGXCPU
    return {"passed": 0, "outcome": outcome, "returncode": proc.returncode, "stderr": stderr}


def _limits(timeout_s: float, memory_mb: int):
    """A preexec_fn that sets resource limits (and a private network namespace when allowed)."""

    def apply() -> None:
        import resource

        cpu_s = max(1, int(timeout_s) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024, 16 * 1024 * 1024))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _try_unshare_network()

    return apply


def _try_unshare_network() -> None:
    try:
        import ctypes

        clone_newnet = 0x40000000
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(clone_newnet)  # fails harmlessly without CAP_SYS_ADMIN
    except Exception:
        pass


def _kill_group(pid: int) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
