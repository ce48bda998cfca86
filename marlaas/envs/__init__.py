"""Environments: an async `Environment` interface, a registry by name, and built-in tasks."""

from marlaas.envs.base import Environment, StepResult
from marlaas.envs.registry import (
    EnvLoadError,
    check_env,
    env_names,
    make_env,
    register_env,
    resolve_env,
)

__all__ = [
    "EnvLoadError",
    "Environment",
    "StepResult",
    "check_env",
    "env_names",
    "make_env",
    "register_env",
    "resolve_env",
]
