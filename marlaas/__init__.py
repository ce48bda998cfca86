"""MARLaaS: multi-tenant asynchronous RL as a service (see README.md).

The Python API (docs/python-api.md, marlaas.api): :func:`load_workload`, :func:`simulate`,
:func:`train`, :func:`report` and :class:`RunResult`. Each is imported on first use
(PEP 562), so ``import marlaas`` loads nothing else and changes nothing: which build of the
simulator's hot path runs is decided when it is first imported (marlaas.compiled).
"""

from importlib import import_module as _import_module

_EXPORTS = {
    "load_workload": "marlaas.api",
    "simulate": "marlaas.api",
    "train": "marlaas.api",
    "RunResult": "marlaas.drive.result",
}
"""Name -> the module that defines it. ``report`` is the package marlaas.report, which is
callable: ``marlaas.report(runs, out)`` is :func:`marlaas.api.report` (a package of that
name is an attribute of this one as soon as it is imported, so the name is the package's)."""
__all__ = sorted([*_EXPORTS, "report"])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(_import_module(_EXPORTS[name]), name)
    if name == "report":
        return _import_module("marlaas.report")
    raise AttributeError(f"module 'marlaas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
