"""The simulator's hot path, compiled with mypyc, and when its plain-Python sources run instead.

``setup.py`` compiles :data:`MODULES` with mypyc when the package is installed (``make setup``;
``make build`` again after editing one of them). The extension modules land beside their
sources, and Python imports an extension module in preference to its source. The compiled
modules make the same decisions and the same event log as their sources; they run the
simulator about twice as fast.

The plain sources of all of :data:`MODULES` run instead (all or none: compiled modules call
each other directly, so a mix would still run old code) when:

- ``MARLAAS_PURE_PYTHON=1`` is set: profilers such as py-spy see only Python frames, and tests
  that patch the core's methods need them;
- in a source checkout (``setup.py`` beside the package), a source is newer than its
  extension module (edited since the build): one line on stderr says so, and the processes
  this one starts run the plain sources too. An installed package is not checked: a wheel
  writes its files in any order;
- nothing was compiled (no C compiler where it was installed): silently.

This module imports only the standard library: ``setup.py`` reads :data:`MODULES` from it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

MODULES = (
    "marlaas.core.cluster",
    "marlaas.core.environments",
    "marlaas.core.feasibility",
    "marlaas.core.free_engines",
    "marlaas.core.generation",
    "marlaas.core.idle",
    "marlaas.core.jobs",
    "marlaas.core.ledger",
    "marlaas.core.need_index",
    "marlaas.core.policy_queue",
    "marlaas.core.prompts",
    "marlaas.core.scheduler",
    "marlaas.core.seeds",
    "marlaas.core.training",
    "marlaas.core.work",
    "marlaas.drive.loop",
    "marlaas.sim.engine_model",
    "marlaas.sim.executor",
)
"""The modules mypyc compiles: the scheduler core and the simulator's per-event work."""

PURE_ENV = "MARLAAS_PURE_PYTHON"
"""Set to 1 to run the plain-Python sources of :data:`MODULES`."""

ROOT = Path(__file__).resolve().parent.parent
"""The folder that holds the ``marlaas`` package."""


def source_of(module: str, root: Path = ROOT) -> Path:
    """The ``.py`` file of a dotted module name under ``root``."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def extension_of(module: str, root: Path = ROOT) -> Path | None:
    """The compiled extension module beside the module's source, or None when not built."""
    source = source_of(module, root)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def stale(root: Path = ROOT, modules: Sequence[str] = MODULES) -> list[str]:
    """The modules whose source was modified after their extension module was built."""
    out = []
    for module in modules:
        extension = extension_of(module, root)
        if extension is not None and source_of(module, root).stat().st_mtime > (
            extension.stat().st_mtime
        ):
            out.append(module)
    return out


NOT_COMPILED = "not compiled"


def pure_reason(root: Path = ROOT, modules: Sequence[str] = MODULES) -> str | None:
    """Why this process runs the plain sources of :data:`MODULES`; None when it runs the
    compiled build."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    if any(extension_of(m, root) is None for m in modules):
        return NOT_COMPILED
    if (root / "setup.py").exists() and (old := stale(root, modules)):
        more = f" and {len(old) - 2} more" if len(old) > 3 else ""
        named = ", ".join(old[:2] if more else old)
        return f"{named}{more} edited since the build; `make build` compiles again"
    return None


def state() -> str:
    """Which build of :data:`MODULES` this process runs, in a few words."""
    reason = pure_reason()
    return "compiled (mypyc)" if reason is None else f"plain Python ({reason})"


class SourceFinder:
    """A meta-path finder that loads :data:`MODULES` from their ``.py`` sources."""

    def __init__(self, root: Path = ROOT, modules: Sequence[str] = MODULES) -> None:
        self.root, self.modules = root, frozenset(modules)

    def find_spec(self, name: str, path=None, target=None):
        """The source's spec for one of the modules; None (not ours) for any other."""
        if name not in self.modules:
            return None
        return importlib.util.spec_from_file_location(name, source_of(name, self.root))


def choose(root: Path = ROOT, modules: Sequence[str] = MODULES) -> None:
    """Make this process import the plain sources when :func:`pure_reason` gives a reason
    (called by ``marlaas/__init__.py``, before any of :data:`MODULES` is imported)."""
    reason = pure_reason(root, modules)
    if reason is None or reason == NOT_COMPILED:
        return
    if "edited" in reason:  # said once: the processes this one starts inherit the setting
        sys.stderr.write(f"marlaas: the simulator runs as plain Python: {reason}\n")
        os.environ[PURE_ENV] = "1"
    finder = SourceFinder(root, modules)
    if not any(vars(f) == vars(finder) for f in sys.meta_path if isinstance(f, SourceFinder)):
        sys.meta_path.insert(0, finder)
