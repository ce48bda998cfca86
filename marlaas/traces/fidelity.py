"""How closely a simulated run's lengths follow the request trace they were drawn from.

Compares the first turn of every group in an event log (``prompt_tokens``: the group's
prompt; ``tokens / seqs``: the response per sample, exact when ``group_size`` is 1) with the
trace's rows: quantiles of both, and the correlation of prompt and response::

    python -m marlaas.traces.fidelity RUN_DIR --job azure-conv \\
        --trace traces/azure/AzureLLMInferenceTrace_conv.csv --format azure
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from marlaas.eventlog import read_event_log
from marlaas.traces.lengths import load_length_trace

QUANTILES = (10, 50, 90, 99)
"""Percentiles shown [%]."""


def first_turns(events: pd.DataFrame, job: str) -> dict[str, np.ndarray]:
    """``{"prompt", "response"}`` [tokens] of the job's successful first turns: the group's
    prompt per sample, and the mean response per sample (the response when seqs is 1)."""
    rows = events[
        (events["kind"] == "generate")
        & (events["job"] == job)
        & (events["turn"] == 0)
        & (events["outcome"] == "ok")
    ]
    return {
        "prompt": rows["prompt_tokens"].to_numpy(float),
        "response": (rows["tokens"] / rows["seqs"]).to_numpy(float),
    }


def correlations(prompt: np.ndarray, response: np.ndarray) -> tuple[float, float]:
    """(Pearson, Spearman) correlation of prompt and response lengths."""
    pearson = float(np.corrcoef(prompt, response)[0, 1])
    ranks = [pd.Series(x).rank().to_numpy() for x in (prompt, response)]
    return pearson, float(np.corrcoef(*ranks)[0, 1])


def table(simulated: dict[str, np.ndarray], trace: dict[str, np.ndarray]) -> str:
    """A Markdown table: quantiles, largest value and mean of prompt and response for the
    simulated run and the trace, and their correlation."""
    head = " | ".join(f"p{q}" for q in QUANTILES)
    lines = [
        f"| | rows | {head} | max | mean | Pearson | Spearman |",
        "|---" * (len(QUANTILES) + 6) + "|",
    ]
    for label, lengths in (("trace", trace), ("simulated", simulated)):
        pearson, spearman = correlations(lengths["prompt"], lengths["response"])
        for column in ("prompt", "response"):
            values = lengths[column]
            cells = " | ".join(f"{v:,.0f}" for v in np.percentile(values, QUANTILES))
            corr = f"{pearson:+.3f} | {spearman:+.3f}" if column == "prompt" else " | "
            lines.append(
                f"| {label} {column} | {len(values):,} | {cells} | {values.max():,.0f} "
                f"| {values.mean():,.0f} | {corr} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m marlaas.traces.fidelity", description=__doc__)
    parser.add_argument("run", type=Path, help="run folder or events.parquet")
    parser.add_argument("--job", required=True, help="the job whose lengths came from the trace")
    parser.add_argument("--trace", required=True, type=Path, help="the trace file")
    parser.add_argument("--format", default="csv", help="the trace's format")
    args = parser.parse_args(argv)
    simulated = first_turns(read_event_log(args.run), args.job)
    if not len(simulated["prompt"]):
        parser.error(f"{args.run}: no first turns of job {args.job!r}")
    print(table(simulated, load_length_trace(args.trace, args.format)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
