"""Worker processes that never outlive the command that started them.

A sweep runs its simulations in worker processes (:func:`run_tasks`). Its workers ignore
Ctrl-C (the terminal sends SIGINT to the whole process group; the parent alone decides what
happens), are terminated by the parent when it stops for any reason (an error, Ctrl-C,
SIGTERM), and die with it when it is killed outright (SIGKILL): Linux's parent-death signal
where there is one, and a watchdog thread that notices the parent has gone everywhere.

A worker that dies while it runs a task (killed, out of memory, ``os._exit``) is
:class:`WorkerDied`, naming the task, not a wait for a result that never comes (as with
``multiprocessing.Pool``, which loses a dead worker's task).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from multiprocessing.connection import Connection, wait
from typing import Any

WATCHDOG_PERIOD_S = 0.5
"""How often a worker checks that its parent is still alive [s]."""

STOP_WAIT_S = 5.0
"""How long a terminated worker has to end before it is killed [s]."""

_PR_SET_PDEATHSIG = 1


class WorkerDied(Exception):
    """A worker process ended while it ran a task (``index``: the task's; ``exitcode``:
    the process's, negative for a signal)."""

    def __init__(self, index: int, exitcode: int | None) -> None:
        super().__init__(f"a worker process {how_it_ended(exitcode)} while it ran task {index}")
        self.index = index
        self.exitcode = exitcode


class RemoteTraceback(Exception):
    """The traceback of an error raised in a worker (the cause of the error re-raised here)."""

    def __str__(self) -> str:
        return str(self.args[0])


def how_it_ended(exitcode: int | None) -> str:
    """``was killed by SIGKILL``, ``exited with status 3``: how a process ended."""
    if exitcode is not None and exitcode < 0:
        with suppress(ValueError):
            return f"was killed by {signal.Signals(-exitcode).name}"
        return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def run_tasks(
    fn: Callable[[Any], Any], tasks: Iterable[tuple[int, Any]], processes: int
) -> Iterator[tuple[int, Any]]:
    """``(index, fn(item))`` for every ``(index, item)`` of ``tasks``, computed in
    ``processes`` worker processes (each given the next task as it becomes free), as they
    finish. An error ``fn`` raises is raised here (its traceback as its cause); a worker that
    dies running a task is :class:`WorkerDied`. Leaving early (an error, Ctrl-C, SIGTERM, the
    iterator closed) terminates the workers at once, and waits until they are gone."""
    ctx = multiprocessing.get_context(start_method())
    todo = iter(tasks)
    workers: list[_Worker] = []
    try:
        for _ in range(processes):
            here, there = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(there, fn, os.getpid()), daemon=True)
            _start_without_ctrl_c(process)
            there.close()
            workers.append(_Worker(process, here))
        live = list(workers)
        for worker in live:
            worker.give(next(todo, None))
        while any(w.index is not None for w in live):
            wait([w.conn for w in live] + [w.process.sentinel for w in live])
            for worker in list(live):
                if worker.index is not None and worker.conn.poll():
                    index, value = worker.result()
                    worker.give(next(todo, None))
                    yield index, value
                elif not worker.process.is_alive():
                    worker.process.join()
                    if worker.index is not None:
                        raise WorkerDied(worker.index, worker.process.exitcode)
                    live.remove(worker)  # done: it was told to stop
    finally:
        _stop(workers)


def _start_without_ctrl_c(process: multiprocessing.process.BaseProcess) -> None:
    """Start ``process`` with SIGINT blocked, so that a Ctrl-C while it starts is not raised in
    it by the handler it inherits (it once exited with status 1, and the sweep ended on that
    instead of on the Ctrl-C); the worker ignores SIGINT before it unblocks it, and here the
    signal, if one came, is delivered once the start is done."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def start_method() -> str | None:
    """How a worker process starts: the platform's default (on Linux a fork, which starts at
    once with what this process has imported), but a fresh interpreter (``spawn``) in a
    process that has used Ray: Ray's gRPC threads outlive ``ray.shutdown()``, and a process
    forked after them can die of SIGSEGV (a sweep worker did, in a test session that had run
    Ray's tests first)."""
    return "spawn" if "ray" in sys.modules else None


class _Worker:
    """A worker process, the parent's end of its pipe and the task it runs (None: idle)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.index: int | None = None

    def give(self, task: tuple[int, Any] | None) -> None:
        """Send it ``task``, or None: no more, end."""
        self.index = None if task is None else task[0]
        with suppress(OSError):  # it died: its sentinel says so
            self.conn.send(task)

    def result(self) -> tuple[int, Any]:
        """The task's (index, value); its error raised, with the worker's traceback."""
        index = self.index
        assert index is not None
        try:
            ok, value, text = self.conn.recv()
        except (EOFError, OSError):  # it died as it answered
            self.process.join()
            raise WorkerDied(index, self.process.exitcode) from None
        if not ok:
            value.__cause__ = RemoteTraceback(text)
            raise value
        return index, value


def _stop(workers: list[_Worker]) -> None:
    """Terminate the workers still running, and wait until they are gone (killed if they
    do not end within STOP_WAIT_S)."""
    for worker in workers:
        if worker.process.is_alive() and worker.index is not None:
            worker.process.terminate()
        else:
            with suppress(OSError):
                worker.conn.send(None)  # idle: let it end on its own
    deadline = time.monotonic() + STOP_WAIT_S
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.process.terminate()
            worker.process.join(1.0)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()


def _serve(conn: Connection, fn: Callable[[Any], Any], parent: int) -> None:
    """A worker: run the tasks the parent sends, answer (ok, value or error, traceback)."""
    _init_worker(parent)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return  # the parent has gone
        if task is None:
            return
        index, item = task
        try:
            answer = (True, fn(item), "")
        except (Exception, SystemExit) as exc:
            answer = (False, _portable(exc), "".join(traceback.format_exception(exc)))
        try:
            conn.send(answer)
        except Exception as exc:  # a value that does not pickle
            text = "".join(traceback.format_exception(exc))
            conn.send((False, RuntimeError(f"task {index}: its result: {exc}"), text))


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling both ways (an error whose ``__init__`` does not take
    its ``args`` does not come back), else a RuntimeError with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked as it started
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
