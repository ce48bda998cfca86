"""The journal of a real run (torch-free): written per part, read back after a kill, rendered
as one history with every step once and every device's time covered."""

from __future__ import annotations

import errno
import os

import pytest

from marlaas.core.records import WorkRecord
from marlaas.executors.episode_runner import RewardPoint
from marlaas.executors.history import INTERRUPTED, history_events, history_points
from marlaas.executors.journal import Journal, JournalError, read_journal, read_run_journal
from marlaas.metrics.idle import check_partition
from marlaas.output.errors import WriteError


def point(job: str, step: int, time_s: float) -> RewardPoint:
    return RewardPoint(job, "t", step, 0.5, time_s, 0, 0, 1.0, 0.0, 0.1, 4)


def work(kind: str, step: int, start: float, end: float, device: str = "d/0", **kw) -> WorkRecord:
    return WorkRecord(kind, "t", "j", device, "d", start, end, step=step, version=step, **kw)


def idle(start: float, end: float, cause: str = "rollouts") -> WorkRecord:
    return WorkRecord("idle", "", "", "d/0", "d", start, end, outcome=cause)


def one_step(step: int, t: float) -> list[WorkRecord]:
    """Generation, training, then the weight sync (the device idles for it), from ``t``."""
    sync = [work("sync", step, t + 2, t + 3), idle(t + 2, t + 3, "weight_sync")]
    return [work("generate", step, t, t + 1), work("train", step, t + 1, t + 2), *sync]


def first_part(path) -> None:
    """Steps 0 and 1 of job j durable; step 2's environment step done, then a kill (the
    device's last idle interval was never closed)."""
    journal = Journal(path, part=0, offset_s=0.0, versions={})
    for step in (0, 1):
        t = 3.0 * step
        journal.records(one_step(step, t))
        journal.step(point("j", step, t + 2), wall_s=t + 3, batches=3 * step + 3, failures=0)
    journal.records([work("env", 2, 6.0, 7.0, device="")])  # step 2: lost with the part
    journal._file.write('{"part": 0, "record": {"kind": "tra')  # cut short by the kill
    journal._file.flush()


def test_a_killed_part_reads_back_to_its_durable_steps(tmp_path):
    path = tmp_path / "journal.jsonl"
    first_part(path)
    journaled = read_journal(path)
    assert journaled.parts == 1 and journaled.versions == {"j": 2}
    assert journaled.end_s == 7.0  # the last thing it journaled
    assert len(journaled.records) == 9


def test_two_parts_render_one_history(tmp_path):
    path = tmp_path / "journal.jsonl"
    first_part(path)
    before = read_journal(path)
    journal = Journal(path, part=1, offset_s=before.end_s, versions=before.versions)
    # part-local times (the journal makes them absolute); the scheduler's own steps and
    # versions, which a resumed job continues (it was submitted at version 2)
    journal.records([idle(0.0, 0.5), *one_step(2, 0.5)])
    journal.step(point("j", 2, 2.5), wall_s=3.5, batches=3, failures=0)  # absolute step
    journal.close()
    journaled = read_journal(path)
    assert journaled.versions == {"j": 3} and journaled.parts == 2
    events = history_events(journaled)
    check_partition(events)  # the gap the kill left is covered
    gap = events[events["outcome"] == INTERRUPTED]  # from the last row before the kill to it
    assert list(zip(gap["start_s"], gap["end_s"], strict=True)) == [(6.0, 7.0)]
    train = events[(events["kind"] == "train") & (events["outcome"] == "ok")]
    assert sorted(train["step"]) == [0, 1, 2]  # every step once
    lost = events[events["outcome"] == "failed"]
    assert list(lost["step"]) == [2] and list(lost["start_s"]) == [6.0]
    resumed = events[(events["kind"] == "train") & (events["step"] == 2)]
    assert resumed["start_s"].iloc[0] == pytest.approx(7.0 + 1.5)  # times continue
    assert [(p.step, p.time_s) for p in history_points(journaled)] == [
        (0, 2.0), (1, 5.0), (2, 9.5)
    ]  # fmt: skip


def test_a_group_dropped_in_a_lost_step_is_lost_with_it(tmp_path):
    """A killed part's dropped group (rl.resample_alike) is not the history's: its step was
    taken again, and a replay must not drop that group again."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, part=0, offset_s=0.0, versions={})
    journal.records(one_step(0, 0.0))
    journal.step(point("j", 0, 2.0), wall_s=3.0, batches=3, failures=0)
    journal.records([work("env", 1, 3.0, 4.0, device="", group=2, outcome="resampled")])
    journal.close()
    before = read_journal(path)
    journal = Journal(path, part=1, offset_s=before.end_s, versions=before.versions)
    journal.records(one_step(1, 0.0))
    journal.step(point("j", 1, 2.0), wall_s=3.0, batches=3, failures=0)
    journal.close()
    events = history_events(read_journal(path))
    env = events[events["kind"] == "env"]
    assert list(env["outcome"]) == ["failed"]


def test_a_journal_damaged_before_its_end_is_refused(tmp_path):
    path = tmp_path / "journal.jsonl"
    first_part(path)
    lines = path.read_text().splitlines()
    lines[2] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JournalError, match="line 3 is damaged"):
        read_journal(path)


def test_a_step_journaled_before_the_trust_clip_was_recorded_reads_back_unmeasured(tmp_path):
    import json
    import math

    path = tmp_path / "journal.jsonl"
    journal = Journal(path, part=0, offset_s=0.0, versions={})
    journal.step(point("j", 0, 1.0), wall_s=2.0, batches=1, failures=0)
    journal._file.flush()
    line = json.loads(path.read_text().splitlines()[-1])
    assert line["step"]["trust_clip_fraction"] == 0.0  # written by today's runs
    del line["step"]["trust_clip_fraction"]  # as a run of 2026-12-02 wrote it
    path.write_text(json.dumps(line) + "\n")
    (_part, step), *_ = read_journal(path).steps
    assert math.isnan(step.trust_clip_fraction)  # not measured: not "nothing clipped"


RECORD = '"kind": "train", "tenant": "t", "job": "j", "device": "d/0", "pool": "d"'


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('{"part": 100000000000000000000}', "line 1: part: Input should be less than or equal"),
        ('{"part": -3}', "line 1: part: Input should be greater than or equal to 0"),
        ('{"part": true}', "line 1: part: Input should be a valid integer"),
        ('{"part": 0, "part": 1}', "line 1: duplicate key 'part'"),
        ('{"part": 0, "step": {"job": "j", "step": "zz"}}', "line 1: tenant: Field required"),
        ('{"part": 0, "record": {' + RECORD + ', "start_s": "abc", "end_s": 1}}', "records: "),
        ('{"part": 0, "record": {' + RECORD + ', "start_s": 5, "end_s": 1}}', "end before"),
        ('{"part": 0, "record": {' + RECORD.replace('"j"', '""') + ', "start_s": 0, "end_s": 1}}',
         "records: row 0: kind 'train' with job ''"),
        ("\udcff", "not a readable journal"),
    ],
)  # fmt: skip
def test_a_journal_line_of_the_wrong_shape_is_refused(tmp_path, line, error):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(line.encode("utf-8", "surrogateescape") + b'\n{"part": 0}\n')
    with pytest.raises(JournalError, match=error.replace("(", r"\(")):
        read_journal(path)


@pytest.mark.parametrize("content", [b"", b"\0" * 4096, b"\n \n", b'{"part": 0, "sta'])
def test_a_journal_with_no_whole_line_is_refused(tmp_path, content):
    """Its first line is fsynced before any work, so a journal without one that the run's
    manifest lists was damaged (zeroed, emptied): it read as no journal, and --resume went on
    from the store's newest version as a run from before journals, every earlier step gone
    from the history. Not listed (a run from before journals), it reads as none."""
    from marlaas.output.manifest import write_manifest

    path = tmp_path / "journal.jsonl"
    path.write_bytes(content)
    assert read_run_journal(tmp_path).parts == 0  # not listed: no journal
    write_manifest(tmp_path, "real", "partial")  # lists journal.jsonl
    with pytest.raises(JournalError, match=r"journal\.jsonl: holds no whole journal line, "
                       r"though the run's manifest\.json lists it"):  # fmt: skip
        read_run_journal(tmp_path)
    assert path.read_bytes() == content  # not cut to nothing, either


def test_a_journal_its_run_lists_but_that_is_missing_is_refused(tmp_path):
    from marlaas.output.manifest import write_manifest

    first_part(tmp_path / "journal.jsonl")
    write_manifest(tmp_path, "real", "partial")  # lists journal.jsonl
    assert read_run_journal(tmp_path).versions == {"j": 2}
    (tmp_path / "journal.jsonl").unlink()
    with pytest.raises(JournalError, match=r"journal\.jsonl: missing, though the run's "
                       r"manifest\.json lists it; cannot resume"):  # fmt: skip
        read_run_journal(tmp_path)
    assert read_run_journal(tmp_path / "before-journals").parts == 0  # nothing listed: none


def test_a_journal_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    """A full disk or a file size limit: Python's error named no file ("marlaas: error: File
    too large"), and closing the journal afterwards raised it again in place of the first."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, part=0, offset_s=0.0, versions={})

    class Full:
        def __init__(self, file):
            self.file, self.closed = file, False

        def write(self, text):
            self.file.write(text[:5])  # half a line got out
            self.flush()

        def flush(self):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

        def fileno(self):
            return self.file.fileno()

        def close(self):
            self.closed = True
            self.file.close()

    journal._file = Full(journal._file)
    told = rf"^{path}: cannot append to the run's journal \(File too large \[EFBIG\]\); the run"
    with pytest.raises(WriteError, match=told):
        journal.records([work("generate", 0, 0.0, 1.0)])
    with pytest.raises(WriteError, match=told):
        journal.close()
    assert journal._file.closed
    assert read_journal(path).parts == 1  # the half line: cut short, as by a kill


def test_a_start_line_that_cannot_be_written_leaves_no_journal_of_no_whole_line(
    tmp_path, monkeypatch
):
    """A run from before journals continued on a full disk: its new journal's first line was
    cut, and every later --resume refused it as damaged. A new journal is removed; one with
    whole lines keeps them (its cut line is dropped when read, and when a part starts)."""

    def failing(self, line, sync=False):
        self._file.write('{"part": 0, "sta')  # half the line got out
        raise WriteError(f"{self.path}: cannot append")

    path = tmp_path / "journal.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(Journal, "_write", failing)
        with pytest.raises(WriteError):
            Journal(path, part=0, offset_s=0.0, versions={"j": 28})
    assert not path.exists()
    first_part(path)  # (its last line cut by a kill: dropped when the next part starts)
    before = path.read_bytes()[: path.read_bytes().rfind(b"\n") + 1]
    with monkeypatch.context() as patch:
        patch.setattr(Journal, "_write", failing)
        with pytest.raises(WriteError):
            Journal(path, part=1, offset_s=5.0, versions={"j": 2})
    assert path.read_bytes().startswith(before) and read_journal(path).versions == {"j": 2}


def test_a_part_that_made_no_step_keeps_the_versions_it_started_at(tmp_path):
    """A journal of a start line alone (a run from before journals continued, then killed
    while its models loaded; or a journal cut to it) named no durable version, and --resume
    removed every trained version of every job."""
    path = tmp_path / "journal.jsonl"
    Journal(path, part=0, offset_s=0.0, versions={"j": 28, "k": 0}).close()
    assert read_journal(path).versions == {"j": 28, "k": 0}
    path.write_text('{"part": 0, "start": {"offset_s": 0.0, "versions": {"j": "28"}}}\n')
    with pytest.raises(JournalError, match="line 1"):
        read_journal(path)
