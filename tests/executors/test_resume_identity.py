"""A resumed run's workload against the one it started with (marlaas.executors.resume)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from marlaas.executors.adapter_store import OPTIMIZER_FILE, AdapterStore
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


def store_of(root: Path, job: str, versions: range) -> AdapterStore:
    """An adapter store with ``job``'s ``versions``, each with its optimizer state."""
    store = AdapterStore(root)
    for version in versions:
        store.path(job, version).mkdir(parents=True)
        (store.path(job, version) / OPTIMIZER_FILE).write_bytes(b"")
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
