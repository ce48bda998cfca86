"""A resumed run's workload against the one it started with (marlaas.executors.resume)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from marlaas.executors.resume import ResumeError, check_same_workload, identity
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
