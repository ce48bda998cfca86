"""Ctrl-C and SIGTERM raised at a safe point: never while the command starts, nor in an import.

An exception raised in the middle of an import breaks more than that import: a compiled
module's initialisation does not expect one (mypyc's aborts the process, printing ``fatal: out
of memory``, exit 134; numpy's turns it into an ImportError, PyO3's into a PanicException), and
the ``marlaas`` console script imports for tens of milliseconds before
:func:`marlaas.cli.main` has its ``except KeyboardInterrupt`` in place. So:

- the first statement of ``marlaas/__init__.py`` blocks SIGINT and SIGTERM (in the kernel: one
  that comes waits there); in the ``marlaas`` process itself (``marlaas._started_as_command``)
  they stay blocked until ``main`` is ready to report one (:func:`release`, inside its
  ``try``: a signal that came is raised there), any other importer of the package has them
  back at once. Nothing starts a thread or a process while they are blocked (both would
  inherit the mask);
- while the command runs (:func:`take` ... :func:`give_back`), one handler raises
  KeyboardInterrupt (SIGINT) or :class:`Interrupted` (SIGTERM, a KeyboardInterrupt too) in the
  main thread, as Python's own would, except while the main thread imports a module: then the
  signal waits for the import to end (the handler is called again every :data:`RETRY_S` until then);
- an exception raised where Python cannot let it through (an at-fork callback such as
  logging's, a ``__del__``: "Exception ignored in ...") would be lost, and the command would
  go on as if no signal had come: ``sys.unraisablehook`` catches it while the handler is in
  place and has the signal delivered again :data:`RETRY_S` later.

Before ``marlaas/__init__.py`` runs, the interpreter's own start-up handles a signal as Python
does: before its handler exists SIGINT kills the process (status -2, 130 in a shell); in
``site`` (a few milliseconds; more with an editable install's finder) it is Python's
``Fatal Python error: init_import_site``.

This module imports only the standard library, and little of it.
"""

from __future__ import annotations

import _thread
import signal
import sys
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals this module raises at a safe point."""

RETRY_S = 0.01
"""How often a signal that arrived during an import is tried again [s]."""

_IMPORT_MODULES = frozenset(("importlib._bootstrap", "importlib._bootstrap_external"))
"""The modules of Python's import machinery (a frame of theirs: an import in progress)."""


class Interrupted(KeyboardInterrupt):
    """The process got SIGTERM (raised in the main thread, like KeyboardInterrupt for SIGINT).

    A KeyboardInterrupt, so that whatever stops for Ctrl-C stops for it: asyncio lets only
    KeyboardInterrupt and SystemExit out of a task's step and keeps any other exception as the
    task's result, so a SIGTERM that landed inside a work task was swallowed and the run went
    on to its end (exit 0). Catch it before KeyboardInterrupt to tell the two apart."""

    def __init__(self, number: int) -> None:
        super().__init__(f"signal {number}")
        self.signal = number


class _State:
    """The handler's state: the signal that waits, the handlers it replaced."""

    def __init__(self) -> None:
        self.depth = 0  # take() calls not given back yet
        self.pending: int | None = None  # the signal that waits for an import to end
        self.retrying = False  # a thread will signal the main one again
        self.retried = False  # it has: the next call of the handler may be that
        self.previous: dict[int, object] = {}  # the handlers before the first take()
        self.previous_unraisable = sys.unraisablehook
        self.main_thread = 0


_state = _State()


def in_import(frame) -> bool:
    """Whether ``frame`` (or a frame that called it) runs Python's import machinery."""
    while frame is not None:
        if frame.f_globals.get("__name__") in _IMPORT_MODULES:
            return True
        frame = frame.f_back
    return False


def _exception(number: int) -> BaseException:
    return KeyboardInterrupt() if number == signal.SIGINT else Interrupted(number)


def _on_signal(number: int, frame) -> None:
    """The handler: raise the signal's exception, or keep it for the end of the import."""
    retried, _state.retried = _state.retried, False
    if retried and _state.pending is None:
        return  # a retry that came after the signal was raised
    if in_import(frame):
        _state.pending = _state.pending or number
        _retry_later()
        return
    number, _state.pending = _state.pending or number, None
    raise _exception(number)


def _on_unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while the handler is in place: a signal's exception that Python
    could not raise through is delivered again; anything else goes to the hook before."""
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt | Interrupted) and _state.depth:
        number = error.signal if isinstance(error, Interrupted) else signal.SIGINT
        _state.pending = _state.pending or number
        _retry_later()
        return
    _state.previous_unraisable(unraisable)


def _retry_later() -> None:
    """Have the handler called again in :data:`RETRY_S` (a thread signals the main one)."""
    if not _state.retrying:
        _state.retrying = True
        _thread.start_new_thread(_retry, ())


def _retry() -> None:
    time.sleep(RETRY_S)
    _state.retrying = False
    number = _state.pending
    if number is not None and _state.depth:
        _state.retried = True
        signal.pthread_kill(_state.main_thread, number)


def take() -> bool:
    """Route :data:`SIGNALS` to the handler, except one this process ignores (as it was
    started: ``nohup``, ``&`` in a script); calls nest, each needs its :func:`give_back`.
    False, changing nothing, outside the main thread."""
    try:
        previous = {number: signal.signal(number, _handler_for(number)) for number in SIGNALS}
    except ValueError:  # not the main thread
        return False
    if not _state.depth:  # a retry's flag left by a span before (its signal came after
        # give_back, to the handler then) must not swallow this span's first signal
        _state.previous, _state.main_thread = previous, _thread.get_ident()
        _state.pending, _state.retried = None, False
        _state.previous_unraisable, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    _state.depth += 1
    return True


def _handler_for(number: int):
    ignored = signal.getsignal(number) == signal.SIG_IGN
    return signal.SIG_IGN if ignored else _on_signal


def give_back() -> None:
    """Undo one :func:`take`; the last one puts back the handlers the first replaced."""
    _state.depth -= 1
    if not _state.depth:
        _state.pending = None
        sys.unraisablehook = _state.previous_unraisable
        for number, handler in _state.previous.items():
            signal.signal(number, handler)


def release() -> None:
    """The command is ready to report a signal (call it inside the ``try`` that does, after
    :func:`take`): unblock :data:`SIGNALS` if the start-up holds them; one that came is raised
    here."""
    package = sys.modules.get("marlaas")
    mask = getattr(package, "_start_up_mask", None)
    if mask is not None:
        package._start_up_mask = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
