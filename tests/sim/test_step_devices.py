"""A training step of a trainer of several devices, in the simulator: divided over as many
devices as the real trainer has replicas (marlaas.executors.data_parallel, one per distinct
torch device): each of its devices where they are GPUs of their own, one where the cluster
declares them one shared processor."""

from __future__ import annotations

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import parse_workload
from marlaas.eventlog import records_to_frame
from marlaas.executors.devices import physical_devices, trainer_devices
from marlaas.sim.cost_model import CostModel
from marlaas.sim.run import simulate


def workload(per_trainer: int, shared: bool):
    return parse_workload({
        "jobs": [{"name": "a", "tenant": "t", "rl": {"steps": 2}}],
        "cluster": {"pools": [
            {"name": "rollout", "role": "inference", "devices": 1},
            {"name": "train", "role": "training", "devices": per_trainer,
             "devices_per_trainer": per_trainer},
        ], "shared_compute": shared},
    })  # fmt: skip


def step_divisor(w) -> float:
    """The devices the simulator divided each training step's compute by (from its
    event log, one row per device of the trainer)."""
    cost, job = CostModel(), w.jobs[0]
    events = records_to_frame(simulate(w, cost=cost).records)
    steps = events[events["kind"] == "train"].drop_duplicates("step")
    compute = steps["tokens"] * (1 + job.lora_rank / cost.train_rank_scale)
    per_device = (steps["end_s"] - steps["start_s"] - cost.train_overhead_s) * (
        cost.train_tokens_per_s
    )
    divisors = (compute / per_device).round(6).unique().tolist()
    assert len(divisors) == 1
    return divisors[0]


@pytest.mark.parametrize(
    ("per_trainer", "shared", "divisor"), [(1, False, 1), (2, False, 2), (4, False, 4),
                                           (2, True, 1), (4, True, 1)]
)  # fmt: skip
def test_a_step_is_divided_by_the_real_trainers_replicas(per_trainer, shared, divisor):
    w = workload(per_trainer, shared)
    assert step_divisor(w) == divisor
    cluster = Scheduler.for_workload(w).cluster
    (trainer,) = cluster.trainers
    assert cluster.step_devices(trainer) == divisor
    # the real world on a machine with a GPU per device: one replica per distinct device
    on_gpus = physical_devices(cluster, gpus=len(cluster.devices))
    assert len(trainer_devices(trainer, on_gpus)) == divisor


def test_a_step_of_several_minibatches_pays_the_forward_pass_of_the_later_ones():
    """A job of ``rl.minibatches`` = 4 computes its step's starting log-probs for 3/4 of its
    samples first (marlaas.executors.peft_trainer): train_forward_share x 3/4 more compute per
    token than one minibatch where the step is stale; a step of staleness 0 has them from
    sampling and pays nothing more, unless the engines sample in bfloat16
    (cluster.engine.dtype). The same tokens, the same fixed overhead."""
    cost = CostModel()

    def per_token(minibatches: int, dtype: str = "auto"):
        rl = {"steps": 6, "minibatches": minibatches, "max_staleness": 2}
        w = parse_workload({"jobs": [{"name": "a", "tenant": "t", "rl": rl}],
                            "cluster": {"engine": {"dtype": dtype}}})  # fmt: skip
        events = records_to_frame(simulate(w, cost=cost).records)
        steps = events[events["kind"] == "train"].drop_duplicates("step")
        compute = steps["end_s"] - steps["start_s"] - cost.train_overhead_s
        return steps["tokens"].tolist(), (compute / steps["tokens"]).tolist(), steps["staleness"]

    (tokens, one, _), (same_tokens, four, staleness) = per_token(1), per_token(4)
    assert tokens == same_tokens
    assert set(staleness) >= {0, 1}  # both kinds of step
    for a, b, stale in zip(one, four, staleness > 0, strict=True):
        assert b / a == pytest.approx(1 + cost.train_forward_share * 3 / 4 if stale else 1.0)
    # engines sampling in bfloat16: the trainer makes the pass at staleness 0 too
    (bf16_tokens, bf16, _) = per_token(4, "bfloat16")
    assert bf16_tokens == tokens
    for a, b in zip(one, bf16, strict=True):
        assert b / a == pytest.approx(1 + cost.train_forward_share * 3 / 4)
