"""The twin: calibrate recovers a cost model from event logs, replay measures the error.

"Real" runs here are simulations with a known cost model written as real run folders, so that
calibrating from them must give that cost model back, and replaying them with it must give
their own numbers back (the same workload, policy, seed, lengths and environment times).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from marlaas.cli import main
from marlaas.core.prompts import prompt_cap
from marlaas.core.scheduler import Scheduler
from marlaas.eventlog import read_event_log, write_event_log
from marlaas.runs import write_run
from marlaas.sim.cost_model import CostModel
from marlaas.sim.cost_profiles import CostProfile, bundled_profiles, load_profile
from marlaas.sim.run import simulate_run
from marlaas.twin.calibrate import CalibrationError, calibrate
from marlaas.twin.header import provenance
from marlaas.twin.real_run import load_real_run
from marlaas.twin.replay import replay
from marlaas.twin.speed import SPEED_PER_YARDSTICK, charged_speed, speed_note, speed_ratio
from marlaas.workload_file import load_workload

TINY = Path(__file__).resolve().parents[1] / "traces" / "real-tiny.yaml"
TRUE = CostModel(
    decode_base_ms=9.0, decode_per_seq_ms=0.4, decode_per_kv_token_ms=0.001,
    decode_per_adapter_ms=2.0, prefill_tokens_per_s=5_000.0, adapter_load_s=0.005,
    train_tokens_per_s=40_000.0, train_overhead_s=0.02, trainer_swap_s=0.015, sync_s=0.017,
    colocated_switch_s=0.0, engine_warmup_s=1.5, prefill_base_ms=0.0,
)  # fmt: skip
"""A CPU-like cost model the fake real runs are made with."""


def fake_real_run(
    tmp_path: Path, name: str, overrides: dict, policy: str, cost: CostModel = TRUE
) -> Path:
    """A simulation with ``cost`` written as a real run folder (kind real, workload.json)."""
    workload = load_workload(TINY, {"jobs.*.rl.steps": 6, **overrides})
    true = workload.model_copy(update={"cost": cost})
    events, summary = simulate_run(true, policy, kind="real", backend="sim")
    engines = {d.name for d in Scheduler.for_workload(workload).cluster.engines}
    summary["engine_warmup_s"] = dict.fromkeys(engines, TRUE.engine_warmup_s)  # as measured
    return write_run(tmp_path / name, events, summary, workload)  # with the default cost model


TWO_ENGINES = {
    "cluster.pools": [
        {"name": "rollout", "role": "inference", "devices": 2},
        {"name": "train", "role": "training", "devices": 1},
    ]
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("twin")
    varied = {
        "jobs.*.response_tokens": {"dist": "uniform", "low": 2, "high": 8},
        "jobs.emit-a.rl.group_size": 8,
        "jobs.emit-z.rl.prompts_per_step": 2,
    }
    return {
        "fair": fake_real_run(root, "fair", varied, "fair"),
        "fair-2": fake_real_run(root, "fair-2", {**varied, **TWO_ENGINES}, "fair"),
        "sequential": fake_real_run(root, "seq", {"scheduling.preset": "sequential"}, "fifo"),
    }  # fmt: skip


def test_calibrate_recovers_the_cost_model(runs):
    result = calibrate([runs["fair"], runs["fair-2"]])
    fitted = result.cost
    for name in ("adapter_load_s", "trainer_swap_s", "sync_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name
    # an iteration of one adapter; apart, base and per-adapter are told apart only as far as
    # the runs' adapters per engine vary (two engines taking turns each hold one or two)
    assert fitted.decode_base_ms + fitted.decode_per_adapter_ms == pytest.approx(
        TRUE.decode_base_ms + TRUE.decode_per_adapter_ms, rel=0.15
    )
    assert fitted.decode_per_seq_ms == pytest.approx(TRUE.decode_per_seq_ms, rel=0.3)
    assert fitted.engine_warmup_s == pytest.approx(TRUE.engine_warmup_s, rel=0.1)
    table = result.table()
    assert "decode_base_ms" in table and "replayed:" in table
    assert fitted.train_overhead_s + 512 / fitted.train_tokens_per_s == pytest.approx(
        TRUE.train_overhead_s + 512 / TRUE.train_tokens_per_s, rel=0.05
    )  # a step of 512 tokens takes what it took


def test_calibrate_recovers_how_much_overlapped_generation_and_training_slow_each_other(
    runs, tmp_path
):
    """A run on a processor where training overlaps generation (shared_compute: overlap) and
    one that took turns, made with known slowdowns, give them back; the regressions take each
    row as if alone, and a replay with the profile gives the run's makespan back."""
    slowed = TRUE.model_copy(update={"overlap_decode_slowdown": 1.3, "train_tokens_per_s": 4000,
                                     "overlap_train_slowdown": 1.7})  # fmt: skip
    varied = {
        "jobs.*.response_tokens": {"dist": "uniform", "low": 2, "high": 8},
        "jobs.emit-a.rl.group_size": 8,
    }
    overlapped = fake_real_run(tmp_path, "overlap", {**varied, "cluster.shared_compute": "overlap"},
                               "fair", cost=slowed)  # fmt: skip
    turns = fake_real_run(tmp_path, "turns", varied, "fair", cost=slowed)
    events = pd.read_parquet(overlapped / "events.parquet")
    gen, train = events[events.kind == "generate"], events[events.kind == "train"]
    assert any(((gen.start_s < t.end_s) & (gen.end_s > t.start_s)).any()
               for t in train.itertuples())  # fmt: skip
    result = calibrate([overlapped, turns], refine_evaluations=0)
    fitted = result.cost
    assert fitted.overlap_train_slowdown == pytest.approx(1.7, abs=0.05)
    assert fitted.overlap_decode_slowdown == pytest.approx(1.3, abs=0.1)
    assert fitted.train_tokens_per_s == pytest.approx(4000, rel=0.05)
    assert "overlap_train_slowdown" in result.table()
    _events, summary, _table = replay(load_real_run(overlapped), _profile(fitted))
    real = json.loads((overlapped / "summary.json").read_text())["metrics"]["makespan_s"]
    assert summary["metrics"]["makespan_s"] == pytest.approx(real, rel=0.05)
    plain = calibrate([runs["fair"]], refine_evaluations=0)  # took turns: nothing to fit
    assert "overlap_train_slowdown" not in plain.table()
    assert plain.cost.overlap_train_slowdown == CostModel().overlap_train_slowdown


def _profile(cost: CostModel):
    from marlaas.sim.cost_profiles import CostProfile

    return CostProfile("fitted", cost, "(in memory)", "-")


def test_a_trainer_that_reads_each_prompt_once_is_fitted_on_what_it_read(runs, tmp_path):
    """Steps of a trainer that reads a group's prompt once (the prefix tree) record the
    repeats it did not read, are charged for the rest, and calibrate tells them apart."""
    shares = TRUE.model_copy(update={"train_shares_prompts": True, "train_overhead_s": 0.0})
    varied = {
        "jobs.*.prompt_tokens": {"dist": "uniform", "low": 10, "high": 60},
        "jobs.emit-a.rl.group_size": 8,
        "jobs.emit-z.rl.prompts_per_step": 2,
    }
    run = fake_real_run(tmp_path, "shares", varied, "fair", cost=shares)
    workload = load_workload(run / "workload.json")
    train = pd.read_parquet(run / "events.parquet").query("kind == 'train'")
    sizes = {j.name: j.rl.group_size for j in workload.jobs}
    assert (train["prompt_tokens"] > 0).all()
    assert (train["prompt_tokens"] % train["job"].map(lambda j: sizes[j] - 1) == 0).all()
    read = train["tokens"] - train["prompt_tokens"]
    per_token = (1 + 8 / shares.train_rank_scale) / shares.train_tokens_per_s
    assert (train["end_s"] - train["start_s"]).to_numpy() == pytest.approx(
        (read * per_token).to_numpy(), rel=1e-9
    )  # what the trainer read, not the step's tokens
    fitted = calibrate([run]).cost
    assert fitted.train_shares_prompts
    assert fitted.train_tokens_per_s == pytest.approx(shares.train_tokens_per_s, rel=0.02)
    assert not calibrate([runs["fair"]]).cost.train_shares_prompts  # a padded trainer's rows


def test_steps_of_one_size_are_charged_per_step_and_the_table_says_so(runs):
    result = calibrate([runs["sequential"]])  # every step trains the same number of tokens
    fitted = result.cost
    notes = {f.name: f.quality for f in result.fitted}
    assert "add runs with other batch sizes" in notes["train_tokens_per_s"]
    assert any("not identifiable" in w for w in result.warnings)
    assert fitted.train_tokens_per_s < 1e9  # a rate it can stand behind, not 1e12
    tokens = 512 * (1 + 8 / fitted.train_rank_scale)  # a step of the size the run had
    assert fitted.train_overhead_s + tokens / fitted.train_tokens_per_s == pytest.approx(
        TRUE.train_overhead_s + tokens / TRUE.train_tokens_per_s, rel=0.05
    )
    varied = calibrate([runs["fair"]])
    assert "add runs" not in {f.name: f.quality for f in varied.fitted}["train_tokens_per_s"]


def test_replay_with_the_true_cost_model_reproduces_the_run(runs, tmp_path):
    profile_path = tmp_path / "true.yaml"
    profile_path.write_text(json.dumps({"name": "true", "cost": TRUE.model_dump()}))
    # equal lengths within a group: the recording is exact; unequal: it keeps the longest
    # sample and the total, not every sample, so the batch differs a little
    for name, tolerance in (("sequential", 1e-9), ("fair", 0.01)):
        _, summary, table = replay(runs[name], load_profile(profile_path))
        assert summary["kind"] == "replay" and summary["replay_of"] == str(runs[name])
        errors = table.set_index("metric")["error"]
        assert abs(errors["makespan"]) < tolerance, name
        assert abs(errors["job completion, mean"]) < tolerance, name


def test_the_regression_alone_is_not_enough(runs):
    """The refinement by replays earns its keep: without it the held-out replay is worse."""
    from marlaas.sim.cost_profiles import CostProfile

    errors = []
    for evaluations in (0, 150):
        cost = calibrate([runs["fair"], runs["fair-2"]], refine_evaluations=evaluations).cost
        _, _, table = replay(runs["sequential"], CostProfile("fit", cost, "", ""))
        errors.append(abs(table.set_index("metric")["error"]["makespan"]))
    assert errors[1] < errors[0]


def test_calibrated_on_one_schedule_the_replay_of_another_is_close(runs, tmp_path):
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(runs["fair"]), str(runs["fair-2"]), "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.meta["origin"] == "calibrated" and len(profile.meta["sources"]["runs"]) == 2
    _, _, table = replay(runs["sequential"], profile)
    errors = table.set_index("metric")["error"]
    assert abs(errors["makespan"]) < 0.10
    assert abs(errors["job completion, mean"]) < 0.15
    pools = [m for m in errors.index if m.startswith("busy fraction, pool")]
    assert all(abs(errors[m]) < 5 for m in pools)  # points


def test_before_calibration_the_default_model_is_far_off(runs):
    _, _, table = replay(runs["fair"])  # the workload's own (default, 7B/H100) cost model
    assert abs(table.set_index("metric")["error"]["generate duration, mean"]) > 0.3


def test_a_missing_stage_is_named(runs, tmp_path):
    from marlaas.eventlog import read_event_log, write_event_log

    broken = tmp_path / "nosync"
    broken.mkdir()
    for f in ("summary.json", "workload.json"):
        (broken / f).write_text((runs["fair"] / f).read_text())
    events = read_event_log(runs["fair"])
    write_event_log(events[events["kind"] != "sync"], broken / "events.parquet")
    with pytest.raises(CalibrationError, match="no successful sync rows"):
        calibrate([broken])


def test_a_fit_out_of_a_cost_profiles_bounds_is_one_error(runs, tmp_path):
    from marlaas.eventlog import read_event_log, write_event_log

    broken = tmp_path / "slow-train"
    broken.mkdir()
    for f in ("summary.json", "workload.json"):
        (broken / f).write_text((runs["fair"] / f).read_text())
    events = read_event_log(runs["fair"])
    train = events["kind"] == "train"
    events.loc[train, "end_s"] = events.loc[train, "start_s"] + 9e11  # 28,000 years a step
    write_event_log(events, broken / "events.parquet")
    with pytest.raises(CalibrationError, match="the fitted cost model: train_overhead_s: "):
        calibrate([broken], refine_evaluations=0)


def test_replay_and_calibrate_refuse_a_simulation(tmp_path, capsys):
    sim = tmp_path / "sim"
    args = ["simulate", str(TINY), "--quiet", "--set", "jobs.*.rl.steps=1", "--out", str(sim)]
    assert main(args) == 0
    for command in (["calibrate", str(sim), "--out", str(tmp_path / "p.yaml")],
                    ["replay", str(sim), "--out", str(tmp_path / "r")]):  # fmt: skip
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("marlaas: error: ") and "not a real training run" in err


def test_bundled_profiles_load_and_simulate_records_the_profile(tmp_path):
    assert {"h100-7b", "a100-7b", "cpu-tiny"} <= set(bundled_profiles())
    for name in bundled_profiles():
        profile = load_profile(name)
        assert profile.meta.get("origin") in ("published", "calibrated") and profile.meta["sources"]
    out = tmp_path / "run"
    args = ["simulate", "traces/small.yaml", "--quiet", "--set", "jobs.*.rl.steps=2"]
    assert main([*args, "--cost", "a100-7b", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cost_profile"]["name"] == "a100-7b" and summary["cost_profile"]["sha256"]
    assert main([*args, "--cost", "nope", "--out", str(tmp_path / "x")]) == 2


def test_fidelity_table_has_every_metric(runs):
    _, _, table = replay(runs["fair-2"])
    metrics = set(table["metric"])
    assert {"makespan", "job completion, mean", "busy fraction, pool rollout",
            "busy fraction, rollout/1", "generate duration, mean", "train duration, p90",
            "sync duration, mean", "adapter_load duration, mean", "staleness, max",
            "adapter loads"} <= metrics  # fmt: skip
    assert isinstance(table, pd.DataFrame) and table["real"].notna().all()


def test_the_default_cost_model_is_the_published_h100_profile():
    assert load_profile("h100-7b").cost == CostModel()


def _with_train_durations(run: Path, out: Path, duration) -> Path:
    """A copy of ``run`` whose training steps took ``duration(tokens)`` [s] each."""
    from marlaas.eventlog import read_event_log, write_event_log

    out.mkdir()
    for f in ("summary.json", "workload.json"):
        (out / f).write_text((run / f).read_text())
    events = read_event_log(run)
    train = events["kind"] == "train"
    events.loc[train, "end_s"] = events.loc[train, "start_s"] + duration(
        events.loc[train, "tokens"].to_numpy(float)
    )
    write_event_log(events, out / "events.parquet")
    return out


def test_the_train_fit_is_non_negative_and_refitted_at_its_bound(runs, tmp_path):
    """Durations that grow a little faster than the tokens: an unconstrained line has a
    negative intercept; clamped to 0 without a refit its slope made every step too long."""
    convex = _with_train_durations(runs["fair"], tmp_path / "convex", lambda t: (t / 300) ** 1.3)
    result = calibrate([convex], refine_evaluations=0)
    cost = result.cost
    ops = pd.read_parquet(convex / "events.parquet").query("kind == 'train'")
    tokens = ops["tokens"].to_numpy(float) * (1 + 8 / cost.train_rank_scale)  # rank 8
    real = (ops["end_s"] - ops["start_s"]).to_numpy(float)
    assert cost.train_overhead_s == 0  # at its bound, and the rate refitted with it there:
    best = (tokens * real).sum() / (tokens * tokens).sum()  # least squares through 0 [s/token]
    assert cost.train_tokens_per_s == pytest.approx(1 / best, rel=1e-6)  # not the OLS slope's
    assert "R² " in {f.name: f.quality for f in result.fitted}["train_tokens_per_s"]


def test_a_fit_the_data_cannot_support_is_a_warning(runs, tmp_path, capsys):
    """Steps whose durations do not grow with their tokens: the rate is not identifiable,
    the profile keeps the base rate instead of 1e12 tokens/s, and calibrate says why."""
    noise = _with_train_durations(runs["fair"], tmp_path / "noise", lambda t: 1.0 - t / 5_000)
    result = calibrate([noise], refine_evaluations=0)
    assert result.cost.train_tokens_per_s < 1e9
    assert any("train_tokens_per_s" in w and "not identifiable" in w for w in result.warnings)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(noise), "--out", str(out)]) == 0
    assert "warning: train_tokens_per_s: not identifiable" in capsys.readouterr().err
    assert load_profile(out).meta["sources"]["warnings"]


def test_a_few_slow_loads_do_not_set_every_loads_cost():
    import numpy as np

    from marlaas.twin.calibrate import fit_load_costs

    idle = np.zeros(100)
    durations = np.r_[np.full(90, 0.01), np.full(10, 0.2)]  # a tenth queued behind other work
    base, wait, _ = fit_load_costs(durations, idle)
    assert base < 0.013  # an absolute-error fit gives their mean, 0.029 s
    busy = np.linspace(0.0, 0.05, 50)
    base, wait, _ = fit_load_costs(0.01 + 2.0 * busy, busy)
    assert (base, wait) == (pytest.approx(0.01), pytest.approx(2.0))


def test_a_run_on_a_busy_host_is_named_by_calibrate_and_replay(runs, tmp_path, capsys):
    """Its durations are its host's, which no profile can know: calibrate warns, replay says
    so beside its errors; a quiet run's is silent."""
    busy = tmp_path / "busy"
    busy.mkdir()
    for f in ("events.parquet", "workload.json"):
        (busy / f).write_bytes((runs["fair"] / f).read_bytes())
    summary = json.loads((runs["fair"] / "summary.json").read_text())
    summary["host"] = {"cpus": 2, "other_cpu_s": 80.0, "steal_s": 0.0, "others_share": 0.4}
    (busy / "summary.json").write_text(json.dumps(summary))
    warned = [w for w in calibrate([busy], refine_evaluations=0).warnings if "busy" in w]
    assert warned == [f"{busy}: other processes and the hypervisor took 40% of the machine's "
                      "processor time while it ran (80 CPU-s, steal 0 s): its times are a busy "
                      "machine's; calibrate from runs on a quiet machine"]  # fmt: skip
    assert not [w for w in calibrate([runs["fair"]], refine_evaluations=0).warnings if "busy" in w]
    capsys.readouterr()
    assert main(["replay", str(busy), "--out", str(tmp_path / "r")]) == 0
    assert "note: the real run's host was busy: other processes" in capsys.readouterr().out
    assert main(["replay", str(runs["fair"]), "--out", str(tmp_path / "r2")]) == 0
    assert "host was busy" not in capsys.readouterr().out


def test_the_holdout_benchmark_calibrates_per_schedule_and_replays_the_others(runs):
    from benchmarks.twin_holdout import holdout_table, per_schedule, repeat_spread, run_table
    from marlaas.twin.real_run import load_real_run

    loaded = [load_real_run(runs[name]) for name in ("fair", "fair-2", "sequential")]
    loaded[2].summary["host"] = {"others_share": 0.25, "run_cpu_s": 12.0}
    listed = run_table(loaded)
    assert list(listed["schedule"]) == ["fair", "fair", "fifo+sequential"]
    assert list(listed["others"]) == ["-", "-", "25.0%"]
    assert (listed["generate_s"] > 0).all()
    spread = listed.assign(makespan_s=[10.0, 11.0, 30.0])
    assert repeat_spread(spread) == ["repeats of fair: makespans 10.0, 11.0 s, 9.5% apart"]
    table, _warnings = holdout_table(loaded, refine=0)
    assert [(r["calibrated on"], r["replayed"]) for _, r in table.iterrows()] == [
        ("fair", "seq"), ("fifo+sequential", "fair"), ("fifo+sequential", "fair-2")
    ]  # fmt: skip
    assert table["others"].tolist() == ["25.0%", "-", "-"]
    assert table["speed"].isna().all()  # no run of these timed a yardstick
    # one true cost model, fitted by the regression alone (refine 0: not within 10%, above);
    # the sequential run's groups are all of one length: its rows cannot tell the terms apart
    # (calibrate warns), so only the profile fitted on the fair runs is held to it
    assert abs(table["makespan error"].iloc[0]) < 0.25
    made = table.assign(**{"makespan error": [0.05, -0.12, 0.02], "busy error pt": [1.0, 2.0, 6.5]})
    assert per_schedule(made) == [
        "calibrated on fair: makespan within 10% on 1 of 1, busy within 5 points on 1, both on 1",
        "calibrated on fifo+sequential: makespan within 10% on 1 of 2, busy within 5 points on "
        "1, both on 0",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"runs of one schedule only \(fair\)"):
        holdout_table(loaded[:2], refine=0)


def test_the_holdout_benchmark_mixed_calibrates_on_one_run_of_each_of_two_schedules(runs):
    from benchmarks.twin_holdout import calibration_sets, holdout_table, per_schedule
    from marlaas.twin.real_run import load_real_run

    by_schedule = {"a": ["a1", "a2"], "b": ["b1", "b2"], "c": ["c1"]}
    assert calibration_sets(by_schedule, mixed=False) == [
        ("a", ["a1", "a2"]), ("b", ["b1", "b2"]), ("c", ["c1"])
    ]  # fmt: skip
    assert calibration_sets(by_schedule, mixed=True) == [
        ("a + b", ["a1", "b1"]), ("a + b", ["a2", "b2"]), ("a + c", ["a1", "c1"]),
        ("b + c", ["b1", "c1"]),
    ]  # fmt: skip
    loaded = [load_real_run(runs[name]) for name in ("fair", "fair-2", "sequential")]
    table, _warnings = holdout_table(loaded, refine=0, mixed=True)
    # fair's first run and the sequential run calibrate; fair's second is replayed
    rows = [(r["calibrated on"], r["replayed"], r["schedule seen"]) for _, r in table.iterrows()]
    assert rows == [("fair + fifo+sequential", "fair-2", True)]
    with pytest.raises(ValueError, match="none is left to replay"):  # one run of each
        holdout_table([loaded[0], loaded[2]], refine=0, mixed=True)
    made = pd.DataFrame({
        "calibrated on": ["a + b"] * 3, "schedule seen": [True, False, False],
        "makespan error": [0.05, 0.02, -0.2], "busy error pt": [1.0, 1.0, 1.0],
    })  # fmt: skip
    assert per_schedule(made) == [
        "calibrated on a + b: makespan within 10% on 2 of 3, busy within 5 points on 3, both on 2",
        "  of them, runs of a schedule not calibrated on: makespan within 10% on 1 of 2",
    ]


def test_runs_of_one_adapter_per_engine_are_said_to_hide_the_adapters_cost(runs):
    """A sequential run's engines hold one adapter whenever they decode: its per-adapter cost
    cannot be told from the per-iteration one, which calibrate says (a fair run's do not)."""
    said = [w for w in calibrate([runs["sequential"]], refine_evaluations=0).warnings
            if "held one adapter whenever it decoded" in w]  # fmt: skip
    assert len(said) == 1 and said[0].startswith("decode_per_adapter_ms: ")
    fair = calibrate([runs["fair"]], refine_evaluations=0).warnings
    assert not any("held one adapter" in w for w in fair)


def test_runs_of_one_job_at_a_time_are_said_to_hide_what_work_costs_beside_others(runs):
    """A sequential schedule's runs never have two jobs' work in flight: what work costs
    beside other jobs' is in none of them, which calibrate says (a fair run's do not)."""
    from marlaas.twin.calibrate import _one_job_warning
    from marlaas.twin.operations import most_jobs_at_once

    def said(paths):
        found = calibrate(paths, refine_evaluations=0).warnings
        return [w for w in found if w.startswith("work beside other jobs': every run")]

    assert len(said([runs["sequential"]])) == 1
    assert said([runs["fair"]]) == [] and said([runs["sequential"], runs["fair"]]) == []
    sequential = load_real_run(runs["sequential"])  # a workload of one job: no other schedule
    alone = sequential.workload.model_copy(update={"jobs": sequential.workload.jobs[:1]})
    assert _one_job_warning([dataclasses.replace(sequential, workload=alone)]) == []
    assert len(_one_job_warning([sequential])) == 1
    # one job's generation, its environment step and its training back to back count once; a
    # job starting as another ends is not beside it; an overlap of two is two
    work = pd.DataFrame({
        "kind": ["generate", "env", "train", "generate", "idle", "train"],
        "job": ["a", "a", "a", "b", "c", "b"],
        "start_s": [0.0, 1.0, 1.5, 2.0, 0.0, 3.0],
        "end_s": [1.0, 1.5, 2.0, 2.5, 9.0, 4.0],
    })  # fmt: skip
    assert most_jobs_at_once(work) == 1
    two_envs = pd.DataFrame({"kind": ["env", "env"], "job": ["a", "a"], "start_s": [0.0, 0.5],
                             "end_s": [1.0, 1.5]})  # fmt: skip
    assert most_jobs_at_once(two_envs) == 1  # jobs, not rows: one job's two turns at once
    assert most_jobs_at_once(work.assign(end_s=[1.0, 1.5, 2.1, 2.5, 9.0, 4.0])) == 2
    assert most_jobs_at_once(work.iloc[4:5]) == 0


def test_a_load_wait_no_run_shows_is_assumed_and_said(runs, tmp_path):
    """Under `sequential` no engine load starts while a batch decodes: the wait cannot be fitted
    (the regression leaves it at 0, and a replay of a concurrent schedule would load adapters
    for free), so calibrate assumes one iteration and warns; runs that show it fit it."""
    from marlaas.twin.calibrate import UNSEEN_LOAD_WAIT_ITERATIONS

    sequential = calibrate([runs["sequential"]], refine_evaluations=0)
    assert sequential.cost.adapter_load_wait_iterations == UNSEEN_LOAD_WAIT_ITERATIONS > 0
    assert any(w.startswith("adapter_load_wait_iterations") for w in sequential.warnings)
    one_slot = {**TWO_ENGINES, "cluster.engine.adapter_slots": 1}  # loads while the other decodes
    fair = calibrate([fake_real_run(tmp_path, "one-slot", one_slot, "fair")], refine_evaluations=0)
    assert fair.cost.adapter_load_wait_iterations == pytest.approx(
        TRUE.adapter_load_wait_iterations
    )
    assert not any(w.startswith("adapter_load_wait_iterations") for w in fair.warnings)


def test_a_shared_prompt_is_fitted_as_prefilled_once(tmp_path):
    """With prefix caching a group's 8 samples prefill a 300-token prompt's 288 shared tokens
    once (the simulator's count, which a real engine's matches: tests/executors/
    test_prefix_blocks.py); calibrate counts the same, so it finds the prefill rate the runs
    were made with (counting 8 x 300 tokens, it found several times that)."""
    sharing = {
        "cluster.engine.prefix_caching": True,
        "jobs.*.prompt_tokens": {"dist": "constant", "value": 300},
        "jobs.*.rl.group_size": 8,
        "jobs.*.response_tokens": {"dist": "uniform", "low": 2, "high": 8},
    }
    runs = [fake_real_run(tmp_path, name, {**sharing, **extra}, "fair")
            for name, extra in (("one", {}), ("two", TWO_ENGINES))]  # fmt: skip
    fitted = calibrate(runs).cost
    assert fitted.prefill_tokens_per_s == pytest.approx(TRUE.prefill_tokens_per_s, rel=0.25)


def _with_steps(run: Path, out: Path, seed: int, cost: CostModel = TRUE, steps: int = 300):
    """A copy of ``run`` with an engine_steps.csv of ``steps`` random steps of its engines,
    each as long as ``cost``'s engine model says (a decode iteration where it decodes, a
    prefill's groups and tokens)."""
    shutil.copytree(run, out)
    rng = np.random.default_rng(seed)
    decoding = rng.integers(0, 40, steps) * (rng.random(steps) < 0.9)
    prefill = rng.choice([0, 0, 0, 64, 300], steps) + 8 * (decoding == 0)  # each computes
    prefills = (prefill > 0) * rng.integers(1, 3, steps)
    context = decoding * rng.integers(20, 200, steps)
    adapters = (decoding > 0) * rng.integers(1, 4, steps)
    decode_ms = (
        cost.decode_base_ms * (decoding > 0)
        + cost.decode_per_seq_ms * decoding
        + cost.decode_per_kv_token_ms * context
        + cost.decode_per_adapter_ms * adapters
    )
    duration = (decode_ms + cost.prefill_base_ms * prefills) / 1e3
    duration = duration + prefill / cost.prefill_tokens_per_s
    engines = sorted(d.name for d in Scheduler.for_workload(load_real_run(run).workload)
                     .cluster.engines)  # fmt: skip
    pd.DataFrame({
        "engine": [engines[i % len(engines)] for i in range(steps)],
        "start_s": np.linspace(0.0, 10.0, steps), "duration_s": duration, "decoding": decoding,
        "context_tokens": context, "adapters": adapters, "prefill_tokens": prefill,
        "prefills": prefills, "waiting": 0,
    }).to_csv(out / "engine_steps.csv", index=False)  # fmt: skip
    return out


def test_calibrate_fits_the_engine_on_its_measured_steps_where_every_run_has_them(runs, tmp_path):
    """Steps say each engine term directly: fitted on them, the terms come back exactly (a
    group's row mixes many iterations, other groups' prefills and the other engines' turns);
    a run without them sends the fit back to the generate rows of all."""
    made = [_with_steps(runs[k], tmp_path / k, seed) for seed, k in enumerate(("fair", "fair-2"))]
    result = calibrate(made, refine_evaluations=0)
    for name in ("decode_base_ms", "decode_per_seq_ms", "decode_per_kv_token_ms",
                 "decode_per_adapter_ms", "prefill_tokens_per_s"):  # fmt: skip
        assert getattr(result.cost, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name
    assert "over 600 engine steps" in result.table()
    mixed = calibrate([made[0], runs["fair-2"]], refine_evaluations=0)
    assert "engine steps" not in mixed.table() and "generate rows" in mixed.table()


@pytest.mark.parametrize(
    ("change", "said"),
    [({"duration_s": -0.1}, "row 2, duration_s: -0.1 is not a number >= 0"),
     ({"decoding": "many"}, "row 2, decoding: 'many' is not a number >= 0"),
     ({"engine": "gpu/7"}, "engine 'gpu/7' is not one of the run's engines ('rollout/0')"),
     ({"prefills": None}, "no column prefills")],
)  # fmt: skip
def test_a_bad_engine_steps_file_is_one_error_naming_it(runs, tmp_path, change, said):
    run = _with_steps(runs["fair"], tmp_path / "run", seed=0)
    steps = pd.read_csv(run / "engine_steps.csv").astype({k: object for k in change})
    for column, value in change.items():
        if value is None:
            steps = steps.drop(columns=column)
        else:
            steps.loc[0, column] = value
    steps.to_csv(run / "engine_steps.csv", index=False)
    with pytest.raises(CalibrationError, match=r"engine_steps\.csv: ") as caught:
        calibrate([run], refine_evaluations=0)
    assert said in str(caught.value)


def test_an_engine_steps_file_without_rows_is_named_not_passed_over(runs, tmp_path):
    """A header-only engine_steps.csv (cut, or edited) made calibrate fit the decode terms
    from the generate rows without a word; `marlaas train` never writes one."""
    run = _with_steps(runs["fair"], tmp_path / "run", seed=0)
    steps = pd.read_csv(run / "engine_steps.csv")
    steps.iloc[:0].to_csv(run / "engine_steps.csv", index=False)
    with pytest.raises(CalibrationError, match=r"engine_steps\.csv: no rows"):
        calibrate([run], refine_evaluations=0)


def test_prompts_longer_than_the_workload_declares_are_named_once_per_job(runs, tmp_path):
    """Real prompts longer than the workload declares (an environment's own prompt text): the
    scheduler reserved for the declared lengths and the engines' caches were sized from them,
    so the engines may have queued what the simulator runs at once: calibrate says so, once
    per job; runs within their declared lengths say nothing."""
    assert not any("prompts reached" in w for w in calibrate([runs["fair"]], 0).warnings)
    run = Path(shutil.copytree(runs["fair"], tmp_path / "run"))
    events = read_event_log(run)
    longer = (events["job"] == "emit-a") & (events["kind"] == "generate") & (events["turn"] == 0)
    events.loc[longer, "prompt_tokens"] = events.loc[longer, "prompt_tokens"] + 50
    write_event_log(events, run / "events.parquet")
    [job] = [j for j in load_real_run(run).workload.jobs if j.name == "emit-a"]
    declared = prompt_cap(job)
    said = [w for w in calibrate([run, runs["fair-2"]], 0).warnings if "prompts reached" in w]
    assert said == [
        f"job emit-a: its prompts reached {int(events.loc[longer, 'prompt_tokens'].max())} "
        f"tokens where the workload declares at most {declared} (prompt_tokens): the scheduler "
        "reserved, and the engines' KV caches were sized, for the declared lengths, and an "
        "engine may have queued requests that the simulator runs at once; declare the lengths "
        "its environment produces"
    ]


def test_the_holdout_benchmark_names_a_path_that_is_not_a_run(runs, tmp_path):
    from benchmarks.twin_holdout import main as holdout

    stray = tmp_path / "fair-1.probe"  # a file beside the run folders, caught by a shell glob
    stray.write_text("{}")
    with pytest.raises(SystemExit) as exited:
        holdout([str(runs["fair"]), str(stray)])
    assert str(exited.value).startswith(f"twin_holdout: {stray}: not a real training run")


def copy_run(source: Path, target: Path, **summary_keys) -> Path:
    """A copy of the run folder ``source`` at ``target`` with ``summary_keys`` set in its
    summary."""
    target.mkdir()
    for f in ("events.parquet", "workload.json"):
        (target / f).write_bytes((source / f).read_bytes())
    summary = {**json.loads((source / "summary.json").read_text()), **summary_keys}
    (target / "summary.json").write_text(json.dumps(summary))
    return target


def test_the_yardstick_goes_from_the_runs_to_the_profile_and_the_replay(runs, tmp_path, capsys):
    """calibrate keeps its runs' mean yardstick in the profile's sources; replay sets a run's
    against it (a run slower on the fixed batch: 1.25x); runs without one say nothing."""
    slow = copy_run(runs["fair"], tmp_path / "slow",
                    engine_yardstick_s_per_token={"rollout/0": 5e-4})  # fmt: skip
    calib = [copy_run(runs["fair"], tmp_path / f"c{i}",
                      engine_yardstick_s_per_token={"rollout/0": v})
             for i, v in enumerate((3e-4, 5e-4))]  # fmt: skip
    fit = calibrate(calib, refine_evaluations=0)
    assert fit.yardstick_s_per_token == pytest.approx(4e-4)
    assert calibrate([runs["fair"]], refine_evaluations=0).yardstick_s_per_token is None
    assert main(["calibrate", *map(str, calib), "--out", str(tmp_path / "p.yaml")]) == 0
    capsys.readouterr()
    assert main(["replay", str(slow), "--cost", str(tmp_path / "p.yaml"), "--out",
                 str(tmp_path / "r")]) == 0  # fmt: skip
    assert (
        "note: the run's engines took 1.25x the calibration runs' time on the fixed "
        "yardstick batch (0.5 against 0.4 ms per token): the replay charges the profile's "
        f"engine costs at {1.25**SPEED_PER_YARDSTICK:.3g}x"
    ) in capsys.readouterr().out
    replayed = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert replayed["replayed_at_speed"] == pytest.approx(1.25**SPEED_PER_YARDSTICK)
    assert main(["replay", str(runs["fair"]), "--cost", str(tmp_path / "p.yaml"), "--out",
                 str(tmp_path / "r2")]) == 0  # fmt: skip
    assert "note: the run's engines" not in capsys.readouterr().out
    other = tmp_path / "other.yaml"  # the same profile, from another model's runs
    text = (tmp_path / "p.yaml").read_text()
    other.write_text(text.replace("model: ", "model: another-", 1))
    assert main(["replay", str(slow), "--cost", str(other), "--out", str(tmp_path / "r3")]) == 0
    assert "note: the run's engines" not in capsys.readouterr().out
    hostile = copy_run(runs["fair"], tmp_path / "hostile",
                       engine_yardstick_s_per_token={"rollout/0": "fast"})  # fmt: skip
    with pytest.raises(ValueError, match="engine_yardstick_s_per_token"):
        calibrate([hostile], refine_evaluations=0)


def test_a_replay_charges_the_run_at_its_speed(runs, tmp_path):
    """A run whose engines ran the yardstick 1.5x slower than the calibration runs' replays
    longer than at the profile's own speed (its compute at the speed that follows from it,
    its environments' recorded times as they were); a run 10x slower is not the same
    hardware: the profile's own costs."""
    calib = [copy_run(runs["fair"], tmp_path / f"c{i}",
                      engine_yardstick_s_per_token={"rollout/0": 4e-4})
             for i in range(2)]  # fmt: skip
    fit = calibrate(calib, refine_evaluations=0)
    profile = CostProfile("p", fit.cost, "(mem)", "-", provenance(fit, "p"))
    slow = copy_run(runs["fair"], tmp_path / "slow",
                    engine_yardstick_s_per_token={"rollout/0": 6e-4})  # fmt: skip
    _, at_speed, _ = replay(slow, profile)
    _, own, _ = replay(slow, profile, at_run_speed=False)
    charged = 1.5**SPEED_PER_YARDSTICK
    assert at_speed["replayed_at_speed"] == pytest.approx(charged) and 1.3 < charged < 1.5
    assert own["replayed_at_speed"] is None
    ratio = at_speed["metrics"]["makespan_s"] / own["metrics"]["makespan_s"]
    assert 1.1 < ratio <= charged + 1e-9
    far = copy_run(runs["fair"], tmp_path / "far",
                   engine_yardstick_s_per_token={"rollout/0": 4e-3})  # fmt: skip
    _, unscaled, _ = replay(far, profile)
    assert unscaled["replayed_at_speed"] is None
    assert unscaled["metrics"]["makespan_s"] == own["metrics"]["makespan_s"]
    other = CostProfile("o", fit.cost, "(mem)", "-", {**provenance(fit, "o"), "model": "other"})
    assert replay(slow, other)[1]["replayed_at_speed"] is None  # another model's yardstick


def test_a_busy_hosts_yardstick_is_not_charged(runs, tmp_path, capsys):
    """A run whose host was busy (others took 40% of the processors) timed its yardstick in a
    moment of that load, not at the speed its host gave the run (docs/twin-log.md, 2026-12-07:
    over runs of the same engine steps it told nothing of their time): its replay charges the
    profile's own costs and says why, and a profile calibrated on such a run keeps no
    yardstick; a quiet run is charged its speed as before."""
    busy_host = {"cpus": 2, "other_cpu_s": 80.0, "steal_s": 0.0, "others_share": 0.4}
    quiet_host = {**busy_host, "other_cpu_s": 2.0, "others_share": 0.01}
    calib = [copy_run(runs["fair"], tmp_path / f"c{i}", host=quiet_host,
                      engine_yardstick_s_per_token={"rollout/0": 4e-4})
             for i in range(2)]  # fmt: skip
    fit = calibrate(calib, refine_evaluations=0)
    profile = CostProfile("p", fit.cost, "(mem)", "-", provenance(fit, "p"))
    slow = {"engine_yardstick_s_per_token": {"rollout/0": 6e-4}}
    busy = copy_run(runs["fair"], tmp_path / "busy", host=busy_host, **slow)
    quiet = copy_run(runs["fair"], tmp_path / "quiet", host=quiet_host, **slow)
    assert replay(busy, profile)[1]["replayed_at_speed"] is None
    assert replay(quiet, profile)[1]["replayed_at_speed"] == pytest.approx(1.5**SPEED_PER_YARDSTICK)
    assert calibrate([busy, calib[0]], refine_evaluations=0).yardstick_s_per_token is None
    assert calibrate([quiet, calib[0]], refine_evaluations=0).yardstick_s_per_token == (
        pytest.approx(5e-4))  # fmt: skip
    assert main(["calibrate", *map(str, calib), "--out", str(tmp_path / "p.yaml")]) == 0
    capsys.readouterr()
    assert main(["replay", str(busy), "--cost", str(tmp_path / "p.yaml"), "--out",
                 str(tmp_path / "r")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "its yardstick timed that moment's load, not its speed: the replay charges the " \
        "profile's own costs" in out  # fmt: skip
    assert "the replay charges the profile's engine costs at" not in out


def test_a_profile_that_keeps_no_yardstick_says_why(runs, tmp_path, capsys):
    """A profile calibrated on a busy host's run keeps no yardstick (ea8e2bf): calibrate warns
    that it keeps none and why, and the replay of a quiet run that timed one, which then
    charges the profile's own costs, says so instead of nothing (a quiet run's yardstick 1.5x
    the calibration runs' was charged 1.38x before ea8e2bf, and after it silently 1x)."""
    busy_host = {"cpus": 2, "other_cpu_s": 80.0, "steal_s": 0.0, "others_share": 0.4}
    quiet_host = {**busy_host, "other_cpu_s": 2.0, "others_share": 0.01}
    stick = {"rollout/0": 4e-4}
    calib = [copy_run(runs["fair"], tmp_path / "busy", host=busy_host,
                      engine_yardstick_s_per_token=stick),
             copy_run(runs["fair"], tmp_path / "quiet", host=quiet_host,
                      engine_yardstick_s_per_token=stick)]  # fmt: skip
    fit = calibrate(calib, refine_evaluations=0)
    assert fit.yardstick_s_per_token is None
    kept = [w for w in fit.warnings if w.startswith("yardstick:")]
    assert kept and "keeps none" in kept[0] and "busy" in kept[0], fit.warnings
    assert main(["calibrate", *map(str, calib), "--out", str(tmp_path / "p.yaml")]) == 0
    slow = copy_run(runs["fair"], tmp_path / "slow", host=quiet_host,
                    engine_yardstick_s_per_token={"rollout/0": 6e-4})  # fmt: skip
    capsys.readouterr()
    assert main(["replay", str(slow), "--cost", str(tmp_path / "p.yaml"), "--out",
                 str(tmp_path / "r")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "the profile keeps no yardstick of its calibration runs" in out
    assert "not this run's speed (its yardstick 0.6 ms per token)" in out
    capsys.readouterr()
    plain = copy_run(runs["fair"], tmp_path / "plain", host=quiet_host)  # timed no yardstick
    assert main(["replay", str(plain), "--cost", str(tmp_path / "p.yaml"), "--out",
                 str(tmp_path / "r2")]) == 0  # fmt: skip
    assert "yardstick" not in capsys.readouterr().out


def test_a_speed_is_set_only_between_two_measured_times():
    from marlaas.executors.yardstick import run_yardstick

    two = {"engine_yardstick_s_per_token": {"a": 2e-4, "b": 4e-4}}
    assert run_yardstick(two) == pytest.approx(3e-4)
    ends = {**two, "engine_yardstick_end_s_per_token": {"a": 6e-4, "b": 8e-4}}
    assert run_yardstick(ends) == pytest.approx(5e-4)  # both ends, every engine
    odd = {"engine_yardstick_s_per_token": "fast", "engine_yardstick_end_s_per_token":
           {"a": -1.0, "b": True, "c": "x", "d": 4e-4}}  # fmt: skip
    assert run_yardstick(odd) == pytest.approx(4e-4)  # only times count
    assert run_yardstick({}) is None and run_yardstick({"engine_yardstick_s_per_token": {}}) is None
    assert speed_ratio(6e-4, 4e-4) == pytest.approx(1.5)
    for hostile in (None, 0, -1e-4, "3e-4", True, float("nan"), float("inf")):
        assert speed_ratio(hostile, 4e-4) is None and speed_ratio(4e-4, hostile) is None
        assert speed_note(hostile, 4e-4) is None and speed_note(4e-4, hostile) is None
    tiny = speed_note(4e-4, 1e-300)  # a hand-edited profile: one short line, not 300 digits
    assert tiny.endswith("the replay charges the profile's own costs") and len(tiny) < 250


def test_the_speed_charged_follows_the_yardstick_within_four_times_either_way():
    """A faster run is charged below 1, a slower one above, both less than the ratio itself
    (the yardstick is noisy); at 4x either way still charged, past it the profile's own."""
    assert charged_speed(None) is None
    assert charged_speed(1.0) == 1.0
    assert 0.5 < charged_speed(0.5) < 1.0 and 1.0 < charged_speed(2.0) < 2.0
    assert charged_speed(4.0) == pytest.approx(4.0**SPEED_PER_YARDSTICK)
    assert charged_speed(0.25) == pytest.approx(0.25**SPEED_PER_YARDSTICK)
    assert charged_speed(4.01) is None and charged_speed(0.249) is None
    assert "charges the profile's engine costs at" in speed_note(4e-4, 1e-4)
    assert speed_note(4.1e-4, 1e-4).endswith("the replay charges the profile's own costs")
