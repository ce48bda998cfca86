"""Real prompts against the lengths a workload declares.

A workload declares each job's prompt lengths (``prompt_tokens``: what the simulator samples,
and what the scheduler reserves engine memory for in a real run too, marlaas.core.prompts);
a real run's prompts are what its environment writes, tokenized. Where they are longer, the
scheduler reserved too little and the engines' KV caches were sized too small
(marlaas.executors.backends.engine_kv_tokens), so an engine held back requests in its own
queue (engine_steps.csv's ``waiting``) that the simulator runs at once. Measured on
traces/twin/show-c.yaml (declared 40-80 tokens, real 61-160): 190 of 849 steps of a `fair` run
held 9.8 requests back; declared as produced, 100 of 727, and the twin's held-out replays of
that workload went from 7 to 10 of 12 within 10% (docs/twin-log.md).
"""

from __future__ import annotations

import pandas as pd

from marlaas.core.job_spec import JobSpec
from marlaas.core.prompts import prompt_cap


def longer_prompts(events: pd.DataFrame, jobs: list[JobSpec]) -> list[str]:
    """One line for each job whose groups' first prompts in ``events`` (an event log's
    generate rows) were longer than the job declares (``prompt_cap``)."""
    first = events[(events["kind"] == "generate") & (events["turn"] == 0)]
    out = []
    for job in jobs:
        longest = int(first.loc[first["job"] == job.name, "prompt_tokens"].max(skipna=True) or 0)
        declared = prompt_cap(job)
        if longest > declared:
            out.append(f"job {job.name}: its prompts reached {longest} tokens where the "
                       f"workload declares at most {declared} (prompt_tokens): the scheduler "
                       "reserved, and the engines' KV caches were sized, for the declared "
                       "lengths, and an engine may have queued requests that the simulator "
                       "runs at once; declare the lengths its environment produces")  # fmt: skip
    return out
