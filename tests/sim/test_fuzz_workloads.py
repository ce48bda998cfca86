"""Random workloads (tests/fuzz_workloads.py) simulate or are refused with one line, and
every run keeps its properties; plus the defects random workloads found, each pinned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import marlaas
from tests.fuzz_workloads import (
    check_mutation,
    check_run,
    random_run,
    random_workload,
    write_workload,
)

SAMPLE_SEED = 20261207
"""The seed of the CI sample (a long hunt: ``python tests/fuzz_workloads.py --runs N``)."""
SAMPLE_RUNS = 40


def test_random_workloads_simulate_or_are_refused_in_one_line(tmp_path):
    """A fixed-seed sample of generated workloads: each simulates with sane metrics and the
    same event log twice, or is refused with one line (check_run raises otherwise); every
    twentieth also through `marlaas simulate`, which must write the same event log."""
    rng = np.random.default_rng(SAMPLE_SEED)
    outcomes = [check_run(random_run(rng, tmp_path), tmp_path, cli=k % 20 == 0)
                for k in range(SAMPLE_RUNS)]  # fmt: skip
    simulated = outcomes.count("ok")
    assert simulated >= SAMPLE_RUNS // 2, outcomes  # the generator mostly makes runnable ones


def test_broken_workloads_are_refused_naming_the_field(tmp_path):
    """A fixed-seed sample of generated workloads, each with one field made wrong (a wrong
    type, a negative, huge or NaN number, a missing or unknown field, a huge list): each
    loads (a dropped field's default) or is one WorkloadError line naming the field; two
    also through `marlaas simulate` (exit 2, the same line)."""
    rng = np.random.default_rng(SAMPLE_SEED + 1)
    lines = [check_mutation(random_workload(rng, tmp_path), rng, tmp_path, cli=k in (0, 1))
             for k in range(SAMPLE_RUNS)]  # fmt: skip
    assert sum(bool(line) for line in lines) >= SAMPLE_RUNS // 2, lines


def _simulate(tmp_path, data: dict, cost: str | None = None, policy: str | None = None):
    """marlaas.simulate of ``data`` written as a workload file."""
    return marlaas.simulate(write_workload(data, tmp_path), policy, cost=cost)


@pytest.mark.parametrize("shared", [True, "overlap"])
def test_engines_whose_last_sequences_end_at_once_share_the_processor(tmp_path, shared):
    """On a shared processor, an engine whose sequences all end at the instant another
    engine's group ends is no longer decoding: it used to be counted busy with an iteration
    of 0 s, and dividing by that raised ZeroDivisionError (empty prompts and responses on the
    cpu-tiny profile end every group at once)."""
    data = {
        "name": "at-once",
        "cluster": {"shared_compute": shared},
        "jobs": [{
            "name": "a", "tenant": "t",
            "rl": {"steps": 1, "prompts_per_step": 8, "group_size": 1},
            "prompt_tokens": {"dist": "constant", "value": 0},
            "response_tokens": {"dist": "constant", "value": 0},
        }],
    }  # fmt: skip
    result = _simulate(tmp_path, data, cost="cpu-tiny", policy="fifo")
    assert result.jobs["a"].state == "finished"


LENGTHS = "traces/lengths_sample.csv"
LONG_NAME = "y" * 300
"""A file name longer than file systems allow (255 bytes): pathlib's checks raise OSError."""


def _one_job(**fields) -> dict:
    """A workload of one job with ``fields``."""
    return {"name": "one", "jobs": [{"name": "a", "tenant": "t", **fields}]}


def _refusal(tmp_path, data: dict) -> str:
    """The WorkloadError line marlaas.load_workload gives for ``data`` as a workload file."""
    from marlaas.core.workload import WorkloadError

    with pytest.raises(WorkloadError) as caught:
        marlaas.load_workload(write_workload(data, tmp_path))
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("field", ["column", "format"])
@pytest.mark.parametrize("bad", [{}, [1]])
def test_a_trace_distributions_column_or_format_of_the_wrong_type_is_refused(tmp_path, field, bad):
    """A mapping or list as a trace's column or format is a WorkloadError naming the job's
    distribution (it was a TypeError: unhashable, when the file was read before the schema
    looked at the fields)."""
    dist = {"dist": "trace", "path": str(Path(LENGTHS).resolve()), "format": "csv",
            "column": "prompt", field: bad}  # fmt: skip
    line = _refusal(tmp_path, _one_job(prompt_tokens=dist))
    assert "jobs[0].prompt_tokens" in line and ("column" in line or "trace format" in line)


def test_load_length_trace_names_a_format_that_is_no_name():
    """The traces API refuses a format that is not text with a TraceError, as an unknown
    name (not a TypeError)."""
    from marlaas.traces import TraceError, load_length_trace

    with pytest.raises(TraceError, match="unknown trace format"):
        load_length_trace(LENGTHS, {"csv": 1})


@pytest.mark.parametrize(
    "where",
    [
        lambda p: _one_job(prompt_tokens={"dist": "trace", "path": p, "column": "prompt"}),
        lambda p: {**_one_job(), "arrivals": {"path": p}},
        lambda p: _one_job(env={"name": "math"}, dataset={"path": p}),
    ],
    ids=["trace", "arrivals", "dataset"],
)
def test_a_file_name_too_long_for_the_file_system_is_a_workload_error(tmp_path, where):
    """A trace, arrivals or dataset path whose name the file system refuses (too long) is
    one WorkloadError line saying so, through the API and `marlaas simulate` (exit 2); it
    was an OSError from pathlib's is_file, a traceback in the API and exit 1 in the CLI."""
    data = where(str(tmp_path / LONG_NAME))
    assert "cannot look it up (File name too long)" in _refusal(tmp_path, data)
    done = subprocess.run(
        [sys.executable, "-m", "marlaas", "simulate", str(write_workload(data, tmp_path)),
         "--out", str(tmp_path / "run"), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("marlaas: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-2000:]


def test_a_cost_profile_name_too_long_for_the_file_system_is_a_profile_error():
    """``cost=`` naming no file the system can look up: the ProfileError line (was OSError)."""
    from marlaas.sim.cost_profiles import ProfileError

    with pytest.raises(ProfileError, match="cannot look it up"):
        marlaas.simulate("traces/small.yaml", cost=LONG_NAME)


def test_a_group_too_big_for_an_engine_with_prefix_caching_is_refused_not_stalled(tmp_path):
    """With prefix caching a group of 2 samples of a 2,048-token prompt shares 2,016 tokens
    (whole blocks short of the last token) and holds 2,016 + 2 x 32 + 2 x 1,024 = 4,128 KV
    tokens: more than the engine's 4,096. The feasibility check counted the prompt once
    (4,096: fits), admitted the job, and the run stalled with the job unfinished."""
    data = {
        "name": "blocks",
        "cluster": {"engine": {"kv_tokens": 4096, "prefix_caching": True}},
        "jobs": [
            {"name": "big", "tenant": "t", "prompt_tokens": {"dist": "constant", "value": 3225},
             "rl": {"steps": 1, "prompts_per_step": 1, "group_size": 2,
                    "max_prompt_tokens": 2048}},
            {"name": "small", "tenant": "t", "rl": {"steps": 1, "prompts_per_step": 1,
                                                    "group_size": 2, "max_new_tokens": 64}},
        ],
    }  # fmt: skip
    result = _simulate(tmp_path, data, policy="fifo")
    assert result.jobs["big"].state == "refused"
    assert "4,128 KV tokens" in result.jobs["big"].reason
    assert result.jobs["small"].state == "finished"


@pytest.mark.parametrize(
    "dist",
    [
        {"dist": "constant", "value": 33},
        {"dist": "constant", "value": 64},
        {"dist": "uniform", "low": 1, "high": 33},
        {"dist": "uniform", "low": 33, "high": 40},
        {"dist": "uniform", "low": 0, "high": 300},
        {"dist": "empirical", "values": [33, 65, 97]},
        {"dist": "empirical", "values": [31, 32, 33, 2000]},
        {"dist": "lognormal", "median": 20, "sigma": 0.5},
    ],
)
@pytest.mark.parametrize("group_size", [1, 2, 8])
def test_largest_prompts_kv_is_the_most_any_drawable_prompt_holds(dist, group_size):
    """largest_prompts_kv against every prompt the distribution can give (each whole
    number in a range, each value of a list), with prefix caching and without."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.prompts import largest_prompts_kv, prompt_cap, prompts_kv

    spec = JobSpec(name="a", tenant="t", prompt_tokens=dist, rl={"group_size": group_size})
    cap = prompt_cap(spec)
    if "values" in dist:
        drawable = {min(v, cap) for v in dist["values"]}
    elif dist["dist"] == "constant":
        drawable = {min(dist["value"], cap)}
    else:
        drawable = set(range(dist.get("low", 0), cap + 1))
    for caching in (False, True):
        worst = max(prompts_kv(p, group_size, caching) for p in drawable)
        prompt, kv = largest_prompts_kv(spec, caching)
        assert (kv, prompts_kv(prompt, group_size, caching)) == (worst, worst)


@pytest.mark.parametrize(
    "data",
    [
        {"policy": "y" * 5000},
        {"scheduling": {"preset": "y" * 5000}},
        {"jobs": [{"name": "a", "tenant": "t", "prompt_tokens": {"dist": "y" * 5000}}]},
    ],
    ids=["policy", "preset", "dist"],
)
def test_an_unknown_name_is_echoed_cut_short(data):
    """An unknown policy, preset or distribution kind is named in the error cut to a few
    dozen characters, as every other value is (short_repr): the line echoed all 5,000."""
    from marlaas.core.workload import WorkloadError, parse_workload

    with pytest.raises(WorkloadError) as caught:
        parse_workload({"jobs": [{"name": "a", "tenant": "t"}], **data})
    line = str(caught.value)
    assert "(5002 characters)" in line and len(line) < 600, line[:300]


@pytest.mark.parametrize("policy", ["", "nosuch_module_x:Policy"])
def test_a_workload_whose_policy_cannot_load_is_a_workload_error(tmp_path, policy):
    """A workload file's empty policy, or an import path that does not import, is a
    WorkloadError naming the file and the policy, as every other bad field is (the API
    raised the bare PolicyLoadError, which names no file)."""
    path = write_workload({"policy": policy, **_one_job()}, tmp_path)
    line = _refusal(tmp_path, {"policy": policy, **_one_job()})
    assert line.startswith(f"{path}: policy {policy!r}: ")


def test_an_engine_offered_in_a_round_that_placed_nothing_is_offered_again(tmp_path):
    """A policy that ranks engines (affinity) offers each engine's room to one job per
    round. An engine offered in a round whose candidates came to nothing (its room too
    small for any job then) stayed marked offered for good: job-0, arriving while job-1
    filled both single-slot engines, never got an engine, and the run stalled when job-1
    ended (seed 1; the round's early return skipped clearing the marks)."""
    data = {
        "name": "offered",
        "cluster": {
            "pools": [{"name": "infer0", "role": "inference", "devices": 2},
                      {"name": "train0", "role": "training", "devices": 1}],
            "engine": {"adapter_slots": 1},
        },
        "jobs": [
            {"name": "job-0", "tenant": "t0", "arrival_s": 53.2,
             "prompt_tokens": {"dist": "uniform", "low": 3417, "high": 3631}},
            {"name": "job-1", "tenant": "t1"},
        ],
    }  # fmt: skip
    result = marlaas.simulate(write_workload(data, tmp_path), "affinity", seed=1)
    assert {name: o.state for name, o in result.jobs.items()} == {
        "job-0": "finished", "job-1": "finished"
    }  # fmt: skip


def test_a_trace_path_thousands_of_characters_long_is_shown_cut_short(tmp_path):
    """The error line for a trace path of 5,000 characters shows its start and end (it
    echoed all of it: a line of 5,000 characters)."""
    dist = {"dist": "trace", "path": "x" * 5000, "column": "prompt"}
    line = _refusal(tmp_path, _one_job(prompt_tokens=dist))
    assert "jobs[0].prompt_tokens" in line and "..." in line and len(line) < 800
