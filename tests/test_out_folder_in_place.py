"""An output written in place (a real run) over an old one: the old one is kept in
``.NAME.old`` until the new one is kept, put back when the new one fails or is stopped before,
and after a kill at any point the next claim leaves the old output or the new, whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlaas.interrupts import Interrupted
from marlaas.out_folder import claim
from marlaas.output.errors import OutputError
from marlaas.output.manifest import read_manifest, write_manifest
from marlaas.output.staging import STAGING_MARK


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def finished_run(folder: Path, text: str = "old") -> dict[str, bytes]:
    """A finished real run (adapters, a journal, a manifest); returns its files."""
    (folder / "adapters" / "a" / "v1").mkdir(parents=True)
    (folder / "adapters" / "a" / "v1" / "adapter_model.safetensors").write_text(text)
    (folder / "journal.jsonl").write_text(f'{{"{text}": 1}}\n')
    write_manifest(folder, "real", "finished")
    return files(folder)


def new_run(folder: Path) -> None:
    """What a new run writes in place before its first durable step."""
    (folder / "adapters" / "a" / "v0").mkdir(parents=True)
    (folder / "journal.jsonl").write_text('{"new": 1}\n')


@pytest.mark.parametrize("error", [RuntimeError("model failed to load"), KeyboardInterrupt(),
                                   Interrupted(15)])  # fmt: skip
def test_a_new_output_that_fails_before_it_is_kept_puts_the_old_one_back(tmp_path, error):
    out = tmp_path / "run"
    out.mkdir()
    before = finished_run(out)
    with pytest.raises(type(error)), claim(out, "real") as target, target.in_place() as _keep:
        assert files(tmp_path / ".run.old") == before
        assert (out / STAGING_MARK).is_file() and read_manifest(out)["status"] == "partial"
        new_run(out)
        raise error
    assert files(out) == before
    assert entries(tmp_path) == ["run"]


def test_a_new_output_kept_replaces_the_old_one_even_if_it_fails_later(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    finished_run(out)
    with pytest.raises(KeyboardInterrupt), claim(out, "real") as target, target.in_place() as keep:
        new_run(out)
        keep()  # its first durable step
        assert entries(tmp_path) == [".run.lock", "run"]
        raise KeyboardInterrupt
    assert (out / "journal.jsonl").read_text() == '{"new": 1}\n'
    assert not (out / STAGING_MARK).exists()
    assert entries(tmp_path) == ["run"]


def test_a_new_output_that_ends_replaces_the_old_one(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    finished_run(out)
    with claim(out, "real") as target, target.in_place():
        finished_run(out, text="new")  # (the old manifest was replaced by the new one's)
    assert (out / "journal.jsonl").read_text() == '{"new": 1}\n'
    assert entries(tmp_path) == ["run"] and STAGING_MARK not in entries(out)


def test_a_continued_output_is_written_as_it_is(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "journal.jsonl").write_text("part 1\n")
    write_manifest(out, "real", "partial")
    with claim(out, "real", allow_partial=True) as target, target.in_place(replace=False):
        (out / "journal.jsonl").write_text("part 1\npart 2\n")
    assert (out / "journal.jsonl").read_text() == "part 1\npart 2\n"
    assert entries(tmp_path) == ["run"]


def killed_after_set_aside(tmp_path: Path) -> dict[str, bytes]:
    out, old = tmp_path / "run", tmp_path / ".run.old"
    old.mkdir()
    before = finished_run(old)
    out.mkdir()
    (out / STAGING_MARK).touch()
    write_manifest(out, "real", "partial")
    new_run(out)
    return before


def killed_between_the_renames(tmp_path: Path) -> dict[str, bytes]:
    staging, old = tmp_path / ".run.staging", tmp_path / ".run.old"
    old.mkdir()
    before = finished_run(old)
    staging.mkdir()
    (staging / STAGING_MARK).touch()
    write_manifest(staging, "real", "partial")
    return before


def killed_while_putting_it_back(tmp_path: Path) -> dict[str, bytes]:
    before = killed_after_set_aside(tmp_path)
    (tmp_path / "run").rename(tmp_path / ".run.staging")  # the first rename of the put-back
    (tmp_path / ".run.staging" / "journal.jsonl").unlink()  # and its removal under way
    return before


@pytest.mark.parametrize(
    "killed", [killed_after_set_aside, killed_between_the_renames, killed_while_putting_it_back]
)
def test_killed_before_the_new_output_was_kept_the_next_claim_puts_the_old_back(
    tmp_path, capsys, killed
):
    out = tmp_path / "run"
    before = killed(tmp_path)
    with claim(out, "real") as target:
        assert target.has_output and target.existing_status == "finished"
        assert files(out) == before
        assert entries(tmp_path) == [".run.lock", "run"]  # the new one's leftovers removed
    err = capsys.readouterr().err.splitlines()
    assert err == [f"marlaas: warning: {out}: put the earlier real training run back (the "
                   "command replacing it was stopped before its output was whole)"]  # fmt: skip


def test_killed_after_the_new_output_was_kept_the_old_one_goes(tmp_path, capsys):
    out = tmp_path / "run"
    killed_after_set_aside(tmp_path)
    (out / STAGING_MARK).unlink()  # kept: its first durable step; killed before .run.old went
    with claim(out, "real", allow_partial=True) as target:
        assert target.existing_status == "partial"
        assert (out / "journal.jsonl").read_text() == '{"new": 1}\n'
    assert entries(tmp_path) == ["run"] and capsys.readouterr().err == ""


def test_killed_while_the_old_output_was_removed_the_rest_goes(tmp_path):
    out = tmp_path / "run"
    killed_after_set_aside(tmp_path)
    (out / STAGING_MARK).unlink()
    staging = tmp_path / ".run.staging"
    (tmp_path / ".run.old").rename(staging)  # the old output on its way out ...
    (staging / STAGING_MARK).touch()
    (staging / "manifest.json").unlink()  # ... half removed
    with claim(out, "real", allow_partial=True):
        pass
    assert entries(tmp_path) == ["run"]


def test_another_commands_claim_leaves_the_replacement_and_the_old_run_alone(tmp_path):
    before = killed_after_set_aside(tmp_path)
    new = files(tmp_path / "run")
    refused = pytest.raises(OutputError, match="holds a real training run, not a simulation")
    with refused, claim(tmp_path / "run", "simulation"):
        pass
    assert files(tmp_path / "run") == new and files(tmp_path / ".run.old") == before


def partial_start(folder: Path) -> None:
    """What a fresh real run writes before its first durable step (train_run: the manifest,
    then the journal's start line and the first adapter)."""
    write_manifest(folder, "real", "partial")
    new_run(folder)


@pytest.mark.parametrize("replace", [True, False])  # False: --resume with nothing to resume
@pytest.mark.parametrize("error", [RuntimeError("model failed to load"), KeyboardInterrupt(),
                                   Interrupted(15)])  # fmt: skip
def test_a_fresh_output_that_fails_before_it_is_kept_leaves_nothing(tmp_path, error, replace):
    """It once left a partial run, which a plain rerun refused ("holds an unfinished real
    training run ... --resume") although nothing had been trained."""
    out = tmp_path / "run"
    resume = not replace
    with (
        pytest.raises(type(error)),
        claim(out, "real", allow_partial=resume) as target,
        target.in_place(replace=replace),
    ):
        assert (out / STAGING_MARK).is_file()
        partial_start(out)
        raise error
    assert entries(tmp_path) == []
    with claim(out, "real") as target, target.in_place() as keep:  # a plain rerun may go on
        assert not target.has_output
        keep()
    assert entries(tmp_path) == ["run"] and entries(out) == []


def test_a_fresh_output_in_an_empty_folder_that_fails_leaves_the_folder_empty(tmp_path):
    out = tmp_path / "run"
    out.mkdir()  # (a link given as --out names a folder: it stays)
    with pytest.raises(RuntimeError), claim(out, "real") as target, target.in_place():
        partial_start(out)
        raise RuntimeError("environment error at the first step")
    assert entries(tmp_path) == ["run"] and entries(out) == []


def test_a_fresh_output_kept_is_unfinished_when_it_fails_later(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), claim(out, "real") as target, target.in_place() as keep:
        partial_start(out)
        keep()  # its first durable step
        raise KeyboardInterrupt
    assert STAGING_MARK not in entries(out) and read_manifest(out)["status"] == "partial"
    refused = pytest.raises(OutputError, match=r"unfinished real training run.*--resume")
    with refused, claim(out, "real"):
        pass
    with claim(out, "real", allow_partial=True) as target:
        assert target.has_output and target.existing_status == "partial"


def killed_fresh_start(tmp_path: Path) -> Path:
    """A fresh real run killed (kill -9) before its first durable step."""
    out = tmp_path / "run"
    out.mkdir()
    (out / STAGING_MARK).touch()
    partial_start(out)
    return out


@pytest.mark.parametrize("resume", [False, True])
def test_killed_before_a_fresh_output_was_kept_the_next_claim_empties_it(tmp_path, capsys, resume):
    out = killed_fresh_start(tmp_path)
    with claim(out, "real", allow_partial=resume) as target:
        assert not target.has_output and entries(out) == []
    assert entries(tmp_path) == ["run"]
    assert capsys.readouterr().err.splitlines() == [
        f"marlaas: warning: {out}: removed the start of a real training run that was stopped "
        "before it held anything to keep"
    ]


def test_another_commands_claim_leaves_a_fresh_start_alone(tmp_path):
    out = killed_fresh_start(tmp_path)
    before = files(out)
    refused = pytest.raises(OutputError, match="holds a real training run, not a simulation")
    with refused, claim(out, "simulation"):
        pass
    assert files(out) == before
