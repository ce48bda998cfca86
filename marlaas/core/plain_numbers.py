"""Numbers written as true or false, refused: pydantic reads true as 1 for an int or float
field, and YAML reads yes, no, on and off as true and false, so ``devices: yes`` would be one
device and ``seed: true`` seed 1. Every model of the workload and the cost model runs
:func:`refuse_bool` over its fields before validating them."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationInfo

from marlaas.core.validation_message import type_leaves


def refuse_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """``value`` as given, unless it is true or false for a field of ``model`` that holds a
    number and no bool (ValueError saying so)."""
    if isinstance(value, bool) and info.field_name and _numeric(model, info.field_name):
        raise ValueError("a number, not true or false (YAML reads yes/no/on/off as true/false)")
    return value


@cache
def _numeric(model: type[BaseModel], name: str) -> bool:
    """Whether field ``name`` of ``model`` takes an int or a float and not a bool."""
    field = model.model_fields.get(name)
    kinds = set(type_leaves(field.annotation)) if field is not None else set()
    return bool(kinds & {int, float}) and bool not in kinds
