"""Worker processes that never outlive the command that started them.

A sweep runs its simulations in a process pool. Its workers ignore Ctrl-C (the terminal
sends SIGINT to the whole process group; the parent alone decides what happens), are
terminated by the parent when it stops for any reason (an error, Ctrl-C, SIGTERM), and die
with it when it is killed outright (SIGKILL): Linux's parent-death signal where there is
one, and a watchdog thread that notices the parent has gone everywhere.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from contextlib import suppress
from multiprocessing.pool import Pool

WATCHDOG_PERIOD_S = 0.5
"""How often a worker checks that its parent is still alive [s]."""

_PR_SET_PDEATHSIG = 1


def start_pool(processes: int) -> Pool:
    """A process pool whose workers die with this process; use it as a context manager
    (leaving the block terminates the workers at once, without waiting for their tasks)."""
    return multiprocessing.get_context().Pool(
        processes, initializer=_init_worker, initargs=(os.getpid(),)
    )


def _init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's "raise Interrupted"
    with suppress(OSError, AttributeError):  # not Linux: the watchdog alone
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="watchdog").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCHDOG_PERIOD_S)
    os._exit(1)
