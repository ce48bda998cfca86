"""The report of a sweep folder (``marlaas sweep --out SWEEP_DIR``): all its runs compared.

It reads ``sweep.csv`` (one row per run, see :mod:`marlaas.sweep_table`), ``summaries.json``
and, when the sweep kept them, the runs' folders ``runs/<run_folder>/``. The page has the
scaling table, utilization, mean job completion time and makespan per policy and job count,
idle time by cause per run and, with run folders, utilization over time of every run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from marlaas.atomic import write_durably
from marlaas.eventlog import IDLE_CAUSES
from marlaas.metrics.devices import makespan
from marlaas.metrics.utilization import utilization_over_time
from marlaas.report import fmt
from marlaas.report.html import Section, render_report
from marlaas.report.interactive.sweep import plot_idle_shares, plot_overtime, plot_scaling
from marlaas.report.labels import run_labels
from marlaas.report.load import load_run
from marlaas.report.names import IDLE_CAUSES as CAUSE_TEXT
from marlaas.report.names import idle_name
from marlaas.run_files import read_sweep_summaries, read_sweep_table

SWEEP_FILE = "sweep.csv"
SUMMARIES_FILE = "summaries.json"
RUNS_DIR = "runs"
MAX_OVERTIME_RUNS = 40
"""Most runs whose event logs are read for the utilization-over-time figure."""


def is_sweep_folder(path: str | Path) -> bool:
    """Whether ``path`` is a sweep folder (has sweep.csv)."""
    return (Path(path) / SWEEP_FILE).is_file()


def load_sweep(path: Path) -> pd.DataFrame:
    """sweep.csv with a ``label`` per run (:func:`marlaas.report.labels.run_labels`) and the
    ``folder`` of its run (``None`` where the sweep did not keep it)."""
    from marlaas.sweep import run_folders

    table = read_sweep_table(path / SWEEP_FILE)
    summaries = read_sweep_summaries(path / SUMMARIES_FILE, len(table))
    named = [
        {**s, "variant": r["variant"], "metrics": {"n_jobs": r["jobs"]}}
        for s, (_, r) in zip(summaries, table.iterrows(), strict=True)
    ]
    table = table.assign(label=run_labels(named))
    keys = list(zip(table["jobs"], table["variant"], table["schedule"], table["seed"], strict=True))
    folders = [path / RUNS_DIR / name for name in run_folders(keys)]
    kept = [folder if (folder / "events.parquet").is_file() else None for folder in folders]
    return table.assign(folder=kept)


SCALING_COLUMNS = {
    "makespan_s": ("makespan [s]", fmt.number),
    "jct_mean_s": ("job completion time, mean [s]", fmt.number),
    "jct_p90_s": ("job completion time, p90 [s]", fmt.number),
    "utilization": ("utilization", fmt.percent),
    "util_x": ("utilization x baseline", lambda v: fmt.number(v, "x").replace(" x", "x")),
    "time_reduction": ("time saved vs baseline", fmt.percent),
    "jain_slowdown": ("Jain index of slowdowns", fmt.number),
    "jain_tenant_gpu_s": ("Jain index of device-s per tenant", fmt.number),
    "staleness_mean": ("staleness mean [versions]", fmt.number),
    "staleness_max": ("staleness max [versions]", fmt.count),
    "adapter_swaps": ("adapter loads", fmt.count),
    "wall_s": ("simulated in [s]", fmt.number),
}
"""Columns of the scaling table: sweep.csv column -> (human name, formatter)."""


def scaling_table(table: pd.DataFrame) -> pd.DataFrame:
    """The sweep's runs for people: identity, then SCALING_COLUMNS (and utilization per
    pool), formatted; the variant and seed only when they vary."""
    out = {"run": table["label"], "jobs": table["jobs"].map(fmt.count)}
    for key in ("variant", "seed"):
        if table[key].nunique() > 1:
            out[key] = table[key].astype(str)
    out["policy"] = table["policy"]  # the ordering (a preset's run uses the workload's)
    for col, (name, formatter) in SCALING_COLUMNS.items():
        if col in table and table[col].notna().any():
            out[name] = table[col].map(formatter)
        if col == "utilization":
            for pool in [c for c in table.columns if c.startswith("util_") and c != "util_x"]:
                out[f"utilization, pool {pool[5:]}"] = table[pool].map(fmt.percent)
    return pd.DataFrame(out)


def _overtime(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Utilization over time (overall and per pool) of every run with a folder, in bins of one
    width: the longest makespan / 200."""
    runs = {
        label: load_run(folder).events
        for label, folder in zip(table["label"], table["folder"], strict=True)
        if folder is not None
    }
    longest = max(makespan(events) for events in runs.values())
    return {label: utilization_over_time(ev, longest / 200) for label, ev in runs.items()}


def write_sweep_report(path: Path, out: Path) -> Path:
    """Write the sweep's report.html to ``out`` (a file path)."""
    table = load_sweep(path)
    workload = ", ".join(map(str, table["workload"].unique()))
    kept = table["folder"].notna().sum()
    sections = [
        Section(
            "scaling",
            "Scaling: utilization, job completion time and makespan per schedule",
            figure=plot_scaling(table),
            notes=[
                f"{fmt.count(len(table))} simulated runs of {workload}: schedules (presets "
                f"and policies) {', '.join(table['schedule'].unique())}; job counts "
                f"{', '.join(map(str, sorted(table['jobs'].unique())))}. Each point is the "
                "mean over seeds; hover for the values."
            ],
            tables=[("All runs", scaling_table(table))],
        ),
        Section(
            "idle",
            "Idle time by cause per run",
            figure=plot_idle_shares(table),
            notes=["Share of all device-time (devices x makespan) idle for each cause."],
            glossary=[
                (idle_name(c), CAUSE_TEXT[c][1])
                for c in IDLE_CAUSES
                if f"idle_{c}" in table and table[f"idle_{c}"].fillna(0).gt(0.005).any()
            ],
        ),
    ]
    if kept and kept <= MAX_OVERTIME_RUNS:
        sections.append(
            Section(
                "overtime",
                "Utilization over time, every run",
                figure=plot_overtime(_overtime(table)),
                notes=[
                    f"From the event logs under {RUNS_DIR}/ (one folder per run; `marlaas "
                    f"report {path}/{RUNS_DIR}/<run>` reports one in full)."
                ],
            )
        )
    elif not kept:
        sections[0].notes.append(
            "The sweep kept no event logs (--no-events), so there is no per-run timeline."
        )
    title = f"MARLaaS sweep report: {workload}"
    return write_durably(out, render_report(title, sections))
