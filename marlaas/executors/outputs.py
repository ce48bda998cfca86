"""A real run's folder: the event log and summary (as for a simulation), reward curves, adapters.

``out/events.parquet`` and ``out/summary.json`` are written by :func:`marlaas.runs.write_run`
(summary kind ``real``, the simulator's keys plus ``reward_curves``); ``out/rewards.csv`` and
``out/rewards.png`` hold the mean reward per job and training step; ``out/adapters/`` is the
adapter store (every version of every job) and ``out/tensorboard/`` (or ``out/wandb/``) the
tracker's log (``--tracker``), both kept across the atomic replacement of the folder.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from marlaas.core.workload import Workload
from marlaas.eventlog import records_to_frame
from marlaas.executors.resume import shift_versions
from marlaas.executors.tracking import TRACKERS
from marlaas.runs import read_summary, run_summary, write_run

REWARDS_CSV = "rewards.csv"
REWARDS_PNG = "rewards.png"
ADAPTERS_DIR = "adapters"


KEPT_DIRS = (ADAPTERS_DIR, *TRACKERS)
"""Folders a real run writes while it runs (adapter versions, tracker logs); the run folder's
final write keeps them."""
REAL_RUN_ENTRIES = {*KEPT_DIRS, "events.parquet", "summary.json", "workload.json", REWARDS_CSV,
                    REWARDS_PNG, "eval.json"}  # fmt: skip
"""What a real run folder may hold (anything else: not ours to replace)."""


def check_real_run_folder(out: Path) -> None:
    """Refuse, before any work, an ``out`` that is a file or a folder that is not a real run
    (a simulation, a report, anything with files a run does not write)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a folder")
    if not out.is_dir():
        return
    foreign = sorted(p.name for p in out.iterdir() if p.name not in REAL_RUN_ENTRIES)
    kind = read_summary(out).get("kind", "real")
    if foreign or kind != "real":
        what = f"holds {foreign[:3]}" if foreign else f"holds a {kind} run"
        raise FileExistsError(
            f"{out}: {what}, not a real training run; not writing there (choose another --out)"
        )


def rewards_frame(points) -> pd.DataFrame:
    """One row per job and training step: job, tenant, step, mean_reward, time_s, and the
    trainer's statistics (staleness, importance ratio, clip fraction, loss)."""
    columns = ["job", "tenant", "step", "mean_reward", "time_s"]
    rows = [asdict(p) for p in points]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)
    return frame.sort_values(["job", "step"], kind="stable").reset_index(drop=True)


def real_events(result, offsets: dict[str, int]) -> pd.DataFrame:
    """The run's event log (steps and versions of resumed jobs counted from their start)."""
    return shift_versions(records_to_frame(result.records), offsets)


def real_summary(
    workload: Workload,
    result,
    events: pd.DataFrame,
    rewards: pd.DataFrame,
    backend: str,
    offsets: dict[str, int],
    memory: dict | None = None,
) -> dict:
    """The summary.json content of a real run: a simulation's keys plus reward curves and
    ``memory`` (the run's process's resident memory, MemoryMonitor.summary)."""
    curves = {
        job: [round(float(r), 4) for r in group["mean_reward"]]
        for job, group in rewards.groupby("job", sort=True)
    }
    return run_summary(
        workload, result, events, "real", backend=backend, resumed_from=offsets,
        reward_curves=curves, memory=memory or {},
    )  # fmt: skip


def write_real_run(
    out: str | Path, events: pd.DataFrame, summary: dict, rewards: pd.DataFrame, workload=None
):
    """Write the run folder (atomically, as write_run does) and keep its KEPT_DIRS."""
    out = Path(out)
    aside = {}
    for name in KEPT_DIRS:
        if (out / name).is_dir():
            aside[name] = out.parent / f".{out.name}.{name}"
            shutil.rmtree(aside[name], ignore_errors=True)
            (out / name).rename(aside[name])
    try:
        write_run(out, events, summary, workload)
    finally:
        for name, path in aside.items():
            if path.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                path.rename(out / name)
    rewards.to_csv(out / REWARDS_CSV, index=False)
    plot_rewards(rewards, out / REWARDS_PNG, title=f"{summary['workload']} · {summary['policy']}")
    return out


def plot_rewards(rewards: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Mean reward per training step, one line per job (tenant in the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for job, group in rewards.groupby("job", sort=True):
        ax.plot(
            group["step"],
            group["mean_reward"],
            marker="o",
            ms=3,
            label=f"{job} ({group['tenant'].iloc[0]})",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward")
    ax.set_title(title or "reward per tenant")
    ax.grid(alpha=0.3)
    if len(rewards):
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
