"""Per-request LLM traces -> prompt and response lengths [tokens].

Formats (one row per request; see docs/workloads.md):

``azure``     Azure LLM inference trace (Azure/AzurePublicDataset, 2023 and 2024):
              ``TIMESTAMP,ContextTokens,GeneratedTokens``.
``burstgpt``  BurstGPT (HPMLL/BurstGPT): ``Timestamp,Model,Request tokens,Response tokens,
              Total tokens,Log Type``. Rows with 0 response tokens are failed requests and are
              dropped, as the BurstGPT README describes them.
``csv``       a plain CSV with ``prompt_tokens,response_tokens`` (other columns ignored).

Only the token columns are checked; other columns (timestamps, model names) are kept as text
and ignored. A bad row raises :class:`TraceError` with the file and line number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from marlaas.traces.csvrows import count, read_rows
from marlaas.traces.errors import TraceError

FORMATS: dict[str, tuple[str, str]] = {
    "azure": ("ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Request tokens", "Response tokens"),
    "csv": ("prompt_tokens", "response_tokens"),
}
"""Format name -> (prompt column, response column)."""


def load_length_trace(path: str | Path, format: str = "csv") -> dict[str, np.ndarray]:
    """Read a request trace: ``{"prompt": int64 array, "response": int64 array}`` [tokens].

    The arrays are aligned (row i of both is request i). Raises :class:`TraceError` for an
    unknown format, a missing file or column, a bad row (with its line number), or a trace
    with no usable rows.
    """
    if format not in FORMATS:
        raise TraceError(path, f"unknown trace format {format!r}; choose one of {list(FORMATS)}")
    prompt_col, response_col = FORMATS[format]
    prompts: list[int] = []
    responses: list[int] = []
    for line, row in read_rows(path, (prompt_col, response_col)):
        prompt = count(path, line, prompt_col, row[prompt_col])
        response = count(path, line, response_col, row[response_col])
        if format == "burstgpt" and response == 0:
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
