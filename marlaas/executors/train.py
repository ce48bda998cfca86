"""One real training run, end to end: what ``marlaas train`` does (also used by the tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from marlaas.core.policies import Policy
from marlaas.core.workload import Workload
from marlaas.executors.driver import RealResult, RealRun
from marlaas.executors.outputs import (
    ADAPTERS_DIR,
    real_events,
    real_summary,
    rewards_frame,
    write_real_run,
)


def train_run(
    workload: Workload,
    out: str | Path,
    policy: Policy | str | None = None,
    *,
    resume: bool = False,
    base_dir: Path | None = None,
    **options,
) -> tuple[pd.DataFrame, dict, pd.DataFrame, RealResult]:
    """Train every job of ``workload`` for real and write the run folder ``out``.

    Without ``resume`` the adapters of an earlier run in ``out`` are deleted first; with it,
    each job continues from its newest saved version. ``options`` go to :class:`RealRun`
    (backend, seed, generator, trainer, progress, ...). Returns (events, summary, rewards,
    result).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a folder")
    if not resume:
        shutil.rmtree(out / ADAPTERS_DIR, ignore_errors=True)
    run = RealRun(workload, policy, out_dir=out, resume=resume, base_dir=base_dir, **options)
    result = run.run()
    events = real_events(result)
    rewards = rewards_frame(result)
    summary = real_summary(workload, result, events, rewards)
    write_real_run(out, events, summary, rewards)
    return events, summary, rewards, result
