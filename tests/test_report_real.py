"""Reports of real runs (reward curves, evaluation) and of runs of different kinds."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from marlaas.report import run_report
from marlaas.report.interactive.real import (
    accuracy_pivot,
    plot_evaluation,
    plot_memory,
    plot_rewards,
    plot_rewards_compared,
)
from marlaas.report.load import load_runs
from tests.synthetic import write_run


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A synthetic real run folder: events, summary kind real, rewards.csv, memory.csv and
    eval.json."""
    run = write_run(tmp_path_factory.mktemp("real") / "fifo-real", policy="fifo", seed=0)
    summary = json.loads((run / "summary.json").read_text())
    summary["kind"] = "real"
    (run / "summary.json").write_text(json.dumps(summary))
    jobs = [(f"job{j}", f"t{j % 2}") for j in range(4)]
    rewards = pd.DataFrame(
        [
            {"job": job, "tenant": tenant, "step": step, "mean_reward": 0.1 * step + 0.01 * j,
             "time_s": 3.0 * step}
            for j, (job, tenant) in enumerate(jobs)
            for step in range(5)
        ]
    )  # fmt: skip
    rewards.to_csv(run / "rewards.csv", index=False)
    rss = [400.0, 900.0, 1500.0, 1200.0, 1700.0, 1300.0]  # peaks at 1,700 MiB, at 6 s
    memory = pd.DataFrame(
        {"time_s": [-2.0, 0.0, 2.0, 4.0, 6.0, 8.0], "rss_mb": rss,
         "peak_rss_mb": np.maximum.accumulate(rss)}
    )  # fmt: skip
    memory.to_csv(run / "memory.csv", index=False)
    evaluation = [
        {"job": job, "tenant": tenant, "env": "arithmetic", "model": model, "version": v,
         "prompts": 20, "accuracy": acc, "mean_reward": acc}
        for job, tenant in jobs
        for model, v, acc in (("base", -1, 0.2), ("trained", 5, 0.65))
    ]  # fmt: skip
    (run / "eval.json").write_text(json.dumps(evaluation))
    return run


def test_reward_and_evaluation_figures_plot_the_files(real_run):
    rewards = pd.read_csv(real_run / "rewards.csv")
    fig = plot_rewards(rewards)
    assert {t.meta for t in fig.data} == set(rewards["job"])
    for trace in fig.data:
        rows = rewards[rewards["job"] == trace.meta].sort_values("step")
        assert np.asarray(trace.y) == pytest.approx(rows["mean_reward"].to_numpy())
        assert list(trace.x) == rows["step"].tolist()
    evaluation = pd.DataFrame(json.loads((real_run / "eval.json").read_text()))
    bars = {t.name: np.asarray(t.y) for t in plot_evaluation(evaluation).data}
    assert bars["trained"] == pytest.approx([0.65] * 4) and bars["base"] == pytest.approx(0.2)
    pivot = accuracy_pivot(evaluation)
    assert pivot["change"].to_numpy() == pytest.approx(0.45)


def test_memory_figure_plots_the_timeline_and_dates_the_peak(real_run):
    memory = pd.read_csv(real_run / "memory.csv")
    fig = plot_memory(memory)
    lines = {t.name: t for t in fig.data}
    assert list(lines["resident (all processes)"].y) == memory["rss_mb"].tolist()
    assert list(lines["peak so far (this process)"].x) == memory["time_s"].tolist()
    [note] = fig.layout.annotations
    assert (note.x, note.y) == (6.0, 1700.0) and "1,700 MiB at 6.0 s" in note.text


def test_real_run_report_shows_rewards_memory_and_evaluation(real_run, tmp_path):
    text = run_report([real_run], tmp_path / "out").read_text()
    ids = set(re.findall(r'<section id="([^"]+)"', text))
    assert {"rewards-fifo", "memory-fifo", "evaluation-fifo", "timeline-fifo"} <= ids
    assert "peaked at 1,700 MiB, first seen at 6.0 s" in text
    assert '<span class="kind">real run</span>' in text
    assert "+45.0 points" in text  # accuracy change, trained vs base


def test_runs_of_different_kinds_are_labelled_and_compared(real_run, tmp_path):
    sim = write_run(tmp_path / "fifo-sim", policy="fifo", seed=3)  # same policy, simulated
    runs = load_runs([real_run, sim])
    real, simulated = "fifo (real run, seed 0)", "fifo (simulation, seed 3)"
    assert [r.label for r in runs] == [real, simulated]
    text = run_report([real_run, sim], tmp_path / "out").read_text()
    assert f"{simulated} vs {real}" in text
    assert "runs are of different kinds" in text
    assert 'id="timeline"' in text  # both runs in one timeline
    assert 'id="rewards-fifo-real-run-seed-0"' in text  # the real run's own sections
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    a, b = summary[real], summary[simulated]
    expected = (b["makespan_s"] - a["makespan_s"]) / a["makespan_s"]
    row = re.search(r"<td>makespan \[s\]</td>(.*?)</tr>", text, flags=re.S).group(1)
    assert f"{expected:+.1%}" in row


def test_real_runs_compared_show_their_reward_curves_side_by_side(real_run, tmp_path):
    """Two real runs (e.g. the quality experiment's alone and together): one panel per job,
    one line per run, each line the run's rewards.csv."""
    import shutil

    other = tmp_path / "fifo-real-2"
    shutil.copytree(real_run, other)
    rewards = pd.read_csv(other / "rewards.csv")
    rewards["mean_reward"] = 1.0 - rewards["mean_reward"]
    rewards.to_csv(other / "rewards.csv", index=False)
    fig = plot_rewards_compared([("a", pd.read_csv(real_run / "rewards.csv")), ("b", rewards)])
    assert {(t.name, t.meta) for t in fig.data} == {
        (run, f"job{j}") for run in "ab" for j in range(4)
    }
    line = next(t for t in fig.data if (t.name, t.meta) == ("b", "job2"))
    rows = rewards[rewards["job"] == "job2"].sort_values("step")
    assert np.asarray(line.y) == pytest.approx(rows["mean_reward"].to_numpy())
    text = run_report([real_run, other], tmp_path / "out").read_text()
    assert '<section id="rewards">' in text and "Rewards compared" in text


def test_accuracy_over_training_time_with_intervals(real_run, tmp_path):
    """eval.json of several versions (marlaas evaluate --versions): the pivot and the bars take
    each job's newest, the time figure plots every version at the time it was made with its
    interval, and the report shows both."""
    import shutil

    from marlaas.report.interactive.real import plot_accuracy_over_time

    run = tmp_path / "fifo-versions"
    shutil.copytree(real_run, run)
    rows = [
        {"job": "job0", "tenant": "t0", "model": "base", "version": -1, "prompts": 200,
         "correct": 40, "accuracy": 0.2, "ci_low": 0.15, "ci_high": 0.26, "time_s": 0.0},
        {"job": "job0", "tenant": "t0", "model": "trained", "version": 2, "prompts": 200,
         "correct": 80, "accuracy": 0.4, "ci_low": 0.34, "ci_high": 0.47, "time_s": 6.0},
        {"job": "job0", "tenant": "t0", "model": "trained", "version": 5, "prompts": 200,
         "correct": 120, "accuracy": 0.6, "ci_low": 0.53, "ci_high": 0.66, "time_s": 15.0},
    ]  # fmt: skip
    (run / "eval.json").write_text(json.dumps(rows))
    evaluation = pd.DataFrame(rows)
    assert accuracy_pivot(evaluation)["change"].to_numpy() == pytest.approx(0.4)
    assert np.asarray(plot_evaluation(evaluation).data[1].y) == pytest.approx([0.6])
    [line] = plot_accuracy_over_time(evaluation).data
    assert list(line.x) == [0.0, 6.0, 15.0] and list(line.y) == [0.2, 0.4, 0.6]
    assert np.asarray(line.error_y.array) == pytest.approx([0.06, 0.07, 0.06])
    assert np.asarray(line.error_y.arrayminus) == pytest.approx([0.05, 0.06, 0.07])
    text = run_report([run], tmp_path / "out").read_text()
    assert 'id="accuracy-time-fifo"' in text and "53.0-66.0%" in text


def test_rows_of_jobs_the_run_does_not_have_are_refused(real_run, tmp_path):
    import shutil

    from marlaas.run_files import RunFileError

    run = shutil.copytree(real_run, tmp_path / "run")
    rewards = pd.read_csv(run / "rewards.csv")
    mixed = pd.concat([rewards, rewards.head(2).assign(job="ghost", tenant="t9")])
    mixed.to_csv(run / "rewards.csv", index=False)
    with pytest.raises(RunFileError) as err:  # was drawn as a fifth job
        run_report([run], tmp_path / "out")
    assert str(err.value) == (
        f"{run / 'rewards.csv'}: line 22: job 'ghost' is not of this run (its jobs: 'job0', "
        "'job1', 'job2' and 1 more); the folder mixes two runs"
    )
    assert not (tmp_path / "out").exists()
    rewards.to_csv(run / "rewards.csv", index=False)
    # a job the summary names that never ran (no event) is the run's: its evaluation is kept
    summary = json.loads((run / "summary.json").read_text())
    summary["tenants"] = {**{f"job{j}": f"t{j % 2}" for j in range(4)}, "late": "t1"}
    (run / "summary.json").write_text(json.dumps(summary))
    evaluation = json.loads((run / "eval.json").read_text())
    late = {"job": "late", "tenant": "t1", "model": "base", "version": -1, "accuracy": 0.25}
    (run / "eval.json").write_text(json.dumps([*evaluation, late]))
    [loaded] = load_runs([run])
    assert "late" in set(loaded.evaluation()["job"])
    (run / "eval.json").write_text(json.dumps([*evaluation, {**late, "tenant": "t0"}]))
    with pytest.raises(RunFileError, match=r"eval.json: item 8: job 'late' of tenant 't0', but "
                       "of 't1' in this run"):  # fmt: skip
        load_runs([run])[0].evaluation()
