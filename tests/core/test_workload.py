"""Workload files: validation errors name the field and value; overrides; defaults."""

from __future__ import annotations

import pytest
import yaml

from marlaas.core.workload import WorkloadError, load_workload, parse_workload


def minimal(**extra) -> dict:
    return {"jobs": [{"name": "a", "tenant": "t"}], **extra}


def test_minimal_workload_gets_documented_defaults():
    workload = parse_workload(minimal())
    job = workload.jobs[0]
    assert job.rl.group_size == 8 and job.rl.max_staleness == 1
    assert workload.cluster.total_devices == 8
    assert workload.scheduling.placement == "disaggregated"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["jobs"][0].update(colour="red"), "jobs[0].colour: unknown field"),
        (lambda d: d["jobs"][0].update(rl={"steps": -3}), "jobs[0].rl.steps:"),
        (lambda d: d["jobs"][0].update(rl={"group_size": 0}), "(got 0)"),
        (lambda d: d.update(cluster={"pools": []}), "cluster"),
        (lambda d: d["jobs"].append({"name": "a", "tenant": "u"}), "repeated: ['a']"),
        (
            lambda d: d["jobs"][0].update(response_tokens={"dist": "gamma"}),
            "jobs[0].response_tokens",
        ),
        (
            lambda d: d["jobs"][0].update(response_tokens={"dist": "uniform", "low": 5, "high": 1}),
            "must be >= low",
        ),
    ],
)
def test_bad_fields_are_named(mutate, expected):
    data = minimal()
    mutate(data)
    with pytest.raises(WorkloadError) as err:
        parse_workload(data, source="w.yaml")
    assert expected in str(err.value)
    assert str(err.value).startswith("w.yaml: ")


def test_unknown_policy_in_file_is_rejected():
    with pytest.raises(WorkloadError, match="policy: unknown policy 'fastest'"):
        parse_workload(minimal(policy="fastest"))


def test_missing_and_unparsable_files(tmp_path):
    with pytest.raises(WorkloadError, match="no such workload file"):
        load_workload(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(WorkloadError, match="must be a mapping"):
        load_workload(scalar)


def test_overrides_apply_by_path_name_and_wildcard(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(
        yaml.safe_dump(minimal(jobs=[{"name": "a", "tenant": "t"}, {"name": "b", "tenant": "u"}]))
    )
    workload = load_workload(path).with_overrides(
        {"jobs.*.rl.steps": 3, "jobs.b.weight": 2.5, "scheduling.barrier": True}
    )
    assert [j.rl.steps for j in workload.jobs] == [3, 3]
    assert workload.jobs[1].weight == 2.5
    assert workload.scheduling.barrier is True


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("jobs.*.rl.stepz", 3, "unknown field 'stepz'"),
        ("jobs.c.weight", 1, "no list item 'c'"),
        ("jobs.*.rl.steps", -1, "jobs[0].rl.steps"),
    ],
)
def test_bad_overrides(key, value, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload(minimal()).with_overrides({key: value})
    assert message in str(err.value)


def test_bundled_workloads_load():
    from pathlib import Path

    for path in sorted(Path("traces").glob("*.yaml")):
        assert load_workload(path).jobs, path


def test_a_tenant_has_one_weight_and_trainers_are_whole():
    two = {
        "jobs": [
            {"name": "a", "tenant": "t", "weight": 1},
            {"name": "b", "tenant": "t", "weight": 2},
        ]
    }
    with pytest.raises(WorkloadError, match="tenant 't' has jobs with different weights"):
        parse_workload(two)
    pools = [
        {"name": "r", "role": "inference", "devices": 2},
        {"name": "t", "role": "training", "devices": 3, "devices_per_trainer": 2},
    ]
    with pytest.raises(WorkloadError, match=r"cluster.pools\[1\].*multiple of devices_per_trainer"):
        parse_workload(minimal(cluster={"pools": pools}))
