"""The simulator's hot path, compiled with mypyc, and when its plain-Python sources run instead.

``setup.py`` compiles :data:`MODULES` with mypyc when the package is installed (``make setup``;
``make build`` again after editing one of them). The extension modules land beside their
sources, and Python imports an extension module in preference to its source. The compiled
modules make the same decisions and the same event log as their sources; they run the
simulator about twice as fast.

Which of the two a process runs is decided by :func:`choose`, which the packages holding
:data:`MODULES` (``marlaas.core``, ``marlaas.drive``, ``marlaas.sim``) call first thing, before
any of their modules loads: importing ``marlaas`` itself changes nothing. The plain sources of
all of :data:`MODULES` run instead (all or none: compiled modules call each other directly, so
a mix would still run old code) when:

- ``MARLAAS_PURE_PYTHON=1`` is set: profilers such as py-spy see only Python frames, and tests
  that patch the core's methods need them;
- in a source checkout (``setup.py`` beside the package), a source is newer than its
  extension module, or one of :data:`TYPE_SOURCES` is newer than the build (edited since);
  or the build is partial (a module added to :data:`MODULES`, an extension that failed to
  build). One line on stderr says so, and the processes this one starts run the plain
  sources too. An installed package is not checked for edits: a wheel writes its files in
  any order;
- nothing was compiled (no C compiler where it was installed): silently.

Compiled, the classes of :data:`MODULES` check their fields' and arguments' types as
annotated: a custom policy's ``key`` must return a tuple (as ``Policy.key`` says), and a
custom executor's completions must be a ``(float, list)`` tuple of ``WorkDone`` with Python
ints in its int fields (a numpy integer is a TypeError there).

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
    "marlaas.core.admission_queue",
    "marlaas.core.backlog",
    "marlaas.core.cluster",
    "marlaas.core.engine_choice",
    "marlaas.core.environments",
    "marlaas.core.feasibility",
    "marlaas.core.free_engines",
    "marlaas.core.generation",
    "marlaas.core.idle",
    "marlaas.core.jobs",
    "marlaas.core.least",
    "marlaas.core.ledger",
    "marlaas.core.need_index",
    "marlaas.core.policy_queue",
    "marlaas.core.prompts",
    "marlaas.core.record_fields",
    "marlaas.core.scheduler",
    "marlaas.core.seeds",
    "marlaas.core.training",
    "marlaas.core.work",
    "marlaas.drive.inbox",
    "marlaas.drive.loop",
    "marlaas.sim.draws",
    "marlaas.sim.engine_model",
    "marlaas.sim.executor",
    "marlaas.sim.turn_draws",
)
"""The modules mypyc compiles: the scheduler core and the simulator's per-event work."""

TYPE_SOURCES = (
    "marlaas.core.cluster_spec",
    "marlaas.core.distributions",
    "marlaas.core.estimates",
    "marlaas.core.job_spec",
    "marlaas.core.limits",
    "marlaas.core.outcomes",
    "marlaas.core.policies",
    "marlaas.core.records",
    "marlaas.core.scheduling",
    "marlaas.core.tenant_spec",
    "marlaas.core.workload",
    "marlaas.drive.collector",
    "marlaas.drive.executor",
    "marlaas.drive.invariants",
    "marlaas.drive.result",
    "marlaas.sim.cost_model",
    "marlaas.sim.recording",
)
"""The other modules (a package: all its modules) that :data:`MODULES` import: the build
took their types, so an edit of one also makes the build stale."""

RUNTIME = "marlaas__mypyc"
"""The build's runtime library, beside the package (setup.py's mypyc group ``marlaas``)."""

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


def files_of(module: str, root: Path = ROOT) -> list[Path]:
    """The source of a module, or every source of a package."""
    package = root.joinpath(*module.split("."))
    return sorted(package.rglob("*.py")) if package.is_dir() else [source_of(module, root)]


def stale(
    root: Path = ROOT, modules: Sequence[str] = MODULES, type_sources: Sequence[str] = TYPE_SOURCES
) -> list[str]:
    """The modules whose source was modified after their extension module was built, and
    the type sources modified after the build's runtime library."""
    out = []
    for module in modules:
        extension = extension_of(module, root)
        if extension is not None and source_of(module, root).stat().st_mtime > (
            extension.stat().st_mtime
        ):
            out.append(module)
    runtime = extension_of(RUNTIME, root)
    if runtime is not None:
        built = runtime.stat().st_mtime
        for module in type_sources:
            if any(p.stat().st_mtime > built for p in files_of(module, root)):
                out.append(module)
    return out


NOT_COMPILED = "not compiled"


def _pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def pure_reason(
    root: Path = ROOT, modules: Sequence[str] = MODULES, type_sources: Sequence[str] = TYPE_SOURCES
) -> str | None:
    """Why this process runs the plain sources of :data:`MODULES`; None when it runs the
    compiled build."""
    if _pure_requested():
        return f"{PURE_ENV} is set"
    built = sum(extension_of(m, root) is not None for m in modules)
    runtime = extension_of(RUNTIME, root) is not None
    if not built and not runtime:
        return NOT_COMPILED
    if built < len(modules) or not runtime:
        missing = len(modules) - built + (not runtime)
        return f"{missing} of its {len(modules) + 1} compiled files missing; `make build`"
    if (root / "setup.py").exists() and (old := stale(root, modules, type_sources)):
        more = f" and {len(old) - 2} more" if len(old) > 3 else ""
        named = ", ".join(old[:2] if more else old)
        return f"{named}{more} edited since the build; `make build` compiles again"
    return None


_chosen: list[str] = []
"""The reason :func:`choose` found for this process to run the plain sources, if any."""


def state() -> str:
    """Which build of :data:`MODULES` this process runs, in a few words."""
    reason = _chosen[0] if _chosen else pure_reason()
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


def choose(
    root: Path = ROOT, modules: Sequence[str] = MODULES, type_sources: Sequence[str] = TYPE_SOURCES
) -> None:
    """Make this process import the plain sources when :func:`pure_reason` gives a reason.

    Called by ``marlaas/core/__init__.py``, ``marlaas/drive/__init__.py`` and
    ``marlaas/sim/__init__.py``, before any of :data:`MODULES` is imported; decided once per
    process (a later call, by another of those packages, changes nothing)."""
    finder = SourceFinder(root, modules)
    if _installed(finder):
        return
    reason = pure_reason(root, modules, type_sources)
    if reason is None or reason == NOT_COMPILED:
        return
    _chosen[:] = [reason]
    if not _pure_requested():  # said once: the processes this one starts inherit the setting
        sys.stderr.write(f"marlaas: the simulator runs as plain Python: {reason}\n")
        os.environ[PURE_ENV] = "1"
    sys.meta_path.insert(0, finder)


def _installed(finder: SourceFinder) -> bool:
    """Whether an equal :class:`SourceFinder` is already on ``sys.meta_path``."""
    return any(vars(f) == vars(finder) for f in sys.meta_path if isinstance(f, SourceFinder))
