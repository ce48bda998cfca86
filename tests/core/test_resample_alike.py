"""rl.resample_alike (DAPO's dynamic sampling): a group whose samples all earned the same
reward is dropped while its step has resamples left, and another group takes its place."""

from __future__ import annotations

import random

import pytest

from marlaas.core import limits as L
from marlaas.core.jobs import RESAMPLED_BASE
from marlaas.core.work import EnvStep, Generate, Train
from marlaas.core.workload import parse_workload
from marlaas.drive import FixedExecutor
from marlaas.eventlog import records_to_frame
from tests.core.fixed_driver import run_fixed
from tests.core.test_scheduler import workload


def resampling(jobs=1, steps=3, resample=2, turns=1, preset=None, staleness=1):
    data = workload(jobs=jobs, steps=steps, staleness=staleness,
                    scheduling={"preset": preset}).model_dump()  # fmt: skip
    for job in data["jobs"]:
        job["rl"].update(resample_alike=resample, turns=turns)
    return parse_workload(data)


def run_alike(wl, alike, policy="fair"):
    started = []
    executor = FixedExecutor(alike=alike)
    run = run_fixed(wl, policy, executor=executor,
                    on_decision=lambda d, now, s: started.append(d))  # fmt: skip
    return run, started


def test_a_dropped_group_is_replaced_and_the_step_trains_on_its_replacement():
    # groups 0-5 are the 3 steps' own (2 a step); step s's k-th replacement is
    # RESAMPLED_BASE + s * MAX_PROMPTS_PER_STEP + k
    wl = resampling(turns=2)
    first, second = RESAMPLED_BASE, RESAMPLED_BASE + 1
    run, started = run_alike(wl, lambda step: step.group in {0, 1, first})
    trains = {d.step: d for d in started if isinstance(d, Train)}
    assert sorted(trains[0].groups) == [first, second]  # first was alike too: step 0 drew 2
    assert trains[0].dropped == (0, 1)
    assert sorted(trains[1].groups) == [2, 3] and trains[1].dropped == ()
    firsts = [d for d in started if isinstance(d, Generate) and d.turn == 0]
    assert sorted(d.group for d in firsts) == [0, 1, 2, 3, 4, 5, first, second]
    assert {d.group: d.step for d in firsts}[second] == 0
    frame = records_to_frame(run.records)
    env = frame[frame.kind == "env"]
    resampled = env[env.outcome == "resampled"]
    assert sorted(resampled.group) == [0, 1]  # the episodes' last steps only
    assert (resampled.turn == 1).all()
    assert (env[env.turn == 0].outcome == "ok").all()
    assert all(j.published == 3 for j in run.states.values())


def test_without_resample_alike_an_alike_group_trains_as_it_is():
    run, started = run_alike(resampling(resample=0), lambda step: True)
    trains = [d for d in started if isinstance(d, Train)]
    assert [sorted(d.groups) for d in trains] == [[0, 1], [2, 3], [4, 5]]
    assert all(d.dropped == () for d in trains)
    assert "resampled" not in set(records_to_frame(run.records).outcome)


@pytest.mark.parametrize(
    ("policy", "preset"), [("fair", None), ("fifo", "sequential"), ("fifo", "sync")]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_alike_groups_keep_every_bound_and_leak_nothing(policy, preset, seed):
    rng = random.Random(seed)
    wl = resampling(jobs=3, steps=4, resample=3, turns=2, preset=preset, staleness=2)
    run, started = run_alike(wl, lambda step: rng.random() < 0.6, policy)  # invariants checked
    trains = [d for d in started if isinstance(d, Train)]
    assert len(trains) == 3 * 4
    assert all(len(d.groups) == 2 and len(d.dropped) <= 3 for d in trains)
    dropped = sum(len(d.dropped) for d in trains)
    assert dropped > 0
    firsts = [d for d in started if isinstance(d, Generate) and d.turn == 0]
    assert len(firsts) == 3 * 4 * 2 + dropped  # each dropped group drew exactly one
    envs = [d for d in started if isinstance(d, EnvStep) and d.last_turn]
    assert all(d.step == run.states[d.job].step_of(d.group) for d in envs)
    for d in firsts:
        assert d.step - d.version <= run.states[d.job].max_staleness
    # the service estimate counted the drawn groups' work: nothing left at the end
    assert all(j.remaining_tokens == pytest.approx(0) for j in run.states.values())


def test_a_replacement_keeps_its_number_when_a_resumed_job_trains_longer():
    """A resumed run may ask for more steps: the groups drawn for step 0 keep their numbers
    (and prompts), and none is another step's own group."""
    numbers = []
    for steps in (3, 30):
        _, started = run_alike(resampling(steps=steps), lambda step: step.group == 0)
        numbers.append(next(d for d in started if isinstance(d, Train) and d.step == 0).groups)
        own = steps * 2  # prompts_per_step 2
        drawn = [d.group for d in started if isinstance(d, Generate) and d.group >= own]
        assert drawn == [RESAMPLED_BASE]
    assert numbers[0] == numbers[1] == (1, RESAMPLED_BASE)
    assert RESAMPLED_BASE + L.MAX_STEPS * L.MAX_PROMPTS_PER_STEP < 2**31  # an int32, a seed


def test_resampling_groups_of_one_sample_is_refused():
    data = workload(jobs=1).model_dump()
    data["jobs"][0]["rl"].update(group_size=1, resample_alike=2)
    with pytest.raises(ValueError, match=r"resample_alike \(2\) needs group_size 2 or more"):
        parse_workload(data)


def test_a_workload_too_large_with_its_resamples_is_refused():
    data = workload(jobs=1, steps=100_000).model_dump()
    data["jobs"][0]["rl"].update(prompts_per_step=10, resample_alike=20)
    with pytest.raises(ValueError, match="resample_alike"):
        parse_workload(data)
