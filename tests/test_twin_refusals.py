"""The twin refuses a run folder it cannot trust, in one line naming the file: a bad
engine_warmup_s, a run that did not finish, a log cut short or of another workload's steps, a
log without a stage, duplicated rows; and a profile file that does not name every cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marlaas.cli import main
from marlaas.eventlog import read_event_log, write_event_log
from marlaas.twin.calibrate import CalibrationError, calibrate
from marlaas.twin.replay import replay
from tests.test_twin import copy_run, fake_real_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return fake_real_run(tmp_path_factory.mktemp("refusals"), "fair", {}, "fair")


def _both_refuse(folder: Path, match: str) -> None:
    """calibrate and replay of ``folder`` each raise a CalibrationError matching ``match``."""
    with pytest.raises(CalibrationError, match=match):
        calibrate([folder], refine_evaluations=0)
    with pytest.raises(CalibrationError, match=match):
        replay(folder)


def _with_events(run: Path, target: Path, change) -> Path:
    """A copy of ``run`` at ``target`` whose event log is ``change(events)``."""
    copy = copy_run(run, target)
    write_event_log(change(read_event_log(run)), copy / "events.parquet")
    return copy


@pytest.mark.parametrize(
    "value, said",
    [
        ({"rollout/0": "fast"}, r"engine_warmup_s\.rollout/0: Input should be a valid number"),
        ({"rollout/0": None}, r"engine_warmup_s\.rollout/0: Input should be a valid number"),
        ({"rollout/0": -1.0}, r"engine_warmup_s\.rollout/0: Input should be greater than"),
        (5, "engine_warmup_s: Input should be a valid dictionary"),
        ([1, 2], "engine_warmup_s: Input should be a valid dictionary"),
        (None, "engine_warmup_s: Input should be a valid dictionary"),
        (True, "engine_warmup_s: Input should be a valid dictionary"),
    ],
)
def test_a_bad_engine_warmup_is_one_error_naming_the_file_and_field(run, tmp_path, value, said):
    bad = copy_run(run, tmp_path / "bad", engine_warmup_s=value)
    with pytest.raises(CalibrationError, match=f"bad/summary.json: {said}"):
        calibrate([bad], refine_evaluations=0)


def test_a_bad_engine_warmup_is_one_line_from_the_cli(run, tmp_path, capsys):
    bad = copy_run(run, tmp_path / "bad", engine_warmup_s={"rollout/0": "fast"})
    assert main(["calibrate", str(bad), "--out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: ") and err.count("\n") == 1
    assert "summary.json: engine_warmup_s" in err and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("status", ["partial", "running"])
def test_a_run_that_did_not_finish_is_refused(run, tmp_path, status):
    unfinished = copy_run(run, tmp_path / "unfinished")
    manifest = json.loads((run / "manifest.json").read_text())
    (unfinished / "manifest.json").write_text(json.dumps({**manifest, "status": status}))
    _both_refuse(unfinished, f"manifest.json: status '{status}': the run did not finish")


def test_a_log_cut_short_is_refused_naming_the_job_and_its_steps(run, tmp_path):
    events = read_event_log(run)
    last = events[events["kind"] == "train"].iloc[-1]  # the last step of its job
    cut = _with_events(run, tmp_path / "cut", lambda e: e[e.index < last.name])
    _both_refuse(cut, f"job '{last.job}' has 5 training steps in the log, but 6 in "
                      "workload.json")  # fmt: skip


@pytest.mark.parametrize("steps", [2, 100_000])
def test_a_workload_of_other_steps_than_the_log_is_refused(run, tmp_path, steps):
    other = copy_run(run, tmp_path / "other")
    workload = json.loads((run / "workload.json").read_text())
    for job in workload["jobs"]:
        job["rl"]["steps"] = steps
    (other / "workload.json").write_text(json.dumps(workload))
    name = workload["jobs"][0]["name"]
    _both_refuse(other, f"job '{name}' has 6 training steps in the log, but {steps} in "
                        "workload.json")  # fmt: skip


def test_replay_refuses_a_log_without_a_stage_as_calibrate_does(run, tmp_path):
    nogen = _with_events(run, tmp_path / "nogen", lambda e: e[e["kind"] != "generate"])
    _both_refuse(nogen, "no successful generate rows in the event log")
    nosync = _with_events(run, tmp_path / "nosync", lambda e: e[e["kind"] != "sync"])
    _both_refuse(nosync, "no successful sync rows in the event log")


def test_an_event_log_of_repeated_rows_is_refused_saying_how_many(run, tmp_path):
    import pandas as pd

    rows = len(read_event_log(run))
    twice = _with_events(run, tmp_path / "twice", lambda e: pd.concat([e, e]))
    _both_refuse(twice, f"events.parquet: {rows} of its {2 * rows} rows repeat an earlier row")


def test_a_profile_file_missing_a_cost_is_refused_naming_it(run, tmp_path, capsys):
    from marlaas.sim.cost_model import CostModel
    from marlaas.sim.cost_profiles import (
        LATE_COSTS,
        ProfileError,
        bundled_profiles,
        load_profile,
    )

    whole = CostModel().model_dump()
    (tmp_path / "whole.yaml").write_text(json.dumps({"name": "whole", "cost": whole}))
    assert load_profile(tmp_path / "whole.yaml").cost == CostModel()
    less = {k: v for k, v in whole.items() if k != "decode_base_ms"}
    (tmp_path / "less.yaml").write_text(json.dumps({"name": "less", "cost": less}))
    with pytest.raises(ProfileError, match=r"less.yaml: cost: missing decode_base_ms; "):
        load_profile(tmp_path / "less.yaml")
    (tmp_path / "empty.yaml").write_text("name: empty\ncost: {}\n")
    empty, out = str(tmp_path / "empty.yaml"), str(tmp_path / "r")
    assert main(["replay", str(run), "--cost", empty, "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()
    assert "empty.yaml: cost: missing decode_base_ms, decode_per_seq_ms, " in err
    assert f" and {len(whole) - len(LATE_COSTS) - 5} more; " in err
    for name in bundled_profiles():  # those marlaas ships keep loading
        load_profile(name)
    older = {k: v for k, v in whole.items() if k not in LATE_COSTS}  # calibrated before them
    (tmp_path / "older.yaml").write_text(json.dumps({"name": "older", "cost": older}))
    assert load_profile(tmp_path / "older.yaml").cost == CostModel()


def _yardstick_profile(folder: Path, model: str) -> Path:
    """A complete calibrated profile of ``model`` whose runs' yardstick was 0.4 ms a token."""
    from tests.test_twin import TRUE

    path = folder / f"p-{len(list(folder.glob('p-*.yaml')))}.yaml"
    path.write_text(json.dumps({"name": "p", "origin": "calibrated", "model": model,
                                "sources": {"yardstick_s_per_token": 4e-4},
                                "cost": TRUE.model_dump()}))  # fmt: skip
    return path


def _run_of_model(run: Path, target: Path, model_path: str) -> Path:
    """A copy of ``run`` whose yardstick is 0.5 ms a token and whose base model's folder is
    ``model_path``."""
    copy = copy_run(run, target, engine_yardstick_s_per_token={"rollout/0": 5e-4})
    workload = json.loads((copy / "workload.json").read_text())
    workload["base_model"]["path"] = model_path
    (copy / "workload.json").write_text(json.dumps(workload))
    return copy


def test_one_model_folder_spelled_two_ways_is_the_same_model(run, tmp_path, capsys):
    """A profile naming its model's folder relative to itself and a run naming the same
    folder absolute: the replay charges the run's yardstick speed and warns of nothing."""
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    profile = _yardstick_profile(tmp_path, "tiny-llama (models/tiny)")
    absolute = _run_of_model(run, tmp_path / "abs", str(tmp_path / "models" / "tiny"))
    capsys.readouterr()
    assert main(["replay", str(absolute), "--cost", str(profile), "--out",
                 str(tmp_path / "r")]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert "note: the run's engines took 1.25x" in out and "warning" not in err


@pytest.mark.parametrize("model", ["llama-7b (models/tiny)", "tiny-llama (/elsewhere/tiny)"])
def test_a_profile_of_another_model_is_a_warning(run, tmp_path, capsys, model):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    profile = _yardstick_profile(tmp_path, model)
    other = _run_of_model(run, tmp_path / "other", str(tmp_path / "models" / "tiny"))
    capsys.readouterr()
    assert main(["replay", str(other), "--cost", str(profile), "--out",
                 str(tmp_path / "r")]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert err.startswith("marlaas: warning: the profile 'p' was fitted on another model "
                          f"({model}) than the run's (tiny-llama ")  # fmt: skip
    assert err.count("\n") == 1 and "note: the run's engines" not in out


def _with_workload(run: Path, target: Path, change) -> Path:
    """A copy of ``run`` at ``target`` whose workload.json is edited in place by ``change``."""
    copy = copy_run(run, target)
    workload = json.loads((copy / "workload.json").read_text())
    change(workload)
    (copy / "workload.json").write_text(json.dumps(workload))
    return copy


def test_calibrate_refuses_runs_of_two_base_models_or_backends(run, tmp_path, capsys):
    """A profile is of one model on one kind of engine: runs of another model (its header
    named the first run's) or another backend are one error naming the file."""
    other = _with_workload(run, tmp_path / "other",
                           lambda w: w["base_model"].update(name="smollm2"))  # fmt: skip
    with pytest.raises(CalibrationError, match=r"other/workload.json: base_model smollm2 "):
        calibrate([run, other], refine_evaluations=0)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(run), str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: ") and err.count("\n") == 1 and not out.exists()
    hf = copy_run(run, tmp_path / "hf", backend="hf")
    with pytest.raises(CalibrationError, match=r"hf/summary.json: backend 'hf', but .* 'sim'"):
        calibrate([run, hf], refine_evaluations=0)
    same = copy_run(run, tmp_path / "same")  # another run of the same model and backend
    assert calibrate([run, same], refine_evaluations=0).model.startswith("tiny-llama")


def test_a_job_arriving_otherwise_than_the_run_logged_it_is_refused(run, tmp_path):
    """workload.json's arrival (what a replay submits the job at) against the summary's and
    the log's: a later one replayed the job 100 s late (+910% makespan), without a word."""
    job = json.loads((run / "workload.json").read_text())["jobs"][0]["name"]

    def later(workload):
        workload["jobs"][0]["arrival_s"] = 100.0

    _both_refuse(_with_workload(run, tmp_path / "late", later),
                 f"late/workload.json: job '{job}' arrives at 100 s, but at 0.0 s in "
                 "summary.json's arrivals")  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    unsaid = _with_workload(run, tmp_path / "unsaid", later)
    (unsaid / "summary.json").write_text(json.dumps({**summary, "arrivals": None}))
    _both_refuse(unsaid, f"unsaid/workload.json: job '{job}' arrives at 100 s, but its work "
                         "starts at 0 s in events.parquet")  # fmt: skip
    moved = copy_run(run, tmp_path / "moved", arrivals={**summary["arrivals"], job: 3.5})
    _both_refuse(moved, f"moved/workload.json: job '{job}' arrives at 0 s, but at 3.5 s in "
                        "summary.json's arrivals")  # fmt: skip


@pytest.mark.parametrize(
    ("field", "said"),
    [("group_size", "samples in a group"), ("max_new_tokens", "tokens in a response")],
)
def test_a_job_shape_smaller_than_its_log_is_refused(run, tmp_path, field, said):
    """workload.json's job shape against the logged turns: a group size or a response bound
    edited below what the run made replayed with drawn lengths, without a word."""
    job = json.loads((run / "workload.json").read_text())["jobs"][0]

    def smaller(workload):
        workload["jobs"][0]["rl"][field] = 1

    _both_refuse(_with_workload(run, tmp_path / "shape", smaller),
                 f"shape/events.parquet: job '{job['name']}' has {job['rl'][field]} {said} in "
                 "the log, but at most 1 in workload.json")  # fmt: skip


@pytest.mark.parametrize(
    ("field", "said"),
    [("group_size", "a group of {} samples"), ("prompts_per_step", "a training step of {} groups")],
)
def test_a_job_shape_larger_than_its_log_is_refused(run, tmp_path, field, said):
    """workload.json's job shape against the logged turns, from above: a group size or the
    prompts of a step edited upwards replayed groups and samples the run never made."""
    job = json.loads((run / "workload.json").read_text())["jobs"][0]

    def larger(workload):
        workload["jobs"][0]["rl"][field] += 1

    _both_refuse(_with_workload(run, tmp_path / "shape", larger),
                 f"shape/events.parquet: job '{job['name']}' has {said.format(job['rl'][field])} "
                 f"in the log, but {field} {job['rl'][field] + 1} in workload.json")  # fmt: skip


def test_a_cluster_device_the_log_never_names_is_refused(run, tmp_path):
    """Every device of a run has its work or idle rows: a workload.json of two engines
    beside a log of one was replayed on two."""

    def two_engines(workload):
        workload["cluster"]["pools"][0]["devices"] = 2

    wider = _with_workload(run, tmp_path / "wider", two_engines)
    _both_refuse(wider, r"wider/workload.json: cluster devices 'rollout/1' have no row in "
                        r"events.parquet \(its devices: 'rollout/0', 'train/0'\)")  # fmt: skip


def _one_job_run(folder: Path, steps: int) -> Path:
    """A fake real run of real-tiny's first job alone, for ``steps`` training steps."""
    from marlaas.core.scheduler import Scheduler
    from marlaas.runs import write_run
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload
    from tests.test_twin import TINY, TRUE

    workload = load_workload(TINY, {"jobs.*.rl.steps": steps, "jobs.*.rl.prompts_per_step": 8})
    workload = workload.model_copy(update={"jobs": workload.jobs[:1]})
    events, summary = simulate_run(workload.model_copy(update={"cost": TRUE}), "fair",
                                   kind="real", backend="sim")  # fmt: skip
    engines = {d.name for d in Scheduler.for_workload(workload).cluster.engines}
    summary["engine_warmup_s"] = dict.fromkeys(engines, TRUE.engine_warmup_s)
    return write_run(folder / f"one-{steps}", events, summary, workload)


def test_a_parameter_fitted_from_a_single_row_is_a_warning(tmp_path):
    """One job's one step: its one load, swap, training step and sync are the profile's
    adapter_load_s, trainer_swap_s, train_* and sync_s, and calibrate says so, naming what
    adds rows; two runs give two rows each and no such warning."""
    one = _one_job_run(tmp_path, 1)
    lone = [w for w in calibrate([one], refine_evaluations=0).warnings if "single row" in w]
    assert lone == [
        "train_overhead_s, train_tokens_per_s, adapter_load_s, trainer_swap_s, sync_s: from a "
        "single row of these runs (one measurement: nothing tells how far another would be "
        "from it); calibrate from more runs, or runs of more steps (of more jobs, for "
        "trainer_swap_s)"
    ]
    again = copy_run(one, tmp_path / "again")
    both = calibrate([one, again], refine_evaluations=0).warnings
    assert not any("single row" in w for w in both)


def test_one_run_of_one_engine_calibrates_without_a_single_row_warning(run, capsys):
    """The README's `marlaas calibrate runs/real-tiny`: one engine warms up once a run, and
    the simulator charges no warm-up (engines are warm when its clock starts), so its one
    engine_warmup_s is no warning; nor is an adapter_load_wait_iterations that calibrate
    assumed (its own warning says so), on every ordinary calibration of one run."""
    warnings = calibrate([run], refine_evaluations=0).warnings
    assert not any("single row" in w for w in warnings), warnings
    lone = [w for w in calibrate([_one_job_run(run.parent, 2)],
                                 refine_evaluations=0).warnings if "single row" in w]  # fmt: skip
    assert lone and "adapter_load_wait_iterations" not in lone[0]


def test_calibrate_takes_one_model_folder_however_each_run_names_it(run, tmp_path, monkeypatch):
    """Runs of one model folder, named absolute (found), relative to the workload file of
    another folder (``../models/tiny``, as `marlaas train` resolves it: not found from the
    run's folder or the working one) or relative to a checkout calibrated from elsewhere:
    one model, not an error (``../models/tiny`` was refused)."""
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    found = _run_of_model(run, tmp_path / "found", str(tmp_path / "models" / "tiny"))
    beside = _run_of_model(run, tmp_path / "beside", "../models/tiny")
    moved = _run_of_model(run, tmp_path / "moved", "models/tiny")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for pair in ([found, beside], [beside, found], [found, moved], [beside, moved]):
        assert calibrate(pair, refine_evaluations=0).model.startswith("tiny-llama")
    other = _run_of_model(run, tmp_path / "other", str(tmp_path / "models" / "small"))
    with pytest.raises(CalibrationError, match=r"other/workload.json: base_model tiny-llama "):
        calibrate([found, other], refine_evaluations=0)
