"""Terminal tables: :func:`text_table`, the one way marlaas prints aligned text (tabulate), and
a run's summary printed with it."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

MAX_JOB_LINES = 40
"""Most per-job lines printed; a run with more jobs ends its table with a line that says how
many more there are and where they are (summary.json)."""


def text_table(
    rows: Sequence[Sequence[str]], headers: Sequence[str] = (), right: Sequence[bool] = ()
) -> str:
    """``rows`` of text cells as aligned columns two spaces apart, under a line of ``headers``
    and a line of dashes as wide as each column when there are headers. A column is
    left-aligned unless ``right`` says so for it; cells are printed as given (no number
    parsing, leading spaces kept); lines end at their last character."""
    table = [list(r) for r in rows]
    if headers:  # as rows: tabulate's own header line pads every column by two more
        widths = [max(len(c) for c in column) for column in zip(headers, *table, strict=True)]
        table = [list(headers), ["-" * w for w in widths], *table]
    width = max((len(r) for r in table), default=0)
    flags = list(right) + [False] * (width - len(right))
    text = tabulate(
        table,
        tablefmt="plain",
        colalign=["right" if f else "left" for f in flags] or None,
        disable_numparse=True,
        preserve_whitespace=True,  # indented rows (a pool under the utilization)
    )
    return "\n".join(line.rstrip() for line in text.splitlines())


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
    if m.get("groups_dropped"):  # rl.resample_alike: absent from summaries written before it
        rows.append(("groups dropped (all alike)", _fmt(m["groups_dropped"])))
    if m.get("deadlines_missed") is not None:
        rows.append(
            ("deadlines missed", f"{m['deadlines_missed']} of {len(summary['deadlines_s'])}")
        )
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
    table = text_table(rows)
    if title:
        print(title)
        print("-" * max(len(title), *map(len, table.splitlines())))
    print(table)
    finish = summary.get("job_finish_s") or {}
    if finish:
        print()
        print(_job_table(summary, finish))
        if len(finish) > MAX_JOB_LINES:
            more = len(finish) - MAX_JOB_LINES
            print(f"... and {more:,} more jobs; see summary.json (job_finish_s) for all of them")


def _job_table(summary: dict, finish: dict) -> str:
    """One line per job (the first MAX_JOB_LINES): its tenant, arrival, finish (or state) and
    completion time [s]."""
    arrivals, tenants = summary.get("arrivals", {}), summary.get("tenants", {})
    states = summary.get("job_states", {})
    rows = []
    for job, end in list(finish.items())[:MAX_JOB_LINES]:
        start = arrivals.get(job, 0.0)
        if end is None:  # cancelled or refused: its state, no completion
            done = [states.get(job, "unfinished"), "-"]
        else:
            done = [f"{end:.1f}s", f"{end - start:.1f}s"]
        rows.append([job, tenants.get(job, ""), f"{start:.1f}s", *done])
    head = ["job", "tenant", "arrival", "finished", "completion"]
    return text_table(rows, head, right=[False, False, True, True, True])
