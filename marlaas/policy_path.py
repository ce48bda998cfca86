"""Policies of your own by import path, ``--policy mypkg.policies:MyPolicy``, as environments
are (marlaas.envs.registry): the class is imported, checked and registered under its path,
so that everything that takes a policy name (workload files, ``simulate``, ``sweep``,
``train``, :func:`marlaas.simulate`) takes the path too.

Checked on load, each failure one line naming the path: the module imports, the attribute
is a subclass of :class:`~marlaas.core.policies.Policy` that overrides ``key``, it can be
made with no arguments, and its ``key`` (and ``engine_key`` when overridden) of a probe job
returns a tuple. The core itself never imports anything by path (it stays pure).
"""

from __future__ import annotations

import importlib

from marlaas.core.cluster import Cluster
from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy
from marlaas.core.policies.base import add_policy, is_registered
from marlaas.core.scheduling import SchedulingSpec
from marlaas.core.workload import ClusterSpec, JobSpec


class PolicyLoadError(ValueError):
    """A policy import path that cannot be turned into a working Policy."""


def load_policy(spec: str) -> str:
    """Make ``spec`` usable as a policy name: a registered name is returned as it is; an
    import path "pkg.module:Class" is imported, checked and registered under that path
    (once). Raises PolicyLoadError naming what is wrong."""
    if is_registered(spec) or ":" not in spec:
        return spec  # a name: get_policy reports an unknown one
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyLoadError(
            f"policy {spec!r}: cannot import module {module_name!r} ({exc})"
        ) from exc
    except Exception as exc:  # a user's module that fails as it is imported
        raise PolicyLoadError(f"policy {spec!r}: importing module {module_name!r} failed "
                              f"({_one_line(exc)})") from exc  # fmt: skip
    cls = getattr(module, attr, None)
    if cls is None:
        raise PolicyLoadError(f"policy {spec!r}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PolicyLoadError(f"policy {spec!r}: {attr!r} is not a subclass of "
                              "marlaas.core.policies.Policy")  # fmt: skip
    if cls.key is Policy.key:
        raise PolicyLoadError(f"policy {spec!r}: {attr} does not define key(self, job)")
    _probe(spec, cls)
    if not cls.name:
        cls.name = spec  # what run summaries and tables call it
    add_policy(spec, cls)
    return spec


def _probe(spec: str, cls: type[Policy]) -> None:
    """Make the policy and ask it for a probe job's key (and an engine's, if it ranks them)."""
    try:
        policy = cls()
    except Exception as exc:
        raise PolicyLoadError(f"policy {spec!r}: making it failed ({_one_line(exc)})") from exc
    job = JobState(JobSpec(name="probe", tenant="probe"), 0, 1)
    cluster = Cluster.build(ClusterSpec(), SchedulingSpec().resolve())
    checks = [("key", lambda: policy.key(job))]
    if cls.ranks_engines and cluster.engines:
        engine = cluster.engines[0]
        checks.append(("engine_key", lambda: policy.engine_key(job, engine, 0)))
    for what, call in checks:
        try:
            value = call()
        except Exception as exc:
            raise PolicyLoadError(
                f"policy {spec!r}: {what} of a probe job failed ({_one_line(exc)})"
            ) from exc
        if not isinstance(value, tuple) and not (what == "engine_key" and value is None):
            raise PolicyLoadError(
                f"policy {spec!r}: {what} returned {type(value).__name__}, not a tuple"
            )


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
