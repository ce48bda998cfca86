"""Human names and explanations of what reports show: summary metrics (with units and how to
format them), idle causes and kinds of work (see :mod:`marlaas.eventlog`).
"""

from __future__ import annotations

from marlaas.report import fmt

IDLE_CAUSES: dict[str, tuple[str, str]] = {
    "rollouts": (
        "waiting for rollouts",
        "the jobs' next training step waits for its groups to finish generating, so the "
        "device has nothing to do until rollouts complete",
    ),
    "trainer": (
        "waiting for the trainer",
        "a job's batch is complete (or being trained on) and its next work waits for a "
        "training step to finish",
    ),
    "environment": (
        "waiting for environments",
        "the groups of the jobs are in environment steps (tool calls, code execution, "
        "verifiers) and generation resumes when they return",
    ),
    "weight_sync": (
        "weight sync",
        "a new adapter version is being published to the inference engines (on a trainer: "
        "it is busy syncing)",
    ),
    "adapter_load": (
        "adapter load",
        "the device is loading a LoRA adapter version (an engine) or swapping in a job's "
        "adapter and optimizer state (a trainer)",
    ),
    "staleness": (
        "held by the staleness bound",
        "generating more would put samples more than the job's max_staleness versions "
        "behind the trainer, so generation waits for a newer version",
    ),
    "barrier": (
        "waiting at the step barrier",
        "synchronous RL: the next step starts only when every group of the current step is "
        "done (sync preset / scheduling.barrier)",
    ),
    "no_work": (
        "no work",
        "no admitted job has work for this device (before jobs arrive, after they finish, "
        "or when the policy admits fewer jobs than there are devices)",
    ),
}
"""Idle cause -> (short human name, what it means)."""

WORK_KINDS: dict[str, tuple[str, str]] = {
    "generate": ("generate", "one turn of one prompt group decoding on an inference engine"),
    "train": ("train", "one training step of one job (on every device of its trainer)"),
    "sync": ("weight sync", "publishing a new adapter version to the inference engines"),
    "adapter_load": (
        "adapter load",
        "an engine loading an adapter version, or a trainer swapping in a job",
    ),
    "env": ("environment", "one environment step of one group (no device)"),
}
"""Kind of work -> (human name, what it is)."""


def idle_name(cause: str) -> str:
    """``idle: waiting for rollouts`` for the cause ``rollouts`` (unknown causes as given)."""
    return f"idle: {IDLE_CAUSES.get(cause, (cause, ''))[0]}"


_METRICS: dict[str, tuple[str, fmt.Formatter]] = {
    "makespan_s": ("makespan [s]", fmt.number),
    "utilization": ("utilization, all {devices}s", fmt.percent),
    "jct_mean_s": ("job completion time, mean [s]", fmt.number),
    "jct_p90_s": ("job completion time, p90 [s]", fmt.number),
    "jct_max_s": ("job completion time, max [s]", fmt.number),
    "staleness_mean": ("staleness, mean [versions]", fmt.number),
    "staleness_max": ("staleness, max [versions]", fmt.count),
    "adapter_swaps": ("adapter loads", fmt.count),
    "fairness.jain_slowdown": (
        "fairness: Jain index of slowdowns, JCT / alone (1 = fair)",
        fmt.number,
    ),
    "fairness.slowdown_max": ("fairness: worst slowdown, JCT / alone", fmt.number),
    "fairness.jain_jct": ("fairness: Jain index of completion times", fmt.number),
    "fairness.jain_tenant_gpu_s": (
        "fairness: Jain index of {devices}-seconds per tenant",
        fmt.number,
    ),
    "fairness.jain_tenant_gpu_s_per_weight": (
        "fairness: Jain index of {devices}-seconds per tenant weight",
        fmt.number,
    ),
    "n_jobs": ("jobs", fmt.count),
    "n_tenants": ("tenants", fmt.count),
    "n_devices": ("{devices}s", fmt.count),
    "n_rows": ("event-log rows", fmt.count),
    "groups_dropped": ("groups dropped, their rewards all alike", fmt.count),
    "deadlines_missed": ("jobs that missed their deadline", fmt.count),
}


def metric(key: str, devices: str = "device") -> tuple[str, fmt.Formatter]:
    """Human name (with unit) and formatter of a flattened summary key, e.g.
    ``idle_by_cause_device_s.rollouts`` -> ``idle: waiting for rollouts [device-s]``.
    ``devices`` is what the run calls its devices."""
    if key in _METRICS:
        name, formatter = _METRICS[key]
        return name.format(devices=devices), formatter
    group, _, sub = key.partition(".")
    if group == "utilization_by_pool":
        return f"utilization, pool {sub}", fmt.percent
    if group == "idle_by_cause_device_s":
        return f"{idle_name(sub)} [{devices}-s]", fmt.number
    return key.replace("_", " "), fmt.number
