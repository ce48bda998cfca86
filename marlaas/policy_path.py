"""Policies of your own by import path, ``--policy mypkg.policies:MyPolicy``, as environments
are (marlaas.envs.registry): the class is imported, checked and registered under its path,
so that everything that takes a policy name (workload files, ``simulate``, ``sweep``,
``train``, :func:`marlaas.simulate`) takes the path too.

Checked on load, each failure one line naming the path: the module imports, the attribute is a
subclass of :class:`~marlaas.core.policies.Policy` that overrides ``key``, it can be made with no
arguments, and its ``key`` (and ``engine_key`` when overridden) of a probe job returns a tuple; a
key that reads the backlog's figures (``backlog_s``, ``backlog_end_s``, ``longest_alone_s``,
``longest_alone_jobs``, ``runner_up_late_s``) without ``reads_backlog = True`` is refused, since
its keys would go stale as the backlog moves (seen only where the probe job's key reads
them). The core itself never imports anything by path (it stays pure).
"""

from __future__ import annotations

import re

from marlaas.core.cluster import Cluster
from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy
from marlaas.core.policies.base import add_policy, is_registered
from marlaas.core.scheduling import SchedulingSpec
from marlaas.import_path import import_subclass, one_line

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
"""What a policy import path looks like ("pkg.module:Class"); anything else is a name."""


BACKLOG_FIELDS = (
    "backlog_s",
    "backlog_end_s",
    "longest_alone_s",
    "longest_alone_jobs",
    "runner_up_late_s",
)
"""The JobView figures the scheduler re-keys on only for a policy with ``reads_backlog``."""


class PolicyLoadError(ValueError):
    """A policy import path that cannot be turned into a working Policy."""


class _ReadFields:
    """A probe job that remembers which of its fields were read."""

    def __init__(self, job: JobState) -> None:
        self._job = job
        self.fields_read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        self.fields_read.add(name)
        return getattr(self._job, name)


def load_policy(spec: str) -> str:
    """Make ``spec`` usable as a policy name: a registered name is returned as it is; an
    import path "pkg.module:Class" is imported, checked and registered under that path
    (once). Raises PolicyLoadError naming what is wrong."""
    if is_registered(spec) or not IMPORT_PATH.fullmatch(spec):
        return spec  # a name: get_policy reports an unknown one
    cls = import_subclass(
        spec, Policy, "marlaas.core.policies.Policy", f"policy {spec!r}", PolicyLoadError
    )
    if cls.key is Policy.key:
        raise PolicyLoadError(f"policy {spec!r}: {cls.__name__} does not define key(self, job)")
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
        raise PolicyLoadError(f"policy {spec!r}: making it failed ({one_line(exc)})") from exc
    job = JobState(JobSpec(name="probe", tenant="probe"), 0, 1)
    keyed = _ReadFields(job)  # what key reads (placement reads the live job: nothing stale)
    cluster = Cluster.build(ClusterSpec(), SchedulingSpec().resolve())
    checks = [("key", lambda: policy.key(keyed))]
    if cls.ranks_engines and cluster.engines:
        engine = cluster.engines[0]
        checks.append(("engine_key", lambda: policy.engine_key(job, engine, 0)))
        checks.append(("open_share", lambda: policy.open_share(job, 0)))
    for what, call in checks:
        try:
            value = call()
        except Exception as exc:
            raise PolicyLoadError(
                f"policy {spec!r}: {what} of a probe job failed ({one_line(exc)})"
            ) from exc
        if what == "open_share":
            share = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not share or not 0 <= value <= 1:
                raise PolicyLoadError(
                    f"policy {spec!r}: open_share returned {value!r}, not a share from 0 to 1"
                )
            continue
        if not isinstance(value, tuple) and not (what == "engine_key" and value is None):
            raise PolicyLoadError(
                f"policy {spec!r}: {what} returned {type(value).__name__}, not a tuple"
            )
    unsaid = sorted(keyed.fields_read.intersection(BACKLOG_FIELDS))
    if unsaid and not policy.reads_backlog:
        raise PolicyLoadError(
            f"policy {spec!r}: key reads {', '.join(unsaid)} but {cls.__name__} does not set "
            "reads_backlog = True (its keys would go stale as the backlog moves)"
        )
