"""What a policy loaded by import path is checked for while a run goes on.

The class registered is not the user's own but a subclass that
:func:`marlaas.policy_path.load_policy` makes (:func:`checked`), with the same name, docstring,
idea and source: whatever its ``key``, ``engine_key`` or ``open_share`` raises while a run goes
on (``SystemExit`` included), or a value of the wrong kind it returns, becomes one
:class:`PolicyError` line naming the path, the method and the job. A key is a tuple of numbers
(``int``, ``float``, ``bool``; infinities are fine, NaN, which orders with nothing, is not) and
strings, a string in the same places in every key (a string and a number do not compare);
``engine_key`` may also return None. The scheduler gets each key as plain ``int``, ``float``
and ``str`` items (a numpy scalar as the number it is). What ``start_run`` raises is such a
line too. Its methods get the job and the engine through a
:class:`~marlaas.policy_views.ReadOnlyView`: a field set or deleted there, or a change to what
a field holds, is such an error too, where it would change the scheduler's own state. The
bundled policies are not wrapped (no cost on their hot path). A class is named by its import
path unless its own class body sets ``name``.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from collections.abc import Callable
from typing import Any

from marlaas.core.policies import Policy
from marlaas.import_path import one_line, shown
from marlaas.numpy_values import is_numpy_bool
from marlaas.policy_views import ReadOnlyEngine, ReadOnlyJob, view, viewed


class PolicyLoadError(ValueError):
    """A policy import path that cannot be turned into a working Policy."""


class PolicyError(PolicyLoadError):
    """A policy loaded by import path that failed while a run went on: one of its methods
    raised, or returned a value that is not a key (printed as one line, like a load error)."""


def checked(spec: str, cls: type[Policy]) -> type[Policy]:
    """A subclass of ``cls`` (same name, docstring, idea and source) whose ``key``,
    ``engine_key`` and ``open_share`` check what ``cls``'s return, and turn what they raise
    (``SystemExit`` too) into a :class:`PolicyError` naming ``spec``, the method and the
    job. Named ``spec`` unless ``cls``'s own body sets ``name`` (an inherited one, such as a
    bundled policy's, would report the subclass under its base's name)."""

    def key_fault(policy: Policy, value: object) -> tuple[str | None, object]:
        return _key_fault(value, _seen(policy, "key"), "a tuple of numbers")

    def engine_key_fault(policy: Policy, value: object) -> tuple[str | None, object]:
        if value is None:
            return None, None
        return _key_fault(value, _seen(policy, "engine_key"), "a tuple of numbers or None")

    def share_fault(policy: Policy, value: object) -> tuple[str | None, object]:
        if not _is_share(value):
            return f"returned {shown(value)}, not a share from 0 to 1", value
        return None, float(value)  # type: ignore[arg-type]  # a plain float, as the mechanism's

    body: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "key": _guarded(spec, "key", cls.key, key_fault),
        "start_run": _guarded_start(spec, cls.start_run),
    }
    if cls.ranks_engines:  # else the mechanism's own order, unwrapped (ranks_engines stays)
        body["engine_key"] = _guarded(spec, "engine_key", cls.engine_key, engine_key_fault)
    if cls.open_share is not Policy.open_share:
        body["open_share"] = _guarded(spec, "open_share", cls.open_share, share_fault)
    wrapped = type(cls.__name__, (cls,), body)
    wrapped.ranks_engines = cls.ranks_engines
    wrapped.checked_from = cls  # the user's own class (what load_policy compares by name)
    if not ("name" in vars(cls) and cls.name):
        wrapped.name = spec  # what run summaries and tables call it
    return wrapped


def _guarded_start(spec: str, user: Callable[[Policy], object]):
    """``user``, a policy's ``start_run``, through a check: what it raises (``SystemExit``
    too) is a :class:`PolicyError` naming ``spec``."""

    def start_run(self: Policy) -> None:
        try:
            user(self)
        except (Exception, SystemExit) as exc:
            raise PolicyError(f"policy {spec!r}: start_run() raised {one_line(exc)}") from exc

    return start_run


def _guarded(
    spec: str,
    method: str,
    user: Callable,
    fault: Callable[[Policy, object], tuple[str | None, object]],
):
    """``user``, a policy method ``(self, job, *rest)``, through a check: what it raises
    (``SystemExit`` too), or a value ``fault`` finds wrong (saying why), is a
    :class:`PolicyError` naming ``spec``, ``method`` and the job (and the engine). A value
    ``fault`` takes is returned as it makes it: plain ``int``, ``float`` and ``str`` items,
    which order as the mechanism expects (a numpy scalar's comparison is a numpy bool)."""

    def call(self: Policy, job: Any, *rest: Any) -> Any:
        engine = rest[0] if method == "engine_key" else None
        if type(job) is ReadOnlyJob:  # a key that asks a key: the job is a view already
            seen, job = job, viewed(job)
        else:
            seen = view(ReadOnlyJob, job)
        try:
            if engine is None:
                value = user(self, seen, *rest)
            else:
                engine = viewed(engine) if type(engine) is ReadOnlyEngine else engine
                value = user(self, seen, view(ReadOnlyEngine, engine), *rest[1:])
        except PolicyError:
            raise  # a recursive key's innermost error: said once
        except (Exception, SystemExit) as exc:
            if type(exc) is RecursionError:  # said by the outermost call, where there is room
                here = sys._getframe()
                outer = here.f_back
                while outer is not None and outer.f_code is not here.f_code:
                    outer = outer.f_back
                if outer is not None:
                    raise
            where = _call(method, job, engine)
            raise PolicyError(f"policy {spec!r}: {where} raised {one_line(exc)}") from exc
        why, value = fault(self, value)
        if why is not None:
            where = _call(method, job, engine)
            raise PolicyError(f"policy {spec!r}: {where} {why}")
        return value

    return call


def _seen(policy: Policy, method: str) -> list[tuple[bool, ...]]:
    """Which items of ``policy``'s ``method`` values so far were strings (kept on the
    instance: a policy made for another run starts afresh)."""
    return policy.__dict__.setdefault(f"_checked_{method}_kinds", [])


def _key_fault(
    value: object, seen: list[tuple[bool, ...]], wanted: str
) -> tuple[str | None, object]:
    """What is wrong with ``value`` as a key (None: nothing), given the kinds of the keys
    before it (``seen``, kept up to date), and the key as the mechanism gets it
    (:func:`_plain_key`)."""
    key = _plain_key(value)
    if key is None:
        return _refusal(value, wanted), value
    if not _same_kinds(seen, key):
        return _mixed(key), value
    return None, key


def _plain_key(value: object) -> tuple | None:
    """``value`` as a key of plain items, or None where it is no key: a tuple of numbers
    (none NaN, which orders with nothing) and strings. A tuple of ``int``, ``float``, ``bool``
    and ``str`` is returned as it is; any other tuple (a namedtuple) as a tuple, and any other
    number (a numpy scalar, a ``Fraction``, an ``IntEnum``) or string as the ``int``,
    ``float`` or ``str`` it equals: compared, a numpy scalar gives a numpy bool, which the
    compiled scheduler refuses (TypeError: bool object expected), and a subclass may order
    as it likes."""
    if not isinstance(value, tuple):
        return None
    plain = type(value) is tuple
    for item in value:
        kind = type(item)
        if kind is int or kind is bool or kind is str:
            continue
        if kind is float:
            if item != item:  # NaN
                return None
            continue
        plain = False
        if not isinstance(item, (numbers.Real, str)) and not is_numpy_bool(item):
            return None
    if plain:
        return value
    try:
        key = tuple(_plain_item(item) for item in value)
    except (ArithmeticError, TypeError, ValueError):  # a Fraction too large for a float
        return None
    return None if any(item != item for item in key) else key


def _plain_item(item: object) -> int | float | str:
    """A key's item as a plain ``int`` (``bool`` kept), ``float`` or ``str``."""
    kind = type(item)
    if kind is int or kind is bool or kind is float or kind is str:
        return item  # type: ignore[return-value]
    if isinstance(item, str):
        return str.__str__(item)
    if is_numpy_bool(item):  # not a numbers.Real: np.any(...) > 0's result
        return bool(item)
    if isinstance(item, numbers.Integral):
        return operator.index(item)
    return float(item)  # type: ignore[arg-type]


def _kinds(value: tuple) -> tuple[bool, ...]:
    """Which items of a key are strings (tuples compare item by item: a string and a number
    in one place do not compare)."""
    return tuple(type(item) is str for item in value)


def _same_kinds(seen: list[tuple[bool, ...]], value: tuple) -> bool:
    """Whether ``value`` has a string where every key before it had one, and a number where
    they had numbers (``seen``: the longest kinds so far, kept up to date)."""
    kinds, known = _kinds(value), seen[0] if seen else ()
    if kinds == known:
        return True
    common = min(len(kinds), len(known))
    if kinds[:common] != known[:common]:
        return False
    if len(kinds) > len(known):
        seen[:] = [kinds]
    return True


def _is_share(value: object) -> bool:
    """Whether ``value`` is a number from 0 to 1 (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return 0 <= value <= 1


def _refusal(value: object, wanted: str = "a tuple of numbers") -> str:
    """Why ``value`` is no key: ``returned ...`` with the value shown (``wanted``: what a
    value that is no tuple should have been)."""
    if not isinstance(value, tuple):
        return f"returned {type(value).__name__} {shown(value)}, not {wanted}"
    for item in value:
        if not isinstance(item, (numbers.Real, str)):
            return f"returned {shown(value)}: {shown(item)} is not a number or a string"
        if isinstance(item, numbers.Real) and _is_nan(item):
            return f"returned {shown(value)}: NaN orders with nothing (use inf or a number)"
    return f"returned {shown(value)}, not a tuple of numbers"


def _is_nan(item: numbers.Real) -> bool:
    """Whether ``item`` is NaN (a numpy NaN too; one whose float() fails is not)."""
    try:
        return math.isnan(item)  # type: ignore[arg-type]
    except (ArithmeticError, TypeError, ValueError):
        return False


def _mixed(value: tuple) -> str:
    """Why ``value`` does not compare with the keys before it."""
    return (f"returned {shown(value)}: a string where earlier keys had a number, or a number "
            "where they had a string (keys compare item by item)")  # fmt: skip


def _call(method: str, job: Any, engine: Any = None) -> str:
    """``key(job 'a')``, ``engine_key(job 'a', engine 1)``: the call that went wrong."""
    name = shown(getattr(job, "name", "?"), 60)
    where = "" if engine is None else f", engine {shown(getattr(engine, 'index', '?'), 20)}"
    return f"{method}(job {name}{where})"
