"""``marlaas train`` without ``--resume`` over a finished real run: the old run is kept until
the new one has its first durable step. A new run whose model fails to load, or that is
stopped (Ctrl-C) or killed (``kill -9``) before that step, leaves the old run as it was (the
next command puts it back after a kill); one that trains replaces it. Real tiny runs (HF
backend, CPU): seconds each."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.cli import main
from marlaas.executors.journal import JOURNAL_FILE, Journal, read_journal
from marlaas.output.manifest import read_manifest
from tests.child_env import python_path_first
from tests.tiny_cluster import tiny_cluster_yaml

REPO = Path(__file__).resolve().parents[2]
STUB_MODEL = {
    "config.json": '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, '
    '"hidden_size": 128}',
    "model.safetensors": "",
    "tokenizer.json": "{}",
}
"""A model folder that passes the checks before any work, and fails to load."""


def workload_text(model: Path, steps: int = 2, held_until: Path | None = None) -> str:
    """One tenant on the tiny model; each environment step waits 0.2 s, so that the first
    durable step comes a while after the model loads. ``held_until``: every environment step
    waits until that file exists (tests/executors/held_env.py), so that the run makes no
    durable step before it, on any machine."""
    env = "{name: target_char, args: {target: a}"
    if held_until is not None:
        release = json.dumps(str(held_until))
        env = ('{name: "tests.executors.held_env:HeldTargetChar", '
               f"args: {{target: a, after: 0, release: {release}}}")  # fmt: skip
    return (
        tiny_cluster_yaml("replace-tiny", model, adapter_slots=2)
        + f"""jobs:
  - name: emit-a
    tenant: ta
    lora_rank: 8
    rl: {{steps: {steps}, prompts_per_step: 2, group_size: 4, max_new_tokens: 8,
         max_staleness: 0, learning_rate: 0.02}}
    prompt_tokens: {{dist: constant, value: 24}}
    response_tokens: {{dist: constant, value: 8}}
    env: {env}, latency_s: {{dist: constant, value: 0.2}}}}
"""
    )


def train_args(workload: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(workload), "--backend", "hf", "--quiet", "--out", str(out), *extra]


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(workload file, finished 2-step run folder)."""
    root = tmp_path_factory.mktemp("replace")
    workload = root / "w.yaml"
    workload.write_text(workload_text(tiny_model_dir))
    assert main(train_args(workload, root / "run")) == 0
    return workload, root / "run"


@pytest.fixture
def old_run(finished, tmp_path) -> tuple[Path, Path, dict[str, bytes]]:
    """(workload, a copy of the finished run, its files)."""
    workload, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return workload, out, files(out)


def assert_whole(out: Path, before: dict[str, bytes]) -> None:
    """``out`` is the old run, byte for byte, and loadable; nothing beside it."""
    from safetensors.torch import load_file

    assert files(out) == before
    assert read_manifest(out)["status"] == "finished"
    assert len(read_journal(out / JOURNAL_FILE).steps) == 2
    assert load_file(str(out / "adapters" / "emit-a" / "v2" / "adapter_model.safetensors"))
    assert entries(out.parent) == ["run"]


def test_a_new_run_whose_model_fails_to_load_keeps_the_old_run(old_run, tmp_path):
    _, out, before = old_run
    stub = tmp_path / "stub"
    stub.mkdir()
    for name, text in STUB_MODEL.items():
        (stub / name).write_text(text)
    broken = tmp_path / "broken.yaml"
    broken.write_text(workload_text(stub))
    with pytest.raises(Exception):  # noqa: B017 (how it is reported is not this test's matter)
        assert main(train_args(broken, out)) == 0
    shutil.rmtree(stub)
    broken.unlink()
    assert_whole(out, before)


def test_a_new_run_stopped_before_its_first_durable_step_keeps_the_old_run(
    old_run, capsys, monkeypatch
):
    workload, out, before = old_run

    def stopped(*_args, **_kwargs):
        raise KeyboardInterrupt  # Ctrl-C as the first step was to be made durable

    monkeypatch.setattr(Journal, "step", stopped)
    assert main(train_args(workload, out)) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"marlaas: interrupted (SIGINT); {out} holds the earlier run, as it was "
                    "(the new one had no durable step)")  # fmt: skip
    assert_whole(out, before)


def test_a_fresh_run_stopped_before_its_first_durable_step_leaves_nothing(
    finished, tmp_path, capsys, monkeypatch
):
    """It left a partial run, which the next plain ``train`` refused (resume it), and said
    its durable steps were kept: there were none."""
    workload, _ = finished
    out = tmp_path / "fresh"

    def stopped(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Journal, "step", stopped)
    assert main(train_args(workload, out)) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"marlaas: interrupted (SIGINT); nothing was kept in {out} (the run had no "
                    "durable step)")  # fmt: skip
    assert entries(tmp_path) == []


def test_a_new_run_that_trains_replaces_the_old_run(old_run):
    workload, out, before = old_run
    assert main(train_args(workload, out, "--seed", "7")) == 0
    assert read_manifest(out)["status"] == "finished"
    journaled = read_journal(out / JOURNAL_FILE)
    assert journaled.parts == 1 and len(journaled.steps) == 2  # the new run's alone
    assert files(out) != before and entries(out.parent) == ["run"]


def _signals_as_a_shell_sets() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


KILL_POINTS = {
    "as the old run is set aside": "",
    "as the journal starts, before the model loads": JOURNAL_FILE,
    "once the first adapter is stored, before the first durable step": "adapters/emit-a",
}
"""Where ``kill -9`` hits the new run: once the old run is set aside (``.run.old``) and the
new one holds this path."""


def reached(out: Path, point: str) -> bool:
    return out.with_name(".run.old").exists() and (out / KILL_POINTS[point]).exists()


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_9_before_the_first_durable_step_and_the_next_command_puts_the_old_run_back(
    old_run, capsys, point, tiny_model_dir, tmp_path_factory
):
    workload, out, before = old_run
    held = tmp_path_factory.mktemp("held")  # the new run makes no durable step: it is killed
    (held / "w.yaml").write_text(workload_text(tiny_model_dir, held_until=held / "never"))
    env = python_path_first(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "marlaas", *train_args(held / "w.yaml", out)], env=env,
        stderr=subprocess.DEVNULL, preexec_fn=_signals_as_a_shell_sets,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while not reached(out, point) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.wait()
    assert reached(out, point), f"the new run was not killed {point}"
    old, journal = out.with_name(".run.old"), out / JOURNAL_FILE
    assert not journal.exists() or read_journal(journal).steps == []  # none durable yet
    assert files(old) == before
    # the next command on the run puts it back, says so, then does what it was asked
    assert main(train_args(workload, out, "--resume")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"marlaas: warning: {out}: put the earlier real training run back (the "
                      "command replacing it was stopped before its output was whole)")  # fmt: skip
    assert "nothing to resume" in err[-1]
    assert_whole(out, before)
