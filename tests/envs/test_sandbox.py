"""The python_exec sandbox under attack: each attack fails and the host is unharmed.

Tests that need bubblewrap are marked ``needs_bwrap``: skipped without it, saying how to
install it, and failed instead in CI, which installs it (tests/system_tools.py);
test_refuses_without_bwrap simulates a missing bwrap. Model code is written so that it
scores 1.0 only if the attack works, unless the test says otherwise.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from marlaas.envs import make_env, resolve_env
from marlaas.envs import sandbox_runtime as runtime
from marlaas.envs.python_exec import score_results
from marlaas.envs.sandbox import SandboxLimits, SandboxResult, SandboxUnavailable, run_python
from tests.system_tools import needs_bwrap

ADD_TESTS = [[[1, 2], 3], [[2, 2], 4], [[5, 5], 10]]
GENEROUS_S = 60.0  # upper bound on any step here; they take ~0.1 s, timeouts a few s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, GENEROUS_S))


def step(code: str, tests=None, func: str = "add", **options):
    """Score `code` (dedented) once in a fresh python_exec environment."""
    task = {"prompt": "p", "func": func, "tests": tests or ADD_TESTS}
    env = make_env("python_exec", {"tasks": [task], **options})
    run(env.reset(0))
    return run(env.step(textwrap.dedent(code)))


def processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.fixture
def open_dir():
    """A host folder anyone may write to and delete from: only the sandbox keeps code out."""
    path = Path(tempfile.mkdtemp(prefix="marlaas-open-"))
    path.chmod(0o777)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)


# --- what the code is for -----------------------------------------------------------------


@needs_bwrap
def test_correct_solution_scores_one():
    out = step("```python\ndef add(a, b):\n    return a + b\n```")
    assert out.reward == 1.0 and out.info["outcome"] == "ok" and out.info["passed"] == 3


@needs_bwrap
def test_partly_correct_solution_scores_in_between():
    out = step("def add(a, b):\n    return 4 if a == 2 else a + b + 1")
    assert out.reward == pytest.approx(1 / 3) and out.info["passed"] == 1


@needs_bwrap
def test_runs_as_nobody_with_python_and_a_writable_workspace():
    code = """
    import os
    def probe():
        with open("/work/f", "w") as f:
            f.write("x")
        return [os.getuid(), os.getgid(), os.listdir("/work"), os.getcwd()]
    """
    out = step(code, tests=[[[], [65534, 65534, ["f"], "/work"]]], func="probe")
    assert out.reward == 1.0, out.info


@needs_bwrap
def test_host_sees_the_sandbox_as_nobody():
    token = uuid.uuid4().hex
    script = f"""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
    time.sleep(60)
    """

    async def watch():
        task = asyncio.ensure_future(run_python(textwrap.dedent(script), {}, SandboxLimits(30)))
        while not processes_with(token) and not task.done():
            await asyncio.sleep(0.05)
        assert not task.done(), task.result()
        status = Path(f"/proc/{processes_with(token)[0]}/status").read_text()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return status

    status = run(watch())
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    expected = runtime.SANDBOX_UID if os.geteuid() == 0 else os.geteuid()
    assert set(map(int, uids)) == {expected}
    assert processes_with(token) == []  # a cancelled step kills its sandbox too


@needs_bwrap
def test_concurrent_steps_each_get_their_own_process_limit():
    code = """
    import os, time
    def add(a, b):
        pid = os.fork()
        if pid == 0:
            time.sleep(0.3)
            os._exit(0)
        os.waitpid(pid, 0)
        return a + b
    """

    async def together():
        task = {"prompt": "p", "func": "add", "tests": ADD_TESTS}
        options = {"tasks": [task], "max_processes": 2, "timeout_s": 20}
        envs = [make_env("python_exec", options) for _ in range(6)]
        for env in envs:
            await env.reset(0)
        return await asyncio.gather(*(env.step(textwrap.dedent(code)) for env in envs))

    assert [out.reward for out in run(together())] == [1.0] * 6


@needs_bwrap
def test_infinite_loop_times_out():
    out = step("while True:\n    pass", timeout_s=1.0)
    assert out.reward == 0.0 and out.info["outcome"] == "timeout"


# --- attacks ------------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("path", ["/etc/passwd", str(Path(__file__).resolve())])
def test_cannot_read_host_files(path):
    code = f"""
    print(open({path!r}).read())
    def add(a, b):
        return a + b
    """
    out = step(code)
    assert out.reward == 0.0 and "FileNotFoundError" in out.info["stderr"]
    assert "root:" not in out.info["stderr"] and "cannot_read_host" not in out.info["stderr"]


@needs_bwrap
def test_cannot_write_or_delete_outside_its_folder(open_dir):
    victim, created = open_dir / "victim.txt", open_dir / "created.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)
    code = f"""
    import os
    done = 0
    for attempt in (lambda: os.remove({str(victim)!r}),
                    lambda: open({str(victim)!r}, "w").write("pwned"),
                    lambda: open({str(created)!r}, "w").write("pwned"),
                    lambda: open("/tmp/marlaas-pwned", "w").write("pwned")):
        try:
            attempt()
            done += 1
        except OSError:
            pass
    def add(a, b):
        return a + b if done else 0
    """
    out = step(code)
    assert out.reward == 0.0
    assert victim.read_text() == "keep me" and not created.exists()


@needs_bwrap
def test_big_file_stays_inside_and_goes_with_the_step(open_dir):
    big = open_dir / "big.bin"
    code = f"""
    written = largest = 0
    for path in ({str(big)!r}, "/work/a.bin", "/work/b.bin", "/work/c.bin"):
        size = 0
        try:
            with open(path, "wb") as f:
                for _ in range(24):
                    f.write(bytes(1 << 20))
                    size += 1 << 20
        except OSError:
            pass
        written, largest = written + size, max(largest, size)
    def add(a, b):
        # a file over the 16 MiB limit, or over the 32 MiB workspace in all
        return a + b if largest > 16 << 20 or written > 40 << 20 else 0
    """
    out = step(code)
    assert out.reward == 0.0 and not big.exists()


@needs_bwrap
def test_cannot_kill_the_trainer_or_other_processes():
    argv, start_as = runtime.unprivileged(["sleep", "60"])
    sentinel = subprocess.Popen(argv, **start_as)  # same host uid
    try:
        code = f"""
        import os, signal
        for pid in (os.getppid(), {os.getpid()}, {sentinel.pid}, -1):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        def add(a, b):
            return a + b
        """
        out = step(code)
        assert sentinel.poll() is None  # still running; so is this test's process
        assert out.reward == 1.0  # the sandbox's own init ignores the kill, the code still runs
    finally:
        sentinel.kill()
        sentinel.wait()


@needs_bwrap
@pytest.mark.parametrize("outcome", ["ok", "timeout"])
def test_no_process_outlives_the_step(outcome):
    token = uuid.uuid4().hex
    code = f"""
    import os, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"],
                     start_new_session=True)
    if os.fork() == 0:  # a daemon: own session, no pipes to the step
        os.setsid()
        os.closerange(0, 64)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
    def add(a, b):
        return a + b
    {"time.sleep(60)" if outcome == "timeout" else ""}
    """
    out = step(code, timeout_s=2.0)
    assert out.info["outcome"] == outcome
    assert processes_with(token) == []


@needs_bwrap
def test_huge_output_is_capped_without_buffering():
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = """
    import os
    chunk = b"x" * (1 << 20)
    for _ in range(1024):  # 1 GiB
        os.write(1, chunk)
        os.write(2, chunk)
    def add(a, b):
        return a + b
    """
    out = step(code)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib
    assert out.reward == 0.0 and out.info["outcome"] == "output_limit"
    assert grown_kib < 128 * 1024  # the old path grew by ~3 GiB
    assert len(out.info["stderr"]) <= 2000


@needs_bwrap
def test_stderr_in_info_is_capped():
    out = step("import sys\nsys.stderr.write('e' * 100_000)\ndef add(a, b):\n    return a + b")
    assert out.reward == 1.0 and len(out.info["stderr"]) == 2000


@needs_bwrap
def test_no_network_to_a_host_server():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"""
        import socket
        def add(a, b):
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            except OSError:
                return 0
            return a + b
        """
        out = step(code)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    assert out.reward == 0.0


@needs_bwrap
def test_no_raw_or_packet_sockets():
    code = """
    import socket
    opened = 0
    for family, kind, proto in ((socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                                (socket.AF_PACKET, socket.SOCK_RAW, 0x0300)):
        try:
            socket.socket(family, kind, proto).close()
            opened += 1
        except OSError:
            pass
    def add(a, b):
        return a + b if opened else 0
    """
    assert step(code).reward == 0.0


@needs_bwrap
def test_fork_bomb_is_contained():
    token = uuid.uuid4().hex
    code = f"""
    import os, sys
    forked = 0
    try:
        while forked < 200:
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)",
                                          "{token}"])
            forked += 1
    except OSError:
        pass
    def add(a, b):
        return a + b if forked >= 8 else 0
    """
    out = step(code, max_processes=8)
    assert out.reward == 0.0 and processes_with(token) == []
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert step(bomb, timeout_s=1.0, max_processes=8).info["outcome"] == "timeout"
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


@needs_bwrap
def test_environment_holds_no_secrets(monkeypatch):
    monkeypatch.setenv("MARLAAS_TEST_SECRET", "hunter2")
    code = """
    import os
    seen = str(dict(os.environ))
    for pid in os.listdir("/proc"):
        try:
            seen += open(f"/proc/{pid}/environ", errors="replace").read()
        except OSError:
            pass
    print(seen)
    def add(a, b):
        return a + b if "hunter2" in seen or set(os.environ) - {"PATH", "HOME", "TMPDIR",
                                                                  "PWD", "LC_CTYPE"} else 0
    """
    out = step(code)
    assert out.reward == 0.0 and "hunter2" not in out.info["stderr"]


@needs_bwrap
def test_eq_that_is_always_true_scores_zero():
    code = """
    class Yes:
        def __eq__(self, other):
            return True
    def add(a, b):
        return Yes()
    """
    out = step(code)
    assert out.reward == 0.0 and out.info["outcome"] == "ok"


@needs_bwrap
def test_forged_results_score_zero():
    code = """
    import json, os
    cmdline = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    forged = json.dumps({"passed": 100, "results": [{"value": 3}] * 100}) + "\\n"
    for prefix in [b""] + cmdline:  # the old harness put its nonce on the command line
        for fd in range(1, 20):
            try:
                os.write(fd, prefix + forged.encode())
            except OSError:
                pass
    os._exit(0)  # before the harness writes its own line
    """
    out = step(code)
    assert out.reward == 0.0


@needs_bwrap
def test_expected_values_never_enter_the_sandbox():
    secret = f"expected-{uuid.uuid4().hex}"
    code = """
    import os
    def reveal():
        paths = ["/proc/self/cmdline", "/proc/self/environ", "/proc/1/cmdline", "/proc/1/environ"]
        paths += [os.path.join(root, name) for root in ("/sandbox", "/work")
                  for name in os.listdir(root)]
        for path in paths:
            try:
                text = open(path, errors="replace").read()
            except OSError:
                continue
                start = text.find("expected-")
                if start >= 0:
                    return text[start : start + 41]
        return None
    """
    assert step(code, tests=[[[], secret]], func="reveal").reward == 0.0


def test_results_are_judged_in_the_parent():
    def sandbox_said(line: bytes) -> tuple[int, str]:
        return score_results(SandboxResult("exited", 0, line, b""), [3, True, [1.0]])

    good = b'{"results": [{"value": 3}, {"value": true}, {"value": [1]}]}'
    assert sandbox_said(good) == (3, "ok")
    assert sandbox_said(b'{"results": [{"value": 3.0}, {"value": 1}, {"value": [true]}]}')[0] == 1
    assert sandbox_said(b'{"results": [{"value": 3}, {"value": true}]}') == (0, "error")
    assert sandbox_said(b'{"results": [{"value": NaN}, {"value": true}, {"value": [1]}]}')[0] == 0
    assert sandbox_said(b'{"load_error": "MemoryError"}') == (0, "memory")
    assert sandbox_said(b"[" * 100_000) == (0, "error")


# --- refusal and options ------------------------------------------------------------------


@pytest.fixture
def fresh_probe():
    runtime._probe.cache_clear()
    yield
    runtime._probe.cache_clear()


@pytest.mark.parametrize(("bwrap", "why"), [("no-such-bwrap-x", "not found"), ("false", "cannot")])
def test_refuses_without_bwrap(monkeypatch, fresh_probe, bwrap, why):
    env = make_env("python_exec")
    run(env.reset(0))
    monkeypatch.setattr(runtime, "BWRAP", bwrap)
    runtime._probe.cache_clear()
    make_env("python_exec")  # validating a workload (or simulating it) needs no sandbox
    with pytest.raises(SandboxUnavailable, match=why) as caught:
        resolve_env("python_exec").check_runtime()  # a real run refuses to start
    assert "apt-get install bubblewrap" in str(caught.value)
    assert "\n" not in str(caught.value) and isinstance(caught.value, RuntimeError)
    with pytest.raises(SandboxUnavailable):
        run(env.step("def add(a, b):\n    return a + b"))


@pytest.mark.parametrize("setpriv", ["/usr/bin/setpriv", None])
def test_root_starts_the_sandbox_as_nobody_and_lets_python_vfork(monkeypatch, setpriv):
    """As root the sandbox starts as SANDBOX_UID; through setpriv, Popen changes no ids itself
    (CPython forks the whole trainer, gigabytes of mappings, where it does)."""
    monkeypatch.setattr(runtime.os, "geteuid", lambda: 0)
    monkeypatch.setattr(runtime.shutil, "which", {"setpriv": setpriv}.get)
    argv, start_as = runtime.unprivileged(["bwrap", "python"])
    uid = runtime.SANDBOX_UID
    if setpriv:
        assert argv == [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "bwrap",
                        "python"]  # fmt: skip
        assert not {"user", "group", "extra_groups", "preexec_fn"} & set(start_as)
    else:
        assert argv == ["bwrap", "python"]
        assert start_as == {"user": uid, "group": uid, "extra_groups": []}
    monkeypatch.setattr(runtime.os, "geteuid", lambda: 1000)
    assert runtime.unprivileged(["bwrap"]) == (["bwrap"], {})


@pytest.mark.parametrize(
    ("option", "value"),
    [("timeout_s", float("inf")), ("timeout_s", float("nan")), ("timeout_s", 0),
     ("memory_mb", 0), ("memory_mb", 10**9), ("max_output_bytes", True),
     ("max_processes", 0), ("max_processes", 10**6), ("tasks", [{"prompt": "p"}]),
     ("tasks", [{"prompt": "p", "func": "f", "tests": [[[1], (1, 2)]]}])],
)  # fmt: skip
def test_bad_options_are_rejected(option, value):
    with pytest.raises(ValueError, match=option):
        make_env("python_exec", {option: value})


def test_interpreter_needs_no_site_packages():
    found = runtime._interpreters()
    assert found and all(os.path.isabs(python) for python, _ in found)
    assert found[0][0] == os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    assert not any("site-packages" in path for _, binds in found for path in binds)
    assert not any(path.startswith(sys.prefix + "/") for _, binds in found for path in binds)


@needs_bwrap
def test_a_step_cancelled_as_its_sandbox_is_killed_is_cancelled(monkeypatch):
    """A cancellation (the step's bound passed, its group failed, the run stops) that comes
    while the sandbox is being killed and its pipes drained was swallowed there, with the
    drain's own: the step returned a result, and its episode went on where its caller had
    given it up (a stopping run waited for it)."""
    from marlaas.envs import sandbox

    killed = sandbox._kill

    async def kill_then_cancelled(proc, init_pidfd):
        await killed(proc, init_pidfd)
        asyncio.current_task().cancel()  # delivered at the drain's await

    monkeypatch.setattr(sandbox, "_kill", kill_then_cancelled)

    async def cancelled() -> bool:
        try:
            await run_python("print('hi')", {}, SandboxLimits(10))
        except asyncio.CancelledError:
            return True
        return False

    assert run(cancelled())
