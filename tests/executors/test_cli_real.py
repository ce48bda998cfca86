"""``marlaas train`` and ``evaluate`` as a user runs them: quiet by default (no library logs,
warnings or weight-loading bars), ``--verbose`` shows them, ``--tracker tensorboard`` logs
every job's steps, ``evaluate`` shows a progress bar per job."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.cli import main
from marlaas.executors.quiet import ALWAYS_ENV, QUIET_ENV
from tests.child_env import python_path_first

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "traces" / "real-tiny.yaml"
JOBS = ("emit-a", "emit-z", "emit-e-slow")
NOISE = ("INFO", "WARNING", "Warning", "Loading weights", "Loading safetensors")


def marlaas(*args: str) -> subprocess.CompletedProcess:
    """``python -m marlaas ARGS`` with the environment a user has (no quieting variables)."""
    user = {k: v for k, v in os.environ.items() if k not in {*QUIET_ENV, *ALWAYS_ENV}}
    env = python_path_first(REPO, base=user)
    return subprocess.run(
        [sys.executable, "-m", "marlaas", *args], capture_output=True, text=True, env=env,
        cwd=REPO, check=False, timeout=300,
    )  # fmt: skip


def tiny_args(model_dir: Path, steps: int) -> list[str]:
    model, steps_ = f"base_model.path={model_dir}", f"jobs.*.rl.steps={steps}"
    return [str(TRACE), "--set", model, "--set", steps_]


@pytest.fixture(scope="module")
def quiet_run(tiny_model_dir, tmp_path_factory):
    """(run folder, finished process) of a 2-step HF `marlaas train --tracker tensorboard`,
    each step in two minibatches with a narrow trust region (the clip acts)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    args = ["train", *tiny_args(tiny_model_dir, 2), "--backend", "hf", "--out", str(out)]
    args += ["--set", "jobs.*.rl.minibatches=2", "--set", "jobs.*.rl.clip_eps=0.01"]
    return out, marlaas(*args, "--tracker", "tensorboard")


def test_train_is_quiet_by_default(quiet_run):
    _out, done = quiet_run
    assert done.returncode == 0, done.stderr
    noisy = [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)]
    assert noisy == []
    assert "training" in done.stderr  # our own progress bar stays
    assert "makespan" in done.stdout


def test_train_tracker_writes_each_jobs_steps_and_the_makespan(quiet_run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, done = quiet_run
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    for job in JOBS:
        acc = EventAccumulator(str(out / "tensorboard" / job))
        acc.Reload()
        rewards = [(e.step, e.value) for e in acc.Scalars("reward/mean")]
        assert [step for step, _ in rewards] == [0, 1]
        assert [v for _, v in rewards] == pytest.approx(summary["reward_curves"][job], abs=1e-4)
        tags = set(acc.Tags()["scalars"])
        assert {"train/loss", "train/clip_fraction", "train/staleness"} <= tags
        assert "train/trust_clip_fraction" in tags
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    (makespan,) = acc.Scalars("run/makespan_s")
    assert makespan.value == pytest.approx(summary["metrics"]["makespan_s"], rel=1e-5)


def test_rewards_csv_records_how_much_of_each_step_the_trust_region_clipped(quiet_run):
    """A step's ratio to its starting policy, clipped from its second minibatch on, is in
    rewards.csv (the trust clip), beside the truncated weights (clip_fraction)."""
    import pandas as pd

    out, done = quiet_run
    assert done.returncode == 0, done.stderr
    rewards = pd.read_csv(out / "rewards.csv")
    assert rewards["trust_clip_fraction"].between(0, 1).all()
    assert (rewards["trust_clip_fraction"] > 0).any()  # clip_eps 0.01: the second half moved


def test_train_records_peak_memory_per_process(quiet_run):
    """summary.json keeps the run's peak resident memory (this process, its children, all of
    them, over the weights), rewards.csv the memory after every step, the table prints it."""
    import pandas as pd

    out, done = quiet_run
    assert done.returncode == 0, done.stderr
    memory = json.loads((out / "summary.json").read_text())["memory"]
    assert memory["peak_rss_mb"] > 100  # torch alone is more
    assert memory["tree_peak_rss_mb"] >= memory["peak_rss_mb"] - 0.1
    assert isinstance(memory["children"], list)
    assert memory["weights_mb"] == pytest.approx(1.256, abs=0.01)  # the tiny model: 1.3 MB
    assert memory["peak_to_weights"] == pytest.approx(
        memory["tree_peak_rss_mb"] / memory["weights_mb"], rel=0.02
    )
    rewards = pd.read_csv(out / "rewards.csv")
    assert (rewards["rss_mb"] > 100).all()
    assert (rewards["rss_mb"] <= memory["tree_peak_rss_mb"] + 1).all()
    assert "peak memory (process)" in done.stdout
    timeline = pd.read_csv(out / "memory.csv")
    assert list(timeline.columns) == ["time_s", "rss_mb", "peak_rss_mb"]
    assert timeline["time_s"].is_monotonic_increasing
    assert timeline["time_s"].iloc[0] < 0 < timeline["time_s"].iloc[-1]  # setup, then the run
    assert timeline["peak_rss_mb"].is_monotonic_increasing
    assert timeline["peak_rss_mb"].max() == pytest.approx(memory["peak_rss_mb"], abs=1.0)
    first_at_peak = timeline[timeline["peak_rss_mb"] >= timeline["peak_rss_mb"].max()].iloc[0]
    assert memory["peak_at_s"] == pytest.approx(first_at_peak["time_s"], abs=0.01)
    acc_dir = out / "tensorboard"
    if importlib.util.find_spec("tensorboard") is not None:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(acc_dir))
        acc.Reload()
        (peak,) = acc.Scalars("run/peak_rss_mb")
        assert peak.value == pytest.approx(memory["peak_rss_mb"], rel=1e-5)


def test_the_train_command_runs_under_jemalloc_where_it_is_installed(quiet_run):
    """Ray's wheel ships jemalloc: `marlaas train` starts again with it preloaded
    (marlaas.allocator), and the summary says which allocator ran."""
    from marlaas.allocator import bundled_jemalloc

    out, done = quiet_run
    assert done.returncode == 0, done.stderr
    memory = json.loads((out / "summary.json").read_text())["memory"]
    assert memory["allocator"] == ("jemalloc" if bundled_jemalloc() else "glibc")


def test_train_verbose_shows_the_libraries_output(tiny_model_dir, tmp_path):
    args = ["train", *tiny_args(tiny_model_dir, 1), "--backend", "hf", "--verbose"]
    done = marlaas(*args, "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "Loading weights" in done.stderr


def test_the_summary_records_the_runs_share_of_the_machine(quiet_run):
    out, done = quiet_run
    host = json.loads((out / "summary.json").read_text())["host"]
    assert host["cpus"] == os.cpu_count()
    assert 0 < host["run_cpu_s"] <= host["wall_s"] * host["cpus"]
    assert 0 <= host["others_share"] <= 1
    assert f"of its {host['cpus']} processors' time" in done.stdout


def test_evaluate_shows_a_progress_bar_per_job(quiet_run, tiny_model_dir, capsys, monkeypatch):
    for key in (*QUIET_ENV, *ALWAYS_ENV):  # evaluate sets them; give them back afterwards
        monkeypatch.delenv(key, raising=False)
    out, _done = quiet_run
    args = [str(TRACE), "--set", f"base_model.path={tiny_model_dir}", "--run", str(out)]
    assert main(["evaluate", *args, "--prompts", "2", "--backend", "hf"]) == 0
    captured = capsys.readouterr()
    for job in JOBS:
        assert f"{job}: 100%" in captured.err and job in captured.out
    rows = json.loads((out / "eval.json").read_text())
    expected = {(job, model) for job in JOBS for model in ("base", "trained")}
    assert {(r["job"], r["model"]) for r in rows} == expected


def test_evaluate_scores_only_the_jobs_asked_for_and_keeps_the_others_rows(
    quiet_run, tiny_model_dir, tmp_path, capsys
):
    out, _done = quiet_run
    own = out / "eval.json"
    args = [str(TRACE), "--set", f"base_model.path={tiny_model_dir}", "--run", str(out),
            "--backend", "hf", "--quiet"]  # fmt: skip
    assert main(["evaluate", *args, "--prompts", "1"]) == 0
    before = json.loads(own.read_text())
    capsys.readouterr()
    assert main(["evaluate", *args, "--prompts", "2", "--jobs", "emit-z"]) == 0
    printed = capsys.readouterr().out
    assert "emit-z" in printed and "emit-a" not in printed  # only what was scored now
    after = json.loads(own.read_text())
    assert [r for r in after if r["job"] != "emit-z"] == [r for r in before if r["job"] != "emit-z"]
    assert [(r["job"], r["prompts"]) for r in after] == [
        ("emit-a", 1), ("emit-a", 1), ("emit-z", 2), ("emit-z", 2), ("emit-e-slow", 1),
        ("emit-e-slow", 1)
    ]  # fmt: skip
    refused = [
        (["--jobs", "emit-a,emit-q"], "no job 'emit-q' in the workload; its jobs are emit-a"),
        (["--jobs", "emit-a", "--out", str(tmp_path / "x.json")], None),  # a new file: fine
    ]  # fmt: skip
    for extra, message in refused:
        code = main(["evaluate", *args, "--prompts", "1", *extra])
        assert code == (2 if message else 0) and (message or "") in capsys.readouterr().err
    elsewhere = tmp_path / "x.json"
    assert [r["job"] for r in json.loads(elsewhere.read_text())] == ["emit-a", "emit-a"]
    assert main(["evaluate", *args, "--jobs", "emit-a", "--out", str(elsewhere)]) == 2
    assert "exists; --jobs merges into the run's own eval.json only" in capsys.readouterr().err
    foreign = [{**row, "job": "other-" + row["job"]} for row in after]  # another workload's
    own.write_text(json.dumps(foreign))
    try:
        assert main(["evaluate", *args, "--jobs", "emit-a"]) == 2
        assert "holds rows of 'other-emit-a', not a job of" in capsys.readouterr().err
        assert json.loads(own.read_text()) == foreign  # left as it was
    finally:
        own.write_text(json.dumps(after))
    assert json.loads(own.read_text()) == after
    rewards = out / "rewards.csv"
    kept = rewards.read_text()
    rewards.write_text(kept.replace("emit-a,", "other-a,"))  # another run's reward rows
    try:
        assert main(["evaluate", *args, "--prompts", "1"]) == 2
        assert "rewards.csv: line 2: job 'other-a' is not of this run" in capsys.readouterr().err
        assert json.loads(own.read_text()) == after  # nothing evaluated, nothing written
    finally:
        rewards.write_text(kept)


RAISING_ENV = """
from marlaas.envs.base import Environment, StepResult


class Raises(Environment):
    async def reset(self, seed):
        return "abcd"

    async def step(self, action):
        raise KeyError("answer")


class SaysMaybe(Raises):
    async def step(self, action):
        return StepResult("", 1.0, "maybe")
"""


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ("Raises", "environment raising_env:Raises: step() raised KeyError: 'answer'"),
        ("SaysMaybe", "environment raising_env:SaysMaybe: step() returned done str 'maybe', "
                      "not True or False"),
    ],
)  # fmt: skip
def test_evaluate_names_an_environment_that_raises_in_one_line(
    quiet_run, tiny_model_dir, tmp_path, capsys, monkeypatch, env, says
):
    """What a user's environment raised (or a contract it broke) in evaluate was a traceback:
    a run retries such work and names it in its reason, evaluate raised it as it came."""
    (tmp_path / "raising_env.py").write_text(RAISING_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    out, _done = quiet_run
    before = sorted(p.name for p in out.iterdir())
    own = out / "eval.json"
    kept = own.read_text() if own.is_file() else None
    args = [str(TRACE), "--set", f"base_model.path={tiny_model_dir}", "--set",
            f"jobs.emit-a.env={{name: 'raising_env:{env}'}}", "--run", str(out), "--jobs",
            "emit-a", "--prompts", "1", "--backend", "hf", "--quiet"]  # fmt: skip
    assert main(["evaluate", *args]) == 2
    skip = ("plain Python", "it/s]")  # a stale build's notice, transformers' loading bars
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.strip() and not any(s in line for s in skip)]  # fmt: skip
    assert err == [f"marlaas: error: {says}"]
    assert sorted(p.name for p in out.iterdir()) == before  # nothing written
    assert (own.read_text() if own.is_file() else None) == kept


@pytest.mark.slow
def test_vllm_start_up_prints_no_log(quiet_run, tiny_model_dir, tmp_path):
    """vLLM's ~30 lines of engine start-up (here through evaluate, which quiets the libraries
    as train does, without training) stay off stdout and stderr."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed")
    out, _done = quiet_run
    args = [str(TRACE), "--set", f"base_model.path={tiny_model_dir}", "--run", str(out)]
    evaluate = ["evaluate", *args, "--prompts", "1", "--backend", "vllm"]
    done = marlaas(*evaluate, "--out", str(tmp_path / "eval.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (done.stdout + done.stderr).splitlines()
    assert [line for line in lines if any(n in line for n in NOISE)] == []
