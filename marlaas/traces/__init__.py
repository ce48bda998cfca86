"""Trace I/O: request traces give jobs their length distributions, arrival traces their
submission times and sizes. See docs/workloads.md for the formats."""

from marlaas.traces.arrivals import Arrival, apply_arrivals, load_arrivals
from marlaas.traces.errors import TraceError
from marlaas.traces.lengths import FORMATS, describe, load_length_trace

__all__ = [
    "FORMATS",
    "Arrival",
    "TraceError",
    "apply_arrivals",
    "describe",
    "load_arrivals",
    "load_length_trace",
]
