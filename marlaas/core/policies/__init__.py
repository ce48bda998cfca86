"""Scheduling policies, one file each, registered by name."""

from marlaas.core.policies import (
    affinity,
    bottleneck,
    cp_srpt,
    fair,
    fifo,
    horizon,
    las_srpt,
    priority,
    round_robin,
    split_progress,
    srtf,
    themis,
)
from marlaas.core.policies.base import (
    EngineView,
    JobView,
    Policy,
    UnknownPolicyError,
    get_policy,
    policy_names,
    register,
)

__all__ = [
    "EngineView",
    "JobView",
    "Policy",
    "UnknownPolicyError",
    "affinity",
    "bottleneck",
    "cp_srpt",
    "fair",
    "fifo",
    "get_policy",
    "horizon",
    "las_srpt",
    "policy_names",
    "priority",
    "register",
    "round_robin",
    "split_progress",
    "srtf",
    "themis",
]
