"""A real run's folder: the event log and summary (as for a simulation), reward curves,
adapters, the journal.

The folder is written in place while the run trains (``adapters/``: the adapter store, every
version of every job; ``journal.jsonl``: see marlaas.executors.journal), with a ``partial``
manifest (see marlaas.out_folder). At the end ``events.parquet``, ``summary.json`` (kind
``real``, the simulator's keys plus ``reward_curves``), ``rewards.csv`` and ``rewards.png``
(the mean reward per job and training step), ``memory.csv`` (the resident memory over the
run's last part, sampled) and ``engine_steps.csv`` (every step of the in-process engines in the
last part that trained, marlaas.executors.engine_steps) are written one by one, each
atomically, and the manifest becomes ``finished``. Other files (``eval.json`` from ``marlaas
evaluate``) are kept.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from marlaas.atomic import replacing, write_durably
from marlaas.core.workload import Workload
from marlaas.eventlog import EVENT_LOG_FILE, write_event_log
from marlaas.executors.engine_steps import ENGINE_STEPS_CSV
from marlaas.executors.yardstick import YARDSTICK_KEYS
from marlaas.output.errors import WriteError, reason
from marlaas.runs import SUMMARY_FILE, WORKLOAD_FILE, run_summary, summary_json

REWARDS_CSV = "rewards.csv"
REWARDS_PNG = "rewards.png"
MEMORY_CSV = "memory.csv"
ADAPTERS_DIR = "adapters"


def rewards_frame(points) -> pd.DataFrame:
    """One row per job and training step: job, tenant, step, mean_reward, time_s, and the
    trainer's statistics (staleness, importance ratio, clip fraction, loss)."""
    columns = ["job", "tenant", "step", "mean_reward", "time_s"]
    rows = [asdict(p) for p in points]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)
    return frame.sort_values(["job", "step"], kind="stable").reset_index(drop=True)


def real_summary(
    workload: Workload,
    result,
    events: pd.DataFrame,
    rewards: pd.DataFrame,
    backend: str,
    offsets: dict[str, int],
    memory: dict | None = None,
    executor: str = "local",
    outside_clock: dict[str, dict[str, float]] | None = None,
    host: dict | None = None,
) -> dict:
    """The summary.json content of a real run: a simulation's keys plus reward curves,
    ``memory`` (the run's process's resident memory, MemoryMonitor.summary), ``executor``
    (where the backends ran: ``local`` or ``ray``), ``outside_clock``: what the engines did
    outside the run's timed work (``engine_warmup_s``, each engine's warm-up [s],
    marlaas.executors.warmup; ``engine_yardstick_s_per_token`` and
    ``engine_yardstick_end_s_per_token``, its yardstick after the warm-up and after the work,
    marlaas.executors.yardstick), and ``host`` (what the run and everything else used of the
    machine's processors, HostShare.summary)."""
    curves = {
        job: [round(float(r), 4) for r in group["mean_reward"]]
        for job, group in rewards.groupby("job", sort=True)
    }
    outside = {key: {} for key in ("engine_warmup_s", *YARDSTICK_KEYS)} | (outside_clock or {})
    return run_summary(
        workload, result, events, "real", backend=backend, resumed_from=offsets,
        reward_curves=curves, memory=memory or {}, executor=executor,
        **outside,
        host=host or {},
    )  # fmt: skip


def write_real_files(
    out: Path,
    events: pd.DataFrame,
    summary: dict,
    rewards: pd.DataFrame,
    workload=None,
    memory: list[tuple[float, float, float]] | None = None,
    engine_steps: pd.DataFrame | None = None,
):
    """Write the run's event log, summary, workload, reward curves, ``memory`` (the
    samples of MemoryMonitor.timeline: time_s, rss_mb, peak_rss_mb) and ``engine_steps`` (the
    engines' measured steps, when there are any) into ``out``, each atomically; a failed write
    (disk full) is one WriteError line (exit status 1), the journal and adapters kept."""
    try:
        write_event_log(events, out / EVENT_LOG_FILE)
        write_durably(out / SUMMARY_FILE, summary_json(summary))
        if workload is not None:
            write_durably(out / WORKLOAD_FILE, workload.model_dump_json(indent=1))
        _write_csv(rewards, out / REWARDS_CSV)
        if memory is not None:
            columns = ["time_s", "rss_mb", "peak_rss_mb"]
            frame = pd.DataFrame(memory, columns=columns).round({c: 2 for c in columns})
            _write_csv(frame, out / MEMORY_CSV)
        if engine_steps is not None and len(engine_steps):
            _write_csv(engine_steps.round({"start_s": 6, "duration_s": 6}), out / ENGINE_STEPS_CSV)
        with replacing(out / REWARDS_PNG, suffix=".tmp.png") as png:  # matplotlib: by extension
            plot_rewards(rewards, png, title=f"{summary['workload']} · {summary['policy']}")
    except OSError as err:
        raise WriteError(
            f"{out}: cannot write the run's outputs ({reason(err)}); its adapters and journal "
            "are kept: free some space and run the same command with --resume"
        ) from None
    return out


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    with replacing(path) as tmp:
        frame.to_csv(tmp, index=False)


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
