"""Resident memory of a real run: the allocator setting that keeps it down, and its measurement.

glibc's malloc serves a block of up to 32 MiB from its heap once a block that size has been
freed (the dynamic mmap threshold), and keeps freed heap memory for reuse instead of returning
it. A training step allocates and frees gigabytes of activations in blocks of 0.1-10 MB, so the
process kept what its largest step ever touched, fragmented: a SmolLM2 training step of 64
sequences peaked at 9.3 GB and still held 5.9 GB after it; with a fixed threshold of 256 KiB
(blocks above it are mmap'ed and unmapped on free) the same step peaked at 3.9 GB and fell
back to 1.0 GB (docs/real-runs.md, "Where the memory goes"). :func:`release_large_blocks`
sets that threshold (the environment variable ``MALLOC_MMAP_THRESHOLD_``, when set, wins).

:class:`MemoryMonitor` samples the process's resident set size on a light background thread
(every ``period_s``); ``peak_rss_mb`` is also the kernel's own figure
(``getrusage(RUSAGE_SELF).ru_maxrss``), which no sampling interval can miss.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
import threading
from pathlib import Path

MMAP_THRESHOLD_BYTES = 256 * 1024
"""Blocks at least this big are mmap'ed and returned to the system when freed [bytes]."""
_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers from glibc's malloc.h
_MB = 1024 * 1024


def release_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Make glibc return every freed block of at least ``threshold`` bytes to the system (a
    fixed mmap threshold). Process-wide, for allocations made after the call; True when set.
    Nothing happens without glibc or when ``MALLOC_MMAP_THRESHOLD_`` is set (the user's
    setting wins)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def trim() -> None:
    """Return the heap's free pages to the system now (glibc ``malloc_trim``)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def rss_mb() -> float:
    """The process's resident set size now [MB] (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / _MB


def peak_rss_mb() -> float:
    """The process's peak resident set size since it started [MB] (ru_maxrss)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _MB if sys.platform == "darwin" else peak / 1024  # bytes on macOS, else KiB


def weights_mb(model_dir: str | Path) -> float:
    """The model's weight files' size [MB]: its *.safetensors (else *.bin) files."""
    folder = Path(model_dir)
    files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files) / _MB


class MemoryMonitor:
    """The resident memory of this process over a stretch of work, sampled every ``period_s``.

    Use as a context manager; ``mark()`` returns the resident memory now [MB] (e.g. after each
    training step) and ``summary()`` the figures a run's summary keeps.
    """

    def __init__(self, period_s: float = 0.25) -> None:
        self.period_s = period_s
        self.start_mb = rss_mb()
        self.sampled_peak_mb = self.start_mb
        self.end_mb: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MemoryMonitor:
        self._thread = threading.Thread(target=self._run, name="marlaas-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.end_mb = self.mark()

    def mark(self) -> float:
        """The resident memory now [MB] (also counted in the sampled peak)."""
        now = rss_mb()
        self.sampled_peak_mb = max(self.sampled_peak_mb, now)
        return now

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.mark()

    def summary(self, model_dir: str | Path | None = None) -> dict:
        """``peak_rss_mb`` (ru_maxrss: the process's peak since it started, model loading
        included), ``run_peak_rss_mb`` (sampled while monitored), ``start_rss_mb`` and
        ``end_rss_mb`` (when monitoring began and ended, or now); with ``model_dir`` also
        ``weights_mb`` and ``peak_to_weights``."""
        out = {
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "run_peak_rss_mb": round(self.sampled_peak_mb, 1),
            "start_rss_mb": round(self.start_mb, 1),
            "end_rss_mb": round(rss_mb() if self.end_mb is None else self.end_mb, 1),
        }
        if model_dir is not None:
            weights = weights_mb(model_dir)
            out["weights_mb"] = round(weights, 1)
            out["peak_to_weights"] = round(out["peak_rss_mb"] / weights, 2) if weights else None
        return out


def _libc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None
