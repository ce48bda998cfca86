"""rl.resample_alike in a real run: the executor says which groups' rewards were all alike,
the core drops them while their step has resamples left, the trainer never sees them, and
rewards.csv and the event log say how many; a replay of the run drops the same groups."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.episodes import GroupEpisode, Sample
from marlaas.executors.train import train_run
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate_run
from marlaas.workload_file import load_workload
from tests.sim.test_alike_draws import dropped_groups

TRACE = Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml"


def episode(*rewards: float) -> GroupEpisode:
    return GroupEpisode("j", 0, 0, [Sample(env=None, context=[], reward=r) for r in rewards])


def test_a_group_is_alike_when_every_sample_earned_the_same_reward():
    assert episode(0.2, 0.2, 0.2).all_alike
    assert episode(0.1 + 0.2, 0.3).all_alike  # a float's rounding is not a difference
    assert not episode(0.0, 0.0, 1.0).all_alike
    assert not episode(1.0, 1.2).all_alike


def test_a_real_run_drops_and_resamples_the_groups_that_teach_nothing(tiny_model_dir, tmp_path):
    # the tiny random model never adds two numbers: every group's rewards are all 0
    workload = load_workload(TRACE, {
        "base_model.path": str(tiny_model_dir), "jobs": [{
            "name": "add", "tenant": "alice",
            "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 3, "max_new_tokens": 4,
                   "max_staleness": 1, "resample_alike": 2},
            "prompt_tokens": {"dist": "constant", "value": 24},
            "env": {"name": "arithmetic"},
        }],
    })  # fmt: skip
    events, _, rewards, _ = train_run(workload, tmp_path / "run", backend="hf", progress=False)
    env = events[(events.kind == "env") & (events.outcome != "failed")]
    assert env.reward.eq(0).all()
    dropped = env[env.outcome == "resampled"]
    assert len(dropped) == 2 * 2  # each step dropped its 2 resamples' worth, then kept
    assert rewards["dropped_groups"].tolist() == [2, 2]
    trained = events[(events.kind == "train") & (events.outcome == "ok")]
    assert trained.drop_duplicates("step").seqs.tolist() == [2 * 3, 2 * 3]
    recording = Recording.from_events(events)
    replayed, _ = simulate_run(workload, recording=recording)
    assert dropped_groups(replayed) == dropped_groups(events) == set(recording.resampled)
