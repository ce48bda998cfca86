"""Workloads: validation errors name the field and value; overrides; presets; defaults; and
workload files (YAML, referenced traces, environments checked on load)."""

from __future__ import annotations

import pytest
import yaml

from marlaas.core.scheduling import SchedulingSpec
from marlaas.core.workload import WorkloadError, parse_workload
from marlaas.workload_file import load_workload


def minimal(**extra) -> dict:
    return {"jobs": [{"name": "a", "tenant": "t"}], **extra}


def test_minimal_workload_gets_documented_defaults():
    workload = parse_workload(minimal())
    job = workload.jobs[0]
    assert job.rl.group_size == 8 and job.rl.max_staleness == 1
    assert workload.cluster.total_devices == 8
    assert workload.scheduling.resolve().placement == "disaggregated"
    assert job.env.latency_s.mean() == 0  # an environment waits nothing unless declared


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
        # an unknown field names the field meant, or the fields allowed there
        (lambda d: d.update(sede=1), "sede: unknown field (did you mean 'seed'?)"),
        (lambda d: d["jobs"][0].update(tenat="t"), "jobs[0].tenat: unknown field (did you mean"),
        (
            lambda d: d["jobs"][0].update(rl={"step": 2}),
            "rl.step: unknown field (did you mean 'steps'?)",
        ),
        (
            lambda d: d["jobs"][0].update(
                response_tokens={"dist": "lognormal", "median": 9, "sigmaa": 1}
            ),
            "response_tokens.lognormal.sigmaa: unknown field (did you mean 'sigma'?)",
        ),
        (
            lambda d: d.update(cluster={"pool": []}),
            "cluster.pool: unknown field (did you mean 'pools'?)",
        ),
        (
            lambda d: d.update(tenants={"t": {"wieght": 1}}),
            "tenants.t.wieght: unknown field (known fields: ",
        ),
        (
            lambda d: d.update(qqqq=1),
            "qqqq: unknown field (known fields: arrivals, base_model, cluster",
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


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        ({"minibatches": 0}, "jobs[0].rl.minibatches: Input should be greater than or equal to 1"),
        ({"minibatches": -2}, "jobs[0].rl.minibatches: Input should be greater than or equal"),
        ({"minibatches": 2.5}, "jobs[0].rl.minibatches: must be a whole number (got 2.5)"),
        ({"minibatches": "2"}, "jobs[0].rl.minibatches: must be a whole number, not text"),
        ({"minibatches": True}, "jobs[0].rl.minibatches: a number, not true or false"),
        ({"minibatches": 9}, "minibatches (9) must be at most prompts_per_step (8)"),
        ({"clip_eps": 0}, "jobs[0].rl.clip_eps: Input should be greater than 0"),
        ({"clip_eps": 1.5}, "jobs[0].rl.clip_eps: Input should be less than or equal to 1"),
        ({"clip_eps_high": 0}, "jobs[0].rl.clip_eps_high: Input should be greater than 0"),
        ({"clip_eps_high": 11}, "jobs[0].rl.clip_eps_high: Input should be less than or equal"),
        ({"clip_eps_high": "x"}, "jobs[0].rl.clip_eps_high: Input should be a valid number"),
    ],
)
def test_minibatches_and_their_clip_are_checked(rl, expected):
    data = minimal()
    data["jobs"][0]["rl"] = rl
    with pytest.raises(WorkloadError) as err:
        parse_workload(data, source="w.yaml")
    assert expected in str(err.value)
    rl = parse_workload(minimal()).jobs[0].rl
    assert (rl.minibatches, rl.clip_eps, rl.clip_eps_high) == (1, 0.2, None)  # one optimizer step
    data["jobs"][0]["rl"] = {"minibatches": 4, "prompts_per_step": 4, "clip_eps": 0.1}
    assert parse_workload(data).jobs[0].rl.minibatches == 4


COUNTS = [
    ("rl", "steps"), ("rl", "prompts_per_step"), ("rl", "group_size"), ("rl", "turns"),
    ("rl", "max_new_tokens"), ("rl", "max_prompt_tokens"), ("rl", "max_staleness"),
    ("rl", "minibatches"), ("rl", "resample_alike"), ("env", "observation_tokens"),
    (None, "lora_rank"),
]  # fmt: skip
"""Every count of a job: (its block, or None for the job's own field; the field)."""


def job_with(block: str | None, field: str, value) -> dict:
    """The minimal workload with one count of its job set to ``value``."""
    data = minimal()
    job = data["jobs"][0]
    if block is None:
        job[field] = value
    else:
        job[block] = {field: value}
    return data


def count_of(workload, block: str | None, field: str):
    job = workload.jobs[0]
    return getattr(job if block is None else getattr(job, block), field)


@pytest.mark.parametrize(("block", "field"), COUNTS)
def test_a_count_given_as_text_is_refused_whatever_the_field(block, field):
    # rl.steps: "5" was read as 5 and rl.minibatches: "1" refused: one rule for every count
    where = f"jobs[0].{block}.{field}" if block else f"jobs[0].{field}"
    for text, hint in (("1", " (write it without quotes)"), ("many", "")):
        with pytest.raises(WorkloadError) as err:
            parse_workload(job_with(block, field, text), source="w.yaml")
        message = f"w.yaml: {where}: must be a whole number, not text{hint} (got '{text}')"
        assert str(err.value) == message


@pytest.mark.parametrize(("block", "field"), COUNTS)
def test_a_whole_float_or_numpy_integer_count_is_a_python_int(block, field):
    import numpy as np

    # a workload built in code may hold numpy integers and whole floats (rl.minibatches
    # refused both, rl.steps took them)
    for value in (1.0, np.int64(1), np.float64(1.0), np.uint8(1)):
        got = count_of(parse_workload(job_with(block, field, value)), block, field)
        assert got == 1 and type(got) is int, value
    for value in (1.5, True, np.bool_(True)):
        with pytest.raises(WorkloadError, match=r"must be a whole number|not true or false"):
            parse_workload(job_with(block, field, value))


def test_every_count_of_the_workload_takes_whole_numbers_only():
    import numpy as np

    pools = [{"name": "r", "role": "inference", "devices": np.int32(2)},
             {"name": "t", "role": "training", "devices": 2.0}]  # fmt: skip
    workload = parse_workload(minimal(
        seed=np.int64(3), cluster={"pools": pools, "engine": {"max_seqs": 64.0}},
        scheduling={"max_active_jobs": np.int16(2)}, tenants={"t": {"max_active_jobs": 1.0}},
    ))  # fmt: skip
    assert (workload.seed, workload.cluster.pools[0].devices) == (3, 2)
    assert workload.scheduling.max_active_jobs == 2
    assert workload.tenants["t"].max_active_jobs == 1
    for data, where in [
        (minimal(seed="3"), "seed"),
        (minimal(cluster={"engine": {"kv_tokens": "1000"}}), "cluster.engine.kv_tokens"),
        (minimal(scheduling={"staleness_cap": "0"}), "scheduling.staleness_cap"),
        (minimal(tenants={"t": {"max_queued_jobs": "2"}}), "tenants.t.max_queued_jobs"),
    ]:
        with pytest.raises(WorkloadError, match=rf"^w.yaml: {where}: must be a whole number, "
                           r"not text \(write it without quotes\)"):  # fmt: skip
            parse_workload(data, source="w.yaml")


def test_digits_grouped_by_underscores_are_a_count_and_quoted_ones_are_refused(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("jobs: [{name: j, tenant: t, rl: {steps: 1_000}}]\n")
    assert load_workload(path).jobs[0].rl.steps == 1000  # as Python reads it (and YAML 1.1)
    path.write_text("jobs: [{name: j, tenant: t, rl: {steps: '1_000'}}]\n")
    with pytest.raises(WorkloadError, match=r"rl.steps: must be a whole number, not text"):
        load_workload(path)


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        ({"median": 3600, "sigma": 5}, "jobs[0].env.latency_s: lognormal median 3600 s, "
         "sigma 5: its p99.99 (median x e^(3.72 sigma)) is 4.286e+11 s; at most 86400 s"),
        ({"median": 10, "sigma": 4}, "its p99.99 (median x e^(3.72 sigma)) is 2.888e+07 s"),
        ({"median": 10, "sigma": -1}, "jobs[0].env.latency_s.lognormal.sigma: Input should be "
         "greater than or equal to 0"),
        ({"median": 10, "sigma": float("nan")}, "latency_s.lognormal.sigma: Input should be "
         "a finite number"),
        ({"median": 10, "sigma": float("inf")}, "latency_s.lognormal.sigma: Input should be "
         "a finite number"),
        ({"median": 0, "sigma": 1}, "latency_s.lognormal.median: Input should be greater than 0"),
    ],
)  # fmt: skip
def test_a_lognormal_latency_is_bounded_by_its_tail_not_its_median_alone(latency, expected):
    # a median within the day's bound passed whatever its sigma: median 1 h with sigma 5 was
    # waited up to 10^11 s (a real run sleeps it)
    data = minimal()
    data["jobs"][0]["env"] = {"latency_s": {"dist": "lognormal", **latency}}
    with pytest.raises(WorkloadError) as err:
        parse_workload(data, source="w.yaml")
    assert expected in str(err.value)
    for fine in ({"median": 86400, "sigma": 0}, {"median": 10, "sigma": 0.6}):
        data["jobs"][0]["env"] = {"latency_s": {"dist": "lognormal", **fine}}
        assert parse_workload(data).jobs[0].env.latency_s.median == fine["median"]


def test_a_lognormal_length_is_bounded_by_its_median_its_draws_truncated():
    # lengths are truncated where they are used (rl.max_new_tokens, a prompt's p99.99, at
    # most MAX_TOKENS): a long tail is a response that runs to its cap, not a refusal
    data = minimal()
    data["jobs"][0]["response_tokens"] = {"dist": "lognormal", "median": 2000, "sigma": 3}
    assert parse_workload(data).jobs[0].response_tokens.sigma == 3


def test_a_tenant_no_job_names_is_kept_not_refused(tmp_path):
    from marlaas.sweep import first_jobs

    # not refused on load either: a service's traffic file names every registered tenant,
    # those that never submitted too (tests/service/test_service_traffic.py), a sweep over
    # job counts takes the first N jobs, and --set may move a job to another tenant
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({
        "jobs": [{"name": "a", "tenant": "t"}, {"name": "b", "tenant": "u"}],
        "tenants": {"u": {"max_active_jobs": 1}, "idle": {"max_queued_jobs": 0}},
    }))  # fmt: skip
    workload = load_workload(path)
    assert sorted(workload.tenants) == ["idle", "u"]
    assert sorted(first_jobs(workload, 1).tenants) == ["idle", "u"]
    moved = load_workload(path, {"jobs.b.tenant": "t"})
    assert {j.tenant for j in moved.jobs} == {"t"} and sorted(moved.tenants) == ["idle", "u"]


def test_unknown_policy_in_file_is_rejected():
    with pytest.raises(WorkloadError, match="policy: unknown policy 'fastest'"):
        parse_workload(minimal(policy="fastest"))
    with pytest.raises(WorkloadError, match="is a preset of mechanism settings"):
        parse_workload(minimal(policy="sequential"))


def test_presets_fill_unset_settings_and_refuse_contradictions():
    sequential = SchedulingSpec(preset="sequential").resolve()
    assert (sequential.placement, sequential.max_active_jobs, sequential.staleness_cap) == (
        "colocated", 1, 0,
    )  # fmt: skip
    assert SchedulingSpec(preset="sync", staleness_cap=0).resolve().barrier is True
    assert SchedulingSpec(max_active_jobs=2).resolve().placement == "disaggregated"
    with pytest.raises(WorkloadError) as err:
        parse_workload(minimal(scheduling={"preset": "sequential", "placement": "disaggregated"}))
    message = str(err.value)
    assert "scheduling" in message and "'disaggregated'" in message and "'sequential'" in message
    with pytest.raises(WorkloadError, match="unknown preset 'fast'"):
        parse_workload(minimal(scheduling={"preset": "fast"}))
    overridden = parse_workload(minimal()).with_overrides({"scheduling.preset": "sync"})
    assert overridden.scheduling.resolve().barrier is True


def test_base_model_is_declared_once():
    workload = parse_workload(minimal(base_model={"name": "m", "path": "models/m"}))
    assert workload.base_model.path == "models/m"
    data = minimal()
    data["jobs"][0]["model_dir"] = "models/m"
    with pytest.raises(WorkloadError, match=r"jobs\[0\].*declare it once.*base_model"):
        parse_workload(data)


def test_trace_distributions_need_their_values_read():
    data = minimal()
    data["jobs"][0]["response_tokens"] = {"dist": "trace", "path": "x.csv"}
    with pytest.raises(WorkloadError, match="load_workload"):
        parse_workload(data)


def test_duplicate_keys_and_environments_are_checked_on_load(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: a\nname: b\njobs: [{name: j, tenant: t}]\n")
    with pytest.raises(WorkloadError, match="duplicate key 'name' at line 2"):
        load_workload(dup)
    merged = tmp_path / "merge.yaml"
    merged.write_text(
        "base: &b {name: j, tenant: t, weight: 1}\njobs: [{<<: *b, weight: 2}]\n".replace(
            "base: &b", "x-base: &b"
        )
    )
    with pytest.raises(WorkloadError, match="x-base: unknown field"):
        load_workload(merged)  # merge keys work (the override is no duplicate)
    for env, message in [
        ({"name": "no-such-env"}, r"jobs\[0\].env: unknown environment 'no-such-env'"),
        (
            {"name": "target_char", "args": {"latency_s": 0.5}},
            r"unknown option\(s\) \['latency_s'\]",
        ),
        ({"name": "target_char", "args": {"target": "ab"}}, "one character"),
        ({"name": "nowhere.mod:Env"}, "cannot import module 'nowhere.mod'"),
    ]:
        path = tmp_path / "env.yaml"
        path.write_text(yaml.safe_dump({"jobs": [{"name": "j", "tenant": "t", "env": env}]}))
        with pytest.raises(WorkloadError, match=message):
            load_workload(path)
    plugin = {"name": "tests.executors.plugin_env:EchoEnv"}
    path.write_text(yaml.safe_dump({"jobs": [{"name": "j", "tenant": "t", "env": plugin}]}))
    assert load_workload(path).jobs[0].env.name == plugin["name"]


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
        ("jobs.*.rl.stepz", 3, "jobs.*.rl.stepz: unknown field 'stepz' (did you mean 'steps'?)"),
        ("polcy", "fair", "polcy: unknown field 'polcy' (did you mean 'policy'?)"),
        ("nope", 1, "nope: unknown field 'nope' (known: name, seed, policy, "),
        ("cluster.*.devices", 1, "'*' stands for every item of a list, and cluster is a mapping"),
        ("arrivals.path", "a.csv", "arrivals is not set; set it whole, e.g. arrivals={path: ...}"),
        ("seed.x", 1, "seed.x: seed is a value (0), not a mapping of fields"),
        ("jobs.c.weight", 1, "no list item 'c'"),
        ("jobs.*.rl.steps", -1, "jobs[0].rl.steps"),
        ("", 1, "override '': a dotted path to a field, with no empty part"),
        ("jobs..rl.steps", 1, "override 'jobs..rl.steps': a dotted path to a field"),
    ],
)
def test_bad_overrides(key, value, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload(minimal()).with_overrides({key: value})
    assert message in str(err.value)


def test_a_set_value_python_cannot_convert_is_a_workload_error():
    from marlaas.workload_file import parse_overrides

    with pytest.raises(WorkloadError, match=r"not a YAML value \(cannot read '9999.* as int"):
        parse_overrides(["seed=" + "9" * 5000])  # over int()'s 4,300 digits: was a ValueError


def test_a_yaml_text_of_too_many_values_is_refused_before_its_document_is_built(monkeypatch):
    from marlaas import workload_file

    def built(*_args, **_kwargs):
        raise AssertionError("the document was built (memory grows with the file)")

    monkeypatch.setattr(workload_file, "MAX_NODES", 1_000)
    monkeypatch.setattr(workload_file._UniqueKeyLoader, "construct_document", built)
    with pytest.raises(WorkloadError, match=r"w.yaml: more than 1,000 values \(mappings, lists"):
        workload_file.parse_yaml("x: [" + "0, " * 2_000 + "0]", "w.yaml")


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


@pytest.mark.parametrize(
    ("text", "value"),
    [("seed: 0123", 123), ("seed: 1e3", 1000), ("seed: 0x10", 16), ("seed: 007", 7)],
)
def test_numbers_are_read_as_yaml_1_2_reads_them(tmp_path, text, value):
    path = tmp_path / "w.yaml"
    path.write_text(f"{text}\njobs: [{{name: j, tenant: t}}]\n")
    assert load_workload(path).seed == value  # YAML 1.1: 0123 was octal 83, 1e3 a string


@pytest.mark.parametrize("given", ["1:20", "0b101"])
def test_yaml_1_1_number_forms_are_text_a_number_field_refuses(tmp_path, given):
    path = tmp_path / "w.yaml"
    path.write_text(f"seed: {given}\njobs: [{{name: j, tenant: t}}]\n")
    with pytest.raises(WorkloadError, match=f"seed: .*{given}"):  # YAML 1.1: 80 and 5
        load_workload(path)


@pytest.mark.parametrize(
    "written", ["2024-01-01", "2024-01-01T10:00:00Z", "2024-1-1 10:00:00", "2001-02-30"]
)
def test_an_unquoted_date_is_the_text_written(tmp_path, written):
    from marlaas.workload_file import parse_overrides

    # YAML 1.1 made these dates: an env arg got a date object (workload.json then held it in
    # another format: 2024-01-01T10:00:00, 2024-01-01), a text field refused it, and the 30th
    # of February was a YAML error; YAML 1.2's schema, like this reader's, has no timestamps
    env = f"{{name: tests.executors.plugin_env:EchoEnv, args: {{day: {written}, {written}: 1}}}}"
    path = tmp_path / "w.yaml"
    path.write_text(f"jobs: [{{name: j, tenant: {written}, env: {env}}}]\n")
    job = load_workload(path).jobs[0]
    assert job.env.args == {"day": written, written: 1} and job.tenant == written
    assert parse_overrides([f"jobs.0.env.args.day={written}"]) == {"jobs.0.env.args.day": written}


def test_a_plain_equals_sign_or_merge_sign_value_is_text(tmp_path):
    from marlaas.workload_file import parse_overrides

    # YAML 1.1 resolved them to !!value and !!merge, which no loader constructs: "not valid
    # YAML (could not determine a constructor for the tag 'tag:yaml.org,2002:value')"
    env = "{name: tests.executors.plugin_env:EchoEnv, args: {op: =, shift: <<, ops: [=, <<]}}"
    path = tmp_path / "w.yaml"
    path.write_text(f"jobs: [{{<<: {{tenant: t}}, name: j, env: {env}}}]\n")
    job = load_workload(path).jobs[0]
    assert job.env.args == {"op": "=", "shift": "<<", "ops": ["=", "<<"]}
    assert job.tenant == "t"  # a key << still merges
    assert parse_overrides(["a==", "b=<<"]) == {"a": "=", "b": "<<"}


def test_a_set_key_given_twice_is_refused():
    from marlaas.workload_file import parse_overrides

    assert parse_overrides(["seed=1", "policy=fair"]) == {"seed": 1, "policy": "fair"}
    with pytest.raises(WorkloadError, match=r"--set 'seed' given twice; give each key once"):
        parse_overrides(["seed=1", " seed =2"])  # the last one silently won


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: !!binary aGVsbG8=\njobs: [{name: j, tenant: t}]",
         "name: a !!binary value (bytes) at line 1, column 7"),
        ("jobs: [{name: !!binary aGVsbG8=, tenant: t}]", "jobs[0].name: a !!binary value"),
        ("jobs: [{name: j, tenant: t, env: {name: calculator, args: {x: [1, !!binary aGk=]}}}]",
         "jobs[0].env.args.x[1]: a !!binary value"),
        ("jobs: [{name: j, tenant: t, dataset: {path: !!binary ZC5qc29ubA==}, env: {name: math}}]",
         "jobs[0].dataset.path: a !!binary value"),
        ("x-t: &t {tenant: !!binary dA==}\njobs: [{<<: *t, name: j}]", "x-t.tenant: a !!binary"),
    ],
)  # fmt: skip
def test_a_binary_value_is_refused_naming_its_field(tmp_path, text, where):
    # a job name was the bytes' UTF-8 ('hello'), a dataset path was not made relative to the
    # workload file (only text is), an env arg stayed bytes
    path = tmp_path / "w.yaml"
    path.write_text(text + "\n")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert f"w.yaml: {where}" in str(err.value)
    assert "write the text itself" in str(err.value)


def test_a_binary_set_value_is_refused():
    from marlaas.workload_file import parse_overrides

    with pytest.raises(WorkloadError, match=r"--set 'name=!!binary aGk=': a !!binary value"):
        parse_overrides(["name=!!binary aGk="])


JSON_ONLY = (
    "this file holds text, numbers, true and false, null, lists and mappings, and no other "
    "YAML tags"
)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("!!set {a, b}", ": a !!set value at line 7, column 12; this file holds lists, not sets: "
                         "write the list [a, b]"),
        ("!!set\n          ? a\n          ? b", ": a !!set value at line 7, column 12; this "
                                               "file holds lists, not sets: write the list [a, b]"),
        ("!!omap [{a: 1}, {b: 2}]", ": a !!omap value (an ordered mapping) at line 7, column 12; "
                                    "this file's mappings keep their keys' order: write the "
                                    "mapping {a: 1, b: 2}"),
        ("!!pairs [{a: 1}, {a: 2}]", ": a !!pairs value at line 7, column 12; write a list of "
                                     "mappings without the tag: [{a: 1}, {a: 2}]"),
        ("!!timestamp 2024-01-01", ": a !!timestamp value (a date) at line 7, column 12; this "
                                   "file holds no dates: write the date as text, without the "
                                   "tag (2024-01-01)"),
        ("[1, !!python/tuple [1, 2]]",
         f"[1]: a value tagged !!python/tuple at line 7, column 16; {JSON_ONLY}"),
        ("{y: !point {x: 1}}", f".y: a value tagged !point at line 7, column 16; {JSON_ONLY}"),
        ("!!merge a", ": a value tagged !!merge at line 7, column 12"),
    ],
)  # fmt: skip
def test_a_value_json_cannot_hold_is_refused_naming_its_field(tmp_path, value, named):
    # was a Python set (workload.json wrote it in hash order), a list of tuples, a date, or
    # "not valid YAML (could not determine a constructor for the tag ...)" naming no field
    path = tmp_path / "w.yaml"
    env = "name: tests.executors.plugin_env:EchoEnv"
    path.write_text(f"jobs:\n  - name: j\n    tenant: t\n    env:\n      {env}\n      args:\n"
                    f"        x: {value}\n")  # fmt: skip
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert f"w.yaml: jobs[0].env.args.x{named}" in str(err.value)


def test_json_tags_are_read_and_a_set_value_of_another_tag_is_refused():
    from marlaas.workload_file import parse_overrides, parse_yaml

    text = "{a: !!str 1, b: !!float 1, c: !!bool true, d: !!null ~, e: !!seq [1], f: !!map {}}"
    assert parse_yaml(text, "w") == {"a": "1", "b": 1.0, "c": True, "d": None, "e": [1], "f": {}}
    with pytest.raises(WorkloadError, match=r"^--set 'x=!!set \{a\}': a !!set value at line 1"):
        parse_overrides(["x=!!set {a}"])


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("1: foo", "w.yaml: key 1 at line 1, column 1 is a number; keys must be field names "
                   "(text); quote it ('1')"),
        ("[a, b]: x", "w.yaml: key [a, b] at line 1, column 1 is a list; keys must be field "
                      "names (text)"),
        ("? [1]\n: x", "w.yaml: key [1] at line 1, column 3 is a list"),
        ("? {a: [b, 2]}\n: x", "w.yaml: key {a: [b, 2]} at line 1, column 3 is a mapping"),
        ("on: x", "w.yaml: key on at line 1, column 1 is a boolean"),
        ("x-b: &b [" + "abcdef, " * 20 + "x]\n? *b\n: 1",
         "w.yaml: key [abcdef, abcdef, abcdef, abcdef, abcdef,... at"),
        ("tenants: {t: {weight: 1}, 7: {weight: 2}}",
         "w.yaml: tenants: key 7 at line 1, column 27 is a number"),
    ],
)  # fmt: skip
def test_a_key_that_is_not_text_is_named_as_written(tmp_path, text, named):
    path = tmp_path / "w.yaml"
    path.write_text(f"{text}\njobs: [{{name: j, tenant: t}}]\n")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert named in str(err.value)  # was "[1]: Keys should be strings", or not a key's text


def test_a_mapping_given_a_key_that_is_not_text_names_the_key():
    with pytest.raises(WorkloadError) as err:
        parse_workload({1: "foo", **minimal()}, source="w")
    assert str(err.value) == "w: key 1: keys must be field names (text)"  # was "w: [1]: ..."
    job = {"name": "a", "tenant": "t", "env": {"name": "calculator", "args": {2: 1}}}
    with pytest.raises(WorkloadError) as err:
        parse_workload({"jobs": [job]}, source="w")
    assert str(err.value) == "w: jobs[0].env.args: key 2: Input should be a valid string"
