"""``marlaas plan`` end to end on a tiny workload, with the simulator."""

from __future__ import annotations

import errno
import json
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from marlaas.cli import main
from marlaas.core.policies import base
from marlaas.plan import command
from marlaas.plan.evaluate import Evaluator
from marlaas.plan.search import cheapest, exhaustive
from marlaas.plan.space import Space, Variant
from marlaas.sim.run import simulate_run
from marlaas.workload_file import load_with_overrides, load_workload

SMALL = "traces/small.yaml"
TINY = ["jobs.*.rl.steps=2", "jobs.*.rl.prompts_per_step=2"]
"""small.yaml's 4 jobs, 2 steps of 2 groups each: a simulation takes ~20 ms."""
DEADLINE = "jobs.*.deadline_s=42"
"""On one inference device code-d takes ~45 s (seeds 0 and 1), on two ~38 s: more than one
is needed."""


def plan(tmp_path, *args: str) -> int:
    sets = [f"--set={s}" for s in TINY]
    return main(["plan", SMALL, *sets, "--workers", "1", "--quiet", *args])


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "p"
    assert plan(out, f"--set={DEADLINE}", "--max-devices", "6", "--seeds", "2",
                "--out", str(out)) == 0  # fmt: skip
    return out


def test_plan_writes_its_files(planned):
    names = {"workload.yaml", "plan.csv", "pareto.csv", "plan.json", "plan.html", "manifest.json"}
    assert {p.name for p in planned.iterdir()} == names
    report = json.loads((planned / "plan.json").read_text())
    table = pd.read_csv(planned / "plan.csv")
    chosen = report["chosen"]
    assert chosen["meets_every_deadline"] and chosen["inference_devices"] == 2
    rows = table[table["chosen"]]
    assert sorted(rows["seed"]) == [0, 1] and (rows["deadlines_missed"] == 0).all()
    assert len(table) == report["simulations"]  # one row per configuration and seed
    assert {"devices", "price_per_hour", "makespan_s", "jct_p90_s", "deadlines_missed"} <= set(
        table.columns
    )
    assert report["binding"][0]["job"] == "code-d"
    html = (planned / "plan.html").read_text()
    assert "Pareto front" in html and "code-d" in html
    assert not re.search(r"<script[^>]+src=", html)  # Plotly inlined: nothing is fetched


def test_the_written_workload_runs_and_meets_its_deadlines(planned):
    workload = load_workload(planned / "workload.yaml")
    assert [p.devices for p in workload.cluster.pools] == [2, 1]
    _, summary = simulate_run(workload, seed=0)
    assert summary["metrics"]["deadlines_missed"] == 0
    assert summary["deadlines_s"] == {j.name: 42.0 for j in workload.jobs}


def test_one_device_fewer_misses(planned):
    report = json.loads((planned / "plan.json").read_text())
    (near,) = report["neighbours"]  # one training device is the least there is
    assert near["fewer"] == "inference" and not near["meets_every_deadline"]
    assert "code-d" in {j for jobs in near["missed"].values() for j in jobs}


def test_search_and_grid_agree_on_the_simulator():
    workload = load_with_overrides(SMALL, [*TINY, DEADLINE])
    space = Space((Variant(1, 8, "fair", "none"),), 5, 1.0, 1.0)
    runs = {}
    for name, how in (("search", cheapest), ("grid", exhaustive)):
        evaluate = Evaluator(workload, [0, 1], workers=1, progress=False)
        runs[name] = (how(space, evaluate).config, evaluate.simulations)
    assert runs["search"][0] == runs["grid"][0]
    assert runs["search"][1] < runs["grid"][1] == 2 * len(space.configs())


def test_an_unmeetable_deadline_is_one_line_naming_the_job(tmp_path, capsys):
    out = tmp_path / "p"
    assert plan(tmp_path, "--set=jobs.code-d.deadline_s=5", "--max-devices", "3",
                "--seeds", "1", "--out", str(out)) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err.startswith("marlaas: error: no configuration of at most 3 devices meets every")
    assert "job 'code-d' (deadline 5 s) at best finished" in err and "\n" not in err
    assert not out.exists()


def test_a_job_that_fits_no_engine_is_one_line(tmp_path, capsys):
    assert plan(tmp_path, f"--set={DEADLINE}", "--set=cluster.engine.kv_tokens=1000",
                "--out", str(tmp_path / "p")) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "job 'math-a' fits no engine of any cluster size" in err


def test_no_deadline_no_plan(tmp_path, capsys):
    assert plan(tmp_path, "--out", str(tmp_path / "p")) == 2
    assert "no job has a deadline" in capsys.readouterr().err


def test_budget_plan(tmp_path):
    out = tmp_path / "p"
    assert plan(tmp_path, "--budget", "4", "--max-devices", "6", "--seeds", "1",
                "--out", str(out)) == 0  # fmt: skip
    report = json.loads((out / "plan.json").read_text())
    assert report["mode"] == "budget" and report["chosen"]["price_per_hour"] <= 4


def test_searching_policies_and_presets(tmp_path):
    out = tmp_path / "p"
    assert plan(tmp_path, f"--set={DEADLINE}", "--search", "pools,policy,preset", "--policies",
                "fifo,fair", "--presets", "none,sync", "--max-devices", "3", "--seeds", "1",
                "--out", str(out)) == 0  # fmt: skip
    report = json.loads((out / "plan.json").read_text())
    assert len(report["space"]["variants"]) == 4
    assert report["chosen"]["preset"] == "none"  # sync's barrier is slower


def test_plan_replaces_a_plan_and_refuses_other_folders(tmp_path, capsys):
    out = tmp_path / "p"
    args = [f"--set={DEADLINE}", "--max-devices", "3", "--seeds", "1", "--out", str(out)]
    assert plan(tmp_path, *args) == 0
    assert plan(tmp_path, *args) == 0  # a plan replaces a plan
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert plan(tmp_path, *args[:-1], str(mine)) == 2
    assert (mine / "notes.txt").read_text() == "keep"
    assert "marlaas: error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--max-devices", "0"], "--max-devices 0: give 2..65,536"),
        (["--budget", "nan"], "--budget nan: a price per hour must be a finite number > 0"),
        (["--budget", "inf"], "--budget inf: a price per hour must be a finite number > 0"),
        (["--adapter-slots", "4,100000"], "--adapter-slots: values must be 1..4,096"),
        (["--adapter-slots", "0"], "--adapter-slots: values must be 1..4,096"),
        (["--trainer-widths", "70000"], "--trainer-widths: values must be 1..65,536"),
        (["--seeds", "3", "--set=seed=4294967295"], "--seeds 3 from the workload's seed"),
    ],
)
def test_a_bad_number_is_one_line_before_any_work(tmp_path, capsys, option, says):
    out = tmp_path / "p"
    assert plan(tmp_path, f"--set={DEADLINE}", "--seeds", "1", *option, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"marlaas: error: {says}") and "\n" not in err, err
    assert not out.exists()


def test_a_cancelled_job_with_a_deadline_misses_it(tmp_path, capsys):
    """A job that never finishes (cancelled: no finish time) misses its deadline on every
    configuration, said in one line (it was a TypeError)."""
    out = tmp_path / "p"
    assert plan(tmp_path, "--set=jobs.*.deadline_s=1000", "--set=jobs.math-a.cancel_after_s=1",
                "--max-devices", "3", "--seeds", "1", "--out", str(out)) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "job 'math-a' (deadline 1,000 s) at best never finished" in err and "\n" not in err
    assert not out.exists()


def test_searching_a_policy_of_ones_own_by_import_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # registered for this test
    (tmp_path / "planpol.py").write_text(
        "from marlaas.core.policies import Policy\n\n\n"
        "class ByName(Policy):\n    def key(self, job):\n        return (job.spec.name,)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planpol", raising=False)
    out = tmp_path / "p"
    assert plan(tmp_path, f"--set={DEADLINE}", "--search", "pools,policy", "--policies",
                "fifo,planpol:ByName", "--max-devices", "3", "--seeds", "1",
                "--out", str(out)) == 0  # fmt: skip
    report = json.loads((out / "plan.json").read_text())
    assert len(report["space"]["variants"]) == 2
    capsys.readouterr()
    assert plan(tmp_path, f"--set={DEADLINE}", "--search", "policy", "--policies",
                "planpol:Missing", "--out", str(tmp_path / "q")) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "policy 'planpol:Missing'" in err and "has no 'Missing'" in err and "\n" not in err
    assert not (tmp_path / "q").exists()


def full_disk_midway(write, name: str):
    """``write`` (a writer whose first argument is the file) failing as a full disk does on
    a file whose name holds ``name`` (its temporary name too): it writes the first half of
    what it was given, then raises an OSError that names no file."""

    def writing(target, data, *args, **kwargs):
        if name not in Path(target).name:
            return write(target, data, *args, **kwargs)
        write(target, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    return writing


def test_a_plan_file_whose_write_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch):
    """write_plan_files wrote each file in place (to_csv, write_text): a write that failed
    midway (a full disk, a kill) left half of it where the old one was. Each file is now
    written beside and renamed, so the old one stays whole, nothing half-written is left,
    and the error names the file."""
    args, write = [], command.write_plan_files
    monkeypatch.setattr(command, "write_plan_files", lambda *a: (args.extend(a[1:]), write(*a)))
    out = tmp_path / "p"
    assert plan(tmp_path, f"--set={DEADLINE}", "--max-devices", "3", "--seeds", "1",
                "--out", str(out)) == 0  # fmt: skip
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    for name, patch in [
        ("plan.csv", lambda m: m.setattr(pd.DataFrame, "to_csv", _failing_csv("plan.csv"))),
        ("plan.html", lambda m: m.setattr(Path, "write_text",
                                          full_disk_midway(Path.write_text, "plan.html"))),
    ]:  # fmt: skip
        with monkeypatch.context() as m:
            patch(m)
            with pytest.raises(OSError) as err:
                write(folder, *args)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
        assert err.value.filename == str(folder / name)


def _failing_csv(name: str):
    """DataFrame.to_csv failing as a full disk does (half the table written, then an
    OSError that names no file) on a file whose name holds ``name``; itself on any other."""
    to_csv = pd.DataFrame.to_csv

    def writing(frame, path=None, *args, **kwargs):
        if path is None or name not in Path(path).name:
            return to_csv(frame, path, *args, **kwargs)
        text = to_csv(frame, None, *args, **kwargs)
        Path(path).write_text(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    return writing


def test_a_full_disk_while_planning_names_the_file_and_keeps_the_old_plan(
    tmp_path, monkeypatch, capsys
):
    """The error of a plan whose plan.html did not fit on the disk named the output folder
    alone ("cannot write the output (No space left on device [ENOSPC])")."""
    out = tmp_path / "p"
    args = [f"--set={DEADLINE}", "--max-devices", "3", "--seeds", "1", "--out", str(out)]
    assert plan(tmp_path, *args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(Path, "write_text", full_disk_midway(Path.write_text, "plan.html"))
    capsys.readouterr()
    assert plan(tmp_path, *args) == 1
    err = capsys.readouterr().err
    assert f"{out}/plan.html: No space left on device [ENOSPC]" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert {p.name for p in tmp_path.iterdir()} == {"p"}  # no staging or temporary file left
