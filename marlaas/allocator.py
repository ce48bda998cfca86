"""Which malloc a real run uses: jemalloc where it is installed, else glibc's.

glibc's malloc, as marlaas.executors.memory sets it (blocks of 256 KiB and more mapped afresh
and returned when freed, so that a run does not keep what its largest step touched), pays a
page fault for every page of every such block, every time: activations, logits, the engine's
buffers. jemalloc keeps freed memory in size classes for reuse and returns what stays unused
to the system after a few seconds, so it has neither glibc's retention nor those faults. On
the quality workload's sequential run (docs/quality-log.md, "One forward pass less, and
jemalloc"): 4.9 M minor page faults and 41 s of system time against 23.8 M and 78 s, 213 s
against 238 s, at the same peak resident memory (3,910 MiB against 3,907 MiB).

jemalloc comes with Ray's wheel (``ray/core/libjemalloc.so``; ``make setup`` installs Ray). A
library is preloaded only when a process starts, so the ``marlaas`` command, started for a
command that loads models (:data:`JEMALLOC_COMMANDS`), starts itself again at once, the same
command line, with it preloaded (:func:`run_under_jemalloc`, from the package's first lines,
before anything else is imported). SIGINT and SIGTERM stay blocked through the start (one that
comes waits in the kernel and is reported by the new process as any other); the new process
learns the mask from before the block, and that it was started again, from
:data:`STARTED_AGAIN_ENV`, and never starts again itself. ``MARLAAS_ALLOCATOR=glibc`` keeps
glibc, as does a user's own preloaded allocator; the Python API (marlaas.api.train) runs on
the allocator its process has.

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
STARTED_AGAIN_ENV = "_MARLAAS_STARTED_AGAIN"
"""Set for the process started again: the signals blocked before the command blocked SIGINT
and SIGTERM, as numbers (``"2,15"``; empty: none)."""


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
    """The command line (``sys.orig_argv`` as it was, run by ``sys.executable``) and the
    environment that run this command again with jemalloc preloaded (``library``, else
    :func:`bundled_jemalloc`); ``args``: its arguments after the program. None where nothing
    changes: not Linux, not a command of :data:`JEMALLOC_COMMANDS`, ``MARLAAS_ALLOCATOR=glibc``,
    started again already, an allocator already preloaded (jemalloc, tcmalloc, mimalloc...),
    none installed, or a library path that LD_PRELOAD cannot hold (a space or a colon)."""
    if not sys.platform.startswith("linux") or not args or args[0] not in JEMALLOC_COMMANDS:
        return None
    choice = env.get(ALLOCATOR_ENV, "").strip().lower() or "jemalloc"
    if choice not in ("jemalloc", "glibc"):
        raise ValueError(f"{ALLOCATOR_ENV}={env[ALLOCATOR_ENV]!r}: use jemalloc or glibc")
    preloaded = env.get("LD_PRELOAD", "")
    if choice == "glibc" or STARTED_AGAIN_ENV in env or "malloc" in preloaded:
        return None
    library = library or bundled_jemalloc()
    if library is None or any(c in str(library) for c in " :"):
        return None
    preload = f"{library} {preloaded}".strip()
    return [sys.executable, *sys.orig_argv[1:]], {**env, "LD_PRELOAD": preload}


def allocator_in_use() -> str:
    """``jemalloc`` when it is loaded in this process, ``glibc`` on another Linux process,
    ``system`` where /proc cannot tell."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "jemalloc" if "libjemalloc" in maps else "glibc"


def first_mask() -> set[int] | None:
    """In a process this module started again, the signals its first process had blocked
    before the command's block (from :data:`STARTED_AGAIN_ENV`, taken out of the environment
    so that no child inherits it); None in a process that was not started again."""
    blocked = os.environ.pop(STARTED_AGAIN_ENV, None)
    if blocked is None:
        return None
    numbers = (number.strip() for number in blocked.split(","))
    return {int(number) for number in numbers if number.isascii() and number.isdigit()}


def run_under_jemalloc(args: list[str], mask) -> None:
    """Replace this process by the same command with jemalloc preloaded where that applies
    (:func:`jemalloc_exec`), ``mask`` (the signals blocked before the command's block, or
    None) handed to it; else return (also where the start fails: glibc, as before). A bad
    ``MARLAAS_ALLOCATOR`` exits with status 2 and one line saying so."""
    try:
        command = jemalloc_exec(args, dict(os.environ))
    except ValueError as err:
        print(f"marlaas: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if command is None:
        return
    argv, env = command
    env[STARTED_AGAIN_ENV] = ",".join(str(int(n)) for n in sorted(mask or ()))
    try:
        os.execve(argv[0], argv, env)
    except OSError:
        return
