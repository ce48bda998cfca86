"""The simulator's hot path, compiled by mypyc or as plain Python (marlaas/compiled.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marlaas import compiled

ROOT = Path(__file__).resolve().parents[1]
SUFFIX = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
IS_COMPILED = compiled.pure_reason() is None


def fake_tree(tmp_path: Path, extension_age_s: float | None) -> Path:
    """A source checkout of a package ``pkg``: a module ``mod`` and a module ``types`` it
    takes types from, both written at t = 1,000,000 s, and (unless None) ``mod``'s extension
    module and the build's runtime library ``extension_age_s`` seconds older (negative:
    newer)."""
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "pkg").mkdir()
    for name, text in (("mod", "WHERE = 'source'\n"), ("types", "")):
        source = tmp_path / "pkg" / f"{name}.py"
        source.write_text(text)
        os.utime(source, (1_000_000, 1_000_000))
    if extension_age_s is not None:
        then = 1_000_000 - extension_age_s
        for built in (tmp_path / "pkg" / f"mod{SUFFIX}", tmp_path / f"{compiled.RUNTIME}{SUFFIX}"):
            built.write_bytes(b"")
            os.utime(built, (then, then))
    return tmp_path


def reason(root: Path, modules=("pkg.mod",)) -> str | None:
    return compiled.pure_reason(root, modules, ("pkg.types",))


@pytest.fixture(autouse=True)
def not_pure(monkeypatch):
    monkeypatch.setenv(compiled.PURE_ENV, "0")  # "0": not set; restored after each test


def test_an_extension_older_than_its_source_is_stale(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=5.0)
    assert compiled.stale(root, ["pkg.mod"], ()) == ["pkg.mod"]
    assert "pkg.mod, pkg.types edited since the build" in reason(root)


def test_a_module_the_build_took_types_from_makes_it_stale(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=-5.0)
    assert reason(root) is None
    os.utime(root / "pkg" / "types.py", (1_000_010, 1_000_010))
    assert "pkg.types edited since the build" in reason(root)


def test_an_installed_package_is_never_stale(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=5.0)
    (root / "setup.py").unlink()  # site-packages: no setup.py beside the package
    assert reason(root) is None


def test_many_stale_modules_are_named_in_one_short_line(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=5.0)
    for name in ("a", "b", "c"):
        (root / "pkg" / f"{name}.py").write_text("")
        (root / "pkg" / f"{name}{SUFFIX}").write_bytes(b"")
        os.utime(root / "pkg" / f"{name}{SUFFIX}", (0, 0))
    assert reason(root, ["pkg.mod", "pkg.a", "pkg.b", "pkg.c"]).startswith(
        "pkg.mod, pkg.a and 3 more edited"
    )


def test_an_extension_newer_than_its_source_is_used(tmp_path, monkeypatch):
    root = fake_tree(tmp_path, extension_age_s=-5.0)
    assert compiled.stale(root, ["pkg.mod"], ["pkg.types"]) == []
    assert reason(root) is None
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled.PURE_ENV in reason(root)


def test_a_module_without_an_extension_is_not_compiled(tmp_path):
    assert reason(fake_tree(tmp_path, extension_age_s=None)) == compiled.NOT_COMPILED


def test_a_partial_build_runs_the_plain_sources(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=-5.0)
    (root / "pkg" / "new.py").write_text("")  # a module added to MODULES, not built yet
    assert "1 of its 3 compiled files missing" in reason(root, ["pkg.mod", "pkg.new"])
    (root / f"{compiled.RUNTIME}{SUFFIX}").unlink()  # the runtime library failed to build
    assert "1 of its 2 compiled files missing" in reason(root)


def test_the_source_finder_loads_the_source_of_its_modules_only(tmp_path):
    root = fake_tree(tmp_path, extension_age_s=-5.0)
    finder = compiled.SourceFinder(root, ["pkg.mod"])
    spec = finder.find_spec("pkg.mod")
    assert spec is not None and spec.origin == str(root / "pkg" / "mod.py")
    assert finder.find_spec("pkg.other") is None


def test_a_stale_build_is_said_once_and_its_sources_imported(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.syspath_prepend(str(fake_tree(tmp_path, extension_age_s=5.0)))
    monkeypatch.setattr(compiled, "_chosen", [])
    compiled.choose(tmp_path, ["pkg.mod"], ["pkg.types"])
    assert "pkg.mod, pkg.types edited since the build" in capsys.readouterr().err
    assert os.environ[compiled.PURE_ENV] == "1"  # the processes it starts: plain, silently
    import pkg.mod  # the fake extension is empty: only its source imports

    assert pkg.mod.WHERE == "source"
    assert "pkg.mod, pkg.types edited since the build" in compiled.state()
    monkeypatch.delitem(sys.modules, "pkg.mod")
    monkeypatch.delitem(sys.modules, "pkg")


FIRST_IMPORTS = ("marlaas.core.scheduler", "marlaas.drive.loop", "marlaas.sim.executor")
"""Modules of each package that holds compiled modules, each imported first in a process."""


def imported_file(env: dict[str, str], module: str = "marlaas.core.scheduler") -> str:
    code = f"import marlaas, {module} as m; print(m.__file__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, **env}, check=True)  # fmt: skip
    return run.stdout.strip()


def test_the_pure_setting_imports_the_plain_sources():
    assert imported_file({compiled.PURE_ENV: "1"}).endswith("scheduler.py")


@pytest.mark.skipif(not IS_COMPILED, reason="the hot path is not compiled here")
@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_a_process_imports_the_compiled_build_when_it_is_current(module):
    assert imported_file({compiled.PURE_ENV: "0"}, module).endswith(SUFFIX)


@pytest.mark.skipif(not IS_COMPILED, reason="the suite already runs on the plain sources")
def test_the_plain_sources_pass_the_decision_tests():
    """The tests that pin every decision (golden logs, placement against its brute-force
    reference, failures) pass on the plain sources too: the fallback decides as the build."""
    tests = ["tests/sim/test_golden_logs.py", "tests/core/test_placement_reference.py",
             "tests/core/test_failures.py"]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, compiled.PURE_ENV: "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout[-2000:]


def test_the_type_sources_are_what_the_compiled_modules_import():
    imported = set()
    for module in compiled.MODULES:
        tree = ast.parse(compiled.source_of(module, ROOT).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("marlaas."):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("marlaas.")}
    imported -= set(compiled.MODULES)
    covered = {
        m for m in imported for t in compiled.TYPE_SOURCES if m == t or m.startswith(t + ".")
    }
    assert imported == covered, sorted(imported - covered)
    assert set(compiled.TYPE_SOURCES) <= imported
