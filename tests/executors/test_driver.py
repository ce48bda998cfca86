"""Real runs of the scheduler core: tiny model, several tenants, HF and vLLM generation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas import metrics
from marlaas.cli import main
from marlaas.core.policies.fair import Fair
from marlaas.core.workload import load_workload
from marlaas.eventlog import read_event_log
from marlaas.executors.train import train_run
from marlaas.runs import read_summary

TRACE = Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml"
STEPS = 14


def tiny_workload(model_dir, **overrides):
    """traces/real-tiny.yaml on the session's tiny model, with overrides."""
    workload = load_workload(TRACE).with_overrides({"jobs.*.model_dir": str(model_dir)})
    return workload.with_overrides(overrides) if overrides else workload


def assert_learned(rewards: pd.DataFrame) -> None:
    """Every job's reward rises from near 0 to near 1."""
    assert rewards["job"].nunique() >= 2
    for job, group in rewards.groupby("job"):
        first, last = group["mean_reward"].iloc[0], group["mean_reward"].tail(3).mean()
        print(f"{job}: reward {first:.3f} -> {last:.3f}")
        assert first < 0.2 and last > 0.7, f"{job} did not learn: {group['mean_reward'].tolist()}"


class RecordingPolicy(Fair):
    """Fair share that counts the jobs it is asked about (one instance for both drivers)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.calls = 0

    def key(self, job):
        self.calls += 1
        self.seen.add(job.name)
        return super().key(job)


@pytest.fixture(scope="module")
def hf_run(tiny_model_dir, tmp_path_factory):
    """One `marlaas train`-equivalent run of real-tiny.yaml with HF generation."""
    out = tmp_path_factory.mktemp("real") / "hf"
    events, summary, rewards, result = train_run(
        tiny_workload(tiny_model_dir), out, backend="hf", progress=False
    )
    return out, events, summary, rewards, result


@pytest.mark.slow
def test_hf_run_each_tenant_learns_its_target(hf_run):
    out, events, summary, _rewards, _result = hf_run
    assert summary["kind"] == "real" and summary["backend"] == "hf"
    assert_learned(pd.read_csv(out / "rewards.csv"))
    assert (out / "rewards.png").stat().st_size > 0
    assert set(summary["reward_curves"]) == {"emit-a", "emit-z", "emit-e-slow"}
    last_env = events[(events["kind"] == "env") & events["reward"].notna()]
    assert len(last_env) == 3 * STEPS * 4  # one rewarded env row per group


@pytest.mark.slow
def test_real_event_log_partitions_and_reports(hf_run, tmp_path):
    out, *_ = hf_run
    events = read_event_log(out)
    metrics.check_partition(events)
    assert set(events["kind"]) >= {"generate", "env", "train", "sync", "adapter_load", "idle"}
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").stat().st_size > 0


@pytest.mark.slow
def test_resume_continues_from_saved_adapters(hf_run, tiny_model_dir, tmp_path):
    import shutil

    out = tmp_path / "resumed"
    shutil.copytree(hf_run[0], out)
    workload = tiny_workload(tiny_model_dir, **{"jobs.*.rl.steps": STEPS + 2})
    events, _summary, rewards, result = train_run(
        workload, out, backend="hf", resume=True, progress=False
    )
    assert result.offsets == dict.fromkeys(("emit-a", "emit-z", "emit-e-slow"), STEPS)
    assert sorted(rewards["step"].unique()) == [STEPS, STEPS + 1]
    assert rewards["mean_reward"].min() > 0.7  # the resumed adapters already know their target
    train = events[events["kind"] == "train"]
    assert sorted(train["version"].unique()) == [STEPS + 1, STEPS + 2]
    from marlaas.executors.adapter_store import AdapterStore

    store = AdapterStore(out / "adapters")
    assert all(store.latest(j) == STEPS + 2 for j in ("emit-a", "emit-z", "emit-e-slow"))


@pytest.mark.slow
def test_tenant_isolation(hf_run, tiny_model_dir):
    """Training one tenant never moves another's log-probs, and batching tenants together
    never changes a tenant's generations."""
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.hf_generator import HFGenerator
    from marlaas.executors.peft_trainer import PeftTrainer
    from marlaas.executors.rollout import TrainSample

    store = AdapterStore(hf_run[0] / "adapters")
    trainer = PeftTrainer(tiny_model_dir, lr=2e-2)
    for job in ("emit-a", "emit-z"):
        trainer.add_job(job, 8, 16, init_dir=store.latest_path(job))
    prompt, completion = [[10, 20, 30, 40]], [[97, 97, 122, 101]]
    before = trainer.logprobs("emit-z", prompt, completion)
    samples = [TrainSample((1, 2, 3), (97 + i,), (-5.0,), float(i), 0, STEPS) for i in range(4)]
    trainer.train_step("emit-a", samples)
    assert trainer.logprobs("emit-z", prompt, completion) == before
    assert trainer.logprobs("emit-a", prompt, completion) != before

    async def generations():
        gen = HFGenerator(tiny_model_dir)
        for job in ("emit-a", "emit-z"):
            await gen.publish(job, STEPS, store.latest_path(job))
        prompts = ["user: abcd\nassistant: ", "user: qwer\nassistant: "]
        alone = await gen.generate("emit-z", STEPS, prompts, 2, 8, temperature=0.0)
        mixed_z, mixed_a = await asyncio.gather(
            gen.generate("emit-z", STEPS, prompts, 2, 8, temperature=0.0),
            gen.generate("emit-a", STEPS, prompts, 2, 8, temperature=0.0),
        )
        await gen.close()
        return alone, mixed_z, mixed_a, gen.batches_run

    alone, mixed_z, mixed_a, batches = asyncio.run(generations())
    texts = lambda groups: [c.text for g in groups for c in g]  # noqa: E731
    assert texts(alone) == texts(mixed_z)
    assert "z" in "".join(texts(mixed_z)) and "a" in "".join(texts(mixed_a))
    assert texts(mixed_z) != texts(mixed_a)
    assert batches == 2  # the two tenants' requests shared one batch


@pytest.mark.slow
def test_staleness_bound_and_one_policy_object_for_both_drivers(tiny_model_dir, tmp_path):
    """The policy instance that drives a simulation drives the real run; no sample staler
    than its job's bound is ever trained on."""
    from marlaas.sim.simulator import Simulation

    workload = tiny_workload(
        tiny_model_dir, **{"jobs.*.rl.steps": 5, "jobs.*.rl.max_staleness": 1,
                           "jobs.emit-e-slow.rl.max_staleness": 2},
    )  # fmt: skip
    policy = RecordingPolicy()
    Simulation(workload, policy).run()
    sim_calls = policy.calls
    assert sim_calls > 0 and policy.seen == {"emit-a", "emit-z", "emit-e-slow"}
    events, summary, rewards, _ = train_run(
        workload, tmp_path / "stale", policy, backend="hf", progress=False
    )
    assert policy.calls > sim_calls  # the same object was asked again, by the real run
    assert summary["policy"] == "fair"
    bounds = {j.name: j.rl.max_staleness for j in workload.jobs}
    train = events[events["kind"] == "train"]
    assert (train["staleness"] <= train["job"].map(bounds)).all()
    assert (rewards["staleness"] <= rewards["job"].map(bounds)).all()
    assert train["staleness"].max() >= 1  # the bound was exercised, not trivially met
    metrics.check_partition(events)


@pytest.mark.slow
def test_multi_turn_tool_episodes(tiny_model_dir, tmp_path):
    """A calculator tenant with 2 turns: each sample continues from its own context."""
    workload = tiny_workload(
        tiny_model_dir, **{"jobs.*.rl.steps": 2, "jobs.emit-z.rl.turns": 2,
                           "jobs.emit-z.rl.max_new_tokens": 12},
    )  # fmt: skip
    data = workload.model_dump()
    data["jobs"][1]["env"] = {"name": "calculator", "args": {"max_turns": 2, "latency_s": 0.05}}
    from marlaas.core.workload import parse_workload

    events, _summary, rewards, _ = train_run(
        parse_workload(data), tmp_path / "multi", backend="hf", progress=False
    )
    env = events[(events["kind"] == "env") & (events["job"] == "emit-z")]
    assert sorted(env["turn"].unique()) == [0, 1]
    assert env[env["turn"] == 0]["reward"].isna().all()
    assert env[env["turn"] == 1]["reward"].notna().all()
    assert len(rewards[rewards["job"] == "emit-z"]) == 2


@pytest.mark.slow
def test_vllm_run_each_tenant_learns_its_target(tiny_model_dir, vllm_generator, tmp_path):
    events, _summary, rewards, _result = train_run(
        tiny_workload(tiny_model_dir), tmp_path / "vllm", generator=vllm_generator,
        progress=False,
    )  # fmt: skip
    assert_learned(rewards)
    metrics.check_partition(events)
    assert read_summary(tmp_path / "vllm")["kind"] == "real"
    assert vllm_generator.published() == []  # the shared engine was left clean


def test_train_cli_reports_user_errors(tmp_path, capsys):
    workload = tmp_path / "w.yaml"
    workload.write_text(TRACE.read_text().replace("models/tiny", str(tmp_path / "nothing")))
    assert main(["train", str(workload), "--out", str(tmp_path / "x"), "--backend", "hf"]) == 2
    err = capsys.readouterr().err
    assert "marlaas: error:" in err and "make-tiny-model" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.gpu
def test_vllm_gpu_run(tiny_model_dir, tmp_path):
    """The same run on vLLM's GPU build (skipped without CUDA)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm")
    _, _, rewards, _result = train_run(
        tiny_workload(tiny_model_dir), tmp_path / "gpu", backend="vllm", progress=False
    )
    assert_learned(rewards)
