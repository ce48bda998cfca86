"""The building blocks of the workload's models: a strict pydantic base model, bounded counts
and amounts (the bounds from :mod:`marlaas.core.limits`), and the checks of names and text."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from marlaas.core import limits as L
from marlaas.core.distributions import LogNormal, largest
from marlaas.core.plain_numbers import plain_number


class StrictSpec(BaseModel):
    """A frozen model that refuses unknown fields, validates its defaults and takes finite
    numbers only, never true or false for one, and whole numbers only for its counts
    (:mod:`marlaas.core.plain_numbers`)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _plain_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return plain_number(cls, value, info)


def Count(high: int, low: int = 1):
    """An int in [low, high] (the bound comes from marlaas.core.limits): a whole number, not
    text (a model's :func:`~marlaas.core.plain_numbers.plain_number` sees to it)."""
    return Annotated[int, Field(ge=low, le=high)]


def Amount(high: float, low: float = 0.0, positive: bool = False):
    """A finite float in [low, high] (> low when ``positive``)."""
    return Annotated[float, Field(gt=low, le=high) if positive else Field(ge=low, le=high)]


JOB_NAME = r"^[A-Za-z0-9_-]+$"
"""Job names are folder and adapter names in real runs: letters, digits, - and _."""


def check_policy(name: str) -> str:
    """A registered policy's name (ValueError naming the known ones otherwise)."""
    from marlaas.core.policies import UnknownPolicyError, get_policy

    try:
        get_policy(name)
    except UnknownPolicyError as err:
        raise ValueError(str(err)) from None
    return name


def check_name(value: str) -> str:
    """A name: 1..MAX_NAME_CHARS printable characters, not only spaces."""
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > L.MAX_NAME_CHARS:
        raise ValueError(f"at most {L.MAX_NAME_CHARS} characters (got {len(value)})")
    if not value.isprintable():
        raise ValueError("must hold printable characters only (no newlines or escapes)")
    return value


SHOWN_NAME_CHARS = 40
"""Characters of a refused name an error echoes (a longer one is cut, with "...")."""


def shown_name(value: str) -> str:
    """``value`` quoted for an error line, cut to its first SHOWN_NAME_CHARS characters and
    "..." when longer (a refused name may be thousands of characters)."""
    if len(value) <= SHOWN_NAME_CHARS:
        return repr(value)
    return f"{value[:SHOWN_NAME_CHARS]!r}..."


def at_most(dist, bound: float, unit: str):
    """``dist`` when its values stay within ``bound``: a lognormal's median (its draws are
    truncated at a cap where they are used: a length's rl.max_new_tokens, a prompt's p99.99)."""
    if largest(dist) > bound:
        raise ValueError(f"values up to {largest(dist):g} {unit}; at most {bound:g} {unit}")
    return dist


def tail_at_most(dist, bound: float, unit: str):
    """``dist`` when its values stay within ``bound``, a lognormal's by its p99.99 (median x
    e^(3.72 sigma)), not its median alone: for a quantity drawn and used whole, a latency
    waited in full (median 1 day with sigma 5 waited up to 10^8 days)."""
    if not isinstance(dist, LogNormal):
        return at_most(dist, bound, unit)
    top = largest(dist, tail=True)
    if top > bound:
        raise ValueError(
            f"lognormal median {dist.median:g} {unit}, sigma {dist.sigma:g}: its p99.99 "
            f"(median x e^(3.72 sigma)) is {top:.4g} {unit}; at most {bound:g} {unit} (a "
            "smaller median or sigma)"
        )
    return dist


def printable(value: str, limit: int) -> str:
    """``value`` when it is at most ``limit`` printable characters (ValueError otherwise)."""
    if len(value) > limit or not value.isprintable():
        raise ValueError(f"at most {limit} printable characters")
    return value
