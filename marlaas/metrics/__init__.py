"""Metrics of a run, computed from its event log alone (see :mod:`marlaas.eventlog`).

Every function is a pure function of the event-log frame; times are seconds [s] since the
run's start (0). The definitions, which reports and the simulator's invariants share:

- A *device* is every distinct non-empty ``device``; its pool is the row's ``pool``.
- A device is *busy* at ``t`` when a ``generate`` or ``train`` row on it covers ``t`` (the
  union of those intervals: generate rows of several groups overlap on one engine). All other
  time on a device is idle, and the log explains it with ``idle`` rows (``outcome`` = cause).
- The *makespan* [s] is the largest ``end_s`` of ``train`` and ``sync`` rows (a job finishes
  when its last adapter version is published), or of all non-idle rows when there are none.
  Busy and idle intervals are clipped to ``[0, makespan]``.
- A job's *completion* [s] is the end of its last ``sync`` row (else its last ``train`` row);
  its *arrival* [s] comes from an ``arrivals`` mapping when given, else 0.
- Work that spans several devices (a training step on a trainer of 4 devices, its weight sync,
  a trainer's adapter swap-in) is one row *per device* in the log. Device-seconds count every
  row; counts of work (steps, tokens, adapter loads, staleness samples) count each piece of
  work once (:func:`marlaas.metrics.jobs.train_ops`,
  :func:`marlaas.metrics.adapter_loads.adapter_loads`).

All work is vectorised (sort + cumulative max), so 1e6-row logs take well under a second.

One module per job: :mod:`~marlaas.metrics.natural_order` (names in natural order),
:mod:`~marlaas.metrics.intervals` (interval arithmetic), :mod:`~marlaas.metrics.devices`
(devices, makespan, busy intervals), :mod:`~marlaas.metrics.utilization`,
:mod:`~marlaas.metrics.idle`, :mod:`~marlaas.metrics.jobs`,
:mod:`~marlaas.metrics.adapter_loads`, :mod:`~marlaas.metrics.staleness`,
:mod:`~marlaas.metrics.fairness`, :mod:`~marlaas.metrics.deadlines` and
:mod:`~marlaas.metrics.summary` (a run's headline numbers).
"""
