"""Which malloc a real run uses: jemalloc where it is installed, else glibc's.

glibc's malloc, as marlaas.executors.memory sets it (blocks of 256 KiB and more mapped afresh
and returned when freed, so that a run does not keep what its largest step touched), pays a
page fault for every page of every such block, every time: activations, logits, the engine's
buffers. jemalloc keeps freed memory in size classes for reuse and returns what stays unused
to the system after a few seconds, so it has neither glibc's retention nor those faults. On
the quality workload's sequential run (docs/quality.md, "One forward pass less, and jemalloc"):
4.9 M minor page faults
and 41 s of system time against 23.8 M and 78 s, 213 s against 238 s, at the same peak
resident memory (4.0 GB).

jemalloc comes with Ray's wheel (``ray/core/libjemalloc.so``; ``make setup`` installs Ray). A
library is preloaded only when a process starts, so the ``marlaas`` command, started for a
command that loads models (:data:`JEMALLOC_COMMANDS`), starts itself again at once with it
preloaded (:func:`run_under_jemalloc`, from the package's first lines, before anything else
is imported or any signal blocked). ``MARLAAS_ALLOCATOR=glibc`` keeps glibc; the Python API
(marlaas.api.train) runs on the allocator its process has.

Light on purpose: the standard library only (it runs before the command's own imports).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ALLOCATOR_ENV = "MARLAAS_ALLOCATOR"
"""``glibc``: a real run stays on glibc's malloc; unset or ``jemalloc``: jemalloc where it is
installed."""
JEMALLOC_COMMANDS = ("train", "evaluate", "serve")
"""The commands that load models, which :func:`jemalloc_exec` starts again under jemalloc."""


def bundled_jemalloc() -> Path | None:
    """The jemalloc library Ray's wheel ships (``ray/core/libjemalloc.so``), found without
    importing Ray; None where Ray (or its library) is not installed."""
    try:
        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "core" / "libjemalloc.so"
        if path.is_file():
            return path
    return None


def jemalloc_exec(
    args: list[str], env: dict[str, str], library: Path | None = None
) -> tuple[list[str], dict[str, str]] | None:
    """The command line and environment that run ``marlaas ARGS`` again with jemalloc
    preloaded (``library``, else :func:`bundled_jemalloc`); None where nothing changes: not
    Linux, not a command of :data:`JEMALLOC_COMMANDS`, ``MARLAAS_ALLOCATOR=glibc``,
    jemalloc already preloaded, or none installed."""
    if not sys.platform.startswith("linux") or not args or args[0] not in JEMALLOC_COMMANDS:
        return None
    choice = env.get(ALLOCATOR_ENV, "jemalloc").strip().lower()
    if choice not in ("jemalloc", "glibc"):
        raise ValueError(f"{ALLOCATOR_ENV}={env[ALLOCATOR_ENV]!r}: use jemalloc or glibc")
    preloaded = env.get("LD_PRELOAD", "")
    if choice == "glibc" or "libjemalloc" in preloaded:
        return None
    library = library or bundled_jemalloc()
    if library is None:
        return None
    preload = f"{library} {preloaded}".strip()
    command = [sys.executable, *interpreter_options(sys.orig_argv), "-m", "marlaas", *args]
    return command, {**env, "LD_PRELOAD": preload}


def interpreter_options(argv: list[str]) -> list[str]:
    """The interpreter's own options in ``argv`` (sys.orig_argv: ``python -X dev -u -m
    marlaas ...`` -> ``-X dev -u``), kept when the command starts again; none after a
    script's path (the console script)."""
    options, i = [], 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" or arg.startswith("-m") or not arg.startswith("-"):
            break
        takes_value = arg in ("-X", "-W", "-Q", "--check-hash-based-pycs")
        options += argv[i : i + 2] if takes_value else [arg]
        i += 2 if takes_value else 1
    return options


def allocator_in_use() -> str:
    """``jemalloc`` when it is loaded in this process, ``glibc`` on another Linux process,
    ``system`` where /proc cannot tell."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "jemalloc" if "libjemalloc" in maps else "glibc"


def run_under_jemalloc(args: list[str]) -> None:
    """Replace this process by ``marlaas ARGS`` with jemalloc preloaded where that applies
    (:func:`jemalloc_exec`), else return; a bad ``MARLAAS_ALLOCATOR`` exits with status 2 and
    one line saying so."""
    try:
        command = jemalloc_exec(args, dict(os.environ))
    except ValueError as err:
        print(f"marlaas: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if command is not None:
        os.execve(command[0][0], command[0], command[1])
