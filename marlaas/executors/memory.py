"""Resident memory of a real run: the allocator setting that keeps it down, and its measurement.

glibc's malloc serves a block of up to 32 MiB from its heap once a block that size has been
freed (the dynamic mmap threshold), and keeps freed heap memory for reuse instead of returning
it. A training step allocates and frees gigabytes of activations in blocks of 0.1-10 MiB, so
the process kept what its largest step ever touched, fragmented: a SmolLM2 training step of 64
sequences peaked at 9.3 GB and still held 5.9 GB after it; with a fixed threshold of 256 KiB
(blocks above it are mmap'ed and unmapped on free) the same step peaked at 3.9 GB and fell
back to 1.0 GB (measured with full-vocabulary logits, before marlaas.executors.logprobs).
Threads (asyncio workers, the engine thread, OpenMP) each get an arena of their own, up to 8
per core, and each keeps its own freed memory. :func:`release_large_blocks` sets that
threshold and at most :data:`ARENAS` arenas (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_ARENA_MAX``, when set, win). Measured on the 2-step SmolLM2 run: docs/real-runs.md,
"Where the memory goes".

:class:`MemoryMonitor` samples the resident set size of this process and of every process it
started (an engine core in a child process, compiler or probe subprocesses) on a light
background thread (every ``period_s``). This process's peak is the kernel's own figure
(``ru_maxrss``), which no sampling interval can miss; a child's is its high-water mark
(``VmHWM`` in /proc/PID/status, which psutil does not expose) when last sampled (a child
that lives less than ``period_s`` may be missed); the peak of the whole tree (their sum) is
sampled. A child forked from this process and not (yet) exec'ed is left out of both: its
resident pages are mostly this process's, shared copy-on-write (a child that forks without
exec, such as a ``fork`` multiprocessing worker, is therefore not counted).

Processes, their resident sizes and command lines come from psutil.

Where jemalloc is installed the ``marlaas`` command runs ``train``, ``evaluate`` and ``serve``
under it instead (marlaas.allocator); these glibc settings then change nothing and are not
made. The summary's ``memory.allocator`` says which ran.

Sizes are in MiB (2^20 bytes), written ``_mb`` as elsewhere in the project (ru_maxrss / 1024).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import sys
import threading
import time
from pathlib import Path

import psutil

from marlaas.allocator import allocator_in_use

MMAP_THRESHOLD_BYTES = 256 * 1024
"""Blocks at least this big are mmap'ed and returned to the system when freed [bytes]."""
ARENAS = 2
"""malloc arenas at most: threads (asyncio workers, the engine thread, OpenMP) share these
instead of up to 8 per core, each keeping its own freed memory."""
_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers from glibc's malloc.h
_M_ARENA_MAX = -8
_MB = 1024 * 1024
_PROC = Path("/proc")


def release_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES, arenas: int = ARENAS) -> bool:
    """Make glibc return every freed block of at least ``threshold`` bytes to the system (a
    fixed mmap threshold) and keep at most ``arenas`` malloc arenas. Process-wide, for
    allocations made after the call; True when the threshold was set. Nothing happens without
    glibc; ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX``, when set, win (the user's
    setting)."""
    if not sys.platform.startswith("linux") or allocator_in_use() == "jemalloc":
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    if not os.environ.get("MALLOC_ARENA_MAX"):
        libc.mallopt(_M_ARENA_MAX, int(arenas))
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def _process(pid: int | str | None) -> psutil.Process:
    """The psutil handle of ``pid`` (``"self"`` or None: this process)."""
    return psutil.Process(None if pid in (None, "self") else int(pid))


def rss_mb(pid: int | str = "self") -> float:
    """A process's resident set size now [MiB] (0 when it is gone or cannot be read)."""
    try:
        return _process(pid).memory_info().rss / _MB
    except psutil.Error:
        return 0.0


def peak_rss_mb() -> float:
    """This process's peak resident set size since it started [MiB] (ru_maxrss)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _MB if sys.platform == "darwin" else peak / 1024  # bytes on macOS, else KiB


def hwm_mb(pid: int | str) -> float:
    """A process's peak resident set size so far [MiB] (VmHWM, Linux; 0 when it is gone or
    there is no /proc: psutil has no such figure)."""
    try:
        with open(_PROC / str(pid) / "status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def descendants(pid: int | None = None) -> list[int]:
    """The ids of every living process below ``pid`` (default: this one)."""
    try:
        return [child.pid for child in _process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def forked_copy(pid: int, of: int | None = None) -> bool:
    """Whether process ``pid`` still runs the same command line as ``of`` (default: this
    process): forked and not (yet) exec'ed, so most of its resident pages are its parent's,
    shared copy-on-write; counted in a sum, they would count twice."""
    try:
        return _process(pid).cmdline() == _process(of).cmdline()
    except psutil.Error:  # gone (a zombie has no command line either)
        return False


def tree_rss_mb() -> float:
    """Resident memory of this process and its descendants now [MiB] (forked copies of this
    process that have not exec'ed are left out: their pages are mostly this one's)."""
    return rss_mb() + sum(rss_mb(pid) for pid in descendants() if not forked_copy(pid))


def weights_mb(model_dir: str | Path) -> float:
    """The model's weight files' size [MiB]: its *.safetensors (else *.bin) files."""
    folder = Path(model_dir)
    files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files) / _MB


class MemoryMonitor:
    """The resident memory of this process and its child processes over a stretch of work,
    sampled every ``period_s`` [s].

    Use as a context manager; ``mark()`` returns the process tree's resident memory now [MiB]
    (e.g. after each training step), ``timeline()`` every sample on a run's clock and
    ``summary()`` the figures a run's summary keeps.

    Every sample also keeps this process's peak so far (ru_maxrss, which misses nothing), so
    the peak's time is known to within one period even when it lasted less: it is the first
    sample that saw the final peak (``peak_at_s``).
    """

    def __init__(self, period_s: float = 0.25) -> None:
        self.period_s = period_s
        self.zero = time.monotonic()
        """The monotonic time [s] a timeline's ``time_s`` counts from (a run's clock: set it
        when the run's setup ends); ``offset_s`` is added (a resumed run's earlier parts)."""
        self.offset_s = 0.0
        self.start_mb = tree_rss_mb()
        self.tree_peak_mb = self.start_mb
        """The largest sampled sum over the process tree [MiB]."""
        self.end_mb: float | None = None
        self.children: dict[int, dict] = {}
        """pid -> {"command", "peak_rss_mb"} of every child process seen."""
        self.samples: list[tuple[float, float, float]] = []
        """(monotonic time [s], the tree's resident memory [MiB], this process's peak so far
        [MiB]) of every sample."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

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
        """The process tree's resident memory now [MiB] (also counted in the peaks)."""
        total = rss_mb()
        seen = []
        for pid in descendants():
            now = rss_mb(pid)
            if now <= 0.0:
                continue  # ended meanwhile
            if forked_copy(pid):
                continue  # forked, not yet exec'ed: its pages are this process's
            total += now
            seen.append((pid, max(now, hwm_mb(pid))))
        with self._lock:
            self.samples.append((time.monotonic(), total, peak_rss_mb()))
            self.tree_peak_mb = max(self.tree_peak_mb, total)
            for pid, peak in seen:
                child = self.children.get(pid)
                if child is None:
                    child = self.children[pid] = {"command": _command(pid), "peak_rss_mb": 0.0}
                child["peak_rss_mb"] = max(child["peak_rss_mb"], peak)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.mark()

    def timeline(self) -> list[tuple[float, float, float]]:
        """(time_s, rss_mb, peak_rss_mb) of every sample: seconds on the run's clock (``zero``,
        ``offset_s``; negative while the run set up), the process tree's resident memory and
        this process's peak so far [MiB]."""
        with self._lock:
            samples = list(self.samples)
        return [(t - self.zero + self.offset_s, now, peak) for t, now, peak in samples]

    def peak_at_s(self) -> float | None:
        """When this process's peak was reached, on the run's clock [s]: the first sample that
        saw it (the peak came at most one period before); None before any sample."""
        timeline = self.timeline()
        if not timeline:
            return None
        top = max(peak for _, _, peak in timeline)
        return next(t for t, _, peak in timeline if peak >= top)

    def summary(self, model_dir: str | Path | None = None) -> dict:
        """The figures of a run's summary [MiB]: ``peak_rss_mb``, this process's peak since it
        started (ru_maxrss: model loading included); ``children``, every child process seen
        (pid, command, its peak, largest first); ``tree_peak_rss_mb``, the largest sampled sum
        of the process and its children; ``start_rss_mb`` and ``end_rss_mb``, the tree when
        monitoring began and ended (or now); ``peak_at_s``, when the process's peak came, on
        the run's clock [s]; ``allocator``, the process's (:func:`allocator_in_use`); with
        ``model_dir`` also ``weights_mb`` (the weight files) and ``peak_to_weights`` (the
        tree's peak over the weights)."""
        with self._lock:
            children = [
                {"pid": pid, "command": c["command"], "peak_rss_mb": round(c["peak_rss_mb"], 1)}
                for pid, c in sorted(self.children.items(), key=lambda kv: -kv[1]["peak_rss_mb"])
            ]
            tree_peak = max(self.tree_peak_mb, peak_rss_mb())
        out = {
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "children": children,
            "tree_peak_rss_mb": round(tree_peak, 1),
            "start_rss_mb": round(self.start_mb, 1),
            "end_rss_mb": round(tree_rss_mb() if self.end_mb is None else self.end_mb, 1),
        }
        peak_at = self.peak_at_s()
        out["peak_at_s"] = None if peak_at is None else round(peak_at, 2)
        out["allocator"] = allocator_in_use()
        if model_dir is not None:
            weights = weights_mb(model_dir)
            out["weights_mb"] = round(weights, 3)
            out["peak_to_weights"] = round(tree_peak / weights, 2) if weights else None
        return out


def _command(pid: int) -> str:
    """A process's command line (its first 120 characters), or its name."""
    try:
        process = _process(pid)
        text = " ".join(" ".join(process.cmdline()).split()) or process.name()
    except psutil.Error:
        return "?"
    return (text or "?")[:120]


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None
