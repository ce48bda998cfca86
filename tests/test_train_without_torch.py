"""A simulation-only install (no torch): every command that needs the training stack says so
in one line before any work, never a traceback, and simulating and reporting work.

The interpreter here is made one: tests/without_training_stack/sitecustomize.py hides torch,
transformers, peft, tokenizers, safetensors and vllm (``import torch`` raises
ModuleNotFoundError, ``find_spec`` finds nothing) although they may be installed. The real
check, a virtual environment without torch (``make setup-sim``), is .ci/check-sim-only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import python_path_first

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_STACK = ROOT / "tests" / "without_training_stack"
NEEDS_STACK = (
    "needs the training stack: pip install -e '.[train]' (torch, transformers and peft are "
    "not installed; GPUs: docs/real-runs.md#install)"
)


def python_without_stack(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in an interpreter that does not find the training stack."""
    env = python_path_first(WITHOUT_STACK, ROOT)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)  # fmt: skip


def test_the_interpreter_does_not_find_the_training_stack():
    code = (
        "import importlib.util\n"
        "assert importlib.util.find_spec('torch') is None\n"
        "import pandas, simpy, marlaas.sim.executor  # the simulator's own stack is there\n"
        "import torch\n"
    )
    run = python_without_stack("-c", code)
    assert run.stderr.strip().endswith("ModuleNotFoundError: No module named 'torch'")


TRAIN = ["train", "traces/real-tiny.yaml", "--out", "{tmp}/run"]
COMMANDS = {
    "train": TRAIN,
    "train --tracker": [*TRAIN, "--tracker", "tensorboard"],
    "evaluate": ["evaluate", "traces/real-tiny.yaml", "--run", "{tmp}/run"],
    "make-tiny-model": ["make-tiny-model", "{tmp}/model"],
    "prepare-smollm2": ["prepare-smollm2", "{tmp}/model"],
}


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_a_command_that_needs_the_stack_says_so_in_one_line(case, tmp_path):
    args = [a.format(tmp=tmp_path) for a in COMMANDS[case]]
    run = python_without_stack("-m", "marlaas", *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [f"marlaas: error: {args[0]} {NEEDS_STACK}"]
    assert run.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a lock


def test_the_python_api_and_the_model_module_say_so_too(tmp_path):
    api = python_without_stack(
        "-c", f"import marlaas; marlaas.train('traces/real-tiny.yaml', {str(tmp_path / 'run')!r})"
    )
    assert api.stderr.splitlines()[-1] == (
        f"marlaas.executors.backends.BackendError: marlaas.train {NEEDS_STACK}"
    )
    module = python_without_stack("-m", "marlaas.executors.models", "tiny", str(tmp_path / "m"))
    assert module.returncode == 2
    assert module.stderr.splitlines() == [
        f"python -m marlaas.executors.models: error: building a model folder {NEEDS_STACK}"
    ]
    assert list(tmp_path.iterdir()) == []


def test_simulate_and_report_need_no_training_stack(tmp_path):
    sim = python_without_stack(
        "-m", "marlaas", "simulate", "traces/small.yaml", "--quiet", "--out", str(tmp_path / "s")
    )
    assert sim.returncode == 0, sim.stderr
    report = python_without_stack(
        "-m", "marlaas", "report", str(tmp_path / "s"), "--out", str(tmp_path / "r")
    )
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r" / "report.html").is_file()
