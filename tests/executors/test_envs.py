"""Environments: rewards, multi-turn tool use, the Python sandbox, plugins.

The sandbox's attack suite is tests/envs/test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from marlaas.envs import EnvLoadError, env_names, make_env
from marlaas.envs.safe_eval import UnsafeExpression, safe_eval
from tests.system_tools import needs_bwrap


def run(coro):
    return asyncio.run(coro)


def test_registry_lists_builtins():
    assert {"arithmetic", "calculator", "python_exec", "target_char"} <= set(env_names())


def test_arithmetic_reward_and_bonus():
    env = make_env("arithmetic", {"max_operand": 9, "format_bonus": 0.1})
    prompt = run(env.reset(seed=3))
    assert prompt.endswith("Answer with just the number.")
    a, b = map(int, prompt.split("What is ")[1].split("?")[0].split("+"))
    assert run(env.step(f" {a + b}\n")).reward == pytest.approx(1.1)
    assert run(env.step(f"The answer is {a + b}.")).reward == pytest.approx(1.0)
    assert run(env.step(f"{a + b + 1}")).reward == pytest.approx(0.1)
    assert run(env.step("no idea")).reward == 0.0
    assert run(env.step("7")).done


def test_reset_is_seeded():
    e1, e2 = make_env("arithmetic"), make_env("arithmetic")
    assert run(e1.reset(5)) == run(e2.reset(5))
    prompts = {run(e1.reset(s)) for s in range(20)}
    assert len(prompts) > 10


def test_bad_args_are_rejected():
    with pytest.raises(ValueError, match="max_operand"):
        make_env("arithmetic", {"max_operand": "ten"})
    with pytest.raises(ValueError, match="target"):
        make_env("target_char", {"target": "ab"})


@pytest.mark.parametrize(("name", "args", "says"), [
    ("arithmetic", {"max_operand": -1}, "'max_operand' must be from 0 to 1,000,000,000, got -1"),
    ("arithmetic", {"max_operand": 10**30}, "'max_operand' must be from 0 to 1,000,000,000"),
    ("arithmetic", {"format_bonus": float("nan")}, "'format_bonus' must be from 0 to 1, got nan"),
    ("arithmetic", {"max_operand": 9.5}, "'max_operand' must be a whole number, got 9.5"),
    ("calculator", {"max_operand": 1}, "'max_operand' must be from 2 to 1,000,000,000, got 1"),
    ("calculator", {"max_turns": 0}, "'max_turns' must be from 1 to 256, got 0"),
    ("target_char", {"prompt_len": 0}, "'prompt_len' must be from 1 to 1,048,576, got 0"),
    ("target_char", {"prompt_len": 10**9}, "'prompt_len' must be from 1 to 1,048,576"),
    ("exact_match", {"format_pattern": "x", "format_reward": float("inf")},
     "'format_reward' must be from 0 to 1, got inf"),
])  # fmt: skip
def test_an_option_its_episodes_cannot_use_is_refused_when_made(name, args, says):
    """A number option was checked for its type alone: an arithmetic environment of
    max_operand -1 was made, and its first reset raised "empty range for randrange()"; a
    target_char prompt of 10^9 characters was drawn, a character at a time; a NaN bonus
    reached the rewards."""
    with pytest.raises(ValueError) as err:
        make_env(name, args)
    assert says in str(err.value)


def test_options_at_their_bounds_make_episodes():
    prompt = run(make_env("arithmetic", {"max_operand": 0, "format_bonus": 1}).reset(1))
    assert prompt.startswith("What is 0+0?")
    assert len(run(make_env("target_char", {"prompt_len": 1}).reset(1))) == 1
    assert "What is 2*2+2?" in run(make_env("calculator", {"max_operand": 2}).reset(1))


def test_target_char_reward():
    env = make_env("target_char", {"target": "a"})
    assert len(run(env.reset(0))) == 4
    assert run(env.step("aaab")).reward == pytest.approx(0.75)
    assert run(env.step("")).reward == 0.0


def test_calculator_multi_turn():
    async def episode(seed):
        env = make_env("calculator")
        prompt = await env.reset(seed)
        expr = prompt.split("What is ")[1].split("?")[0]
        first = await env.step(f"CALC: {expr}")
        assert not first.done and first.reward == 0.0
        assert first.observation.startswith("RESULT: ")
        value = first.observation.split("RESULT: ")[1].strip()
        return await env.step(value)

    results = [run(episode(s)) for s in range(5)]
    assert all(r.done and r.reward == 1.0 and r.info["tool_calls"] == 1 for r in results)


def test_calculator_wrong_answer_and_max_turns():
    env = make_env("calculator", {"max_turns": 2})
    run(env.reset(1))
    assert run(env.step("CALC: 1+1")).observation == "RESULT: 2\n"
    last = run(env.step("CALC: 2+2"))
    assert last.done and last.reward == 0.0
    run(env.reset(1))
    assert run(env.step("12345678")).reward == 0.0


def test_safe_eval_refuses_code():
    assert safe_eval("2*(3+4)-1") == 13
    assert safe_eval("-2**3") == -8
    for bad in ("__import__('os').system('true')", "open('x')", "9**9**9", "[1]*10", "1/0"):
        with pytest.raises(UnsafeExpression):
            safe_eval(bad)


def _py(env_args=None, seed=0):
    env = make_env(
        "python_exec",
        {
            "tasks": [
                {"prompt": "Write add(a, b).", "func": "add", "tests": [[[1, 2], 3], [[2, 2], 4]]},
            ],
            **(env_args or {}),
        },
    )
    run(env.reset(seed))
    return env


@needs_bwrap
def test_python_exec_rewards_passed_tests():
    env = _py()
    good = run(env.step("Here:\n```python\ndef add(a, b):\n    return a + b\n```"))
    assert good.reward == 1.0 and good.info["outcome"] == "ok"
    half = run(env.step("def add(a, b):\n    return 3"))
    assert half.reward == 0.5
    broken = run(env.step("def add(a, b) return"))
    assert broken.reward == 0.0 and broken.info["outcome"] == "error"


@needs_bwrap
def test_python_exec_cannot_fake_the_result_line():
    env = _py()
    forged = '{"passed": 2, "results": [{"value": 3}, {"value": 4}]}'
    fake = run(env.step(f"print({forged!r})\ndef add(a, b):\n    return 0"))
    assert fake.reward == 0.0 and forged in fake.info["stderr"]  # prints go to stderr


@needs_bwrap
def test_python_exec_timeout_kills():
    env = _py({"timeout_s": 1.0})
    t0 = time.perf_counter()
    out = run(env.step("while True:\n    pass"))
    assert out.reward == 0.0 and out.info["outcome"] == "timeout"
    assert time.perf_counter() - t0 < 3.0


@needs_bwrap
def test_python_exec_memory_limit_kills():
    env = _py({"memory_mb": 256})
    out = run(env.step("x = bytearray(1 << 30)\ndef add(a, b):\n    return a + b"))
    assert out.reward == 0.0 and out.info["outcome"] == "memory"


@needs_bwrap
def test_python_exec_no_network():
    env = _py()
    code = (
        "import socket\n"
        "def add(a, b):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "    except OSError:\n"
        "        return a + b\n"
        "    return 0\n"
    )
    assert run(env.step(code)).reward == 1.0


def test_plugin_by_import_path():
    env = make_env("tests.executors.plugin_env:EchoEnv")
    prompt = run(env.reset(7))
    assert run(env.step(prompt)).reward == 1.0


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_such_env", "unknown environment"),
        ("no_such_pkg.mod:Env", "cannot import module"),
        ("tests.executors.plugin_env:Missing", "has no 'Missing'"),
        ("tests.executors.plugin_env:NotAnEnv", "not a subclass"),
    ],
)
def test_bad_import_path_errors(spec, match):
    with pytest.raises(EnvLoadError, match=match):
        make_env(spec)


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("1 / 0\n", r"importing module 'broken_env_\w+' failed \(ZeroDivisionError"),
        ("def f(:\n", r"importing module 'broken_env_\w+' failed \(SyntaxError"),
        ("import sys\nsys.exit('usage: x')\n",
         r"importing module 'broken_env_\w+' failed \(SystemExit: usage: x\)"),
        ("from marlaas.envs import Environment\nclass Env(Environment):\n"
         "    reset = step = None\n"
         "    def __init__(self, args=None):\n        raise RuntimeError('no GPU')\n",
         r"making it failed \(RuntimeError: no GPU\)"),
    ],
)  # fmt: skip
def test_a_plugin_that_fails_as_it_imports_or_starts_is_one_line(
    tmp_path, monkeypatch, capsys, source, match
):
    """It was a traceback from the workload loader."""
    from marlaas.cli import main

    name = f"broken_env_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    workload = tmp_path / "w.yaml"
    workload.write_text(f"jobs: [{{name: j, tenant: t, env: {{name: '{name}:Env'}}}}]\n")
    assert main(["simulate", str(workload), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and re.search(match, err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "value"),
    [("58", 58.0), ("14 + 44 = 58", 58.0), ("7 + 11 = 18\n\nThis is a classic", 18.0),
     ("no idea", None), ("= nothing after, 3 before", 3.0), ("-4", -4.0)],
)  # fmt: skip
def test_parse_number_reads_the_final_answer(text, value):
    from marlaas.envs.base import parse_number

    assert parse_number(text) == value
