"""Tests that need bubblewrap or Chromium skip without them, saying how to install them, and
fail instead under MARLAAS_REQUIRE_SYSTEM_TOOLS=1 (CI): tests/system_tools.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from marlaas.envs import sandbox_runtime
from tests import system_tools

ROOT = Path(__file__).resolve().parents[1]
ONE_OF_EACH = [
    "tests/executors/test_envs.py::test_python_exec_no_network",  # bubblewrap
    "tests/test_report.py::test_report_renders_in_headless_chromium",  # chromium
]


@pytest.fixture
def no_programs(tmp_path, monkeypatch):
    """A PATH with no program on it (so neither bwrap nor chromium), and a fresh probe of the
    sandbox; the probe is forgotten again afterwards."""
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox_runtime._probe.cache_clear()
    yield tmp_path
    sandbox_runtime._probe.cache_clear()


def test_a_missing_program_is_named_with_its_install_line(no_programs):
    assert system_tools.chromium() is None
    bwrap = system_tools.missing_message("bwrap")
    assert "`bwrap` not found on PATH" in bwrap and "apt-get install -y bubblewrap" in bwrap
    chromium = system_tools.missing_message("chromium")
    assert "`chromium` not found" in chromium and "apt-get install -y chromium" in chromium


def test_a_program_on_path_is_found(no_programs):
    fake = no_programs / "chromium-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert system_tools.chromium() == str(fake)
    assert system_tools.missing_message("chromium") is None


def _pytest(tests: list[str], path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``tests`` in a new pytest process whose PATH is ``path``."""
    environment = {k: v for k, v in os.environ.items() if k != system_tools.REQUIRE_ENV}
    environment.update(PATH=str(path), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests],
        capture_output=True, text=True, cwd=ROOT, env=environment, timeout=300,
    )  # fmt: skip


def test_without_the_programs_their_tests_skip_with_the_install_line(tmp_path):
    run = _pytest(ONE_OF_EACH, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "2 skipped" in run.stdout.splitlines()[-1], run.stdout[-3000:]
    assert "apt-get install -y bubblewrap" in run.stdout
    assert "apt-get install -y chromium" in run.stdout


def test_in_ci_a_missing_program_fails_its_tests(tmp_path):
    run = _pytest(ONE_OF_EACH, tmp_path, **{system_tools.REQUIRE_ENV: "1"})
    assert run.returncode == 1, run.stdout[-3000:]
    assert "2 error" in run.stdout.splitlines()[-1], run.stdout[-3000:]
    assert "skipped" not in run.stdout.splitlines()[-1]
    assert f"{system_tools.REQUIRE_ENV}=1: it must be installed" in run.stdout
