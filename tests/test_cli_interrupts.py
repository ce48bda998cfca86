"""Ctrl-C and SIGTERM while the command starts: one ``marlaas: interrupted`` line and status
130 (143), never a traceback, an ImportError or a compiled module's abort (status 134), both at
set points of the start-up's imports and after timed delays (see :mod:`marlaas.interrupts`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_env import python_path_first

ROOT = Path(__file__).resolve().parent.parent
SMALL = str(ROOT / "traces" / "small.yaml")

LAUNCHER = """\
import os
import signal
import sys

{before}
from marlaas.cli import main
sys.exit(main())
"""
"""A console script as pip writes it (a file ``marlaas`` importing ``marlaas.cli.main``), with
lines run before that import."""

SIGNAL_ON_IMPORT = """\
class SignalOnImport:
    \"\"\"Sends the process a signal as it starts importing one module.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), {number})
        return None


sys.meta_path.insert(0, SignalOnImport())
"""

SAY_READY = """\
import marlaas  # its first line holds the signals for the command
os.write({fd}, b"ready")
os.close({fd})
"""


def launcher(folder: Path, before: str) -> Path:
    (folder / "bin").mkdir()
    path = folder / "bin" / "marlaas"
    path.write_text(LAUNCHER.format(before=before))
    return path


def run_env() -> dict[str, str]:
    return python_path_first(ROOT)


def as_a_terminal_starts_it() -> None:
    """SIGINT at its default in the child (a test run in the background has it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted_line(number: int, left: str) -> str:
    return f"marlaas: interrupted ({signal.Signals(number).name}); {left}"


@pytest.mark.parametrize(
    ("module", "left"),
    [
        ("marlaas.run_options", "nothing was written"),  # main's handler is not in place yet
        ("simpy", "{out} was left as it was"),  # the simulator's modules (compiled) initialize
    ],
)
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_a_module_is_imported_is_one_line(tmp_path, module, left, number):
    out = tmp_path / "run"
    before = SIGNAL_ON_IMPORT.format(module=module, number=int(number))
    done = subprocess.run(
        [sys.executable, str(launcher(tmp_path, before)), "simulate", SMALL, "--quiet", "--out",
         str(out)],
        capture_output=True, text=True, env=run_env(), cwd=ROOT, timeout=120, check=False,
        preexec_fn=as_a_terminal_starts_it,
    )  # fmt: skip
    assert done.returncode == 128 + number, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == interrupted_line(number, left.format(out=out))
    assert not out.exists()


TRIAL_DELAYS_MS = (0, 10, 20, 40, 80, 160)
"""Delays after the package's first line at which Ctrl-C comes: the command line's imports,
the command's own (pandas, the simulator, compiled), its run. (Before that line the
interpreter's own start-up handles it, as Python does: see marlaas.interrupts.)"""


def trial(folder: Path, delay_ms: int) -> tuple[int, str]:
    read, write = os.pipe()
    command = [sys.executable, str(launcher(folder, SAY_READY.format(fd=write))), "simulate",
               SMALL, "--quiet", "--out", str(folder / "run")]  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=run_env(),
        cwd=ROOT, pass_fds=(write,), preexec_fn=as_a_terminal_starts_it,
    )  # fmt: skip
    os.close(write)
    with os.fdopen(read, "rb") as ready:
        assert ready.read() == b"ready"
    time.sleep(delay_ms / 1000)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("delay_ms", TRIAL_DELAYS_MS)
def test_ctrl_c_at_any_instant_of_start_up_is_one_line(tmp_path, delay_ms):
    code, err = trial(tmp_path, delay_ms)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(interrupted_line(signal.SIGINT, "")), err


def test_a_coroutine_the_signal_left_unstarted_adds_nothing_after_the_line():
    """The signal may land while work is being set up: a coroutine made but never started
    (an environment's reset, inside asyncio.gather) would add a "was never awaited" warning
    after the ``marlaas: interrupted`` line at exit; the interrupt drops it on purpose."""
    before = """\
import marlaas.cli


async def reset():
    return 0


def interrupted(args):
    pending = reset()  # made, never awaited
    raise KeyboardInterrupt


def build_parser():
    import argparse

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=interrupted)
    return parser


marlaas.cli.build_parser = build_parser
"""
    script = LAUNCHER.format(before=before)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=python_path_first(ROOT), timeout=120)  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        "marlaas: interrupted (SIGINT); nothing was written"
    ], done.stderr
