"""Colours of tenants and jobs that stay apart for dozens of tenants.

A tenant gets a hue and a lightness in OKLCH (a perceptually even colour space): 12 hues 30
degrees apart, visited in an order that puts consecutive tenants (alice, bob; t01, t02) on
far-apart hues, times 3 lightness levels, so 36 tenants get 36 clearly different colours (the
37th starts over). A job is a shade of its
tenant's colour: a tenant's jobs spread a little in lightness around it, less than the gap
between lightness levels, so a job's colour still reads as its tenant's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from marlaas.metrics.natural_order import natural_key

HUE_ORDER = (0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11)
"""Hue index (x 30 degrees) of the 1st, 2nd, ... tenant of each lightness level."""
HUE_OFFSET = 250.0
"""OKLCH hue [degrees] of the first tenant (a blue)."""
LEVELS = ((0.62, 0.15), (0.45, 0.13), (0.80, 0.11))
"""OKLCH (lightness, chroma) of the first 12 tenants, the next 12, the 12 after."""
JOB_SPREAD = 0.10
"""OKLCH lightness range over which the jobs of one tenant are spread."""
N_DISTINCT = len(HUE_ORDER) * len(LEVELS)
"""Tenants that get distinct colours before they repeat."""


def _srgb(lightness: float, chroma: float, hue: float) -> tuple[float, float, float] | None:
    """OKLCH -> sRGB in [0, 1], or None when outside the sRGB gamut."""
    a, b = chroma * math.cos(math.radians(hue)), chroma * math.sin(math.radians(hue))
    l_ = (lightness + 0.3963377774 * a + 0.2158037573 * b) ** 3
    m_ = (lightness - 0.1055613458 * a - 0.0638541728 * b) ** 3
    s_ = (lightness - 0.0894841775 * a - 1.2914855480 * b) ** 3
    linear = (
        4.0767416621 * l_ - 3.3077115913 * m_ + 0.2309699292 * s_,
        -1.2684380046 * l_ + 2.6097574011 * m_ - 0.3413193965 * s_,
        -0.0041960863 * l_ - 0.7034186147 * m_ + 1.7076147010 * s_,
    )
    if min(linear) < -1e-4 or max(linear) > 1 + 1e-4:
        return None
    return tuple(
        12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055
        for c in (min(max(c, 0.0), 1.0) for c in linear)
    )


def _hex(hue: float, lightness: float, chroma: float) -> str:
    """``#rrggbb`` of an OKLCH colour; chroma is reduced until it fits in sRGB."""
    lightness = min(max(lightness, 0.0), 1.0)
    rgb = _srgb(lightness, chroma, hue)
    while rgb is None:
        chroma *= 0.9
        rgb = _srgb(lightness, chroma, hue)
    return "#" + "".join(f"{round(c * 255):02x}" for c in rgb)


def _tenant_lch(i: int) -> tuple[float, float, float]:
    hue = HUE_OFFSET + 30.0 * HUE_ORDER[i % len(HUE_ORDER)]
    lightness, chroma = LEVELS[(i // len(HUE_ORDER)) % len(LEVELS)]
    return hue, lightness, chroma


def ordered(names: Iterable) -> list[str]:
    """Distinct non-empty names in natural order (``t2`` before ``t10``)."""
    return sorted({str(n) for n in names if str(n)}, key=natural_key)


def tenant_colors(tenants: Iterable) -> dict[str, str]:
    """``{tenant: '#rrggbb'}`` for the distinct tenants, by their natural order."""
    return {t: _hex(*_tenant_lch(i)) for i, t in enumerate(ordered(tenants))}


def job_colors(job_tenant: Mapping[str, str]) -> dict[str, str]:
    """``{job: '#rrggbb'}``: shades of the job's tenant colour (jobs in natural order)."""
    tenants = ordered(job_tenant.values())
    index = {t: i for i, t in enumerate(tenants)}
    index.setdefault("", len(tenants))  # jobs of no tenant (a rewards.csv without one)
    jobs_of: dict[str, list[str]] = {}
    for job in ordered(job_tenant):
        jobs_of.setdefault(str(job_tenant[job]), []).append(job)
    out = {}
    for tenant, jobs in jobs_of.items():
        hue, lightness, chroma = _tenant_lch(index[tenant])
        n = len(jobs)
        for k, job in enumerate(jobs):
            shift = 0.0 if n == 1 else JOB_SPREAD * (k / (n - 1) - 0.5)
            out[job] = _hex(hue, lightness + shift, chroma)
    return out
