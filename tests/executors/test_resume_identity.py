"""A resumed run's workload against the one it started with (marlaas.executors.resume)."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from marlaas.executors.adapter_store import (
    CONFIG_FILE,
    META_FILE,
    OPTIMIZER_FILE,
    OPTIMIZER_SHA256,
    WEIGHTS_FILE,
    WEIGHTS_SHA256,
    AdapterStore,
)
from marlaas.executors.resume import ResumeError, check_resumable, check_same_workload, identity
from marlaas.workload_file import load_workload

SMALL = Path(__file__).resolve().parents[2] / "traces" / "small.yaml"


def test_an_rl_setting_added_since_the_run_started_counts_as_its_default():
    workload = load_workload(SMALL)
    recorded = identity(workload)
    for job in recorded["jobs"].values():  # a journal from before these settings existed
        for key in ("clip_eps_high", "minibatches", "clip_eps"):
            del job["rl"][key]
    check_same_workload(recorded, workload)  # the defaults: the same training
    first = workload.jobs[0].name
    changed = copy.deepcopy(recorded)
    changed["jobs"][first]["rl"]["max_staleness"] += 1
    with pytest.raises(ResumeError, match=rf"{first}: rl.max_staleness \d+ -> \d+") as err:
        check_same_workload(changed, workload)
    assert str(err.value).count(" -> ") == 1  # only the setting that differs is named
    tighter = load_workload(SMALL, overrides={f"jobs.{first}.rl.clip_eps_high": 0.28})
    with pytest.raises(ResumeError, match=rf"{first}: rl.clip_eps_high None -> 0.28"):
        check_same_workload(recorded, tighter)


def save_version(
    store: AdapterStore, job: str, version: int, optimizer: bool = True, rank: int = 16
) -> Path:
    """A whole adapter version as a trainer saves it (``rank``: small.yaml's), no torch: its
    config, a safetensors file of one tensor, marlaas's record and the optimizer state, a
    zip archive as torch.save writes; its record holds the SHA-256 of the weights and of
    the optimizer state."""
    folder = store.path(job, version)
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_text(json.dumps({"r": rank}))
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    weights = len(header).to_bytes(8, "little") + header + bytes(range(16))
    (folder / WEIGHTS_FILE).write_bytes(weights)
    meta = {"job": job, "version": version, "rank": rank,
            WEIGHTS_SHA256: hashlib.sha256(weights).hexdigest()}  # fmt: skip
    if optimizer:
        with zipfile.ZipFile(folder / OPTIMIZER_FILE, "w") as archive:
            archive.writestr("archive/data.pkl", b"state %d" % version * 100)
        meta[OPTIMIZER_SHA256] = hashlib.sha256((folder / OPTIMIZER_FILE).read_bytes()).hexdigest()
    (folder / META_FILE).write_text(json.dumps(meta))
    return folder


def store_of(root: Path, job: str, versions: range) -> AdapterStore:
    """An adapter store with ``job``'s ``versions``, each with its optimizer state."""
    store = AdapterStore(root)
    for version in versions:
        save_version(store, job, version)
    return store


@pytest.mark.parametrize("journaled", [True, False])  # False: a run from before journals
def test_resume_with_fewer_steps_than_a_job_has_done_is_refused_before_any_change(
    tmp_path, journaled
):
    """It was accepted, and the run's rewards.csv then kept the steps past the new count."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(5))  # v4: written by a step never journaled
    durable = {first: 3} if journaled else None
    done = 3 if journaled else 4
    fewer = load_workload(SMALL, overrides={f"jobs.{first}.rl.steps": 2})
    with pytest.raises(ResumeError, match=rf"^--resume: job {first} has done {done} steps, "
                       r"more than its rl\.steps 2 now; resume with rl\.steps of at least "
                       rf"{done}, or train into a new --out folder$"):  # fmt: skip
        check_resumable(store, fewer, durable)
    assert store.versions(first) == [0, 1, 2, 3, 4]  # nothing removed
    same = load_workload(SMALL, overrides={f"jobs.{first}.rl.steps": done})
    assert check_resumable(store, same, durable)[first] == done
    assert store.latest(first) == done


def test_a_refused_resume_removes_no_version(tmp_path):
    """A journal cut short names an older durable version than the store holds: the resume
    is refused (that version has no optimizer state), and it removed the newer versions
    first: a finished run's trained adapters were gone."""
    first, second = (j.name for j in load_workload(SMALL).jobs[:2])
    store = AdapterStore(tmp_path)
    for version in range(4):  # a trainer keeps the optimizer state of the newest alone
        save_version(store, first, version, optimizer=version == 3)
        save_version(store, second, version, optimizer=version == 3)
    workload = load_workload(SMALL)
    durable = {first: 3, second: 1}  # the first job could go on: its versions stay too
    with pytest.raises(ResumeError, match=rf"^{second}: version 1 in {tmp_path} has no "
                       "optimizer state; the run cannot be continued exactly \\(its store "
                       "holds versions up to 3, but the run's journal names 1 as its last "
                       "durable one: was the journal cut short\\?\\)"):  # fmt: skip
        check_resumable(store, workload, durable)
    assert store.versions(first) == store.versions(second) == [0, 1, 2, 3]
    save_version(store, first, 4)  # saved by a step never journaled
    save_version(store, second, 4)
    offsets = check_resumable(store, workload, {first: 3, second: 4})
    assert (offsets[first], offsets[second]) == (3, 4)
    assert store.versions(first) == [0, 1, 2, 3]  # past the journal: never durable, removed


def damage(folder: Path, name: str) -> str:
    path = folder / name
    if name == WEIGHTS_FILE:
        path.write_bytes(path.read_bytes()[:40])  # cut short
        return "damaged, not a safetensors file"
    if name == OPTIMIZER_FILE:
        data = bytearray(path.read_bytes())
        data[40:45] = b"XXXXX"  # inside the member: its checksum fails
        path.write_bytes(bytes(data))
        return r"damaged \(archive/data\.pkl fails its checksum\)"
    path.write_bytes(bytes(64))  # zeroed
    return "not a readable JSON file"


@pytest.mark.parametrize("name", [WEIGHTS_FILE, OPTIMIZER_FILE, CONFIG_FILE, META_FILE, None])
def test_a_damaged_durable_version_is_named_before_any_model_loads(tmp_path, name):
    """It was found by the engines and trainers once the models had loaded, four times, and
    named no file ("LoadAdapter of job 'math-a' failed 4 times in a row: SafetensorError:
    Error while deserializing header: invalid header length")."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(3))
    if name is None:  # the whole version
        shutil.rmtree(store.path(first, 2))
        told = rf"version 2 in {tmp_path} is missing; the run cannot be continued "
    else:
        told = rf"{store.path(first, 2) / name}: {damage(store.path(first, 2), name)}"
    with pytest.raises(ResumeError, match=rf"^{first}: {told}"):
        check_resumable(store, load_workload(SMALL), {first: 2})


def test_a_flipped_byte_in_the_weights_data_is_named_by_the_recorded_checksum(tmp_path):
    """A byte changed in the tensors' data (the header and the length whole) was resumed
    from silently: only the header was checked. A version saved before the checksum was
    recorded is checked as before; a record whose checksum is no SHA-256 is named."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(3))
    folder = store.path(first, 2)
    weights = folder / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x10  # in the last tensor's data
    weights.write_bytes(bytes(data))
    with pytest.raises(ResumeError, match=rf"^{first}: {weights}: damaged: its SHA-256 is "
                       rf"[0-9a-f]{{64}}, but {META_FILE} recorded [0-9a-f]{{64}} when it was "
                       "written; the run cannot be continued exactly"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {first: 2})
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, WEIGHTS_SHA256: "abc"}))
    with pytest.raises(ResumeError, match=rf"{META_FILE}: {WEIGHTS_SHA256}: 'abc' is not a "
                       "SHA-256"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {first: 2})
    del meta[WEIGHTS_SHA256]  # saved before checksums were recorded: not checked
    (folder / META_FILE).write_text(json.dumps(meta))
    assert check_resumable(store, load_workload(SMALL), {first: 2})[first] == 2


def test_an_optimizer_state_that_is_not_the_one_written_is_named_by_its_recorded_checksum(
    tmp_path,
):
    """Another whole archive in a version's optimizer state (here: the version before's)
    passed the archive's own checksums, and the job resumed with Adam's moments of another
    step. Its SHA-256 recorded as written names it; a version saved before it was recorded
    is checked as before; a record whose checksum is no SHA-256 is named."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(3))
    folder = store.path(first, 2)
    state = folder / OPTIMIZER_FILE
    state.write_bytes((store.path(first, 1) / OPTIMIZER_FILE).read_bytes())
    with pytest.raises(ResumeError, match=rf"^{first}: {state}: damaged: its SHA-256 is "
                       rf"[0-9a-f]{{64}}, but {META_FILE} recorded [0-9a-f]{{64}} when it was "
                       "written; the run cannot be continued exactly"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {first: 2})
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, OPTIMIZER_SHA256: 7}))
    with pytest.raises(ResumeError, match=rf"{META_FILE}: {OPTIMIZER_SHA256}: '7' is not a "
                       "SHA-256"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {first: 2})
    del meta[OPTIMIZER_SHA256]  # saved before checksums were recorded: its archive checked
    (folder / META_FILE).write_text(json.dumps(meta))
    assert check_resumable(store, load_workload(SMALL), {first: 2})[first] == 2


def test_the_services_drop_checks_the_adapters_weights_given_the_jobs_rank(tmp_path):
    """The service's restart checked a job's durable version for its optimizer state alone:
    a changed byte in its weights was resumed from, and found only when a trainer loaded
    it (the job's swap-in failing over and over). Given the job's rank, it is named."""
    from marlaas.executors.resume import drop_undurable

    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(3))
    weights = store.path(first, 1) / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x10
    weights.write_bytes(bytes(data))
    assert drop_undurable(store, first, 1) == ""  # the optimizer state alone: whole
    lost = drop_undurable(store, first, 1, rank=16)
    assert lost.startswith(f"{first}: {weights}: damaged: its SHA-256 is "), lost
    assert store.versions(first) == [0, 1]


def test_damage_the_file_checks_do_not_expect_is_named_too(tmp_path):
    """An archive whose compression method is unknown (NotImplementedError from zipfile) and
    a header whose data offsets overflow (OverflowError) were tracebacks."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(2))
    folder = store.path(first, 1)
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1e999]}})
    header = header.replace("Infinity", "1e999").encode()
    (folder / WEIGHTS_FILE).write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    with pytest.raises(ResumeError, match=rf"{WEIGHTS_FILE}: damaged, not a safetensors file"):
        check_resumable(store, load_workload(SMALL), {first: 1})
    shutil.rmtree(folder)
    save_version(store, first, 1)
    data = bytearray((folder / OPTIMIZER_FILE).read_bytes())
    central = data.rfind(b"PK\x01\x02")  # the central directory's record of the member
    data[central + 10 : central + 12] = (99).to_bytes(2, "little")  # an unknown method
    (folder / OPTIMIZER_FILE).write_bytes(bytes(data))
    with pytest.raises(ResumeError, match=rf"{OPTIMIZER_FILE}: damaged, not a saved optimizer "
                       "state \\(NotImplementedError"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {first: 1})


def test_a_finished_run_whose_journal_names_fewer_versions_than_its_store_is_refused(tmp_path):
    """A finished run's journal cut to its first line named no durable version, and --resume
    removed every trained version and trained them all again, status 0."""
    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(3))
    with pytest.raises(ResumeError, match=rf"^{first}: the finished run's store in {tmp_path} "
                       "holds versions up to 2, but its journal names 0 as the last durable "
                       "one: was the journal cut short\\?"):  # fmt: skip
        check_resumable(store, load_workload(SMALL), {}, finished=True)
    assert store.versions(first) == [0, 1, 2]
    assert check_resumable(store, load_workload(SMALL), {first: 1})[first] == 1  # a partial run
    assert store.versions(first) == [0, 1]  # version 2: saved, never journaled


def test_the_services_drop_removes_the_versions_past_the_durable_one_of_a_job_that_fails(
    tmp_path,
):
    """A job that cannot go on (its durable version lost its optimizer state) still has its
    never-durable versions removed: they stayed on disk for good."""
    from marlaas.executors.resume import drop_undurable

    first = load_workload(SMALL).jobs[0].name
    store = store_of(tmp_path, first, range(4))
    (store.path(first, 1) / OPTIMIZER_FILE).unlink()
    assert "has no optimizer state" in drop_undurable(store, first, 1)
    assert store.versions(first) == [0, 1]
