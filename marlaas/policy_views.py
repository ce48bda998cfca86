"""The scheduler's objects as a policy loaded by import path sees them: read-only, all the way
down.

A policy's ``key(job)`` and ``engine_key(job, engine, homes)`` get a :class:`ReadOnlyJob` and a
:class:`ReadOnlyEngine` (:mod:`marlaas.policy_checks` wraps the user's methods). The fields of
the JobView and EngineView protocols read through at the cost of one C-level read each (a key
reads several on every call). Any other field reads as a read-only copy or view of what it
holds (:func:`read_only`): a list or deque as a read-only sequence, a set as a frozenset, a
dict as a read-only mapping, an array as a read-only array, any other object as a view of its
own, so that ``job.groups.clear()``, ``job.ready_gen.append(1)`` or ``job.groups[0].turn = 9``
is an AttributeError naming what the policy tried, not a change to the scheduler's state found
later, far from the policy. A method of the scheduler's mutable objects (a job's
``drop_alike``, an engine's ``reserve``) may not be called: it may change them (the protocols'
methods, ``holds``, are read through). A frozen object's methods (a job's spec, a length
distribution: frozen models and dataclasses) run, their results read-only in turn.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from operator import attrgetter
from types import BuiltinMethodType, FunctionType, MethodType
from typing import Any, ClassVar, SupportsIndex

from marlaas.core.policies import EngineView, JobView
from marlaas.numpy_values import loaded_numpy

_AS_THEY_ARE = (int, float, complex, str, bytes, bool, type(None), range, Enum, type, FunctionType)
"""Values that cannot be changed, given to a policy as they are (and plain functions)."""


class ReadOnlyView:
    """An object as a policy loaded by import path sees it: every field reads through to the
    scheduler's own object, read-only (:func:`read_only`), and none can be set or deleted
    (the scheduler's JobState and Engine are plain mutable objects: a key that set
    ``job.name`` broke the run later, far from the policy, with a traceback).

    Otherwise it is the object itself to the policy: ``isinstance``, ``==`` and ``bool`` see
    the object (a view of a job equals the job), ``hash`` is the object's, and ``copy``,
    ``deepcopy`` and ``pickle`` give what they give of the object: a copy is the policy's own,
    as before, but a shallow one (``copy.copy``) holds the scheduler's own dicts and deques,
    not to be changed (compiled, a job cannot be deep-copied: its prompt lengths cannot)."""

    __slots__ = ("_of",)
    _what: ClassVar[str] = "object"

    def __getattr__(self, name: str) -> Any:  # a field the protocols do not name
        of = viewed(self)
        value = getattr(of, name)
        if isinstance(value, (MethodType, BuiltinMethodType)) and value.__self__ is of:
            if not _frozen(of):
                return _refused_call(_shown_as(self), name)
            return _read_only_call(value)
        return read_only(value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"the {_shown_as(self)} is read-only to a policy: it may not set {name!r}"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(
            f"the {_shown_as(self)} is read-only to a policy: it may not delete {name!r}"
        )

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(view, JobState): as the object itself
        return type(viewed(self))

    def __eq__(self, other: object) -> bool:
        return bool(viewed(self) == (viewed(other) if isinstance(other, ReadOnlyView) else other))

    def __hash__(self) -> int:
        return hash(viewed(self))

    def __bool__(self) -> bool:  # as the object's (not its len(): most objects have none)
        return bool(viewed(self))

    def __copy__(self) -> Any:
        return copy.copy(viewed(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(viewed(self), memo)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:  # pickled as the object itself
        return viewed(self).__reduce_ex__(protocol)

    def __dir__(self) -> list[str]:
        return dir(viewed(self))

    def __repr__(self) -> str:
        return repr(viewed(self))

    def __len__(self) -> int:
        return len(viewed(self))

    def __iter__(self) -> Iterator[Any]:
        return (read_only(item) for item in viewed(self))

    def __getitem__(self, key: Any) -> Any:
        return read_only(viewed(self)[key])

    def __contains__(self, item: object) -> bool:
        return item in viewed(self)

    def __setitem__(self, key: Any, value: object) -> None:
        raise TypeError(f"the {_shown_as(self)} is read-only to a policy: it may not set an item")

    def __delitem__(self, key: Any) -> None:
        raise TypeError(
            f"the {_shown_as(self)} is read-only to a policy: it may not delete an item"
        )


viewed = ReadOnlyView._of.__get__  # type: ignore[attr-defined]
"""The object a view shows (the slot's own getter: no recursion while it is unset)."""
_set_viewed = ReadOnlyView._of.__set__  # type: ignore[attr-defined]
_new = object.__new__


def _shown_as(shown: ReadOnlyView) -> str:
    """What a view shows, in its errors: 'job', 'engine', or the class of another object."""
    kind = type(shown)  # the view's own class (its __class__ says the object's)
    return kind._what if kind is not ReadOnlyView else type(viewed(shown)).__name__


class ReadOnlyJob(ReadOnlyView):
    """A job as a policy loaded by import path sees it (:class:`ReadOnlyView`)."""

    __slots__ = ()
    _what = "job"


class ReadOnlyEngine(ReadOnlyView):
    """An engine as a policy loaded by import path sees it (:class:`ReadOnlyView`)."""

    __slots__ = ()
    _what = "engine"


class _Container:
    """What :class:`ReadOnlyMapping` and :class:`ReadOnlySequence` share: the container they
    show (``_kind``: 'mapping' or 'sequence', in their errors), its length, equality and repr,
    no change through them, and copies and pickles of it (a copy is deep, the policy's own: a
    shallow one would hold the scheduler's groups)."""

    __slots__ = ("_of",)
    _kind: ClassVar[str] = "container"

    def __init__(self, of: Any) -> None:
        self._of = of

    def __len__(self) -> int:
        return len(self._of)

    def __eq__(self, other: object) -> bool:
        return bool(self._of == (other._of if isinstance(other, _Container) else other))

    __hash__ = None  # type: ignore[assignment]  # as a dict's or a list's

    def __getattr__(self, name: str) -> Any:  # clear, pop, update, append, ...: the container's
        if hasattr(self._of, name):
            raise AttributeError(
                f"a {self._kind} is read-only to a policy: it may not call {name!r}"
            )
        raise AttributeError(f"{type(self._of).__name__!r} object has no attribute {name!r}")

    def __setitem__(self, key: Any, value: object) -> None:
        raise TypeError(f"a {self._kind} is read-only to a policy: it may not set an item")

    def __delitem__(self, key: Any) -> None:
        raise TypeError(f"a {self._kind} is read-only to a policy: it may not delete an item")

    def __repr__(self) -> str:
        return repr(self._of)

    def __copy__(self) -> Any:
        return copy.deepcopy(self._of)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self._of, memo)

    def __reduce__(self) -> Any:  # pickled as the container itself
        return _as_it_is, (self._of,)


def _as_it_is(of: Any) -> Any:
    """What a pickled :class:`_Container` unpickles as: the container it showed."""
    return of


class ReadOnlyMapping(_Container, Mapping):
    """A dict as a policy sees it: its values read-only (:func:`read_only`) as they are read,
    nothing copied; setting, deleting or clearing an item is an error."""

    __slots__ = ()
    _kind = "mapping"

    def __getitem__(self, key: Any) -> Any:
        return read_only(self._of[key])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._of)


class ReadOnlySequence(_Container, Sequence):
    """A list or deque as a policy sees it: its items read-only (:func:`read_only`) as they
    are read, nothing copied; equal to what it shows; adding, removing or setting an item is
    an error. A slice is a list of its own, as a list's is, of read-only items."""

    __slots__ = ()
    _kind = "sequence"

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [read_only(item) for item in list(self._of)[index]]
        return read_only(self._of[index])

    def __iter__(self) -> Iterator[Any]:
        return (read_only(item) for item in self._of)


def _read_through(kind: type[ReadOnlyView], protocol: type) -> None:
    """Give ``kind`` a property for each field of ``protocol`` (a method, such as
    ``EngineView.holds``, reads as the object's bound method)."""
    for field in vars(protocol):
        if not field.startswith("_"):
            setattr(kind, field, property(attrgetter(f"_of.{field}")))


_read_through(ReadOnlyJob, JobView)
_read_through(ReadOnlyEngine, EngineView)


def view(kind: type[ReadOnlyView], of: object) -> Any:
    """``of`` read-only, as a ``kind``."""
    shown = _new(kind)
    _set_viewed(shown, of)
    return shown


def read_only(value: Any) -> Any:
    """``value`` as a policy may hold it: unchangeable values as they are; a tuple as a tuple
    of read-only items; a list or deque as a :class:`ReadOnlySequence`; a set as a frozenset;
    a mapping as a :class:`ReadOnlyMapping`; a numpy array as a read-only view of it (over a
    read-only buffer: ``setflags(write=True)`` cannot undo it); any other object as a
    :class:`ReadOnlyView`."""
    if isinstance(value, (*_AS_THEY_ARE, ReadOnlyView, ReadOnlyMapping, ReadOnlySequence)):
        return value
    if isinstance(value, tuple):
        return tuple(read_only(item) for item in value)
    if isinstance(value, (list, deque)):
        return ReadOnlySequence(value)
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    if isinstance(value, Mapping):
        return ReadOnlyMapping(value)
    numpy = loaded_numpy()  # imported by whoever made the array, if anyone
    if numpy is not None and isinstance(value, numpy.generic):
        return value  # a numpy scalar: unchangeable
    if numpy is not None and isinstance(value, numpy.ndarray):
        try:
            return numpy.asarray(memoryview(value).toreadonly())
        except (TypeError, ValueError):  # a dtype with no buffer (object, datetime): a copy
            shown = value.copy()
            shown.setflags(write=False)
            return shown
    return view(ReadOnlyView, value)


def _frozen(of: object) -> bool:
    """Whether ``of`` cannot be changed through its fields: a frozen pydantic model or
    dataclass (its methods may run)."""
    config = getattr(type(of), "model_config", None)
    if isinstance(config, dict) and config.get("frozen"):
        return True
    params = getattr(type(of), "__dataclass_params__", None)  # a dataclass's
    return dataclasses.is_dataclass(of) and bool(getattr(params, "frozen", False))


def _read_only_call(method: Any):
    """A frozen object's ``method``, whose result a policy gets read-only."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return read_only(method(*args, **kwargs))

    return call


def _refused_call(what: str, name: str):
    """What a policy gets for a method of the scheduler's mutable objects: a call that says
    it may not call it."""

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AttributeError(
            f"the {what} is read-only to a policy: it may not call {name!r} (a policy reads "
            "the fields of JobView and EngineView: docs/policies.md)"
        )

    return refused
