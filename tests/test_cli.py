"""The command line as a user runs it: outputs, one-line errors, nothing half-written."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marlaas.cli import USER_ERRORS, build_parser, command_parsers, main
from marlaas.eventlog import read_event_log
from tests.child_env import python_path_first


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
    # an earlier run folder is replaced whole: what it wrote then and not now is gone
    from marlaas.output.manifest import write_manifest

    run = tmp_path / "run"
    assert main([*args, "--out", str(run)]) == 0
    (run / "stale.txt").write_text("from before")
    write_manifest(run, "simulation")  # as if the earlier version had written stale.txt
    assert main([*args, "--out", str(run)]) == 0
    assert not (run / "stale.txt").exists()
    (run / "notes.txt").write_text("mine")  # a file marlaas did not write: refused, kept
    assert main([*args, "--out", str(run)]) == 2
    assert "holds notes.txt, which marlaas did not write" in capsys.readouterr().err
    assert (run / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ start-up, help, pipes

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "plotly", "simpy", "torch", "vllm", "pyarrow")


def _python(code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    env = python_path_first(REPO)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, env=env,
        check=False, **kwargs,
    )  # fmt: skip


def test_help_and_every_commands_help_import_no_heavy_package():
    code = f"""
import contextlib, io, sys
from marlaas.cli import build_parser, command_parsers, main

def loaded(names):
    return sorted({{m.split(".")[0] for m in sys.modules}} & set(names))

with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
    main(["--help"])
assert "examples:" in out.getvalue()
top = loaded({[*HEAVY, "pydantic"]!r})
for parser in command_parsers(build_parser()).values():
    parser.format_help()
print(top, loaded({HEAVY!r}))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]"]  # nothing heavy (top level: not even pydantic)


def test_every_option_has_help_and_shows_its_default():
    parser = build_parser()
    top = parser.format_help()
    assert "examples:" in top and "marlaas train" in top
    for name, command in command_parsers(parser).items():
        assert name in top
        formatter = command.formatter_class(prog=command.prog)
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.dest}: no help"
            shown = formatter._get_help_string(action)
            if action.option_strings and action.nargs == 0:  # a flag: its default is implied
                assert "(default:" not in shown, f"{name} {action.dest}: a flag's default shown"
            elif action.default is not None and action.default is not False:
                assert "default" in shown, f"{name} {action.dest}: default not shown"


def test_version_comes_from_the_package_metadata():
    from importlib.metadata import version

    done = _python("from marlaas.cli import main; main(['--version'])")
    assert done.returncode == 0
    assert done.stdout.strip() == f"marlaas {version('marlaas')}"


def test_argument_errors_exit_2_with_one_line(capsys):
    assert main(["simulate", "traces/small.yaml"]) == 2  # no --out
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: simulate: the following arguments are required")
    assert "--out" in err and len(err.strip().splitlines()) == 1


def test_user_errors_name_existing_exception_classes():
    import importlib

    for module, name in USER_ERRORS:
        assert issubclass(getattr(importlib.import_module(module), name), Exception)


def test_a_closed_pipe_ends_quietly_after_the_run_is_written(tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader has gone (`| head` that already exited): any write fails
    out = tmp_path / "run"
    args = ["simulate", "traces/small.yaml", "--quiet", "--set", "jobs.*.rl.steps=2"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "marlaas", *args, "--out", str(out)], stdout=write,
            stderr=subprocess.PIPE, text=True, cwd=REPO, check=False,
            env=python_path_first(REPO),
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == ""
    assert (out / "events.parquet").exists()


def test_output_piped_into_head_has_no_traceback():
    done = subprocess.run(
        f"{sys.executable} -m marlaas policies | head -1", shell=True, capture_output=True,
        text=True, cwd=REPO, check=False, env=python_path_first(REPO),
    )  # fmt: skip
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert "Error" not in done.stderr and "Traceback" not in done.stderr


def test_a_job_that_cannot_fit_is_one_warning_line_and_the_others_run(tmp_path, capsys):
    """As a new user would see it: the run goes on without the job, says so once, and keeps
    how every job ended; a cancelled job is in the table without a completion time."""
    out = tmp_path / "run"
    args = [
        "simulate",
        "traces/small.yaml",
        "--quiet",
        "--out",
        str(out),
        "--set",
        "jobs.code-d.rl.group_size=512",
        "--set",
        "jobs.tools-c.cancel_after_s=60",
    ]
    assert main(args) == 0  # fmt: skip
    printed = capsys.readouterr()
    warnings = [line for line in printed.err.splitlines() if line.strip()]
    assert warnings == [
        "marlaas: warning: job 'code-d' refused: one group needs 512 seqs and 1,179,648 KV "
        "tokens with its longest prompt (256 tokens per sample), but an engine has 256 seqs "
        "and 120,000 tokens (cluster.engine; rl.max_prompt_tokens truncates prompts)"
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["job_states"] == {"code-d": "refused", "math-a": "finished",
                                     "math-b": "finished", "tools-c": "cancelled"}  # fmt: skip
    assert "512 seqs" in summary["refused"]["code-d"]
    assert summary["metrics"]["n_jobs"] == 3  # the refused job did no work
    assert "cancelled" in printed.out and "refused" in printed.out
