"""Output folders: an owner kind and a manifest, one writer at a time, checks before any work,
the old output or the new one and nothing else (disk full, a kill, a race)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from marlaas import runs
from marlaas.cli import main
from marlaas.out_folder import claim
from marlaas.output.errors import OutputError
from marlaas.output.lock import lock_path
from marlaas.output.manifest import MANIFEST_FILE, read_manifest, write_manifest
from marlaas.output.paths import output_path
from marlaas.output.swap import exchange

SIM = ["simulate", "traces/small.yaml", "--quiet", "--set", "jobs.*.rl.steps=2"]
REPORT_HTML = "<!DOCTYPE html>\n<html><head><title>MARLaaS report: fair</title></head></html>"
SWEEP_CSV = "workload,jobs,variant,schedule,policy,seed,makespan_s\nsmall,4,-,fair,fair,0,9.5\n"


def simulate(out: Path, *extra: str) -> int:
    return main([*SIM, *extra, "--out", str(out)])


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("marlaas: error: "), err
    return err


def test_every_output_has_a_manifest_of_its_kind(tmp_path):
    assert simulate(tmp_path / "run") == 0
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "rep")]) == 0
    assert main(["sweep", "traces/small.yaml", "--policies", "fifo", "--set", "jobs.*.rl.steps=1",
                 "--quiet", "--out", str(tmp_path / "sw")]) == 0  # fmt: skip
    for name, kind in (("run", "simulation"), ("rep", "report"), ("sw", "sweep")):
        manifest = read_manifest(tmp_path / name)
        assert manifest["kind"] == kind and manifest["status"] == "finished"
        assert set(manifest["files"]) == set(entries(tmp_path / name))
        assert manifest["marlaas_version"] and manifest["created"]
    assert entries(tmp_path) == ["rep", "run", "sw"]  # no lock, staging or temporary leftovers


@pytest.mark.parametrize("kind", ["real", "report"])
def test_simulate_never_replaces_an_output_of_another_kind(tmp_path, capsys, kind):
    """The reported bug: any folder with a summary.json counted as a replaceable run."""
    out = tmp_path / "precious"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"kind": "real"}))
    (out / "adapters").mkdir()
    (out / "adapters" / "weights.bin").write_text("trained for a week")
    if kind == "report":
        (out / "report.html").write_text("<html>")
    write_manifest(out, kind)
    assert simulate(out) == 2
    assert "not writing there" in one_error(capsys)
    assert (out / "adapters" / "weights.bin").read_text() == "trained for a week"


@pytest.mark.parametrize(
    ("files", "kind"),
    [
        (
            {
                "summary.json": '{"kind": "real", "policy": "fair", "metrics": {}}',
                "events.parquet": "PAR1",
                "adapters/j/v1/x": "w",
            },
            "real",
        ),
        ({"summary.json": "{}", "report.html": REPORT_HTML, "trace.json": "{}"}, "report"),
        ({"sweep.csv": SWEEP_CSV, "summaries.json": "[]", "table.txt": ""}, "sweep"),
        ({"summary.json": "{}", "notes.txt": "mine"}, None),
    ],
)
def test_folders_from_before_manifests_keep_their_kind(tmp_path, capsys, files, kind):
    out = tmp_path / "old"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    assert simulate(out) == 2
    err = one_error(capsys)
    assert (f"holds a {kind}" if kind else "is not a marlaas output") in err
    assert all((out / name).read_text() == text for name, text in files.items())


def test_a_folder_written_before_manifests_by_simulate_is_still_replaced(tmp_path):
    out = tmp_path / "run"
    assert simulate(out) == 0
    (out / MANIFEST_FILE).unlink()
    assert simulate(out, "--seed", "3") == 0
    assert json.loads((out / "summary.json").read_text())["seed"] == 3


def test_an_out_through_a_missing_folder_and_back_makes_no_stray_folder(tmp_path):
    """``--out runs/a/../b`` wrote runs/b and left an empty runs/a behind."""
    assert simulate(tmp_path / "runs" / "a" / ".." / "b") == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["b"]
    assert read_manifest(tmp_path / "runs" / "b")["kind"] == "simulation"
    (tmp_path / "runs" / "link").symlink_to(tmp_path / "nowhere")
    dangling = tmp_path / "runs" / "a" / ".." / "link"
    with pytest.raises(OutputError, match=r"a symbolic link to .*nowhere, which does not exist"):
        output_path(dangling)


def test_an_unwritable_out_is_refused_before_the_simulation(tmp_path, capsys, monkeypatch):
    import marlaas.sim.run

    def no_work(*_args, **_kwargs):
        raise AssertionError("simulated although --out cannot be written")

    monkeypatch.setattr(marlaas.sim.run, "simulate_run", no_work)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile / "run", afile, Path("/proc/marlaas-test/run")):
        assert simulate(out) == 2
        err = one_error(capsys)
        assert str(out) in err and ("cannot write there" in err or "not a folder" in err)
    assert entries(tmp_path) == ["afile"]


def test_an_unwritable_parent_is_refused_for_a_non_root_user(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions")
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o500)
    assert simulate(parent / "run") == 2
    assert "Permission denied" in one_error(capsys)


def test_a_second_writer_of_the_same_out_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert simulate(out) == 0
    before = (out / "events.parquet").read_bytes()
    with claim(out, "simulation"):  # another command holds it
        assert simulate(out, "--seed", "5") == 2
        assert main(["report", str(out), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another marlaas command is writing it" in err
    assert (out / "events.parquet").read_bytes() == before
    assert simulate(out, "--seed", "5") == 0  # released: the lock file is gone with it
    assert not lock_path(out).exists()


def test_two_processes_racing_to_one_out(tmp_path):
    """Two real processes, one folder: one writes it, the other is refused; never a mix. The
    one that holds the folder holds it until the other was refused (a refusal leaves a mark),
    not for a fixed time: on a loaded machine the other could start after it let go, and both
    write in turn."""
    out, refused = tmp_path / "runs" / "run", tmp_path / "refused"
    out.parent.mkdir()
    script = textwrap.dedent(f"""
        import os, sys, time
        from marlaas.out_folder import claim
        try:
            with claim({str(out)!r}, "simulation") as target, target.staged() as staging:
                (staging / "who").write_text(sys.argv[1])
                deadline = time.monotonic() + 60  # (never reached unless both hold it)
                while not os.path.exists({str(refused)!r}) and time.monotonic() < deadline:
                    time.sleep(0.01)
        except BaseException:
            open({str(refused)!r}, "w").close()
            raise
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(i)], stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 1]
    assert any("another marlaas command is writing it" in err for _, err in results)
    assert (out / "who").read_text() in ("0", "1") and entries(out.parent) == ["run"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_disk_full_while_writing_a_run_keeps_the_old_one(tmp_path, capsys, monkeypatch, code):
    out = tmp_path / "run"
    assert simulate(out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(events, path):
        Path(path).write_bytes(b"PAR1 half")
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(runs, "write_event_log", full)
    assert simulate(out, "--seed", "4") == 1  # a failure of the machine, not of the input
    err = one_error(capsys)
    assert os.strerror(code) in err and "the earlier" in err and "is kept" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert entries(tmp_path) == ["run"]
    monkeypatch.undo()
    assert simulate(tmp_path / "new") == 0
    monkeypatch.setattr(runs, "write_event_log", full)
    assert simulate(tmp_path / "other") == 1
    assert "nothing was written" in one_error(capsys)
    assert entries(tmp_path) == ["new", "run"]


def test_disk_full_while_writing_a_report_keeps_the_old_one(tmp_path, capsys, monkeypatch):
    import marlaas.report.build as build

    assert simulate(tmp_path / "run") == 0
    rep = tmp_path / "rep"
    assert main(["report", str(tmp_path / "run"), "--out", str(rep)]) == 0
    before = (rep / "report.html").read_bytes()

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(rep / "trace.json"))

    monkeypatch.setattr(build, "write_trace", full)
    assert main(["report", str(tmp_path / "run"), "--out", str(rep)]) == 1
    assert "No space left on device" in one_error(capsys)
    assert (rep / "report.html").read_bytes() == before
    assert entries(tmp_path) == ["rep", "run"]


SWEEP = ["sweep", "traces/small.yaml", "--policies", "fifo,fair", "--seeds", "0,1", "--quiet",
         "--set", "jobs.*.rl.steps=2", "--no-events"]  # fmt: skip


@pytest.mark.parametrize(("command", "file"), [(SIM, "events.parquet"), (SWEEP, "sweep.csv")])
def test_a_file_size_limit_hit_by_a_real_write_is_one_line(tmp_path, command, file):
    """A real failing write (RLIMIT_FSIZE: EFBIG from the kernel), not a mock. The line names
    the file as it would be in --out (it named none: "(Error writing bytes to file. Detail:
    [errno 27] File too large [EFBIG])", a sweep's "(File too large [EFBIG])")."""
    out = tmp_path / "run"
    script = textwrap.dedent("""
        import resource, signal, sys
        from marlaas.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        sys.exit(main(sys.argv[1:]))
    """)
    args = [sys.executable, "-c", script, *command, "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("marlaas: error: ") and "File too large" in done.stderr
    assert f"({out / file}: " in done.stderr and "nothing was written" in done.stderr
    assert "Traceback" not in done.stderr and entries(tmp_path) == []


def test_an_out_through_a_symbolic_link_loop_is_one_line(tmp_path, capsys):
    """It was a traceback (pathlib's RuntimeError "Symlink loop from ...")."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert simulate(tmp_path / "a" / "run") == 2
    err = one_error(capsys)
    assert f"{tmp_path / 'a'}: Too many levels of symbolic links [ELOOP]" in err
    assert simulate(tmp_path / "a") == 2
    one_error(capsys)
    assert entries(tmp_path) == ["a", "b"]


def unprivileged(args: list[str]) -> list[str]:
    """``args`` run so that file permissions hold: as is for a user, under capsh without the
    capabilities that let root write through them; skips the test where neither can be."""
    if os.geteuid() != 0:
        return args
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("root writes through permissions, and capsh is not installed")
    drop = "--drop=cap_dac_override,cap_dac_read_search,cap_fowner"
    return [capsh, drop, "--", "-c", shlex.join(args)]


def test_a_read_only_output_is_refused_and_nothing_is_left_beside_it(tmp_path):
    """It was replaced (renamed aside), its old content stayed in .run.staging, unremovable,
    and every later command on it failed with "marlaas: error: workload.json: Permission
    denied" (status 1), naming neither folder."""
    out = tmp_path / "run"
    assert simulate(out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    out.chmod(0o555)
    try:
        command = [sys.executable, "-m", "marlaas", *SIM, "--seed", "3", "--out", str(out)]
        done = subprocess.run(unprivileged(command), capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
    finally:
        out.chmod(0o755)
    assert done.returncode == 2, done.stderr
    told = "the folder is read-only; not writing there (make it writable to replace or continue it)"
    assert done.stderr == f"marlaas: error: {out}: {told}\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert entries(tmp_path) == ["run"]


def test_a_leftover_that_cannot_be_removed_is_named(tmp_path):
    out = tmp_path / "run"
    assert simulate(out) == 0
    staging = tmp_path / ".run.staging"  # a killed command's, marked, with a read-only folder
    (staging / "sub").mkdir(parents=True)
    (staging / ".marlaas-staging").touch()
    (staging / "sub" / "x.json").write_text("{}")
    (staging / "sub").chmod(0o555)
    try:
        command = [sys.executable, "-m", "marlaas", *SIM, "--out", str(out)]
        done = subprocess.run(unprivileged(command), capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
    finally:
        (staging / "sub").chmod(0o755)
    assert done.returncode == 2, done.stderr
    told = f"{staging}: left by an earlier command, in the way of {out}'s output, and cannot be"
    assert done.stderr.startswith(f"marlaas: error: {told} removed (")
    assert "Permission denied" in done.stderr and done.stderr.count("\n") == 1


def test_leftovers_of_a_killed_command_are_cleaned_by_the_next(tmp_path):
    out = tmp_path / "run"
    assert simulate(out) == 0
    (tmp_path / ".run.staging").mkdir()
    (tmp_path / ".run.staging" / "events.parquet").write_text("half")
    lock_path(out).write_text("")  # a killed holder's lock file (no longer locked)
    legacy = tmp_path / ".run.k2j4_x9a"  # a staging folder of marlaas before manifests
    legacy.mkdir()
    (legacy / "summary.json").write_text("{}")
    foreign = tmp_path / ".run.notes"
    foreign.mkdir()
    assert simulate(out) == 0
    assert entries(tmp_path) == [".run.notes", "run"]


def test_killed_between_the_two_renames_the_old_output_comes_back(tmp_path):
    out = tmp_path / "run"
    assert simulate(out) == 0
    out.rename(tmp_path / ".run.old")  # the fallback swap's first rename happened, not the 2nd
    with claim(out, "simulation") as target:
        assert target.has_output
        assert (out / "events.parquet").exists()
    assert entries(tmp_path) == ["run"]


def test_a_killed_simulate_leaves_nothing_the_next_run_does_not_clean(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "marlaas.cli", "simulate", "traces/paper-32.yaml", "--quiet",
            "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    try:
        while not lock_path(out).exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.wait()
    assert not out.exists() or read_manifest(out) is not None  # old or new, never half
    assert simulate(out) == 0
    assert entries(tmp_path) == ["run"]


def test_exchange_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not exchange(a, b):
        pytest.skip("no renameat2 here")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_claim_refuses_an_unfinished_output_unless_asked(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "journal.jsonl").write_text("")
    write_manifest(out, "real", "partial")
    refused = pytest.raises(OutputError, match=r"unfinished real training run.*--resume")
    with refused, claim(out, "real"):
        pass
    with claim(out, "real", allow_partial=True) as target:
        assert target.has_output and target.existing_status == "partial"


def test_a_command_that_only_reads_its_folder_takes_a_read_only_one(tmp_path):
    """``evaluate --run RUN --out FILE`` writes nothing into RUN, yet a read-only RUN (an
    archived run) was refused as a read-only output, and one in a read-only folder could not
    be locked ("cannot write there (.RUN.lock: Permission denied)")."""
    out = tmp_path / "runs" / "run"
    assert simulate(out) == 0
    claims = (
        "from marlaas.out_folder import claim\n"
        "import sys\n"
        "with claim(sys.argv[1], 'simulation', writes=sys.argv[2] == 'yes'):\n"
        "    print('claimed')\n"
    )

    def claim_it(writes: str) -> subprocess.CompletedProcess:
        return subprocess.run(unprivileged([sys.executable, "-c", claims, str(out), writes]),
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    before = sorted(tmp_path.rglob("*"))
    for read_only in (out, out.parent):  # the run, then its folder too
        read_only.chmod(0o555)
    try:
        reads, writes = claim_it("no"), claim_it("yes")
    finally:
        for read_only in (out.parent, out):
            read_only.chmod(0o755)
    assert reads.returncode == 0 and reads.stdout == "claimed\n", reads.stderr
    assert writes.returncode == 1 and "cannot write there (" in writes.stderr
    assert sorted(tmp_path.rglob("*")) == before  # no lock file, nothing else left
    out.chmod(0o555)
    try:
        reads, writes = claim_it("no"), claim_it("yes")
    finally:
        out.chmod(0o755)
    assert reads.returncode == 0 and reads.stdout == "claimed\n", reads.stderr
    assert writes.returncode == 1 and "the folder is read-only" in writes.stderr
