"""Real runs of the scheduler core: tiny model, several tenants, HF and vLLM generation.

The real executor enacts every decision: the engine a group is placed on, the adapters the
core loads and evicts (read back from the engines themselves), the trainer a job's state is
swapped onto; and a real run passes the same invariant checks as a simulation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.cli import main
from marlaas.core.policies.fair import Fair
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import EvictAdapter, SwapIn, Train
from marlaas.drive import InvariantError, RunError, check_invariants, drive
from marlaas.drive.inbox import Cancel, Inbox, Submit, workload_inbox
from marlaas.eventlog import read_event_log, records_to_frame
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.journal import read_journal
from marlaas.executors.local import LocalExecutor
from marlaas.executors.outputs import rewards_frame
from marlaas.executors.resume import ResumeError, check_same_workload
from marlaas.executors.train import train_run
from marlaas.metrics.idle import check_partition
from marlaas.sim.run import simulate
from marlaas.workload_file import apply_overrides, load_workload

TRACE = Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml"
STEPS = 14
JOBS = ("emit-a", "emit-z", "emit-e-slow")


def tiny_workload(model_dir, **overrides):
    """traces/real-tiny.yaml on the session's tiny model, with overrides."""
    return load_workload(TRACE, {"base_model.path": str(model_dir), **overrides})


def assert_learned(rewards: pd.DataFrame) -> None:
    """Every job's reward rises from near 0 to near 1."""
    assert rewards["job"].nunique() >= 2
    for job, group in rewards.groupby("job"):
        first, last = group["mean_reward"].iloc[0], group["mean_reward"].tail(3).mean()
        print(f"{job}: reward {first:.3f} -> {last:.3f}")
        assert first < 0.2 and last > 0.7, f"{job} did not learn: {group['mean_reward'].tolist()}"


class RecordingPolicy(Fair):
    """Fair share that counts the jobs it is asked about (one instance for both worlds)."""

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
    assert summary["executor"] == "local"
    assert_learned(pd.read_csv(out / "rewards.csv"))
    assert (out / "rewards.png").stat().st_size > 0
    assert set(summary["reward_curves"]) == set(JOBS)
    last_env = events[(events["kind"] == "env") & events["reward"].notna()]
    assert len(last_env) == 3 * STEPS * 4  # one rewarded env row per group


@pytest.mark.slow
def test_real_event_log_partitions_and_reports(hf_run, tmp_path):
    out, *_ = hf_run
    events = read_event_log(out)
    check_partition(events)
    assert set(events["kind"]) >= {"generate", "env", "train", "sync", "adapter_load", "idle"}
    # one CPU (shared_compute): no training step overlaps any generation
    gen = events[events["kind"] == "generate"]
    for _, step in events[events["kind"] == "train"].iterrows():
        assert not ((gen.start_s < step.end_s) & (step.start_s < gen.end_s)).any()
    # each step's groups' prompt repeats were read once (their micro-batches' prefix trees),
    # at most the core's count of them: (group size - 1) x each group's prompt
    train = events[(events["kind"] == "train") & (events["outcome"] == "ok")]
    specs = {j.name: j for j in load_workload(out / "workload.json").jobs}
    most = train["job"].map(
        lambda j: (specs[j].rl.group_size - 1) * specs[j].rl.prompts_per_step
        * specs[j].prompt_tokens.value
    )  # fmt: skip
    assert ((train["prompt_tokens"] > 0) & (train["prompt_tokens"] <= most)).all()
    # the declared 0.5 s verifier latency of emit-e-slow is waited for real
    slow = events[(events["kind"] == "env") & (events["job"] == "emit-e-slow")]
    assert (slow.end_s - slow.start_s).min() >= 0.5
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").stat().st_size > 0


@pytest.mark.slow
def test_resume_continues_from_saved_adapters_and_optimizer(hf_run, tiny_model_dir, tmp_path):
    import shutil

    out = tmp_path / "resumed"
    shutil.copytree(hf_run[0], out)
    store = AdapterStore(out / "adapters")
    assert all((store.path(j, STEPS) / "optimizer.pt").is_file() for j in JOBS)
    assert not (store.path(JOBS[0], STEPS - 1) / "optimizer.pt").exists()  # newest only
    workload = tiny_workload(tiny_model_dir, **{"jobs.*.rl.steps": STEPS + 2})
    events, summary, rewards, _ = train_run(
        workload, out, backend="hf", resume=True, progress=False
    )
    assert summary["resumed_from"] == dict.fromkeys(JOBS, STEPS)
    # one history: every step of both parts once, the new ones after the old ones
    assert sorted(rewards["step"].unique()) == list(range(STEPS + 2))
    assert (rewards.groupby("job").size() == STEPS + 2).all()
    new = rewards[rewards["step"] >= STEPS]
    assert new["mean_reward"].min() > 0.7  # the resumed adapters already know their target
    assert new["time_s"].min() > rewards[rewards["step"] < STEPS]["time_s"].max()
    train = events[(events["kind"] == "train") & (events["outcome"] == "ok")]
    for job in JOBS:
        assert sorted(train[train["job"] == job]["version"]) == list(range(1, STEPS + 3))
    assert all(store.latest(j) == STEPS + 2 for j in JOBS)
    assert summary["metrics"]["n_jobs"] == len(JOBS)


@pytest.mark.slow
def test_tenant_isolation(hf_run, tiny_model_dir):
    """Training one tenant never moves another's log-probs, and batching tenants together
    never changes a tenant's generations."""
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
def test_one_policy_object_and_one_invariant_checker_for_both_worlds(tiny_model_dir, tmp_path):
    """The policy instance that drives a simulation drives the real run; both runs pass the
    same invariant checks, which do look at the real run (a stale sample breaks them)."""
    workload = tiny_workload(
        tiny_model_dir, **{"jobs.*.rl.steps": 5, "jobs.*.rl.max_staleness": 1,
                           "jobs.emit-e-slow.rl.max_staleness": 2},
    )  # fmt: skip
    policy = RecordingPolicy()
    simulate(workload, policy)
    sim_calls = policy.calls
    assert sim_calls > 0 and policy.seen == set(JOBS)
    scheduler = Scheduler.for_workload(workload, policy)
    store = AdapterStore(tmp_path / "adapters")
    with LocalExecutor(
        EngineSizing.of_workload(workload), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend="hf",
    ) as executor:  # fmt: skip
        result = drive(scheduler, executor, workload_inbox(workload), check=False)
    assert policy.calls > sim_calls  # the same object was asked again, by the real run
    check_invariants(result, scheduler)
    bounds = {j.name: j.rl.max_staleness for j in workload.jobs}
    events = records_to_frame(result.records)
    train = events[events["kind"] == "train"]
    assert (train["staleness"] <= train["job"].map(bounds)).all()
    assert train["staleness"].max() >= 1  # the bound was exercised, not trivially met
    rewards = rewards_frame(executor.rewards)
    assert (rewards["staleness"] <= rewards["job"].map(bounds)).all()
    stale = [r._replace(staleness=9) if r.kind == "train" else r for r in result.records]
    with pytest.raises(InvariantError, match="versions stale"):
        check_invariants(dataclasses.replace(result, records=stale), scheduler)


@pytest.mark.slow
def test_multi_turn_tool_episodes(tiny_model_dir, tmp_path):
    """A calculator tenant with 2 turns: each sample continues from its own context."""
    workload = tiny_workload(
        tiny_model_dir, **{"jobs.*.rl.steps": 2, "jobs.emit-z.rl.turns": 2,
                           "jobs.emit-z.rl.max_new_tokens": 12,
                           "jobs.emit-z.env": {"name": "calculator", "args": {"max_turns": 2}}},
    )  # fmt: skip
    events, _summary, rewards, _ = train_run(
        workload, tmp_path / "multi", backend="hf", progress=False
    )
    env = events[(events["kind"] == "env") & (events["job"] == "emit-z")]
    assert sorted(env["turn"].unique()) == [0, 1]
    assert env[env["turn"] == 0]["reward"].isna().all()
    assert env[env["turn"] == 1]["reward"].notna().all()
    assert len(rewards[rewards["job"] == "emit-z"]) == 2


class ResidencyWatch:
    """Checks that what the engines and trainers themselves hold is what the scheduler
    decided: after every completion, all of it (modulo loads and swaps in flight); right after
    every eviction, that the evicted adapter is gone (the rest of its decision round is not
    enacted yet, so the full comparison waits for the next completion)."""

    def __init__(self, scheduler: Scheduler, executor: LocalExecutor) -> None:
        self.scheduler, self.executor = scheduler, executor
        self.evictions = self.checks = 0
        start = executor.start

        def start_and_check(decision, now):
            start(decision, now)
            if isinstance(decision, EvictAdapter):
                self.evictions += 1
                held = executor.engine_adapters(decision.engine)
                assert (decision.job, decision.version) not in held

        executor.start = start_and_check

    def __call__(self, decision, event, now) -> None:
        self.check()

    def check(self) -> None:
        self.checks += 1
        for engine in self.scheduler.cluster.engines:
            held = self.executor.engine_adapters(engine.name)
            core = set(engine.resident)
            settled = core - engine.loading
            assert settled <= held <= core, (engine.name, held, core, engine.loading)
        swapping = {
            r.decision.job for r in self.scheduler.ledger.running.values()
            if isinstance(r.decision, SwapIn)
        }  # fmt: skip
        for trainer in self.scheduler.cluster.trainers:
            held = self.executor.trainers.resident(trainer.name)
            core = set(trainer.resident)
            assert core - swapping <= held <= core, (trainer.name, held, core)


@pytest.mark.slow
def test_vllm_two_engines_enact_placement_evictions_and_swaps(tiny_model_dir, tmp_path):
    """Two vLLM engines and one trainer on the tiny model: work lands on both engines, the
    engines' own adapter lists follow the core's loads and evictions, the trainer's state
    follows its swaps, and every tenant learns its target."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:
        pytest.skip(f"vllm not importable: {exc}")
    workload = tiny_workload(
        tiny_model_dir,
        **{"cluster.pools": [{"name": "rollout", "role": "inference", "devices": 2},
                             {"name": "train", "role": "training", "devices": 1}],
           "cluster.engine.adapter_slots": 2, "cluster.trainer.adapter_slots": 2},
    )  # fmt: skip
    scheduler = Scheduler.for_workload(workload)
    store = AdapterStore(tmp_path / "adapters")
    with LocalExecutor(
        EngineSizing.of_workload(workload), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend="vllm",
    ) as executor:  # fmt: skip
        watch = ResidencyWatch(scheduler, executor)
        result = drive(scheduler, executor, workload_inbox(workload), observers=[watch])
        [trainer] = executor.trainers.trainers.values()
        steps = executor.engine_steps()
    # the engine's embedding (vocabulary padded to 320 rows) and norms: one copy, not two
    assert {"model.embed_tokens.weight", "model.norm.weight"} <= set(trainer.shared)
    assert watch.evictions > 0 and watch.checks > 100
    events = records_to_frame(result.records)
    gen = events[events["kind"] == "generate"]
    assert set(gen["device"]) == {"rollout/0", "rollout/1"}
    assert gen.groupby("device").size().min() > 10
    swaps = events[(events["kind"] == "adapter_load") & (events["pool"] == "train")]
    assert len(swaps) > len(JOBS)  # 3 jobs, 2 slots: states moved on and off the trainer
    # both engines' steps, measured on the run's clock: a sample's every token but its first
    # was a decoding step of it
    assert set(steps["engine"]) == {"rollout/0", "rollout/1"}
    ends = steps["start_s"] + steps["duration_s"]
    assert steps["start_s"].min() >= 0 and ends.max() <= result.makespan_s
    ok = gen[gen["outcome"] == "ok"]
    assert steps["decoding"].sum() == (ok["tokens"] - ok["seqs"]).sum()
    assert steps["adapters"].between(1, 2).all() and steps["prefills"].sum() >= len(ok)
    assert_learned(rewards_frame(executor.rewards))


def test_a_job_whose_work_keeps_failing_stops_the_run_with_the_reason(tiny_model_dir, tmp_path):
    workload = tiny_workload(tiny_model_dir, **{"jobs.*.rl.steps": 1})
    broken = apply_overrides(workload, {"jobs.emit-a.rl.max_new_tokens": 1})
    scheduler = Scheduler.for_workload(broken)
    store = AdapterStore(tmp_path / "a")
    stops = pytest.raises(RunError, match=r"Generate of job .* in a row: .*max_model_len")
    with LocalExecutor(
        EngineSizing.of_workload(broken), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend="hf", max_model_len=4,
    ) as executor, stops:  # fmt: skip
        drive(scheduler, executor, workload_inbox(broken))


def test_train_cli_reports_user_errors(tmp_path, capsys):
    workload = tmp_path / "w.yaml"
    workload.write_text(TRACE.read_text().replace("models/tiny", str(tmp_path / "nothing")))
    assert main(["train", str(workload), "--out", str(tmp_path / "x"), "--backend", "hf"]) == 2
    err = capsys.readouterr().err
    assert "marlaas: error:" in err and "make-tiny-model" in err
    assert not (tmp_path / "x").exists()


def test_train_refuses_a_folder_that_is_not_a_real_run_before_any_work(tmp_path, capsys):
    sim = tmp_path / "sim"
    assert main(["simulate", "traces/small.yaml", "--quiet", "--set", "jobs.*.rl.steps=1",
                 "--out", str(sim)]) == 0  # fmt: skip
    (sim / "adapters").mkdir()
    (sim / "adapters" / "keep").write_text("x")
    assert main(["train", str(TRACE), "--out", str(sim), "--backend", "hf"]) == 2
    assert "not a real training run" in capsys.readouterr().err
    assert (sim / "adapters" / "keep").exists()


def test_unknown_environment_is_refused_on_load(tmp_path, capsys):
    out = tmp_path / "x"
    args = ["train", str(TRACE), "--out", str(out), "--set", "jobs.emit-a.env.name=nope"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: ") and "unknown environment 'nope'" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


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


@pytest.mark.slow
def test_a_real_run_trains_a_job_submitted_while_it_runs_and_releases_a_cancelled_one(
    tiny_model_dir, tmp_path
):
    """emit-z is submitted 5 s into a real run and learns its target; emit-e-slow is
    cancelled after two steps: its work in flight is discarded, and from its end on the vLLM
    engine and the trainer themselves no longer hold any of its adapters, while the others
    train."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:
        pytest.skip(f"vllm not importable: {exc}")
    workload = tiny_workload(tiny_model_dir, **{"jobs.emit-e-slow.rl.steps": 10})
    arrival = {"emit-a": 0.0, "emit-z": 5.0, "emit-e-slow": 0.0}
    inbox = Inbox()
    for job in workload.jobs:
        inbox.put(Submit(job), arrival[job.name])
    scheduler = Scheduler.for_workload(workload)
    holder: dict = {"steps": 0, "cancel_s": None, "released_checks": 0}

    def cancel_after_two_steps(decision, event, now):
        if isinstance(decision, Train) and decision.job == "emit-e-slow" and event.ok:
            holder["steps"] += 1
            if holder["steps"] == 2:
                holder["cancel_s"] = now
                inbox.put(Cancel("emit-e-slow"))  # at once: the executor's clock stamps it
                inbox.close()

    def nothing_of_it_left(decision, event, now):
        if holder["cancel_s"] is None or scheduler.status("emit-e-slow") is not None:
            return
        holder["released_checks"] += 1  # it has ended; the others still run
        for engine in scheduler.cluster.engines:
            held = executor.engine_adapters(engine.name)
            assert not {job for job, _ in held} & {"emit-e-slow"}, held
        for trainer in scheduler.cluster.trainers:
            assert "emit-e-slow" not in executor.trainers.resident(trainer.name)

    store = AdapterStore(tmp_path / "adapters")
    with LocalExecutor(
        EngineSizing.of_workload(workload), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend="vllm",
    ) as executor:  # fmt: skip
        watch = ResidencyWatch(scheduler, executor)
        result = drive(scheduler, executor, inbox,
                       observers=[watch, cancel_after_two_steps, nothing_of_it_left])  # fmt: skip
    states = {name: o.state for name, o in result.jobs.items()}
    assert states == {"emit-a": "finished", "emit-e-slow": "cancelled", "emit-z": "finished"}
    assert holder["released_checks"] > 0
    events = records_to_frame(result.records)
    late = events[events["job"] == "emit-z"]
    assert late["start_s"].min() >= 5.0 and result.jobs["emit-z"].arrival_s >= 5.0
    cancelled = events[events["job"] == "emit-e-slow"]
    assert (cancelled[cancelled["outcome"] == "cancelled"]["end_s"] >= holder["cancel_s"]).all()
    trained = cancelled[(cancelled["kind"] == "train") & (cancelled["outcome"] == "ok")]
    assert sorted(trained["step"]) == [0, 1]
    # step 1's sync was in flight when the cancel came: it ran and was discarded
    syncs = cancelled[cancelled["kind"] == "sync"]
    assert list(zip(syncs["version"], syncs["outcome"], strict=True)) == [
        (1, "ok"), (2, "cancelled")]  # fmt: skip
    assert result.jobs["emit-e-slow"].published == 1
    rewards = rewards_frame(executor.rewards)
    assert_learned(rewards[rewards["job"] != "emit-e-slow"])


@pytest.mark.slow
def test_resume_with_another_workload_is_refused_before_anything_changes(
    hf_run, tiny_model_dir, tmp_path
):
    import shutil

    out = tmp_path / "other"
    shutil.copytree(hf_run[0], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = tiny_workload(tiny_model_dir, **{"jobs.emit-a.lora_rank": 16,
                                             "jobs.emit-z.rl.group_size": 8})  # fmt: skip
    with pytest.raises(ResumeError) as err:
        train_run(other, out, backend="hf", resume=True, progress=False)
    message = str(err.value)
    assert "emit-a: lora_rank 8 -> 16" in message and "emit-z: rl" in message
    assert "new --out" in message
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # not a byte changed
    renamed = tiny_workload(tiny_model_dir, **{"jobs.emit-a.name": "emit-q"})
    with pytest.raises(ResumeError, match="job emit-a is not in the workload; job emit-q is new"):
        train_run(renamed, out, backend="hf", resume=True, progress=False)
    other_model = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other_model)
    config = json.loads((other_model / "config.json").read_text())
    (other_model / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-3}))
    with pytest.raises(ResumeError, match="base_model_config '"):
        train_run(tiny_workload(other_model), out, backend="hf", resume=True, progress=False)
    moved = tmp_path / "moved-model"
    shutil.copytree(tiny_model_dir, moved)  # the same model elsewhere: resumes
    check_same_workload(read_journal(out / "journal.jsonl").workload, tiny_workload(moved),
                        moved)  # fmt: skip
