"""marlaas.interrupts: a signal during an import waits for its end; the start-up's block is
kept for the command alone; an ignored signal stays ignored."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import marlaas
from marlaas import interrupts
from marlaas.interrupts import Interrupted


@pytest.fixture
def taken():
    """The interrupts taken, from SIGINT's usual handler: a runner started in the background
    of a non-interactive shell inherits SIGINT ignored, which take() keeps ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    assert interrupts.take()
    yield
    interrupts.give_back()
    signal.signal(signal.SIGINT, before)


def write_module(folder, name: str, number: int) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(f"""\
        import signal
        signal.raise_signal({int(number)})
        finished = True  # the import runs to its end
    """))  # fmt: skip


@pytest.mark.parametrize(("number", "error"), [(signal.SIGINT, KeyboardInterrupt),
                                               (signal.SIGTERM, Interrupted)])  # fmt: skip
def test_a_signal_during_an_import_is_raised_once_the_import_is_over(
    tmp_path, monkeypatch, taken, number, error
):
    name = f"h31_signals_{number}"
    write_module(tmp_path, name, number)
    monkeypatch.syspath_prepend(str(tmp_path))
    imported = []
    with pytest.raises(error):
        imported.append(importlib.import_module(name))
        for _ in range(200):  # the handler is called again within RETRY_S
            time.sleep(0.01)
    assert imported and imported[0].finished
    del sys.modules[name]


def test_a_retry_left_from_before_does_not_swallow_the_next_signal(tmp_path, monkeypatch):
    """A retry whose signal reached the handlers of before (given back in between) leaves its
    flag: the next take() starts clean, and a signal during an import is raised."""
    interrupts._state.retried = True  # as such a retry leaves it
    assert interrupts.take()
    try:
        write_module(tmp_path, "h31_signals_stale", signal.SIGTERM)
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(Interrupted):
            importlib.import_module("h31_signals_stale")
            for _ in range(200):
                time.sleep(0.01)
        del sys.modules["h31_signals_stale"]
    finally:
        interrupts.give_back()


@pytest.mark.parametrize(("number", "error"), [(signal.SIGINT, KeyboardInterrupt),
                                               (signal.SIGTERM, Interrupted)])  # fmt: skip
def test_a_signal_raised_where_python_ignores_exceptions_is_delivered_again(taken, number, error):
    """The handler's exception raised inside a finalizer (or an at-fork callback, as logging's
    _releaseLock once in a sweep's fork) is "Exception ignored" by Python: it comes again."""

    class Finalized:
        def __del__(self):
            signal.raise_signal(number)  # the handler raises here, where nothing can catch

    with pytest.raises(error):
        Finalized()  # collected at once: its __del__ runs, and swallows the exception
        for _ in range(200):  # delivered again within RETRY_S
            time.sleep(0.01)


def test_an_unraisable_exception_of_another_kind_goes_to_the_hook_before(taken, monkeypatch):
    seen = []
    monkeypatch.setattr(interrupts._state, "previous_unraisable", seen.append)

    class Finalized:
        def __del__(self):
            raise ValueError("not a signal")

    Finalized()
    assert [type(u.exc_value) for u in seen] == [ValueError]


def test_a_signal_outside_an_import_is_raised_at_once(taken):
    with pytest.raises(Interrupted) as raised:
        signal.raise_signal(signal.SIGTERM)
    assert raised.value.signal == signal.SIGTERM


def test_an_ignored_signal_stays_ignored_and_handlers_come_back(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert interrupts.take()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is interrupts._on_signal
        interrupts.give_back()
        assert signal.getsignal(signal.SIGTERM) == before
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["python", "-m", "marlaas", "simulate"], "marlaas"),
        (["python", "-X", "dev", "-mmarlaas.cli"], "marlaas.cli"),
        (["python", "-m", "marlaas.envs.code_harness"], "marlaas.envs.code_harness"),
        (["python", "script.py", "-m", "x"], "x"),
        (["python", "-m"], None),
    ],
)
def test_module_argument(argv, module):
    assert marlaas._module_argument(argv) == module


def test_started_as_command(tmp_path, monkeypatch):
    script = tmp_path / "marlaas"
    script.write_text("import sys\nfrom marlaas.cli import main\nsys.exit(main())\n")
    other = tmp_path / "mytool"
    other.write_text(script.read_text())
    main = type(sys)("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "marlaas", "train"])
    assert marlaas._started_as_command()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "marlaas.envs.code_harness"])
    assert not marlaas._started_as_command()
    monkeypatch.setattr(sys, "argv", [str(script)])
    main.__file__ = str(script)
    assert marlaas._started_as_command()
    main.__file__ = str(other)
    assert not marlaas._started_as_command()


def mask_after(code: str) -> str:
    done = subprocess.run([sys.executable, *code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


PRINT_MASK = "import signal; print(sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))"


def test_importing_the_package_leaves_the_signal_mask_as_it_was():
    assert mask_after(["-c", f"import marlaas; {PRINT_MASK}"]) == "[]"


def test_the_command_holds_signals_until_its_handler_is_in_place():
    # as `python -m marlaas policies` starts, printing the mask before and after main
    code = ("import runpy, sys, signal; sys.argv = ['-m']; "
            "sys.orig_argv = [sys.executable, '-m', 'marlaas']; import marlaas; "
            "held = sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])); "
            "import marlaas.cli; marlaas.cli.main(['policies']); "
            f"print(held, end=' '); {PRINT_MASK}")  # fmt: skip
    out = mask_after(["-c", code]).splitlines()[-1]
    assert out == "[<Signals.SIGINT: 2>, <Signals.SIGTERM: 15>] []"


@pytest.mark.parametrize("inside", ["task", "callback"])
@pytest.mark.parametrize(("number", "error"), [(signal.SIGINT, KeyboardInterrupt),
                                               (signal.SIGTERM, Interrupted)])  # fmt: skip
def test_a_signal_that_lands_inside_a_task_or_a_callback_ends_the_event_loop(
    taken, number, error, inside
):
    """The handler raises in whatever the main thread runs: often a task's step other than the
    one the loop was asked to complete, or a callback (a thread's result handed to the loop).
    asyncio lets only KeyboardInterrupt and SystemExit out of either; another exception
    becomes the task's result, or goes to the loop's exception handler (the real executor's
    keeps it quiet). SIGTERM's Interrupted was such an exception: a real run took it so and
    trained to its end, exit 0."""
    import asyncio

    from marlaas.executors.real import quiet_interrupts

    async def work():
        signal.raise_signal(number)  # the handler runs here, inside this task's step
        await asyncio.sleep(30)

    async def run():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(quiet_interrupts)  # as the real executor's loop
        work_task = loop.create_task(work()) if inside == "task" else None
        if work_task is None:
            loop.call_soon(signal.raise_signal, number)
        await asyncio.sleep(2)  # the run goes on: nothing awaits the work
        return work_task

    with pytest.raises(error) as raised:
        asyncio.run(run())
    assert raised.type is error
