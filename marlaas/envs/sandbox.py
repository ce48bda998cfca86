"""Run untrusted Python in a bubblewrap sandbox and return what it wrote (one job).

The code runs as uid/gid 65534 in its own user, PID, mount, network, IPC, UTS and cgroup
namespaces, sees only a read-only system (/usr, /lib, /lib64, /bin, the interpreter) and its
inputs, writes only to a size-capped tmpfs at /work, and lives under rlimits (processes, CPU,
address space, file size, open files, no core). The parent enforces a wall-clock timeout and an
output cap, reading stdout/stderr incrementally, and kills the whole sandbox at the end: the
sandbox's PID 1 is killed through a pidfd, which takes every process of the PID namespace with
it, and the call returns only once that PID 1 has exited. Threat model: docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

from marlaas.bounded_wait import within
from marlaas.envs.sandbox_runtime import (
    INPUT_DIR,
    Runtime,
    SandboxUnavailable,
    bwrap_argv,
    require_sandbox,
    unprivileged,
)

__all__ = [
    "SandboxCapError",
    "SandboxCaps",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "cap_sandboxes",
    "held_caps",
    "require_sandbox",
    "run_python",
]

MiB = 1 << 20
MEMORY_MB_BOUNDS = (64, 65_536)
"""The lowest and highest ``memory_mb`` a sandbox takes [MiB]."""
OUTPUT_BYTES_BOUNDS = (1024, 256 * MiB)
"""The lowest and highest ``max_output_bytes`` a sandbox takes [bytes]."""
PROCESSES_BOUNDS = (1, 4096)
"""The lowest and highest ``max_processes`` a sandbox takes."""
READ_CHUNK_BYTES = 64 * 1024
KILL_GRACE_S = 5.0
"""How long bwrap may take to report its sandbox gone after the kill (then it is killed too)."""

# The trusted first lines inside the sandbox: set the rlimits, then run the script. Limits are
# set here, in the sandbox's own user namespace, so that the process count is per sandbox.
_LAUNCHER = (
    "import resource, sys\n"
    "for name, value in {limits!r}:\n"
    "    resource.setrlimit(getattr(resource, name), (value, value))\n"
    "del sys.argv[0]\n"
    "path = sys.argv[0]\n"
    "code = compile(open(path, 'rb').read(), path, 'exec')\n"
    "exec(code, {{'__name__': '__main__', '__file__': path}})\n"
)


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits of one sandbox run; invalid values raise ValueError naming the field."""

    timeout_s: float = 5.0
    """Wall-clock limit [s] from start to the last process gone; CPU limit = ceil(this) + 1 s."""
    memory_mb: int = 512
    """Address space [MiB] of each process (RLIMIT_AS)."""
    max_output_bytes: int = 1 * MiB
    """stdout + stderr [bytes] read before the sandbox is killed."""
    max_processes: int = 32
    """Processes and threads the code may have at once, its own included (RLIMIT_NPROC)."""
    file_size_bytes: int = 16 * MiB
    """Largest file the code may write [bytes] (RLIMIT_FSIZE)."""
    workspace_bytes: int = 32 * MiB
    """Size of the writable tmpfs /work [bytes] (host memory)."""
    open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""

    def __post_init__(self) -> None:
        _check("timeout_s", self.timeout_s, 0.1, 600.0, "s")
        _check("memory_mb", self.memory_mb, *MEMORY_MB_BOUNDS, "MiB", integer=True)
        _check("max_output_bytes", self.max_output_bytes, *OUTPUT_BYTES_BOUNDS, "bytes",
               integer=True)  # fmt: skip
        _check("max_processes", self.max_processes, *PROCESSES_BOUNDS, "", integer=True)
        _check("file_size_bytes", self.file_size_bytes, 0, 1024 * MiB, "bytes", integer=True)
        _check("workspace_bytes", self.workspace_bytes, MiB, 1024 * MiB, "bytes", integer=True)
        _check("open_files", self.open_files, 16, 4096, "", integer=True)

    def rlimits(self) -> list[tuple[str, int]]:
        """(resource.RLIMIT_* name, soft = hard value) set inside the sandbox before the code."""
        return [
            ("RLIMIT_AS", self.memory_mb * MiB),
            ("RLIMIT_CPU", math.ceil(self.timeout_s) + 1),
            ("RLIMIT_FSIZE", self.file_size_bytes),
            ("RLIMIT_NOFILE", self.open_files),
            ("RLIMIT_CORE", 0),
            ("RLIMIT_NPROC", self.max_processes + 1),  # + the sandbox's init (bwrap, PID 1)
        ]


CAPPED = (("memory_mb", " MiB"), ("max_processes", ""), ("max_output_bytes", " bytes"))
"""The limits a :class:`SandboxCaps` bounds, and their units as written."""


@dataclass(frozen=True, slots=True)
class SandboxCaps:
    """The most any sandbox of this process may be given (:func:`cap_sandboxes`): an
    operator's bound over the limits a job's environment asks for (``marlaas serve``'s
    ``service: max_sandbox_*``), checked where a sandbox is made (:func:`run_python`), so that
    it holds whichever environment made the limits (``python_exec``, or a user's environment
    holding one, or calling :func:`run_python` itself)."""

    memory_mb: int
    max_processes: int
    max_output_bytes: int
    names: tuple[tuple[str, str], ...] = ()
    """(limit, the name of its cap where it was set, e.g. ``service.max_sandbox_memory_mb``),
    for refusals to name it."""

    def refusal(self, limits: SandboxLimits) -> str | None:
        """Why ``limits`` are past these caps (the first limit past its cap), or None."""
        named = dict(self.names)
        for field, unit in CAPPED:
            asked, cap = getattr(limits, field), getattr(self, field)
            if asked > cap:
                return (f"sandbox {field}: {asked:,}{unit} is above {cap:,}{unit}, the most "
                        f"{named.get(field, 'the caps')} allows; the sandbox was not "
                        "started")  # fmt: skip
        return None


class SandboxCapError(ValueError):
    """A sandbox asked for more than this process's :class:`SandboxCaps` (one line)."""


_held: dict[int, SandboxCaps] = {}
"""The caps every holder put on this process's sandboxes (:func:`cap_sandboxes`), by the
holder's number: each of them bounds every sandbox made while it is held."""
_held_lock = threading.Lock()
_holders = itertools.count()


def cap_sandboxes(caps: SandboxCaps) -> Callable[[], None]:
    """Bound every sandbox this process makes by ``caps`` until the function returned is
    called (its release; a second call does nothing). Held by the one who runs environments
    for an operator: the service's backends, in the service's process and in each Ray
    environment actor; a sandbox past them is :class:`SandboxCapError` and is never started.
    Holders may overlap and release in any order (two services' backends in one process):
    each one's caps hold until it releases them, and a release leaves the others' (a
    holder that put back the caps it found, set and put back in turn, left the process
    uncapped while one was still open, or capped for good once all had closed)."""
    with _held_lock:
        holder = next(_holders)
        _held[holder] = caps

    def release() -> None:
        with _held_lock:
            _held.pop(holder, None)

    return release


def held_caps() -> tuple[SandboxCaps, ...]:
    """The caps held on this process's sandboxes now (:func:`cap_sandboxes`), oldest first."""
    with _held_lock:
        return tuple(_held.values())


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How a sandbox run ended and what it wrote (at most `max_output_bytes` in all)."""

    outcome: str
    """"exited" (by itself), "timeout" (wall clock) or "output_limit" (killed for output)."""
    returncode: int | None
    """bwrap's exit status: the script's, 128 + n when signal n ended it (137: killed at the
    timeout or output cap), negative when bwrap itself was killed."""
    stdout: bytes
    stderr: bytes


async def run_python(
    script: str, inputs: Mapping[str, bytes], limits: SandboxLimits
) -> SandboxResult:
    """Run `script` with `python -I -S` in a fresh sandbox; `inputs` become read-only files.

    The script is /sandbox/main.py and each input /sandbox/<name>; /work is the working
    directory. Raises SandboxUnavailable when there is no sandbox (never runs unsandboxed),
    SandboxCapError when ``limits`` are past this process's caps (:func:`cap_sandboxes`).
    """
    for caps in held_caps():
        refused = caps.refusal(limits)
        if refused is not None:
            raise SandboxCapError(refused)
    runtime = require_sandbox()
    files = {"main.py": script.encode(), **inputs}
    with contextlib.ExitStack() as stack:
        data_fds = {f"{INPUT_DIR}/{name}": _memfd(stack, data) for name, data in files.items()}
        info_r, info_w = os.pipe()
        stack.callback(os.close, info_r)
        try:
            proc = await _spawn(runtime, limits, data_fds, info_w)
        finally:
            os.close(info_w)
        return await _supervise(proc, info_r, limits)


async def _spawn(
    runtime: Runtime, limits: SandboxLimits, data_fds: dict[str, int], info_fd: int
) -> asyncio.subprocess.Process:
    argv = bwrap_argv(
        runtime, workspace_bytes=limits.workspace_bytes, data_fds=data_fds, info_fd=info_fd
    )
    launcher = _LAUNCHER.format(limits=limits.rlimits())
    argv += [runtime.python, "-I", "-S", "-B", "-c", launcher, f"{INPUT_DIR}/main.py"]
    argv, start_as = unprivileged(argv)
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        pass_fds=(*data_fds.values(), info_fd),
        env={},
        start_new_session=True,
        limit=READ_CHUNK_BYTES,
        **start_as,
    )


async def _supervise(
    proc: asyncio.subprocess.Process, info_fd: int, limits: SandboxLimits
) -> SandboxResult:
    """Wait for the run under the timeout and output cap; always leave no process behind."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.timeout_s
    capture = _Capture(limits.max_output_bytes)
    work = asyncio.gather(
        capture.pump(proc.stdout, capture.stdout),
        capture.pump(proc.stderr, capture.stderr),
        proc.wait(),
    )
    over_cap = asyncio.ensure_future(capture.over_cap.wait())
    init_pidfd = None
    outcome = "timeout"
    try:
        init_pidfd = await within(_open_init(proc, info_fd), limits.timeout_s)
        remaining_s = max(0.0, deadline - loop.time())
        await asyncio.wait(
            {work, over_cap}, timeout=remaining_s, return_when=asyncio.FIRST_COMPLETED
        )
        if capture.over_cap.is_set():
            outcome = "output_limit"
        elif work.done():
            outcome = "exited"
    except asyncio.TimeoutError:
        pass
    finally:
        over_cap.cancel()
        await _kill(proc, init_pidfd)
        # The pumps drain what the dead sandbox left in its pipes (kept up to the cap).
        try:
            await within(work, KILL_GRACE_S)
        except asyncio.TimeoutError:
            pass
        except asyncio.CancelledError:
            if _asked_to_cancel():
                raise  # this step is given up (its bound, its group failed, the run stops)
            # else only the pumps' tasks were cancelled (their loop stops): what they read
    return SandboxResult(outcome, proc.returncode, bytes(capture.stdout), bytes(capture.stderr))


async def _open_init(proc: asyncio.subprocess.Process, info_fd: int) -> int | None:
    """A pidfd of the sandbox's PID 1 (from bwrap's --info-fd), or None if it is already gone."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(os.dup(info_fd), "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        info = await reader.read()  # to EOF: bwrap closes it once written
    finally:
        transport.close()
    try:
        pid = int(json.loads(info)["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    # The pid is bwrap's unreaped child, so it names the sandbox's init and no other process.
    if _parent_pid(pid) != proc.pid:
        os.close(pidfd)
        return None
    return pidfd


async def _kill(proc: asyncio.subprocess.Process, init_pidfd: int | None) -> None:
    """Kill the sandbox's PID 1 and wait until it has exited: the kernel kills every process of
    its PID namespace first, so nothing survives. Then wait for bwrap (if all that fails, kill
    bwrap's process group) and reap PID 1 if it was handed to us (a trainer that is PID 1)."""
    try:
        if init_pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(init_pidfd, signal.SIGKILL)
            await _exited(init_pidfd, KILL_GRACE_S)
        with contextlib.suppress(asyncio.TimeoutError):
            await within(proc.wait(), KILL_GRACE_S)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        if init_pidfd is not None:
            # bwrap may exit before reaping its PID 1, whose parent is then the host's init.
            with contextlib.suppress(ChildProcessError):
                os.waitid(os.P_PIDFD, init_pidfd, os.WEXITED | os.WNOHANG)
    finally:
        if init_pidfd is not None:
            os.close(init_pidfd)


def _asked_to_cancel() -> bool:
    """Whether the task running now was asked to cancel (Python 3.10 cannot tell: yes)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is None or cancelling() > 0


async def _exited(pidfd: int, timeout_s: float) -> None:
    """Return once the process of `pidfd` has exited (its fd turns readable), or after timeout."""
    loop = asyncio.get_running_loop()
    gone = loop.create_future()
    loop.add_reader(pidfd, lambda: gone.done() or gone.set_result(None))
    try:
        await within(gone, timeout_s)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_reader(pidfd)


class _Capture:
    """stdout and stderr read in chunks, kept up to a shared cap (never more in memory)."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.total_bytes = 0
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.over_cap = asyncio.Event()

    async def pump(self, stream: asyncio.StreamReader, sink: bytearray) -> None:
        """Read `stream` to EOF into `sink`, dropping bytes past the cap (then set over_cap)."""
        while chunk := await stream.read(READ_CHUNK_BYTES):
            room = self.cap_bytes - self.total_bytes
            if room > 0:
                sink += chunk[:room]
            self.total_bytes += len(chunk)
            if self.total_bytes > self.cap_bytes:
                self.over_cap.set()


def _memfd(stack: contextlib.ExitStack, data: bytes) -> int:
    """An in-memory file holding `data`, positioned at its start, closed with `stack`."""
    fd = os.memfd_create("sandbox-input")
    stack.callback(os.close, fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _parent_pid(pid: int) -> int | None:
    """The parent's id of process ``pid`` (None when it is gone)."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def _check(name: str, value, lo: float, hi: float, unit: str, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and lo <= value <= hi):
        what = "an integer" if integer else "a finite number"
        unit = f" {unit}" if unit else ""
        raise ValueError(
            f"sandbox limit {name!r} must be {what} in [{lo}, {hi}]{unit}, got {value!r}"
        )
