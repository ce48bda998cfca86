"""Terminal tables: a run's summary, and a comparison of several runs."""

from __future__ import annotations

MAX_JOB_LINES = 40
"""Most per-job lines printed; a run with more jobs ends its table with a line that says how
many more there are and where they are (summary.json)."""


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}" if abs(value) >= 10 else f"{value:.3g}{unit}"
    return f"{value}{unit}"


def print_summary(summary: dict, title: str = "") -> None:
    """Print a run's headline metrics as a two-column table."""
    m = summary["metrics"]
    rows = [
        ("makespan", _fmt(m["makespan_s"], " s")),
        ("device utilization", f"{m['utilization']:.1%}"),
    ]
    rows += [(f"  pool {p}", f"{u:.1%}") for p, u in m["utilization_by_pool"].items()]
    rows += [
        ("job completion mean", _fmt(m["jct_mean_s"], " s")),
        ("job completion p90", _fmt(m["jct_p90_s"], " s")),
        ("staleness mean / max", f"{_fmt(m['staleness_mean'])} / {_fmt(m['staleness_max'])}"),
        ("adapter loads", _fmt(m["adapter_swaps"])),
    ]
    fairness = m.get("fairness") or {}
    rows += [(f"fairness ({k})", _fmt(v)) for k, v in fairness.items()]
    memory = summary.get("memory") or {}
    if memory.get("peak_rss_mb") is not None:
        rows.append(("peak memory (process)", f"{memory['peak_rss_mb']:,.0f} MiB resident"))
        children = memory.get("children") or []
        if children:  # largest first
            top = children[0]
            name = top["command"].split(" ")[0].rsplit("/", 1)[-1]
            rows.append((
                "  child processes",
                f"{len(children)}, the largest {top['peak_rss_mb']:,.0f} MiB ({name})",
            ))  # fmt: skip
        ratio = memory.get("peak_to_weights")
        times = f", {ratio:.1f}x the weights" if ratio else ""
        rows.append(("peak memory (all)", f"{memory['tree_peak_rss_mb']:,.0f} MiB{times}"))
    idle = sorted(m["idle_by_cause_device_s"].items(), key=lambda kv: -kv[1])
    rows += [(f"idle: {cause}", _fmt(secs, " device-s")) for cause, secs in idle if secs > 0]
    width = max(len(k) for k, _ in rows)
    if title:
        print(title)
        print("-" * max(len(title), width + 20))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    finish = summary.get("job_finish_s") or {}
    if finish:
        arrivals, tenants = summary.get("arrivals", {}), summary.get("tenants", {})
        print(f"\n{'job':<16} {'tenant':<12} {'arrival':>10} {'finished':>10} {'completion':>11}")
        states = summary.get("job_states", {})
        for job, end in list(finish.items())[:MAX_JOB_LINES]:
            start = arrivals.get(job, 0.0)
            if end is None:  # cancelled or refused: no completion
                state = states.get(job, "unfinished")
                print(f"{job:<16} {tenants.get(job, ''):<12} {start:>9.1f}s {state:>10} {'-':>11}")
                continue
            print(f"{job:<16} {tenants.get(job, ''):<12} {start:>9.1f}s {end:>9.1f}s "
                  f"{end - start:>10.1f}s")  # fmt: skip
        if len(finish) > MAX_JOB_LINES:
            more = len(finish) - MAX_JOB_LINES
            print(f"... and {more:,} more jobs; see summary.json (job_finish_s) for all of them")
