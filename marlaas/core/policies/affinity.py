"""Adapter affinity: fair share across jobs, and a job's groups kept where its adapter is.

S-LoRA (Sheng et al., MLSys 2024) and Punica (Chen et al., MLSys 2024) batch many adapters
on one engine and pay for every adapter load; serving a job's groups on the engines that
already hold its adapter, and loading its next version where the last one lives (its home),
keeps loads per group low as jobs outnumber adapter slots. Among the engines the mechanism
allows, those that hold the group's adapter version come first (the mechanism's rule); then
this policy prefers the job's home engines, and among equals the fullest one that fits, so
that a job's groups pack onto few engines and the rest stay open for other adapters.
"""

from marlaas.core.policies.base import EngineView, JobView, Policy, register

PROMPTS_PER_HOME = 8
"""A job may spread its adapter over one engine per 8 prompts of a step (assumption: a step's
groups then queue a few deep on each, and a new version is loaded once per home)."""


@register
class AdapterAffinity(Policy):
    """Weighted least attained service; groups packed onto engines holding the adapter."""

    name = "affinity"
    idea = "fair order; a job's groups packed onto the engines that hold its adapter"
    source = "S-LoRA (Sheng et al., MLSys 2024), Punica (Chen et al., MLSys 2024)"

    def key(self, job: JobView) -> tuple:
        return (job.attained_tokens / job.weight, job.arrival_s, job.index)

    def engine_key(self, job: JobView, engine: EngineView, homes: int) -> tuple | None:
        if engine.holds(job.name):
            return (0, -engine.seqs, engine.index)
        if engine.seqs and homes >= max(1, job.prompts_per_step // PROMPTS_PER_HOME):
            return None  # enough homes, and this engine is in use: wait for room at home
        return (1, engine.seqs, engine.index)
