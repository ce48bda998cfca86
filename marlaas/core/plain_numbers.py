"""Numbers as a workload means them, before pydantic validates them.

Every model of the workload runs :func:`plain_number` over its fields first (the cost model
runs :func:`refuse_bool`, its numbers all being floats):

- true or false is refused where a number goes: pydantic reads true as 1 for an int or float
  field, and YAML reads yes, no, on and off as true and false, so ``devices: yes`` would be
  one device and ``seed: true`` seed 1;
- a count (a field that holds an int and no float) takes a whole number only: text is
  refused (``steps: "5"``; pydantic would read it as 5 for one field and refuse it for
  another), and so is a float with a fractional part; a whole float (``5.0``) and a numpy
  integer (a workload built in code) become a plain Python int.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ValidationInfo

from marlaas.core.validation_message import type_leaves

WHOLE = "must be a whole number"
"""The start of a count's refusal (the formatter adds the value: ``(got '5')``)."""
NOT_BOOL = "a number, not true or false (YAML reads yes/no/on/off as true/false)"


def plain_number(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """``value`` for field ``info.field_name`` of ``model``: true or false refused where a
    number goes (:func:`refuse_bool`), and where a count goes, :func:`whole_number`'s int."""
    if isinstance(value, np.bool_):
        value = bool(value)
    value = refuse_bool(model, value, info)
    if info.field_name and _count(model, info.field_name):
        return whole_number(value)
    if (
        isinstance(value, list | dict)
        and info.field_name
        and _numeric_items(model, info.field_name)
    ):
        refuse_bool_items(value)
    return value


def refuse_bool_items(items: list | dict) -> None:
    """ValueError naming the first item of ``items`` (a list's, or a mapping's value) that is
    true or false: pydantic reads them as 1 and 0 in a list of numbers, as for one number."""
    pairs = items.items() if isinstance(items, dict) else enumerate(items)
    for key, item in pairs:
        if isinstance(item, bool | np.bool_):
            where = f"item {key}" if isinstance(items, list) else repr(key)
            raise ValueError(f"{where}: {NOT_BOOL}")


def whole_number(value: Any) -> Any:
    """``value`` as a Python int when it is an int, a numpy integer or a whole finite float;
    ValueError for text and for a float with a fractional part; anything else (None, an
    infinity, a list) as given, for the field's own validation to accept or name."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(NOT_BOOL)
    if isinstance(value, str):
        raise ValueError(f"{WHOLE}, not text{_quoted_hint(value)}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) and math.isfinite(value):
        if not float(value).is_integer():
            raise ValueError(WHOLE)
        return int(value)  # 1e+23 too: the field's bound names it
    return value


def _quoted_hint(text: str) -> str:
    """`` (write it without quotes)`` when ``text`` reads as a number, else nothing."""
    try:
        float(text)
    except ValueError:
        return ""
    return " (write it without quotes)"


def refuse_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """``value`` as given, unless it is true or false for a field of ``model`` that holds a
    number and no bool (ValueError saying so)."""
    if isinstance(value, bool) and info.field_name and _numeric(model, info.field_name):
        raise ValueError(NOT_BOOL)
    return value


@cache
def _numeric(model: type[BaseModel], name: str) -> bool:
    """Whether field ``name`` of ``model`` takes an int or a float and not a bool."""
    kinds = _kinds(model, name)
    return bool(kinds & {int, float}) and bool not in kinds


@cache
def _count(model: type[BaseModel], name: str) -> bool:
    """Whether field ``name`` of ``model`` takes an int, and no float, text or bool."""
    kinds = _kinds(model, name)
    return int in kinds and not kinds & {float, str, bool}


@cache
def _numeric_items(model: type[BaseModel], name: str) -> bool:
    """Whether field ``name`` of ``model`` is a list or mapping of numbers (int or float, not
    bool): ``values: [...]`` of an empirical distribution, ``prices.pools``."""
    for kind in _kinds(model, name):
        if get_origin(kind) in (list, dict) and get_args(kind):
            items = set(type_leaves(get_args(kind)[-1]))
            if items & {int, float} and bool not in items:
                return True
    return False


def _kinds(model: type[BaseModel], name: str) -> set[Any]:
    """The types field ``name`` of ``model`` takes (a union's members; empty: no such
    field)."""
    field = model.model_fields.get(name)
    return set(type_leaves(field.annotation)) if field is not None else set()
