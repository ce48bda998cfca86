"""The comparison table of a sweep: one row per run, ratios against a baseline schedule.

Columns (CSV): ``workload``, ``jobs`` (jobs in the run), ``variant`` (the ``--set`` values
that differ between runs, ``-`` when none), ``schedule`` (the preset, or the policy when the
run has no preset), ``policy`` (the ordering), ``seed``; then ``makespan_s``,
``jct_mean_s``, ``jct_p90_s``, ``jct_max_s`` [s]; ``utilization`` (busy device-seconds /
(devices x makespan), in [0, 1]) and ``util_<pool>`` per pool; ``idle_<cause>`` (idle
device-seconds of that cause / (devices x makespan), so utilization + the idle columns = 1);
``jain_slowdown`` (of each job's JCT / its JCT alone), ``slowdown_max`` (the worst of
them), ``jain_jct`` (of the JCTs themselves), ``jain_tenant_gpu_s``,
``jain_tenant_gpu_s_per_weight`` (Jain's indices: 1 = fair; see marlaas.metrics.fairness);
``staleness_mean``, ``staleness_max`` [versions]; ``adapter_swaps``; ``wall_s`` (wall time
of the simulation [s]); and against the baseline schedule of the same jobs, variant and seed:
``util_x`` (utilization ratio), ``speedup`` (baseline makespan / makespan) and
``time_reduction`` (1 - makespan / baseline makespan).
"""

from __future__ import annotations

import math

import pandas as pd

from marlaas.eventlog import IDLE_CAUSES
from marlaas.table import text_table

KEYS = ["workload", "jobs", "variant", "schedule", "policy", "seed"]
"""Columns that identify a run."""
SHORT_CAUSE = {"environment": "env", "weight_sync": "sync", "adapter_load": "load"}


def summary_row(run: dict, summary: dict) -> dict:
    """One table row from a run's identity (``KEYS``) and its simulate_run summary."""
    m = summary["metrics"]
    span, devices = m["makespan_s"], m["n_devices"]
    device_s = span * devices if span > 0 else math.nan
    row = {k: run[k] for k in KEYS}
    row.update(
        makespan_s=span,
        jct_mean_s=m["jct_mean_s"],
        jct_p90_s=m["jct_p90_s"],
        jct_max_s=m["jct_max_s"],
        utilization=m["utilization"],
    )
    row.update({f"util_{p}": u for p, u in m["utilization_by_pool"].items()})
    idle = m["idle_by_cause_device_s"]
    row.update({f"idle_{c}": idle.get(c, 0.0) / device_s for c in IDLE_CAUSES})
    row.update(m["fairness"])
    row.update(
        staleness_mean=m["staleness_mean"],
        staleness_max=m["staleness_max"],
        adapter_swaps=m["adapter_swaps"],
        loads_per_group=m.get("loads_per_group"),
        wall_s=summary["wall_s"],
    )
    return row


def add_ratios(table: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """Add ``util_x``, ``speedup`` and ``time_reduction`` against ``baseline`` (NaN without)."""
    table = table.copy()
    for col in ("util_x", "speedup", "time_reduction"):
        table[col] = math.nan
    if baseline is None or baseline not in set(table["schedule"]):
        return table
    group = ["workload", "jobs", "variant", "seed"]
    base = table[table["schedule"] == baseline].set_index(group)[["makespan_s", "utilization"]]
    base.columns = [f"{c}_base" for c in base.columns]
    joined = table.join(base, on=group)
    table["util_x"] = joined["utilization"] / joined["utilization_base"]
    table["speedup"] = joined["makespan_s_base"] / joined["makespan_s"]
    table["time_reduction"] = 1 - joined["makespan_s"] / joined["makespan_s_base"]
    return table


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Columns in the documented order (per-pool utilization right after utilization)."""
    cols = list(table.columns)
    pools = [c for c in cols if c.startswith("util_") and c != "util_x"]
    first = cols.index("utilization") + 1
    rest = [c for c in cols[first:] if c not in pools]
    return table[cols[:first] + pools + rest]


def _idle_text(row: pd.Series, top: int = 2) -> str:
    shares = [(row[f"idle_{c}"], c) for c in IDLE_CAUSES if row.get(f"idle_{c}", 0) > 0.005]
    shares.sort(reverse=True)
    return " ".join(f"{SHORT_CAUSE.get(c, c)} {s:.0%}" for s, c in shares[:top]) or "-"


def _num(value, fmt: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else fmt.format(value)
    )


def format_table(table: pd.DataFrame) -> str:
    """The comparison as aligned text (what ``marlaas sweep`` prints)."""
    show_variant = table["variant"].nunique() > 1
    show_seed = table["seed"].nunique() > 1
    head = [
        "jobs",
        *(["variant"] if show_variant else []),
        "schedule",
        *(["seed"] if show_seed else []),
    ]
    head += ["makespan s", "JCT mean s", "JCT p90 s", "util", "util x", "time -%"]
    head += ["idle (top causes)", "Jain slowdn", "Jain dev-s", "stale mean/max", "loads/grp"]
    rows = []
    for _, r in table.iterrows():
        cells = [str(r["jobs"]), *([r["variant"]] if show_variant else []), r["schedule"]]
        cells += [str(r["seed"])] if show_seed else []
        cells += [
            _num(r["makespan_s"], "{:,.0f}"),
            _num(r["jct_mean_s"], "{:,.0f}"),
            _num(r["jct_p90_s"], "{:,.0f}"),
            _num(r["utilization"], "{:.1%}"),
            _num(r["util_x"], "{:.2f}x"),
            _num(r["time_reduction"], "{:.1%}"),
            _idle_text(r),
            _num(r["jain_slowdown"], "{:.3f}"),
            _num(r["jain_tenant_gpu_s"], "{:.3f}"),
            f"{_num(r['staleness_mean'], '{:.2f}')} / {_num(r['staleness_max'], '{:.0f}')}",
            _num(r.get("loads_per_group"), "{:.3f}"),
        ]
        rows.append(cells)
    left = {"variant", "schedule", "idle (top causes)"}
    return text_table(rows, head, right=[h not in left for h in head])
