"""The simulator's all-alike groups: drawn per group with env.alike_groups, the same in every
run of a seed, and a replay drops the groups the recorded run dropped."""

from __future__ import annotations

import dataclasses

import pandas as pd

from marlaas.core.workload import parse_workload
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate_run
from marlaas.table import print_summary
from tests.core.test_scheduler import workload


def alike_workload(chance: float, resample: int = 2, steps: int = 40):
    data = workload(jobs=2, steps=steps).model_dump()
    for job in data["jobs"]:
        job["rl"]["resample_alike"] = resample
        job["env"]["alike_groups"] = chance
    return parse_workload(data)


def last_env_rows(events: pd.DataFrame) -> pd.DataFrame:
    return events[(events.kind == "env") & events.outcome.isin(["ok", "resampled"])]


def dropped_groups(events: pd.DataFrame) -> set[tuple[str, int]]:
    rows = events[events.outcome == "resampled"]
    return set(zip(rows.job, rows.group.astype(int), strict=True))


def test_groups_are_dropped_at_about_the_declared_chance_and_the_same_every_run():
    wl = alike_workload(0.3)
    events, _ = simulate_run(wl, "fair", seed=3)
    again, _ = simulate_run(wl, "fair", seed=3)
    pd.testing.assert_frame_equal(events, again)
    env = last_env_rows(events)
    share = (env.outcome == "resampled").mean()
    # 2 jobs x 40 steps x 2 groups, each alike with chance 0.3 (dropped while its step has
    # resamples left): the dropped share is near 0.3
    assert 0.2 < share < 0.4
    other, _ = simulate_run(wl, "fair", seed=4)
    assert dropped_groups(events) != dropped_groups(other)


def test_no_chance_no_drop(capsys):
    events, summary = simulate_run(alike_workload(0.0), "fair", seed=0)
    assert "resampled" not in set(events.outcome)
    assert summary["metrics"]["groups_dropped"] == 0
    print_summary(summary)
    assert "groups dropped" not in capsys.readouterr().out


def test_the_summary_counts_and_prints_the_dropped_groups(capsys):
    events, summary = simulate_run(alike_workload(0.3, steps=10), "fair", seed=2)
    dropped = len(dropped_groups(events))
    assert dropped and summary["metrics"]["groups_dropped"] == dropped
    print_summary(summary)
    line = next(x for x in capsys.readouterr().out.splitlines() if "groups dropped" in x)
    assert line.split()[-1] == str(dropped)


def test_a_replay_drops_the_groups_the_recorded_run_dropped():
    recorded, _ = simulate_run(alike_workload(0.4, steps=10), "fifo", seed=1)
    recording = Recording.from_events(recorded)
    assert recording.resampled  # the run dropped some groups
    # replayed with no chance of its own: the recording alone says which groups drop
    replayed, _ = simulate_run(alike_workload(0.0, steps=10), "fair", seed=1,
                               recording=recording)  # fmt: skip
    assert dropped_groups(replayed) == set(recording.resampled)
    empty = dataclasses.replace(recording, resampled=frozenset())
    plain, _ = simulate_run(alike_workload(0.4, steps=10), "fair", seed=1, recording=empty)
    assert "resampled" not in set(plain.outcome)
