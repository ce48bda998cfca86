"""How much of the machine a real run had: the CPU time its own processes used, and what other
processes and the hypervisor took while it ran.

A real run's speed is the host's: on a shared machine (or a virtual one whose host runs other
guests) the same work takes longer when something else takes the processors. A replay cannot
predict that, so a comparison of a run with its replay (``marlaas replay``), or a profile
calibrated on it (``marlaas calibrate``), is only as good as the run was undisturbed.
:class:`HostShare` measures it, from the kernel's counters (psutil), at the run's start and end:

- ``run_cpu_s``: CPU time of this process (all its threads) and of its child processes (an
  engine core, compilers, sandboxes: those alive at the end and those it has waited for) [s];
- ``other_cpu_s``: the machine's busy CPU time (every state but idle and I/O wait) less the
  run's, that is, other processes' and the kernel's on their behalf [s]; a child process that
  ended without being waited for counts here;
- ``steal_s``: time the hypervisor ran another guest while this machine's processors had work
  (/proc/stat's ``steal``; 0 on a machine that is not virtual) [s];
- ``others_share``: (other_cpu_s + steal_s) / (wall_s x cpus), the share of the machine's
  processor time that went elsewhere while the run ran (0: the run had the machine to itself).

Counters are read twice, so the figures cover the whole interval: nothing is sampled. They tick
every 1/100 s, so a span shorter than :data:`MIN_WALL_S` records nothing (one tick of other
work would be a large share of it); so does a machine whose counters cannot be read. The span
includes loading the models, which the run's makespan does not. Only the run's own process
tree is the run's: engines and trainers in Ray actors are not its processes, so
``marlaas train`` measures runs without ``--ray`` only, and each part of a resumed run on its
own (the summary of a resumed run has the last part's, if any).
"""

from __future__ import annotations

import time

import psutil

BUSY_HOST_SHARE = 0.10
"""From this share of the machine's processor time gone elsewhere, a run is said to have had a
busy host (``marlaas train`` notes it; ``calibrate`` warns and keeps no yardstick; ``replay``
says so beside its errors and charges no yardstick speed: marlaas.twin.replay.busy_yardstick):
on the 2-core VM of docs/twin-log.md, of twelve runs with every other Python process stopped
seven had 0.7-5.0%, three 7-10% where the hypervisor took the processors (steal 12.5-15.5 s:
those runs took 14-34% longer than their repeats), two more from processes the stopping
missed."""

MIN_WALL_S = 1.0
"""Spans shorter than this [s] record nothing: the counters' tick (10 ms) per processor
would be over 1% of them."""

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
"""The machine's CPU-time states that are work (psutil.cpu_times; idle, iowait and steal are
not, and guest time is already in user)."""


class HostShare:
    """Context manager: what this process tree and everything else used of the machine's
    processors while it was open (see the module docstring); :meth:`summary` after it."""

    def __init__(self, pid: int | None = None) -> None:
        self.process = psutil.Process(pid)
        """The run's process (default: this one); its children are the run's too."""
        self._start: tuple[float, float, float, float] | None = None
        self._span: tuple[float, float, float, float] | None = None

    def _read(self) -> tuple[float, float, float, float]:
        """(wall clock [s], machine busy CPU [s], steal [s], run CPU [s]), read now."""
        machine = psutil.cpu_times()
        busy = sum(getattr(machine, name, 0.0) for name in BUSY_FIELDS)
        return time.monotonic(), busy, getattr(machine, "steal", 0.0), self._run_cpu_s()

    def _run_cpu_s(self) -> float:
        """CPU time of the run's process and its descendants, each with the children it has
        waited for [s]."""
        own = self.process.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for child in self.process.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:  # it ended meanwhile: its time is its parent's, if waited for
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def __enter__(self) -> HostShare:
        self._start = self._measured()
        return self

    def __exit__(self, *exc) -> None:
        end = self._measured()
        if self._start is not None and end is not None:
            self._span = tuple(b - a for a, b in zip(self._start, end, strict=True))

    def _measured(self) -> tuple[float, float, float, float] | None:
        """:meth:`_read`, or None where the counters cannot be read (a restricted /proc):
        the run goes on, unmeasured."""
        try:
            return self._read()
        except (psutil.Error, OSError):
            return None

    def summary(self) -> dict:
        """The run's host share (the module docstring's keys, rounded: s to 0.1 ms); {} before
        the ``with`` has ended, for a span under MIN_WALL_S, or unmeasured."""
        if self._span is None or self._span[0] < MIN_WALL_S:
            return {}
        wall_s, busy_s, steal_s, run_s = self._span
        run_s = max(0.0, run_s)  # a descendant that left the tree unwaited-for
        cpus = psutil.cpu_count() or 1
        other_s = max(0.0, busy_s - run_s)  # the counters tick apart: they may cross by a tick
        share = (other_s + steal_s) / (wall_s * cpus)
        return {
            "cpus": cpus,
            "wall_s": round(wall_s, 4),
            "run_cpu_s": round(run_s, 4),
            "other_cpu_s": round(other_s, 4),
            "steal_s": round(steal_s, 4),
            "others_share": round(min(share, 1.0), 4),
        }


def busy_host_note(host: dict | None) -> str | None:
    """A sentence saying that the run's host was busy (``host``: a summary's ``host``, see
    :meth:`HostShare.summary`), or None: under :data:`BUSY_HOST_SHARE`, or not measured."""
    share = (host or {}).get("others_share")
    if share is None or share < BUSY_HOST_SHARE:
        return None
    return (f"other processes and the hypervisor took {share:.0%} of the machine's processor "
            f"time while it ran ({host.get('other_cpu_s', 0):.0f} CPU-s, steal "
            f"{host.get('steal_s', 0):.0f} s): its times are a busy machine's")  # fmt: skip
