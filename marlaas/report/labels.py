"""How reports name a run: every figure, table, section id and file name goes through here.

A run is named after how it was scheduled: its preset (``sequential``, ``sync``, ... when the
summary records one under ``preset``), else its policy. Where that leaves several runs of one
report with the same name, what tells them apart is added: the run's kind (simulation, real,
replay), its number of jobs, its sweep variant, its workload, then its seed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

KINDS = {"simulation": "simulation", "real": "real run", "replay": "replay"}
"""Human names of the summary's ``kind``."""
DEVICE = "device"
"""What reports call a device unless the run names its accelerator (summary ``accelerator``)."""


def base_name(summary: Mapping, fallback: str = "run") -> str:
    """The preset's name when the summary has one, else the policy, else ``fallback``."""
    for key in ("preset", "policy"):
        value = summary.get(key)
        if value:
            return str(value)
    return fallback


def kind_name(summary: Mapping) -> str:
    """Human name of the run's kind (``simulation`` when the summary does not say)."""
    kind = str(summary.get("kind") or "simulation")
    return KINDS.get(kind, kind)


def device_noun(summary: Mapping) -> str:
    """``device``, or the accelerator the run names (e.g. ``GPU``) in ``accelerator``."""
    return str(summary.get("accelerator") or DEVICE)


def _n_jobs(summary: Mapping):
    metrics = summary.get("metrics")
    if isinstance(metrics, Mapping) and "n_jobs" in metrics:
        return metrics["n_jobs"]
    arrivals = summary.get("arrivals")
    return len(arrivals) if isinstance(arrivals, Mapping) else None


_TELLERS = (
    ("kind", lambda s: kind_name(s), str),
    ("jobs", _n_jobs, lambda n: f"{n} job" if n == 1 else f"{n} jobs"),
    ("variant", lambda s: s.get("variant"), str),
    ("workload", lambda s: s.get("workload"), str),
    ("seed", lambda s: s.get("seed"), lambda seed: f"seed {seed}"),
)
"""What can tell runs of one name apart, in the order it is added: (what, value, text)."""


def run_label(summary: Mapping, among: Sequence[Mapping] = (), fallback: str = "run") -> str:
    """The name of the run of ``summary`` in a report of the runs ``among``.

    ``preset`` (else ``policy``, else ``fallback``), followed in parentheses by whichever of
    kind, job count, variant, workload and seed differ between the runs of ``among`` that share
    that name, e.g. ``fair (real)`` next to ``fair (simulation)``, or ``fifo (seed 2)``.
    """
    name = base_name(summary, fallback)
    twins = [s for s in among if base_name(s, fallback) == name]
    extra = []
    for _, value, text in _TELLERS:
        values = {repr(value(s)) for s in twins}
        own = value(summary)
        if len(values) > 1 and own not in (None, ""):
            extra.append(text(own))
    return f"{name} ({', '.join(extra)})" if extra else name


def run_labels(summaries: Sequence[Mapping], fallbacks: Sequence[str] | None = None) -> list[str]:
    """Labels of several runs (see :func:`run_label`), made unique by ``#2``, ``#3`` suffixes
    where nothing in the summaries tells runs apart. ``fallbacks`` name runs without a policy
    (e.g. their folder names)."""
    fallbacks = list(fallbacks or ["run"] * len(summaries))
    named = [
        {**s, "policy": s.get("policy") or f} for s, f in zip(summaries, fallbacks, strict=True)
    ]
    labels, seen = [], {}
    for summary in named:
        label = run_label(summary, named)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return labels


def slug(text: str) -> str:
    """``text`` reduced to letters, digits, - and _ (for ids and file names)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "run"


def unique_slugs(labels: Sequence[str]) -> list[str]:
    """The :func:`slug` of each label, with ``-2``, ``-3``, ... where labels that differ only
    in the characters a slug drops (``fair #2`` and ``fair-2``) would share one, so that no
    two runs of a report share an element id or a figure file."""
    taken: set[str] = set()
    out = []
    for label in labels:
        base = candidate = slug(label)
        n = 1
        while candidate in taken:
            n += 1
            candidate = f"{base}-{n}"
        taken.add(candidate)
        out.append(candidate)
    return out
