"""Request-trace formats: where a request's prompt and response lengths [tokens] and its
arrival time are, and how the file is laid out (see docs/workloads.md).

``azure``     Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset; the same
              schema): ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP is a date and
              time (``2023-11-16 18:15:46.6805900``, a UTC offset allowed).
``burstgpt``  BurstGPT (HPMLL/BurstGPT): ``Timestamp,Model,Request tokens,Response tokens,
              Total tokens,Log Type``; Timestamp in seconds. Rows with 0 response tokens are
              failed requests: they have no lengths (but they did arrive).
``mooncake``  Mooncake-style JSONL (kvcache-ai/Mooncake): one JSON object per line,
              ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``
              (hash_ids optional, not used).
``csv``       a plain CSV: ``prompt_tokens,response_tokens`` and, for arrivals,
              ``timestamp_s`` [s].

Other columns are ignored. Every reader yields ``(line number, {column: text})`` with the
columns asked for, and a wrong file gets one :class:`TraceError` naming the missing column,
the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from marlaas.core.validation_message import short_repr
from marlaas.traces.csvrows import read_rows
from marlaas.traces.errors import TraceError
from marlaas.traces.jsonrows import read_json_rows


@dataclass(frozen=True)
class Format:
    """Where one format keeps a request's figures."""

    prompt: str
    """Column of the prompt (context) length [tokens]."""
    response: str
    """Column of the response (generated) length [tokens]."""
    time: str
    """Column of the arrival time."""
    time_unit: Literal["datetime", "s", "ms"]
    """``datetime``: an ISO 8601 date and time; ``s``/``ms``: a number of seconds or
    milliseconds from any origin (times are taken relative to the earliest one used)."""
    jsonl: bool = False
    """One JSON object per line instead of a CSV with a header."""
    zero_response_failed: bool = False
    """A row with 0 response tokens is a failed request (BurstGPT)."""


FORMATS: dict[str, Format] = {
    "azure": Format("ContextTokens", "GeneratedTokens", "TIMESTAMP", "datetime"),
    "burstgpt": Format(
        "Request tokens", "Response tokens", "Timestamp", "s", zero_response_failed=True
    ),
    "mooncake": Format("input_length", "output_length", "timestamp", "ms", jsonl=True),
    "csv": Format("prompt_tokens", "response_tokens", "timestamp_s", "s"),
}
"""Format name -> where its figures are."""


def get_format(path: str | Path, name: str) -> Format:
    """The format called ``name``, or a TraceError naming the file and the known formats."""
    if not isinstance(name, str) or name not in FORMATS:  # a mapping or list is no name
        raise TraceError(path, f"unknown trace format {short_repr(name)}; choose one of "
                               f"{list(FORMATS)}")  # fmt: skip
    return FORMATS[name]


def read_requests(
    path: str | Path, fmt: Format, columns: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, {column: text})`` for each request of a trace file in ``fmt``
    (a CSV or JSONL file), with at least ``columns``."""
    reader = read_json_rows if fmt.jsonl else read_rows
    yield from reader(path, columns)
