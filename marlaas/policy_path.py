"""Policies of your own by import path, ``--policy mypkg.policies:MyPolicy``, as environments
are (marlaas.envs.registry): the class is imported, checked and registered under its path,
so that everything that takes a policy name (workload files, ``simulate``, ``sweep``,
``train``, :func:`marlaas.simulate`) takes the path too.

Checked on load, each failure one line naming the path: the module imports, the attribute is a
subclass of :class:`~marlaas.core.policies.Policy` that overrides ``key``, it can be made with no
arguments, and its ``key`` (and ``engine_key`` when overridden) of a probe job returns a key; a
key that reads the backlog's figures (``backlog_s``, ``backlog_end_s``, ``longest_alone_s``,
``longest_alone_jobs``, ``runner_up_late_s``) without ``reads_backlog = True`` is refused, since
its keys would go stale as the backlog moves (seen only where the probe job's key reads
them). While a run goes on, the class registered checks what its methods raise and return
(:mod:`marlaas.policy_checks`). The core itself never imports anything by path (it stays
pure)."""

from __future__ import annotations

import re

from marlaas.core.cluster import Cluster
from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy
from marlaas.core.policies.base import add_policy, get_policy, is_registered, policy_names
from marlaas.core.scheduling import SchedulingSpec
from marlaas.import_path import import_subclass, one_line, shown
from marlaas.policy_checks import PolicyError as PolicyError  # where callers look for it
from marlaas.policy_checks import PolicyLoadError, checked

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


class _ReadFields:
    """A probe job that remembers which of its fields were read."""

    def __init__(self, job: JobState) -> None:
        self._job = job
        self.fields_read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        if name in ("_job", "fields_read"):  # unset: a copy being made (copy.copy(job))
            raise AttributeError(name)
        self.fields_read.add(name)
        return getattr(self._job, name)


def load_policy(spec: str) -> str:
    """Make ``spec`` usable as a policy name: a registered name is returned as it is; an
    import path "pkg.module:Class" is imported, checked and registered under that path
    (once), as :func:`checked` wraps it. Raises PolicyLoadError naming what is wrong: an
    empty name, or a name with ``:`` that is no import path, included."""
    if is_registered(spec):
        return spec
    if not spec.strip():
        raise PolicyLoadError(f"policy {spec!r}: an empty name; give a name or pkg.module:Class")
    if not IMPORT_PATH.fullmatch(spec):
        if ":" in spec:
            raise PolicyLoadError(
                f"unknown policy {spec[:200]!r}; choose one of: {', '.join(policy_names())} or "
                "an import path written pkg.module:Class (dotted module names, ':', a class)"
            )
        return spec  # a name: get_policy reports an unknown one
    cls = import_subclass(
        spec, Policy, "marlaas.core.policies.Policy", f"policy {spec!r}", PolicyLoadError
    )
    if cls.key is Policy.key:
        raise PolicyLoadError(f"policy {spec!r}: {cls.__name__} does not define key(self, job)")
    wrapped = checked(spec, cls)
    _check_name(spec, cls, wrapped.name)
    _probe(spec, wrapped)
    add_policy(spec, wrapped)
    _NAMED[wrapped.name] = (spec, cls)
    return spec


_NAMED: dict[str, tuple[str, type[Policy]]] = {}
"""The names loaded classes are called by (their own ``name``, else their path) -> (path,
the user's class), to refuse a second class by a name already taken."""


def _check_name(spec: str, cls: type[Policy], name: str) -> None:
    """Refuse a class whose own ``name`` is another policy's (a bundled one, or one loaded by
    another path): run summaries, tables and reports would call both by it, and ``replay``
    would simulate a run again under the policy registered by that name, not this one. The
    class registered by that name itself (``marlaas.core.policies.fair:Fair``) is fine. A name
    that is an import path other than ``spec`` is refused whether or not that path is loaded
    yet: ``replay`` would load the class there (and that class, loaded later, would be
    refused in this one's place). A name that is no string is refused (summaries and tables
    write it as one)."""
    if not isinstance(name, str):
        raise PolicyLoadError(
            f"policy {spec!r}: {cls.__name__} sets name = {shown(name)}, not a string; "
            f"choose a name, or set none (it is then called {spec!r})"
        )
    if name != spec and IMPORT_PATH.fullmatch(name):
        raise PolicyLoadError(
            f"policy {spec!r}: {cls.__name__} sets name = {name!r}, an import path: replay "
            f"would load the class there; choose a name without ':', or set none (it is then "
            f"called {spec!r})"
        )
    taken = _NAMED.get(name)
    if taken is not None and is_registered(taken[0]):  # not a test's registry, since undone
        other, known = taken
    elif name != spec and is_registered(name):
        other, known = name, type(get_policy(name))
    else:
        return
    if getattr(known, "checked_from", known) is not cls:
        whose = other if other == name else f"{other} (named {name!r})"
        raise PolicyLoadError(
            f"policy {spec!r}: {cls.__name__} sets name = {name!r}, the name of policy "
            f"{whose}; runs of the two could not be told apart: choose another name, or set "
            f"none (it is then called {spec!r})"
        )


def _probe(spec: str, cls: type[Policy]) -> None:
    """Make the policy (``cls``: as :func:`checked` wraps it, which refuses a bad value or a
    method that raises) and ask it for a probe job's key (and an engine's, if it ranks
    them); then see whether the key read the backlog's figures without saying so."""
    try:
        policy = cls()
    except (Exception, SystemExit) as exc:
        raise PolicyLoadError(f"policy {spec!r}: making it failed ({one_line(exc)})") from exc
    job = JobState(JobSpec(name="probe", tenant="probe"), 0, 1)
    keyed = _ReadFields(job)  # what key reads (placement reads the live job: nothing stale)
    policy.key(keyed)
    cluster = Cluster.build(ClusterSpec(), SchedulingSpec().resolve())
    if cls.ranks_engines and cluster.engines:
        policy.engine_key(job, cluster.engines[0], 0)
        policy.open_share(job, 0)
    unsaid = sorted(keyed.fields_read.intersection(BACKLOG_FIELDS))
    if unsaid and not policy.reads_backlog:
        raise PolicyLoadError(
            f"policy {spec!r}: key reads {', '.join(unsaid)} but {cls.__name__} does not set "
            "reads_backlog = True (its keys would go stale as the backlog moves)"
        )
