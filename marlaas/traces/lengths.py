"""Per-request LLM traces -> prompt and response lengths [tokens], row by row.

The formats (Azure 2023/2024, BurstGPT, Mooncake JSONL, plain CSV) are in
:mod:`marlaas.traces.formats` and docs/workloads.md. Only the token columns are checked;
other columns (timestamps, model names) are ignored. A bad row raises :class:`TraceError`
with the file and line number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from marlaas.traces.csvrows import count
from marlaas.traces.errors import TraceError
from marlaas.traces.formats import FORMATS, get_format, read_requests


def load_length_trace(path: str | Path, format: str = "csv") -> dict[str, np.ndarray]:
    """Read a request trace: ``{"prompt": int64 array, "response": int64 array}`` [tokens].

    The arrays are aligned (row i of both is request i: the pairs of the trace). BurstGPT's
    failed requests (0 response tokens) are left out of both. Raises :class:`TraceError`
    for an unknown format, a missing file or column, a bad row (with its line number), or a
    trace with no usable rows.
    """
    fmt = get_format(path, format)
    prompts: list[int] = []
    responses: list[int] = []
    for line, row in read_requests(path, fmt, (fmt.prompt, fmt.response)):
        prompt = count(path, line, fmt.prompt, row[fmt.prompt])
        response = count(path, line, fmt.response, row[fmt.response])
        if fmt.zero_response_failed and response == 0:
            continue  # a failed request (BurstGPT marks failures with 0 response tokens)
        prompts.append(prompt)
        responses.append(response)
    if not responses:
        raise TraceError(path, f"no requests in the trace ({format} format)")
    return {
        "prompt": np.asarray(prompts, dtype=np.int64),
        "response": np.asarray(responses, dtype=np.int64),
    }


def describe(lengths: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Median, mean, p90, p99 and max of each column [tokens] (for docs and checks)."""
    out = {}
    for key, values in lengths.items():
        q50, q90, q99 = np.percentile(values, [50, 90, 99])
        out[key] = {
            "n": len(values),
            "median": float(q50),
            "mean": float(values.mean()),
            "p90": float(q90),
            "p99": float(q99),
            "max": float(values.max()),
        }
    return out


__all__ = ["FORMATS", "TraceError", "describe", "load_length_trace"]
