"""Trace I/O: request traces give jobs their length distributions (prompt and response as
pairs) and arrival times, arrival traces their submission times and sizes. See
docs/workloads.md for the formats."""

from marlaas.traces.arrivals import Arrival, apply_arrivals, load_arrivals, load_request_times
from marlaas.traces.errors import TraceError
from marlaas.traces.formats import FORMATS, Format
from marlaas.traces.lengths import describe, load_length_trace

__all__ = [
    "FORMATS",
    "Arrival",
    "Format",
    "TraceError",
    "apply_arrivals",
    "describe",
    "load_arrivals",
    "load_length_trace",
    "load_request_times",
]
