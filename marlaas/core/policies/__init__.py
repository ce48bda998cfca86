"""Scheduling policies, one file each, registered by name."""

from marlaas.core.policies import fair, fifo, priority, round_robin, srtf
from marlaas.core.policies.base import (
    JobView,
    Policy,
    UnknownPolicyError,
    get_policy,
    policy_names,
    register,
)

__all__ = [
    "JobView",
    "Policy",
    "UnknownPolicyError",
    "fair",
    "fifo",
    "get_policy",
    "policy_names",
    "priority",
    "register",
    "round_robin",
    "srtf",
]
