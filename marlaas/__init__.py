"""MARLaaS: multi-tenant asynchronous RL as a service (see README.md).

The Python API (docs/python-api.md, marlaas.api): :func:`load_workload`, :func:`simulate`,
:func:`train`, :func:`report` and :class:`RunResult`. Each is imported on first use
(PEP 562), so ``import marlaas`` loads nothing else and changes nothing: which build of the
simulator's hot path runs is decided when it is first imported (marlaas.compiled).

Started as the ``marlaas`` command (its console script, ``python -m marlaas``), the package's
first lines also block SIGINT and SIGTERM until the command's handler is in place, so that a
Ctrl-C in the start-up's imports is reported as any other (marlaas.interrupts), and start a
command that loads models again under jemalloc where it is installed, the signals still
blocked (marlaas.allocator); any other import of it leaves the signal mask as it was.
"""

import _signal  # signal's C part, loaded by the interpreter: importing it loads nothing
import sys
from importlib import import_module as _import_module

_mask = (
    _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM))
    if hasattr(_signal, "pthread_sigmask")
    else None
)  # first: a Ctrl-C from here on waits (in the kernel) until it is unblocked


def _module_argument(argv: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE ...`` (``argv``: sys.orig_argv); None when
    there is none, or options combine ``m`` with others (``-Im``)."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
    return None


def _started_as_command() -> bool:
    """Whether this process is the ``marlaas`` command starting: ``python -m marlaas`` (or
    ``-m marlaas.cli``) while runpy finds the module, or the console script pip writes (a file
    named ``marlaas`` that imports ``marlaas.cli.main``) as ``__main__``."""
    if sys.argv[:1] == ["-m"]:
        return _module_argument(sys.orig_argv) in ("marlaas", "marlaas.cli")
    path = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if path.rpartition("/")[2] != "marlaas":
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return "from marlaas.cli import main" in file.read(4096)
    except OSError:
        return False


_started = _started_as_command()
if _started:  # a command that loads models starts again under jemalloc (marlaas.allocator)
    from marlaas.allocator import first_mask, run_under_jemalloc

    _first = first_mask()  # started again: the mask from before the first process's block
    if _first is None:
        run_under_jemalloc(sys.argv[1:], _mask)  # returns where it does not start again
    elif _mask is not None:
        _mask = _first
    del run_under_jemalloc, first_mask, _first
_start_up_mask = _mask if _mask is not None and _started else None
"""The signal mask from before the block, while the command holds SIGINT and SIGTERM
(marlaas.interrupts.release restores it); None otherwise."""
if _mask is not None and _start_up_mask is None:
    _signal.pthread_sigmask(_signal.SIG_SETMASK, _mask)  # not the command: as it was
del _mask, _started

_EXPORTS = {
    "load_workload": "marlaas.api",
    "simulate": "marlaas.api",
    "train": "marlaas.api",
    "RunResult": "marlaas.drive.result",
}
"""Name -> the module that defines it. ``report`` is the package marlaas.report, which is
callable: ``marlaas.report(runs, out)`` is :func:`marlaas.api.report` (a package of that
name is an attribute of this one as soon as it is imported, so the name is the package's)."""
__all__ = sorted([*_EXPORTS, "report"])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(_import_module(_EXPORTS[name]), name)
    if name == "report":
        return _import_module("marlaas.report")
    raise AttributeError(f"module 'marlaas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
