"""Code tasks: run the model's Python in the bubblewrap sandbox and reward passed test cases."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

from marlaas.envs.base import Environment, StepResult
from marlaas.envs.sandbox import SandboxLimits, SandboxResult, require_sandbox, run_python

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
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HARNESS = (Path(__file__).parent / "code_harness.py").read_text()
"""The script run in the sandbox; it gets each test's arguments, never the expected values."""
STDERR_INFO_CHARS = 2000
"""The tail of the sandbox's stderr kept in `info["stderr"]` [characters]."""


class PythonExecEnv(Environment):
    """Reward = fraction of test cases passed by the function the model writes (one turn).

    The code runs in a bubblewrap sandbox (marlaas.envs.sandbox, docs/sandbox.md): nobody
    (uid 65534) in its own namespaces, no network, a read-only system, a small tmpfs as its
    only writable folder, rlimits, a wall-clock timeout and an output cap; nothing it started
    outlives the step. The sandbox gets each test's arguments and sends back the returned
    values as JSON; this process compares them with the expected values, so the code cannot
    fake its score. Where bubblewrap cannot isolate, a real run refuses to start
    (`check_runtime`) and a step raises SandboxUnavailable (a RuntimeError naming what is
    missing): there is no unsandboxed fallback. Validating the options (and simulating) needs
    no sandbox.

    Options: `timeout_s` (float [s], default 5), `memory_mb` (int [MiB] address space per
    process, default 512), `max_output_bytes` (int [bytes] of stdout + stderr, default 1 MiB),
    `max_processes` (int, processes and threads at once, default 32), `tasks` (list of
    {prompt, func, tests: [[args, expected], ...]} with JSON values, default: a small set).
    `info` = {outcome: ok|error|memory|timeout|output_limit, passed, total, returncode,
    stderr (last 2000 characters)}.
    """

    options = ("timeout_s", "memory_mb", "max_output_bytes", "max_processes", "tasks")

    def __init__(self, args=None) -> None:
        super().__init__(args)
        defaults = SandboxLimits()
        self.limits = SandboxLimits(
            timeout_s=float(self._arg("timeout_s", defaults.timeout_s, (int, float))),
            memory_mb=self._arg("memory_mb", defaults.memory_mb, int),
            max_output_bytes=self._arg("max_output_bytes", defaults.max_output_bytes, int),
            max_processes=self._arg("max_processes", defaults.max_processes, int),
        )
        self.tasks: list[dict[str, Any]] = self._arg("tasks", DEFAULT_TASKS, list)
        for i, task in enumerate(self.tasks):
            _check_task(i, task)
        self.task: dict[str, Any] | None = None

    @classmethod
    def check_runtime(cls) -> None:
        """Raise SandboxUnavailable where bubblewrap cannot isolate the code."""
        require_sandbox()

    async def reset(self, seed: int) -> str:
        """Pick a task with `seed`; return its instruction."""
        self.task = random.Random(seed).choice(self.tasks)
        return self.task["prompt"] + " Reply with the code in a ```python block."

    async def step(self, action: str) -> StepResult:
        """Run the code against the task's tests; the episode ends after one turn."""
        if self.task is None:
            raise RuntimeError("step() before reset()")
        require_sandbox()
        tests = self.task["tests"]
        calls = {"func": self.task["func"], "args": [args for args, _ in tests]}
        inputs = {
            "solution.py": extract_code(action).encode(errors="replace"),
            "calls.json": json.dumps(calls).encode(),
        }
        result = await run_python(HARNESS, inputs, self.limits)
        passed, outcome = score_results(result, [want for _, want in tests])
        reward = min(max(passed / len(tests), 0.0), 1.0)
        stderr = result.stderr.decode(errors="replace")[-STDERR_INFO_CHARS:]
        info = {
            "outcome": outcome,
            "passed": passed,
            "total": len(tests),
            "returncode": result.returncode,
            "stderr": stderr,
        }
        return StepResult("", reward, True, info)


def extract_code(text: str) -> str:
    """The first fenced code block of `text`, or the whole text when there is none."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


def score_results(result: SandboxResult, expected: list) -> tuple[int, str]:
    """(tests passed, outcome) from the sandbox's results line and the expected values.

    Only the last stdout line counts, as strict JSON (no NaN); a value passes when it equals the
    expected one as JSON (json_equal). Anything malformed scores 0.
    """
    if result.outcome != "exited":
        return 0, result.outcome
    doc = _results_line(result.stdout)
    if doc is None:
        crashed_oom = b"MemoryError" in result.stderr[-STDERR_INFO_CHARS:]
        return 0, "memory" if crashed_oom else "error"
    if "load_error" in doc:
        return 0, "memory" if doc["load_error"] == "MemoryError" else "error"
    results = doc.get("results")
    if not isinstance(results, list) or len(results) != len(expected):
        return 0, "error"
    passed = sum(
        isinstance(got, dict) and "value" in got and json_equal(got["value"], want)
        for got, want in zip(results, expected, strict=True)
    )
    return passed, "ok"


def json_equal(got: Any, want: Any) -> bool:
    """Equality of JSON values: bool is not a number, 1 == 1.0, lists and dicts element-wise."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if type(want) in (int, float):
        return type(got) in (int, float) and got == want
    if want is None or type(want) is str:
        return type(got) is type(want) and got == want
    if type(want) is list:
        return (
            type(got) is list
            and len(got) == len(want)
            and all(json_equal(g, w) for g, w in zip(got, want, strict=True))
        )
    if type(want) is dict:
        return (
            type(got) is dict
            and got.keys() == want.keys()
            and all(json_equal(got[k], want[k]) for k in want)
        )
    return False


def _results_line(stdout: bytes) -> dict | None:
    lines = stdout.strip().splitlines()
    if not lines:
        return None
    try:
        doc = json.loads(lines[-1], parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # also: NaN/Infinity, ints of > 4300 digits
        return None
    return doc if isinstance(doc, dict) else None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _check_task(i: int, task: Any) -> None:
    """Raise ValueError unless task `i` is {prompt: str, func: identifier, tests: [[args, want]]}
    with JSON values only (they travel to the sandbox and back as JSON)."""
    where = f"PythonExecEnv: option 'tasks'[{i}]"
    if not isinstance(task, dict) or not isinstance(task.get("prompt"), str):
        raise ValueError(f"{where} must be a dict with a str 'prompt', got {task!r:.80}")
    if not isinstance(task.get("func"), str) or not _IDENTIFIER.fullmatch(task["func"]):
        raise ValueError(f"{where}: 'func' must be a Python identifier, got {task.get('func')!r}")
    tests = task.get("tests")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"{where}: 'tests' must be a non-empty list of [args, expected]")
    for test in tests:
        if not (isinstance(test, list) and len(test) == 2 and isinstance(test[0], list)):
            raise ValueError(f"{where}: each test must be [args list, expected], got {test!r:.80}")
        if not _is_json(test):
            raise ValueError(f"{where}: test {test!r:.80} holds a value that is not JSON")


def _is_json(value: Any) -> bool:
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        return all(_is_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _is_json(v) for k, v in value.items())
    return False
