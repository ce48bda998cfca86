"""A cancel stops the job's generation in flight at once: the core emits an AbortGeneration
per group decoding, the group's completion comes back at the cancel time, its room is free
for the other jobs then, and the job ends then (not when its groups would have finished)."""

from __future__ import annotations

from marlaas.core.work import AbortGeneration, EnvStep, Generate
from marlaas.core.workload import parse_workload
from marlaas.drive import FixedExecutor
from tests.core.fixed_driver import run_fixed

GENERATE_S = 100.0
"""How long a group's turn takes here [s]: far longer than the time of the cancel."""


def one_engine(jobs: int = 2, cancel_after_s: float | None = None):
    """``jobs`` jobs on one engine that holds two groups of 4 sequences;
    j0 is cancelled ``cancel_after_s`` [s] after its arrival (0), if given."""
    job_list = [
        {"name": f"j{i}", "tenant": f"t{i}",
         "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 64,
                "max_staleness": 0},
         "prompt_tokens": {"dist": "constant", "value": 16}}
        for i in range(jobs)
    ]  # fmt: skip
    job_list[0]["cancel_after_s"] = cancel_after_s
    cluster = {
        "pools": [
            {"name": "rollout", "role": "inference", "devices": 1},
            {"name": "train", "role": "training", "devices": 1},
        ],
        "engine": {"max_seqs": 8},
    }
    return parse_workload({"jobs": job_list, "cluster": cluster})


def run_with_cancel(at_s: float):
    """The two jobs, fifo, with j0 cancelled at ``at_s`` [s]: (run, decisions started)."""
    work = one_engine(cancel_after_s=at_s)
    started: list[tuple[float, object]] = []
    executor = FixedExecutor({Generate: GENERATE_S})
    run = run_fixed(work, "fifo", executor=executor,
                    on_decision=lambda d, now, s: started.append((now, d)))  # fmt: skip
    return run, started


def test_a_cancelled_jobs_groups_in_flight_are_aborted_and_it_ends_at_the_cancel():
    run, started = run_with_cancel(10.0)
    generates = {d.work_id: d for _, d in started if isinstance(d, Generate) and d.job == "j0"}
    in_flight = list(generates)  # every j0 group started before 10 s, and runs at 10 s
    assert in_flight
    aborts = [(now, d) for now, d in started if isinstance(d, AbortGeneration)]
    assert [d.generate for _, d in aborts] == in_flight  # one each, in the order they started
    assert all(now == 10.0 and d.job == "j0" for now, d in aborts)
    assert all(d.engine == generates[d.generate].engine for _, d in aborts)
    outcome = run.result.jobs["j0"]
    assert outcome.state == "cancelled"
    assert outcome.end_s == 10.0  # the cancel time, not when its groups would have ended
    mine = [r for r in run.records if r.job == "j0" and r.kind == "generate"]
    assert len(mine) == len(in_flight)
    assert all(r.end_s == 10.0 and r.outcome == "cancelled" for r in mine)
    assert all(r.tokens == 0 for r in mine)  # as every executor: no aborted tokens return
    assert run.result.jobs["j1"].state == "finished"


def test_the_room_an_aborted_group_held_goes_to_the_next_job_at_the_cancel():
    _, started = run_with_cancel(10.0)
    j1 = [now for now, d in started if d.job == "j1" and isinstance(d, Generate)]
    assert j1[:2] == [0.5, 10.0]  # the engine was full until j0's group stopped at 10 s


def test_an_environment_step_in_flight_at_a_cancel_still_finishes():
    """Only generation is stopped: the job ends when its environment step comes back."""
    at = 0.5 + 3.0 + 0.5  # load, a turn, half the environment step (FixedExecutor defaults)
    work = one_engine(jobs=1, cancel_after_s=at)
    started: list = []
    run = run_fixed(work, "fifo",
                    on_decision=lambda d, now, s: started.append((now, d)))  # fmt: skip
    assert not [d for _, d in started if isinstance(d, AbortGeneration)]
    env = [now for now, d in started if isinstance(d, EnvStep)]
    assert env and max(env) < at
    assert run.result.jobs["j0"].end_s == max(env) + 1.0  # its environment step's end
