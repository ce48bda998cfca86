"""``kill -9`` of ``marlaas train`` and ``--resume``: nothing lost, nothing twice.

A real tiny run (HF backend) is killed with SIGKILL once some of its steps are durable, then
resumed; it must end exactly as an uninterrupted run of the same seed: the same adapter
weights (up to floating-point noise: the optimizer state was restored), one event log and
one reward curve with every step exactly once, times continuing, and its other files kept.
Both runs are on-policy (max_staleness 0), so that each step's samples come from the same
adapter version whatever the asynchronous schedule did; and one job's groups can share a
batch with the other's, which moves log-probs by ~1e-7, hence a tolerance, not equality.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.cli import main
from marlaas.executors.journal import JOURNAL_FILE, read_journal
from marlaas.metrics.idle import check_partition
from marlaas.output.manifest import read_manifest
from tests.child_env import python_path_first
from tests.tiny_cluster import tiny_cluster_yaml

REPO = Path(__file__).resolve().parents[2]
STEPS = 6
JOBS = ("emit-a", "emit-z")
PROMPTS, GROUP = 2, 4
HELD_AFTER = 2 * len(JOBS) * PROMPTS * GROUP
"""Environment steps taken before the rest wait for the release file: each job's first two
steps' (on-policy, a job's next step starts once its last one trained), so a held run makes
3 or 4 durable steps of the 12 and no more."""


def workload_text(model: Path, release: Path) -> str:
    """Two tenants on the tiny model, on-policy, one CPU for generation and training. Their
    environment (tests/executors/held_env.py) holds every step past the first
    :data:`HELD_AFTER` until the file ``release`` exists: a run signalled or killed after its
    first durable steps is still training then, on any machine (an environment latency only
    made that likely: on a loaded machine the test process could see the run end first)."""
    jobs = "".join(
        f"""  - name: emit-{c}
    tenant: t{c}
    lora_rank: 8
    rl: {{steps: {STEPS}, prompts_per_step: {PROMPTS}, group_size: {GROUP}, max_new_tokens: 8,
         max_staleness: 0, learning_rate: 0.02}}
    prompt_tokens: {{dist: constant, value: 24}}
    response_tokens: {{dist: constant, value: 8}}
    env: {{name: "tests.executors.held_env:HeldTargetChar",
          args: {{target: {c}, release: {json.dumps(str(release))}, after: {HELD_AFTER}}}}}
"""
        for c in "az"
    )
    return tiny_cluster_yaml("kill-tiny", model) + f"jobs:\n{jobs}"


KILL_TIMEOUT_S = 300
"""Generous bound for the killed run to reach its durable steps."""


def _signals_as_a_shell_sets() -> None:
    """In the child, before exec: SIGINT and SIGTERM unblocked and at their defaults, as a
    terminal's shell starts a command; a signal mask or ignored SIGINT that this (pytest)
    process picked up from a library would otherwise be inherited, and the signal never seen."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def released(release: Path) -> Iterator[list[subprocess.Popen]]:
    """A list for the test to put the run it starts in; on the way out, however the block
    ended (a failed assertion, a wait past its bound, pytest's own interrupt), the run's held
    steps are released (``release`` made) and the run, if it still runs, is killed and
    reaped: a held run left behind would wait for its release for ever."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        release.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def durable_steps(out: Path) -> int:
    path = out / JOURNAL_FILE
    return len(read_journal(path).steps) if path.exists() else 0


def train_args(workload: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(workload), "--backend", "hf", "--quiet", "--out", str(out), *extra]


def adapter(out: Path, job: str, version: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "adapters" / job / f"v{version}" / "adapter_model.safetensors"))


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_adapters_and_one_history(
    tiny_model_dir, tmp_path, capsys
):
    workload, release = tmp_path / "w.yaml", tmp_path / "release"
    workload.write_text(workload_text(tiny_model_dir, release))
    full, part = tmp_path / "full", tmp_path / "part"
    release.touch()  # the reference runs through
    assert main(train_args(workload, full)) == 0

    release.unlink()  # the run to kill is held after its first durable steps
    env = python_path_first(REPO)
    command = [sys.executable, "-m", "marlaas.cli", *train_args(workload, part)]
    with released(release) as started:
        started.append(subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL))
        proc = started[0]
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while durable_steps(part) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the run to kill ended first (status {proc.returncode})"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    done_before = durable_steps(part)
    assert 3 <= done_before < len(JOBS) * STEPS  # killed midway
    assert read_manifest(part)["status"] == "partial"
    emptied = tmp_path / "emptied"  # its journal emptied: refused, not read as none (the
    shutil.copytree(part, emptied)  # manifest lists it from its first line on)
    (emptied / JOURNAL_FILE).write_bytes(b"")
    capsys.readouterr()
    assert main(train_args(workload, emptied, "--resume")) == 2
    assert "journal.jsonl: holds no whole journal line" in capsys.readouterr().err
    (part / "eval.json").write_text('[{"job": "emit-a", "model": "base", "accuracy": 0.1}]')

    assert main(train_args(workload, part, "--resume")) == 0

    assert read_manifest(part)["status"] == "finished"
    assert json.loads((part / "eval.json").read_text())[0]["accuracy"] == 0.1
    import torch

    for job in JOBS:  # the optimizer state came back: Adam's moments shape every later step
        ours, theirs = adapter(part, job, STEPS), adapter(full, job, STEPS)
        assert ours.keys() == theirs.keys()
        # Adam moves every weight ~lr = 0.02 a step: with the optimizer state never loaded
        # the weights are 2.6e-2 apart on average (seen). Batches composed otherwise after
        # the kill give float noise, which Adam scales up where a gradient is near 0 (it
        # divides by the gradient's own size): a few weights of 32,768 up to 1.4e-3 apart,
        # their mean 5e-7 (seen). Hence the mean.
        moved = torch.cat([(value - theirs[key]).abs().flatten() for key, value in ours.items()])
        assert float(moved.mean()) < 1e-5, (job, float(moved.mean()), float(moved.max()))
    events = pd.read_parquet(part / "events.parquet")
    check_partition(events)
    train = events[(events["kind"] == "train") & (events["outcome"] == "ok")]
    for job in JOBS:
        assert sorted(train[train["job"] == job]["step"]) == list(range(STEPS))
    rewards, reference = (pd.read_csv(run / "rewards.csv") for run in (part, full))
    assert list(zip(rewards["job"], rewards["step"], strict=True)) == [
        (job, step) for job in JOBS for step in range(STEPS)
    ]
    assert (rewards["mean_reward"] - reference["mean_reward"]).abs().max() < 1e-6
    for _job, curve in rewards.groupby("job"):
        assert curve["time_s"].is_monotonic_increasing  # times continue after the kill
    parts = read_journal(part / JOURNAL_FILE)
    assert parts.parts == 2 and len(parts.steps) == len(JOBS) * STEPS
    summary = json.loads((part / "summary.json").read_text())
    assert all(t is not None for t in summary["job_finish_s"].values())
    assert summary["metrics"]["makespan_s"] == pytest.approx(events["end_s"].max())


def test_without_resume_an_unfinished_run_is_refused(tiny_model_dir, tmp_path, capsys):
    from marlaas.output.manifest import write_manifest

    workload = tmp_path / "w.yaml"
    workload.write_text(workload_text(tiny_model_dir, tmp_path / "release"))
    out = tmp_path / "run"
    (out / "adapters" / "emit-a" / "v3").mkdir(parents=True)
    write_manifest(out, "real", "partial")
    assert main(train_args(workload, out)) == 2
    err = capsys.readouterr().err
    assert "unfinished real training run" in err and "--resume" in err
    assert (out / "adapters" / "emit-a" / "v3").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_training_with_one_line_and_resume_finishes(
    tiny_model_dir, tmp_path, capsys, sig
):
    workload, release = tmp_path / "w.yaml", tmp_path / "release"
    workload.write_text(workload_text(tiny_model_dir, release))  # held after its first steps
    out = tmp_path / "run"
    env = python_path_first(REPO)
    command = [sys.executable, "-m", "marlaas.cli", *train_args(workload, out)]
    with released(release) as started:
        started.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=_signals_as_a_shell_sets))  # fmt: skip
        proc = started[0]
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while durable_steps(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the run to stop ended first (status {proc.returncode})"
        proc.send_signal(sig)
        try:  # held, a run that goes on after the signal never ends by itself
            _, err = proc.communicate(timeout=KILL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run went on {KILL_TIMEOUT_S} s after {sig.name}")
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # (transformers' loading bars come before it)
    assert last == (
        f"marlaas: interrupted ({sig.name}); the steps made durable so far are kept in {out}: "
        "run the same command with --resume to continue"
    )
    assert read_manifest(out)["status"] == "partial"
    assert sorted(p.name for p in out.iterdir()) == ["adapters", "journal.jsonl", "manifest.json"]
    assert not list(tmp_path.glob(".run.*"))  # no lock or staging left
    # a held-out evaluation of the partial run is part of the run from now on
    assert main(["evaluate", str(workload), "--run", str(out), "--prompts", "2",
                 "--backend", "hf"]) == 0  # fmt: skip
    assert "eval.json" in read_manifest(out)["files"]
    evaluation = (out / "eval.json").read_text()
    assert main(train_args(workload, out, "--resume")) == 0
    assert (out / "eval.json").read_text() == evaluation
    rewards = pd.read_csv(out / "rewards.csv")
    assert len(rewards) == len(JOBS) * STEPS
    assert main(train_args(workload, out, "--resume")) == 2
    assert "nothing to resume" in capsys.readouterr().err
