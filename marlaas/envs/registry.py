"""Environments by name, or a user's class by import path "pkg.module:Class"."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from marlaas.envs.base import Environment

_REGISTRY: dict[str, type[Environment]] = {}


class EnvLoadError(ValueError):
    """An environment name or import path that cannot be turned into an Environment class."""


def register_env(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: register an Environment subclass under `name`."""

    def deco(cls: type[Environment]) -> type[Environment]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"environment {name!r} is already registered")
        _REGISTRY[name] = cls
        return cls

    return deco


def env_names() -> list[str]:
    """Names of the registered environments."""
    _load_builtins()
    return sorted(_REGISTRY)


def resolve_env(spec: str) -> type[Environment]:
    """The Environment class for a registered name or an import path "pkg.module:Class"."""
    _load_builtins()
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if ":" not in spec:
        raise EnvLoadError(
            f"unknown environment {spec!r}: use one of {sorted(_REGISTRY)} "
            f"or an import path 'pkg.module:Class'"
        )
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvLoadError(
            f"environment {spec!r}: cannot import module {module_name!r} ({exc})"
        ) from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise EnvLoadError(f"environment {spec!r}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise EnvLoadError(
            f"environment {spec!r}: {attr!r} is not a subclass of marlaas.envs.Environment"
        )
    return cls


def make_env(spec: str, args: dict[str, Any] | None = None) -> Environment:
    """A new environment instance for `spec` (name or "pkg.module:Class") with options `args`."""
    return resolve_env(spec)(args)


def _load_builtins() -> None:
    # Imported for their @register_env side effect.
    from marlaas.envs import arithmetic, calculator, python_exec, target_char  # noqa: F401
