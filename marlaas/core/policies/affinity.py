"""Adapter affinity: fair share across jobs, and a job's groups kept where its adapter is.

S-LoRA (Sheng et al., MLSys 2024) and Punica (Chen et al., MLSys 2024) batch many adapters
on one engine and pay for every adapter load; serving a job's groups on the engines that
already hold its adapter, and loading its next version where the last one lives (its home),
keeps loads per group low as jobs outnumber adapter slots.

The rule. Jobs go in fair order (least attained tokens per unit of weight). Among the engines
the mechanism allows, those that hold the group's adapter version come first (the
mechanism's rule); then the job's homes, the **emptiest** first (fewest KV tokens reserved:
its groups spread over its homes, each decodes beside less context); then any other engine,
the emptiest first. A job keeps its groups off an engine that is not its home only while it
has enough homes (:func:`home_target`) *and* that engine has more of its KV room (or of its
sequences) reserved than free: a half-empty engine is always taken, so room is not left idle
while groups wait (:meth:`AdapterAffinity.open_share`: the mechanism searches for one).

The constants were chosen (before common random numbers, 7c527cf: docs/policies.md has the
kept rule measured again) by a sweep on the 128-job cycled workload (paper-32's jobs cycled,
192 + 64 GPUs, 20 steps; simulated, h100-7b profile, seed 0; ``benchmarks/cycled_workload.py``,
``marlaas sweep ... --policies``) with scratch copies of this class: fair's makespan is 3,010 s
at 0.745 loads per group. Packing onto the fullest home and refusing any engine in use once
the job had one home per 8 prompts (the previous rule): 3,102 s, 0.092 loads. Emptiest home
first, one home per 5 prompts or per 6 group turns of a step (whichever is more), a
half-empty engine always taken: 2,965 s, 0.191 loads (seeds 1-4: 2,951-2,978 s against
fair's 3,007-3,077 s, 0.183-0.194 loads). Per 6 group turns alone (one home per 6
prompts for one-turn jobs): 2,953 s, 0.169 loads, but 2,508 s on paper-32 (fair 2,429 s):
code jobs, whose groups reserve the most KV, wait at home and end last. Per 4 prompts or per
6 group turns: 2,996 s, 0.222 loads. A home per 3 prompts, turns ignored: 3,060 s, 0.168
loads (multi-turn tool jobs place each group once per turn and wait at home each time).
Refusing above a third of the KV reserved (instead of a half): 2,992 s, 0.164 loads (per 6
group turns); above two thirds: 3,017 s, 0.444 loads. Never refusing: 3,016 s, 0.747 loads.

A group whose adapter version is still loading on an engine where it fits waits for that
load (``EngineChoice.by_policy``) when that engine ranks best among those that need a load
and no open engine the policy takes has room: on the 128-job workload 0.183-0.188 loads per
group on seeds 0-4 (loading it again elsewhere: 0.181-0.202), makespan 0.975-0.993x fair's;
on `small` (seeds 0-4) 242, 256, 240, 227 and 271 s against never waiting's 240, 255, 239,
226 and 272 s (docs/policies.md, "Affinity and an adapter load in progress").
"""

from marlaas.core.policies.base import EngineView, JobView, Policy, register

PROMPTS_PER_HOME = 5
"""A job may hold its adapter on one engine per 5 prompts of a step ..."""
GROUP_TURNS_PER_HOME = 6
"""... or per 6 group turns of a step (prompts x turns), whichever is more: a multi-turn
job places each group once per turn, and an adapter load then serves its turns (the module
docstring has the sweep that chose both)."""


def home_target(job: JobView) -> int:
    """How many engines may hold the job's adapter before it waits for room at home."""
    prompts = job.prompts_per_step
    return max(1, prompts // PROMPTS_PER_HOME, prompts * job.turns // GROUP_TURNS_PER_HOME)


@register
class AdapterAffinity(Policy):
    """Weighted least attained service; groups spread over the engines holding the adapter."""

    name = "affinity"
    idea = (
        "fair order; groups on the emptiest engine holding the job's adapter, another "
        "only while it has few or that one is half empty"
    )
    source = "S-LoRA (Sheng et al., MLSys 2024), Punica (Chen et al., MLSys 2024)"

    def key(self, job: JobView) -> tuple:
        return (job.attained_tokens / job.weight, job.arrival_s, job.index)

    def engine_key(self, job: JobView, engine: EngineView, homes: int) -> tuple | None:
        return (0 if engine.holds(job.name) else 1, engine.tokens, engine.index)

    def open_share(self, job: JobView, homes: int) -> float:
        return 0.5 if homes >= home_target(job) else 0.0  # enough homes: a half-empty engine
