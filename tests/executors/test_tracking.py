"""Experiment tracking: the reward feed (an observer of the driver loop) and the trackers,
on synthetic reward points, and a tracker whose package is missing (refused at once, nothing
written); the end-to-end CLI run is in test_cli_real.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from marlaas.core.work import Generate, Train, WorkDone
from marlaas.executors.backends import missing_training_stack
from marlaas.executors.episode_runner import RewardPoint
from marlaas.executors.tracking import RewardFeed, TrackerError, open_tracker

SUMMARY = {
    "metrics": {"makespan_s": 12.5, "utilization": 0.4, "jct_mean_s": 9.0},
    "job_finish_s": {"a": 10.0, "b/x": 12.5},
}


def point(job: str, step: int, reward: float) -> RewardPoint:
    return RewardPoint(
        job=job, tenant=f"t-{job}", step=step, mean_reward=reward, time_s=1.0 + step,
        staleness=step % 2, max_staleness=1, mean_ratio=1.0 + step / 100, clip_fraction=0.1,
        loss=0.5 - step / 10, samples=16,
    )  # fmt: skip


def train(job: str) -> Train:
    return Train(work_id=1, job=job, step=0, trainer="t0", devices=("d0",), groups=(0,), seqs=4,
                 tokens=100, staleness=0, version_out=1)  # fmt: skip


def generate() -> Generate:
    return Generate(work_id=2, job="a", step=0, group=0, turn=0, engine="e0", version=0, seqs=4,
                    context_tokens=0, max_new_tokens=16)  # fmt: skip


def test_the_feed_hands_on_each_new_point_once_after_a_training_step():
    points, seen = [], []
    feed = RewardFeed(points, [seen.append])
    points.append(point("a", 0, 0.1))
    feed(generate(), WorkDone(work_id=2), 1.0)  # not a training step: nothing yet
    assert seen == []
    feed(train("a"), WorkDone(work_id=1), 1.0)
    points.extend([point("b", 0, 0.2), point("a", 1, 0.3)])
    feed(train("b"), WorkDone(work_id=1, ok=False), 2.0)  # a failed step: nothing new
    assert [p.job for p in seen] == ["a"]
    feed(train("b"), WorkDone(work_id=1), 3.0)
    feed(train("a"), WorkDone(work_id=1), 4.0)
    assert [(p.job, p.step) for p in seen] == [("a", 0), ("b", 0), ("a", 1)]


def test_tensorboard_tracker_writes_per_job_scalars_and_the_run(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = open_tracker("tensorboard", tmp_path, run_name="r", config={})
    assert not (tmp_path / "tensorboard").exists()  # nothing until the first step
    for step in range(3):
        tracker.log_step(point("a", step, 0.1 * step))
        tracker.log_step(point("b/x", step, 0.2 * step))
    tracker.log_run(SUMMARY)
    tracker.close()

    def scalars(folder):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}

    job_a = scalars(tmp_path / "tensorboard" / "a")
    assert set(job_a) == {
        "reward/mean", "train/loss", "train/importance_ratio", "train/clip_fraction",
        "train/staleness", "train/samples", "memory/rss_mb", "job/finish_s",
        "train/trust_clip_fraction",
    }  # fmt: skip
    assert job_a["reward/mean"] == pytest.approx({0: 0.0, 1: 0.1, 2: 0.2})
    assert job_a["train/staleness"] == {0: 0, 1: 1, 2: 0}
    assert job_a["job/finish_s"] == {0: 10.0}
    assert scalars(tmp_path / "tensorboard" / "b_x")["reward/mean"][2] == pytest.approx(0.4)
    run = scalars(tmp_path / "tensorboard")
    assert run["run/makespan_s"] == {0: 12.5}
    assert run["run/utilization"] == pytest.approx({0: 0.4})


class FakeRun:
    def __init__(self, **init):
        self.init, self.logged, self.metrics, self.summary = init, [], [], {}
        self.finished = False

    def define_metric(self, name, step_metric=None):
        self.metrics.append((name, step_metric))

    def log(self, data):
        self.logged.append(data)

    def finish(self):
        self.finished = True


def test_wandb_tracker_is_offline_with_a_step_axis_per_job(tmp_path, monkeypatch):
    runs = []
    fake = types.SimpleNamespace(init=lambda **kw: runs.append(FakeRun(**kw)) or runs[-1])
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = open_tracker("wandb", tmp_path, run_name="r", config={"policy": "fair"})
    tracker.log_step(point("a", 0, 0.5))
    tracker.log_step(point("a", 1, 0.7))
    tracker.log_run(SUMMARY)
    tracker.close()
    (run,) = runs
    assert run.init["mode"] == "offline" and run.init["dir"] == str(tmp_path / "wandb")
    assert ("a/*", "a/step") in run.metrics
    assert run.logged[1]["a/step"] == 1 and run.logged[1]["a/reward/mean"] == 0.7
    assert run.summary["run/makespan_s"] == 12.5 and run.finished


def test_a_tracker_without_its_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(TrackerError, match="pip install wandb"):
        open_tracker("wandb", tmp_path, run_name="r", config={})


ROOT = Path(__file__).resolve().parents[2]
WITHOUT_TRAINING_STACK = "torch, transformers and peft are not all installed"


@pytest.mark.skipif(bool(missing_training_stack()), reason=WITHOUT_TRAINING_STACK)
def test_a_tracker_without_its_package_refuses_the_run_before_its_folder(tmp_path, monkeypatch):
    from marlaas.executors.train import train_run
    from marlaas.workload_file import load_workload

    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed, as far as find_spec says
    workload = load_workload(ROOT / "traces" / "real-tiny.yaml")
    out = tmp_path / "run"
    for _ in range(2):  # the same call again gets the same answer, not "an unfinished run"
        with pytest.raises(TrackerError, match="--tracker wandb needs wandb: pip install wandb"):
            train_run(workload, out, tracker="wandb", base_dir=ROOT / "traces", progress=False)
        assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(bool(missing_training_stack()), reason=WITHOUT_TRAINING_STACK)
@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_train_with_a_missing_tracker_fails_before_loading_the_trainer(tmp_path):
    code = (
        "import sys\nfrom marlaas.cli import main\n"
        f"code = main(['train', 'traces/real-tiny.yaml', '--out', {str(tmp_path / 'run')!r}, "
        "'--tracker', 'wandb'])\n"
        "print(code, 'marlaas.executors.train' in sys.modules, 'torch' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)  # fmt: skip
    assert run.stdout.split() == ["2", "False", "False"], run.stderr
    assert run.stderr.splitlines() == [
        "marlaas: error: --tracker wandb needs wandb: pip install wandb"
    ]
    assert list(tmp_path.iterdir()) == []
