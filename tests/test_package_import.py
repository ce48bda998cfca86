"""``import marlaas`` has no side effects and loads nothing but the package; the Python API is
exported lazily (PEP 562); which build of the hot path runs is decided when it is first
imported (marlaas/compiled.py), also in a checkout whose build is stale."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from marlaas import compiled
from tests.child_env import python_path_first

ROOT = Path(__file__).resolve().parents[1]
SUFFIX = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
API = ["RunResult", "load_workload", "report", "simulate", "train"]

WHAT_IMPORT_CHANGES = """
import io, json, os, sys
meta_path, environ, modules = list(sys.meta_path), dict(os.environ), set(sys.modules)
import marlaas
print(json.dumps({
    "meta_path": sys.meta_path == meta_path,
    "environ": {k: v for k, v in os.environ.items() if environ.get(k) != v},
    "modules": sorted(set(sys.modules) - modules),
    "all": marlaas.__all__,
}))
"""


def python(code: str, root: Path, **env: str | None) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that imports marlaas from ``root``; ``env``
    overrides the environment (None: unset)."""
    environment = python_path_first(root)
    for key, value in env.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, env=environment, check=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("pure", [None, "1"], ids=["default", "pure-python-set"])
def test_importing_marlaas_changes_nothing(pure):
    run = python(WHAT_IMPORT_CHANGES, ROOT, **{compiled.PURE_ENV: pure})
    seen = json.loads(run.stdout)
    assert run.stderr == ""
    assert seen["meta_path"], "import marlaas edited sys.meta_path"
    assert seen["environ"] == {}
    assert seen["modules"] == ["marlaas"]  # light: the API loads on first use
    assert seen["all"] == API


def test_the_api_names_what_the_modules_define():
    import marlaas
    from marlaas import api
    from marlaas.drive.result import RunResult

    assert marlaas.load_workload is api.load_workload and marlaas.simulate is api.simulate
    assert marlaas.train is api.train and marlaas.RunResult is RunResult
    assert set(API) <= set(dir(marlaas))
    with pytest.raises(AttributeError, match="no attribute 'simulate_run'"):
        _ = marlaas.simulate_run


def test_report_is_the_package_and_builds_a_report(two_runs, tmp_path):
    """``marlaas.report`` is also the subpackage's name, so the package is what is called."""
    import marlaas
    import marlaas.report.build  # binds the package to marlaas.report, as any import of it

    assert marlaas.report is sys.modules["marlaas.report"]
    path = marlaas.report(two_runs[0], tmp_path / "report")
    assert path == tmp_path / "report" / "report.html" and path.is_file()


def stale_checkout(tmp_path: Path) -> Path:
    """A copy of the package's sources in a source checkout whose build is stale: an empty
    (unloadable) file stands in for every compiled module, older than its source."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "marlaas", root / "marlaas",
                    ignore=shutil.ignore_patterns(f"*{SUFFIX}", "__pycache__"))  # fmt: skip
    (root / "setup.py").write_text("")
    for module in (*compiled.MODULES, compiled.RUNTIME):
        built = compiled.source_of(module, root).with_suffix(SUFFIX)
        built.write_bytes(b"")
        os.utime(built, (0, 0))
    return root


def test_a_stale_build_is_chosen_when_the_core_is_first_imported(tmp_path):
    root = stale_checkout(tmp_path)
    run = python(WHAT_IMPORT_CHANGES, root, **{compiled.PURE_ENV: None})
    assert run.stderr == "" and json.loads(run.stdout)["environ"] == {}
    code = (
        "import os, marlaas.sim.executor as e, marlaas.core.scheduler as s\n"
        f"print(e.__file__, s.__file__, os.environ[{compiled.PURE_ENV!r}])\n"
    )
    run = python(code, root, **{compiled.PURE_ENV: None})
    assert run.stdout.split() == [
        str(root / "marlaas" / "sim" / "executor.py"),
        str(root / "marlaas" / "core" / "scheduler.py"),
        "1",  # the processes it starts run the plain sources too, silently
    ]
    assert run.stderr.count("\n") == 1 and "edited since the build" in run.stderr
