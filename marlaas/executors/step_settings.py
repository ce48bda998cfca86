"""The checks of a job's training-step settings as the trainer takes them (the workload file
checks the same bounds on load: marlaas.core.job_spec)."""

from __future__ import annotations

from marlaas.core import limits as L


def check_step_settings(
    minibatches: int,
    clip_eps: float,
    clip_eps_high: float | None = None,
    lr_staleness_damping: float = 0.0,
) -> None:
    """ValueError unless ``minibatches`` is an int >= 1, ``clip_eps`` and ``clip_eps_high``
    (None: not given) numbers in (0, their bound in core.limits] and
    ``lr_staleness_damping`` one in [0, its bound]."""
    if isinstance(minibatches, bool) or not isinstance(minibatches, int) or minibatches < 1:
        raise ValueError(f"minibatches must be an int >= 1, got {minibatches!r}")
    _check_number("clip_eps", clip_eps, L.MAX_CLIP_EPS)
    if clip_eps_high is not None:
        _check_number("clip_eps_high", clip_eps_high, L.MAX_CLIP_EPS_HIGH)
    _check_number(
        "lr_staleness_damping", lr_staleness_damping, L.MAX_LR_STALENESS_DAMPING, zero=True
    )


def _check_number(name: str, value: object, high: float, *, zero: bool = False) -> None:
    """ValueError naming ``name`` unless ``value`` is a number in (0, high] ([0, high] with
    ``zero``)."""
    span = f"[0, {high:g}]" if zero else f"(0, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number in {span}, got {value!r}")
    if not ((value >= 0 if zero else value > 0) and value <= high):
        raise ValueError(f"{name} must be in {span}, got {value!r}")
