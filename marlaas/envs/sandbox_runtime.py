"""What the sandbox runs on: the `bwrap` binary, a Python interpreter, the bwrap command line.

Probed once per process (cached): a sandbox that cannot be built is refused with
`SandboxUnavailable`, never replaced by an unsandboxed run. See docs/sandbox.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

BWRAP = "bwrap"
"""The bubblewrap binary, looked up on PATH."""
SANDBOX_UID = 65534
"""uid and gid of the code inside the sandbox, and of bwrap itself when the trainer is root."""
WORK_DIR = "/work"
"""The sandbox's own writable folder (a size-capped tmpfs) and its working directory."""
INPUT_DIR = "/sandbox"
"""Read-only folder inside the sandbox that holds the script and its input files."""
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin")
"""Host folders mounted read-only: what a system Python needs (no /etc, no home, no project)."""
PROBE_TIMEOUT_S = 30.0
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap) on a kernel with user namespaces"


class SandboxUnavailable(RuntimeError):
    """The code sandbox cannot run here (no `bwrap`, or no namespaces): code is refused."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """A working sandbox: the bwrap binary, the interpreter inside, and its extra mounts."""

    bwrap: str
    """Absolute path of `bwrap`."""
    python: str
    """Absolute path of the interpreter, the same inside the sandbox as outside."""
    binds: tuple[str, ...]
    """Host paths mounted read-only at the same place, besides SYSTEM_DIRS."""


def require_sandbox() -> Runtime:
    """The probed runtime; raises SandboxUnavailable (with how to install) when there is none."""
    found = _probe()
    if isinstance(found, str):
        raise SandboxUnavailable(f"the code sandbox is unavailable: {found}; {INSTALL_HINT}")
    return found


def unavailable() -> str | None:
    """Why the sandbox cannot run here (e.g. `bwrap` not found on PATH), or None when it can."""
    found = _probe()
    return found if isinstance(found, str) else None


def bwrap_argv(
    runtime: Runtime, *, workspace_bytes: int, data_fds: dict[str, int], info_fd: int | None
) -> list[str]:
    """The bwrap command line up to (not including) the command to run inside.

    `data_fds` maps a path inside the sandbox to a readable fd whose content becomes that
    read-only file; `info_fd` receives bwrap's JSON info (the sandbox init's host pid).
    """
    argv = [runtime.bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", WORK_DIR]
    argv += ["--setenv", "TMPDIR", WORK_DIR]
    for path in SYSTEM_DIRS:
        argv += ["--ro-bind-try", path, path]
    for path in runtime.binds:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(workspace_bytes), "--perms", "0700", "--tmpfs", WORK_DIR]
    for dest, fd in data_fds.items():
        argv += ["--ro-bind-data", str(fd), dest]
    # Nothing but WORK_DIR stays writable: bwrap's own root and /dev are tmpfs (host memory).
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK_DIR]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    return argv


def unprivileged(argv: list[str]) -> tuple[list[str], dict]:
    """``argv`` started as SANDBOX_UID when the trainer is root (else unchanged): the command
    line and the Popen arguments to start it with.

    As root, bwrap's user namespace would map the sandbox to host root, which the kernel exempts
    from the process-count limit; started as nobody, the sandbox is nobody to the host too.
    Where util-linux's ``setpriv`` is installed it changes the user on the way (``setpriv
    --reuid --regid --clear-groups argv``), so that Popen changes none itself: CPython starts a
    child with vfork only then, and a fork copies the trainer's address space (gigabytes of
    vLLM and torch mappings) while every thread of it waits. Measured on a real run (show-c,
    fair, 2 cores, 2026-12-05): a code group's four sandboxed runs took 0.242 s forked against
    0.139 s, and the engine steps running beside them 4.8x against 1.9x their usual time.
    """
    if os.geteuid() != 0:
        return argv, {}
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return argv, {"user": SANDBOX_UID, "group": SANDBOX_UID, "extra_groups": []}
    ids = [f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
    return [setpriv, *ids, *argv], {}


@functools.cache
def _probe() -> Runtime | str:
    """A Runtime that ran Python as SANDBOX_UID in the sandbox, or why there is none."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return f"`{BWRAP}` not found on PATH"
    errors = []
    for python, binds in _interpreters():
        runtime = Runtime(bwrap, python, binds)
        argv = bwrap_argv(runtime, workspace_bytes=1 << 20, data_fds={}, info_fd=None)
        argv += [python, "-I", "-S", "-c", "import os; print(os.getuid())"]
        argv, start_as = unprivileged(argv)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                env={},
                **start_as,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{python}: {exc}")
            continue
        if done.returncode == 0 and done.stdout.strip() == str(SANDBOX_UID).encode():
            return runtime
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        errors.append(f"{python}: {tail[0][:200]}")
    return f"`{bwrap}` cannot run Python in namespaces ({'; '.join(errors)})"


def _interpreters() -> list[tuple[str, tuple[str, ...]]]:
    """Interpreters to try, each with the host paths it needs mounted: this process's own
    (a venv's `python` resolved to its base interpreter, with its standard library and
    libpython; never the venv's site-packages), then the system's python3 under /usr."""
    own = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    found = [(own, _own_binds(own))] if os.path.isfile(own) else []
    for name in ("/usr/bin/python3", "/bin/python3"):
        real = os.path.realpath(name)
        if os.path.isfile(real) and real not in [python for python, _ in found]:
            found.append((real, ()))
    return found


def _own_binds(python: str) -> tuple[str, ...]:
    """Host paths outside SYSTEM_DIRS that this interpreter needs: itself, stdlib, libpython."""
    paths = [python, os.path.dirname(os.__file__), sysconfig.get_config_var("DESTSHARED") or ""]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        paths.append(os.path.join(libdir, sysconfig.get_config_var("INSTSONAME") or ""))
    binds: list[str] = []
    for path in paths:
        if not path or not os.path.exists(path) or _under(path, SYSTEM_DIRS):
            continue
        if not any(_under(path, (kept,)) for kept in binds):
            binds.append(path)
    return tuple(binds)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
