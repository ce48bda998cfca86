"""Environments by name, or a user's class by import path "pkg.module:Class".

The built-in environments are found by import path (their modules do not import this one);
``register_env`` adds a name for a class of your own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marlaas.envs.base import Environment
from marlaas.import_path import import_subclass, one_line, shown

BUILTINS: dict[str, str] = {
    "arithmetic": "marlaas.envs.arithmetic:ArithmeticEnv",
    "calculator": "marlaas.envs.calculator:CalculatorEnv",
    "exact_match": "marlaas.envs.answer:ExactMatchEnv",
    "math": "marlaas.envs.math_answer:MathEnv",
    "python_exec": "marlaas.envs.python_exec:PythonExecEnv",
    "reasoning_gym": "marlaas.envs.gym_tasks:ReasoningGymEnv",
    "regex": "marlaas.envs.answer:RegexEnv",
    "target_char": "marlaas.envs.target_char:TargetCharEnv",
}
"""Built-in environment names -> their classes' import paths."""

_REGISTRY: dict[str, type[Environment]] = {}


class EnvLoadError(ValueError):
    """An environment name or import path that cannot be turned into an Environment class."""


def register_env(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: register an Environment subclass under `name`."""

    def deco(cls: type[Environment]) -> type[Environment]:
        if name in BUILTINS or (name in _REGISTRY and _REGISTRY[name] is not cls):
            raise ValueError(f"environment {name!r} is already registered")
        _REGISTRY[name] = cls
        return cls

    return deco


def env_names() -> list[str]:
    """Names of the built-in and registered environments."""
    return sorted({*BUILTINS, *_REGISTRY})


def resolve_env(spec: str) -> type[Environment]:
    """The Environment class for a registered name or an import path "pkg.module:Class"."""
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if spec in BUILTINS:
        return _import(BUILTINS[spec])
    if ":" not in spec:
        raise EnvLoadError(
            f"unknown environment {spec!r}: use one of {env_names()} "
            f"or an import path 'pkg.module:Class'"
        )
    return _import(spec)


def make_env(spec: str, args: dict[str, Any] | None = None) -> Environment:
    """A new environment instance for `spec` (name or "pkg.module:Class") with options `args`."""
    return resolve_env(spec)(args)


def check_env(spec: str, args: dict[str, Any] | None = None) -> None:
    """Raise EnvLoadError or ValueError when `spec` does not resolve or `args` are rejected
    (an option the class does not declare in ``options``, or a value of the wrong kind)."""
    cls = resolve_env(spec)
    declared = getattr(cls, "options", None)
    if declared is not None and not _names(declared):
        raise EnvLoadError(
            f"{spec}: its options is {type(declared).__name__} {shown(declared, 80)}, not a "
            "tuple of option names (one name is ('name',): a tuple needs its comma)"
        )
    unknown = sorted(set(args or {}) - set(declared)) if declared is not None else []
    if unknown:
        raise EnvLoadError(
            f"{spec}: unknown option(s) {unknown}; it takes {sorted(declared) or 'none'}"
        )
    try:
        cls(args)
    except (EnvLoadError, ValueError, TypeError):
        raise
    except Exception as exc:  # a user's class: whatever it raises is one line
        raise EnvLoadError(f"{spec}: making it failed ({one_line(exc)})") from exc


def _names(declared: object) -> bool:
    """Whether an environment's ``options`` is a tuple (list, set) of names: a string is not
    (``options = ("target")``, the comma forgotten, took the option names 't', 'a', 'r', ...
    and refused 'target' as unknown)."""
    return isinstance(declared, tuple | list | set | frozenset) and all(
        isinstance(name, str) for name in declared
    )


def _import(path: str) -> type[Environment]:
    return import_subclass(
        path, Environment, "marlaas.envs.Environment", f"environment {path!r}", EnvLoadError
    )
