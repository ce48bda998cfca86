"""The README's Python API snippet runs as written and does what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.child_env import python_path_first

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Python API"


def readme_snippet(readme: Path = ROOT / "README.md") -> str:
    """The first ```python block of the README's Python API section."""
    text = readme.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    (code, *_) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_the_readme_snippet_runs(tmp_path):
    (tmp_path / "traces").symlink_to(ROOT / "traces")  # the snippet's paths, in a fresh folder
    env = python_path_first(ROOT)
    run = subprocess.run([sys.executable, "-c", readme_snippet()], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"makespan: fair \d+\.\d s, fifo \d+\.\d s", lines[0]), lines
    assert [line.split()[0] for line in lines[1:-1]] == ["math-a", "math-b", "tools-c", "code-d"]
    assert lines[-1] == "runs/api-report/report.html"
    assert (tmp_path / lines[-1]).is_file()
    for run_dir in ("api-fair", "api-fifo"):
        assert (tmp_path / "runs" / run_dir / "events.parquet").is_file()
