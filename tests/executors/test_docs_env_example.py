"""The worked environment of docs/real-runs.md ("An environment of your own") runs as
written: the code block is loaded as the module it names and played on a model's ordinary
answers. Its first version fed each answer to an interactive ``python3 -i``, where a
program ending in an indented block, an unclosed bracket or string never printed the end
marker, so its step hung until the job's env.timeout_s (600 s by default; then retried and
failed the job), a correct program whose loop was followed by a line scored 0 (a SyntaxError
of the interactive prompt), and the prompts and the model's tracebacks went to the run's
stderr."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-runs.md"


def example_module() -> types.ModuleType:
    """The docs' ``# mypkg/envs.py`` block, executed as a module."""
    text = DOC.read_text()
    [code] = re.findall(r"```python\n(# mypkg/envs\.py\n.*?)```", text, flags=re.S)
    module = types.ModuleType("mypkg_envs_from_the_docs")
    exec(compile(code, "docs/real-runs.md", "exec"), module.__dict__)
    return module


ANSWERS = [
    ("print(42)", 1.0),
    ("for i in range(3):\n    x = 40 + i\nprint(x - 0)", 1.0),  # a line after a loop
    ("def answer():\n    return 6 * 7\n\nprint(answer())", 1.0),
    ("for i in range(3):\n    print(i)", 0.0),  # ends in an indented block
    ("print(42", 0.0),  # an unclosed bracket
    ('"""\nprint(42)', 0.0),  # an unclosed string
    ("raise ValueError('boom')", 0.0),
    ("import sys\nsys.exit(3)", 0.0),
    ("The answer is 42.", 0.0),  # prose, not code
]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX subprocess")
def test_the_docs_environment_answers_every_kind_of_answer_at_once_and_closes(capfd):
    env_class = example_module().ReplEnv

    async def play() -> list[tuple[float, object]]:
        rewards = []
        for action, _ in ANSWERS:
            env = env_class({"target": "42"})
            assert "42" in await env.reset(0)
            try:
                result = await asyncio.wait_for(env.step(action), 10.0)
            finally:
                await asyncio.wait_for(env.close(), 10.0)
            assert env.proc.returncode is not None  # close ended its process
            rewards.append(result.reward)
        return rewards

    assert asyncio.run(play()) == [reward for _, reward in ANSWERS]
    assert capfd.readouterr().err == ""  # nothing on the run's stderr
