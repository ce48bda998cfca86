"""Experiment tracking of real runs: per-job training scalars for TensorBoard or W&B (offline).

``marlaas train ... --tracker tensorboard`` writes event files under ``OUT/tensorboard/``, one
TensorBoard run per job (``OUT/tensorboard/<job>/``, so the jobs overlay in one chart), one
point per training step (x: the job's step, counting resumed steps):

    reward/mean            mean episode reward of the step's samples
    train/loss             the trainer's loss
    train/importance_ratio mean importance weight (trainer policy / sampling policy)
    train/clip_fraction    fraction of tokens whose weight was truncated (above 1)
    train/trust_clip_fraction  fraction of tokens whose ratio to the step's starting policy
                           was clipped (rl.minibatches > 1)
    train/staleness        largest version lag of a sample in the batch [versions]
    train/samples          sequences trained
    job/finish_s           when the job finished [s] (once, at the end)

and the run's ``run/makespan_s``, ``run/utilization`` and ``run/jct_mean_s`` at the end in
``OUT/tensorboard/`` itself. View with ``tensorboard --logdir OUT/tensorboard``.
``--tracker wandb`` logs the same to an offline W&B run under ``OUT/wandb/`` (``wandb sync``
uploads it later, if you want); nothing is sent anywhere during the run.

The hook into the run is :class:`RewardFeed`, an observer of the driver loop
(marlaas.drive): after the scheduler took a training step's completion it hands the
executor's new reward points to callbacks (a tracker's ``log_step``). The scheduler core is
not involved.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from marlaas.core.work import Decision, Train, WorkDone

if TYPE_CHECKING:
    from marlaas.executors.episode_runner import RewardPoint

TRACKERS = ("tensorboard", "wandb")
"""The trackers; each writes under the run folder in a subfolder of its name."""


class TrackerError(RuntimeError):
    """A tracker that cannot start (its package is not installed)."""


class RewardFeed:
    """Observer of ``drive``: calls ``callbacks`` with each new point of ``points`` (the
    executor's list of reward points, appended to as training steps finish)."""

    def __init__(
        self, points: Sequence[RewardPoint], callbacks: Sequence[Callable[[RewardPoint], None]]
    ) -> None:
        self.points, self.callbacks = points, list(callbacks)
        self._seen = 0

    def __call__(self, decision: Decision, event: WorkDone, now: float) -> None:
        """After a successful training step: hand on the points not yet seen."""
        if not (isinstance(decision, Train) and event.ok):
            return
        new, self._seen = self.points[self._seen :], len(self.points)
        for point in new:
            for callback in self.callbacks:
                callback(point)


class Tracker(Protocol):
    """Where a run's scalars go."""

    def log_step(self, point: RewardPoint) -> None:
        """One training step of one job."""

    def log_run(self, summary: dict) -> None:
        """The finished run's summary (summary.json's content)."""

    def close(self) -> None:
        """Flush and close."""


def _step_scalars(p: RewardPoint) -> dict[str, float]:
    return {
        "reward/mean": p.mean_reward,
        "train/loss": p.loss,
        "train/importance_ratio": p.mean_ratio,
        "train/clip_fraction": p.clip_fraction,
        "train/trust_clip_fraction": p.trust_clip_fraction,
        "train/staleness": p.staleness,
        "train/samples": p.samples,
        "memory/rss_mb": p.rss_mb,
    }


def _run_scalars(summary: dict) -> dict[str, float]:
    metrics = summary.get("metrics", {})
    names = ("makespan_s", "utilization", "jct_mean_s")
    out = {f"run/{n}": float(metrics[n]) for n in names if metrics.get(n) is not None}
    memory = summary.get("memory") or {}
    for name in ("peak_rss_mb", "tree_peak_rss_mb"):
        if memory.get(name) is not None:
            out[f"run/{name}"] = float(memory[name])
    return out


def _folder_name(job: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", job)


class TensorBoardTracker:
    """Event files under ``folder``: one subfolder (TensorBoard run) per job."""

    def __init__(self, folder: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise TrackerError(
                f"--tracker tensorboard needs torch and tensorboard ({err}); install them with: "
                "pip install tensorboard (or pip install -e '.[tensorboard]')"
            ) from None
        self._writer_class, self.folder = SummaryWriter, Path(folder)
        self._writers: dict[str, object] = {}
        """Subfolder ("" for the run's own scalars) -> its writer, made on first use (a run
        that fails before its first step leaves no folder)."""

    def _writer(self, subfolder: str):
        if subfolder not in self._writers:
            self._writers[subfolder] = self._writer_class(str(self.folder / subfolder))
        return self._writers[subfolder]

    def log_step(self, point: RewardPoint) -> None:
        writer = self._writer(_folder_name(point.job))
        for tag, value in _step_scalars(point).items():
            writer.add_scalar(tag, value, point.step)
        writer.flush()  # `tensorboard --logdir` shows the run as it goes

    def log_run(self, summary: dict) -> None:
        for tag, value in _run_scalars(summary).items():
            self._writer("").add_scalar(tag, value, 0)
        for job, finish_s in summary.get("job_finish_s", {}).items():
            self._writer(_folder_name(job)).add_scalar("job/finish_s", finish_s, 0)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


class WandbTracker:
    """An offline W&B run under ``folder`` (never online: ``mode="offline"``)."""

    def __init__(self, folder: Path, name: str, config: dict) -> None:
        try:
            import wandb
        except ImportError:
            raise TrackerError(
                "--tracker wandb needs the wandb package: pip install wandb (it runs offline)"
            ) from None
        os.environ["WANDB_MODE"] = "offline"
        folder.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run = wandb.init(
            mode="offline", dir=str(folder), project="marlaas", name=name, config=config
        )
        self._jobs: set[str] = set()

    def log_step(self, point: RewardPoint) -> None:
        if point.job not in self._jobs:  # each job has its own x axis, its step
            self._jobs.add(point.job)
            self.run.define_metric(f"{point.job}/step")
            self.run.define_metric(f"{point.job}/*", step_metric=f"{point.job}/step")
        scalars = {f"{point.job}/{tag}": v for tag, v in _step_scalars(point).items()}
        self.run.log({f"{point.job}/step": point.step, **scalars})

    def log_run(self, summary: dict) -> None:
        for tag, value in _run_scalars(summary).items():
            self.run.summary[tag] = value
        for job, finish_s in summary.get("job_finish_s", {}).items():
            self.run.summary[f"{job}/finish_s"] = finish_s

    def close(self) -> None:
        self.run.finish()


TRACKER_PACKAGES = {"tensorboard": ("torch", "tensorboard"), "wandb": ("wandb",)}
"""The packages each tracker imports."""


def check_tracker(name: str) -> None:
    """Raise TrackerError when the tracker ``name`` could not start (an unknown name, a
    package missing), without starting it: before anything in a run folder is touched."""
    if name not in TRACKER_PACKAGES:
        raise TrackerError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    missing = [p for p in TRACKER_PACKAGES[name] if importlib.util.find_spec(p) is None]
    if missing:
        raise TrackerError(f"--tracker {name} needs {', '.join(missing)}: pip install "
                           f"{' '.join(missing)}")  # fmt: skip


def open_tracker(name: str, out: Path, *, run_name: str, config: dict) -> Tracker:
    """The tracker ``name`` (one of TRACKERS) writing under the run folder ``out``."""
    if name == "tensorboard":
        return TensorBoardTracker(out / name)
    if name == "wandb":
        return WandbTracker(out / name, run_name, config)
    raise TrackerError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
