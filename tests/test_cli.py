"""The command line as a user runs it: outputs, one-line errors, nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from marlaas.cli import main
from marlaas.eventlog import read_event_log


def test_simulate_writes_a_run_folder_and_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["simulate", "traces/small.yaml", "--policy", "fair", "--out", str(out),
                 "--quiet", "--set", "jobs.*.rl.steps=3"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "makespan" in printed and "device utilization" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "fair"
    events = read_event_log(out)
    assert set(events.kind) >= {"generate", "env", "train", "sync", "idle"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary leftovers


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "traces/nope.yaml"], "no such workload file"),
        (["simulate", "traces/small.yaml", "--policy", "fastest"], "unknown policy 'fastest'"),
        (["simulate", "traces/small.yaml", "--set", "jobs.*.rl.steps=-1"], "rl.steps"),
        (["simulate", "traces/small.yaml", "--set", "nonsense"], "expected key=value"),
        (["simulate", "traces/small.yaml", "--set", "cluster.gpus=3"], "unknown field 'gpus'"),
        (["simulate", "traces/small.yaml", "--policy", "sequential"], "--preset sequential"),
        (
            [
                "simulate",
                "traces/small.yaml",
                "--preset",
                "sequential",
                "--set",
                "scheduling.placement=disaggregated",
            ],
            "preset 'sequential' sets 'colocated'",
        ),
        (
            ["simulate", "traces/small.yaml", "--set", "jobs.*.env.name=nope"],
            "jobs[0].env: unknown environment 'nope'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main([*args, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: ") and message in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_bad_workload_file_names_field_and_value(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - {name: a, tenant: t, rl: {group_size: -4}}\n")
    assert main(["simulate", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "jobs[0].rl.group_size" in err and "(got -4)" in err


def test_report_on_a_foreign_file_is_a_clear_error(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.parquet").write_text("not parquet")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    assert "marlaas: error:" in capsys.readouterr().err


def test_a_preset_runs_the_baseline_and_is_recorded(tmp_path):
    out = tmp_path / "seq"
    args = ["simulate", "traces/small.yaml", "--preset", "sequential", "--policy", "fifo"]
    assert main([*args, "--quiet", "--set", "jobs.*.rl.steps=2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "sequential" and summary["policy"] == "fifo"
    assert summary["settings"]["placement"] == "colocated"
    assert summary["settings"]["max_active_jobs"] == 1


def test_policies_lists_every_policy(capsys):
    assert main(["policies"]) == 0
    listed = capsys.readouterr().out
    for name in ("sequential", "sync", "fifo", "round-robin", "fair", "srtf", "priority"):
        assert name in listed


def test_console_entry_point_runs_as_a_module():
    done = subprocess.run(
        [sys.executable, "-m", "marlaas", "policies"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "fair" in done.stdout


def test_out_never_replaces_a_folder_that_is_not_a_run(tmp_path, capsys):
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    args = ["simulate", "traces/small.yaml", "--quiet", "--set", "jobs.*.rl.steps=2"]
    assert main([*args, "--out", str(precious)]) == 2
    assert "not replacing it" in capsys.readouterr().err
    assert (precious / "thesis.tex").read_text() == "years of work"
    # an earlier run folder is replaced whole
    run = tmp_path / "run"
    assert main([*args, "--out", str(run)]) == 0
    (run / "stale.txt").write_text("from before")
    assert main([*args, "--out", str(run)]) == 0
    assert not (run / "stale.txt").exists()
