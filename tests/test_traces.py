"""Trace import: request traces (azure, burstgpt, csv), arrivals CSVs, the workload hooks."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from marlaas.core.workload import WorkloadError
from marlaas.traces import TraceError, load_arrivals, load_length_trace
from marlaas.traces.arrivals import load_request_times
from marlaas.traces.csvrows import read_rows
from marlaas.workload_file import apply_overrides, load_workload

TRACES = Path(__file__).resolve().parent.parent / "traces"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_azure_columns(tmp_path):
    path = write(
        tmp_path,
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n",
    )
    got = load_length_trace(path, "azure")
    assert got["prompt"].tolist() == [374, 396]
    assert got["response"].tolist() == [44, 109]
    assert got["prompt"].dtype == np.int64


def test_burstgpt_drops_failed_requests(tmp_path):
    path = write(
        tmp_path,
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n",
    )
    got = load_length_trace(path, "burstgpt")
    assert got["prompt"].tolist() == [472, 417]
    assert got["response"].tolist() == [18, 276]


def test_plain_csv_with_comments_and_extra_columns(tmp_path):
    path = write(
        tmp_path,
        "p.csv",
        "# recorded by hand\n\nid,prompt_tokens,response_tokens\na,10,20\nb,30,40\n",
    )
    got = load_length_trace(path, "csv")
    assert got["prompt"].tolist() == [10, 30] and got["response"].tolist() == [20, 40]


def test_a_quoted_field_may_span_lines(tmp_path):
    """A request trace that keeps each prompt's text: a quoted field holds commas, doubled
    quotes, blank lines and lines starting with # (all of them text, not comments), and the
    rows after it keep their own line numbers."""
    prompt = 'Solve:\n\n# step 1, then "step 2"\nend'
    quoted = '"' + prompt.replace('"', '""') + '"'
    text = f"# note\nprompt,prompt_tokens,response_tokens\n{quoted},10,20\n\nplain,30,x\n"
    path = write(tmp_path, "p.csv", text)
    with pytest.raises(TraceError) as err:
        load_length_trace(path, "csv")
    assert err.value.line == 8  # the row after the five lines of the first one and a blank
    path = write(tmp_path, "p.csv", text.replace(",x", ",40"))
    got = load_length_trace(path, "csv")
    assert got["prompt"].tolist() == [10, 30] and got["response"].tolist() == [20, 40]
    rows = list(read_rows(path, ("prompt",)))
    assert [(n, r["prompt"]) for n, r in rows] == [(3, prompt), (8, "plain")]


def test_a_quote_left_open_is_an_error_naming_its_line(tmp_path):
    path = write(tmp_path, "p.csv", 'prompt_tokens,response_tokens\n1,2\n3,"4\n5,6\n')
    with pytest.raises(TraceError, match=r"line 3: not a CSV file \(unexpected end of data\)"):
        load_length_trace(path, "csv")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,12", "prompt_tokens: 'x' is not a non-negative integer"),
        ("-3,12", "prompt_tokens: '-3' is not a non-negative integer"),
        ("10,2.5", "response_tokens: '2.5' is not a non-negative integer"),
        ("10,12,7", "expected 2 fields"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path, row, message):
    path = write(tmp_path, "bad.csv", f"# note\nprompt_tokens,response_tokens\n1,2\n{row}\n")
    with pytest.raises(TraceError) as err:
        load_length_trace(path, "csv")
    assert str(err.value).startswith(f"{path}: line 4: ")
    assert message in str(err.value)
    assert err.value.line == 4


def test_missing_column_and_file_and_format(tmp_path):
    path = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens\n1,2\n")
    with pytest.raises(TraceError, match=r"line 1: missing column\(s\) \['GeneratedTokens'\]"):
        load_length_trace(path, "azure")
    with pytest.raises(TraceError, match="no such trace file"):
        load_length_trace(tmp_path / "nope.csv", "csv")
    with pytest.raises(TraceError, match="is a folder, not a trace file"):
        load_length_trace(tmp_path, "csv")
    os.mkfifo(tmp_path / "pipe.csv")  # reading it would wait for a writer forever
    with pytest.raises(TraceError, match=r"not a regular file \(a device or a pipe\?\)"):
        load_length_trace(tmp_path / "pipe.csv", "csv")
    with pytest.raises(TraceError, match="unknown trace format 'parquet'"):
        load_length_trace(path, "parquet")
    empty = write(tmp_path, "e.csv", "prompt_tokens,response_tokens\n")
    with pytest.raises(TraceError, match="no requests"):
        load_length_trace(empty, "csv")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("azure_code_sample.csv", "azure"),
        ("azure_conv_sample.csv", "azure"),
        ("burstgpt_sample.csv", "burstgpt"),
        ("lengths_sample.csv", "csv"),
    ],
)
def test_bundled_samples_load(name, fmt):
    got = load_length_trace(TRACES / name, fmt)
    assert 100 <= len(got["response"]) <= 1000
    assert (got["response"] > 0).all()


def test_trace_distribution_in_a_workload(tmp_path):
    (tmp_path / "l.csv").write_text("prompt_tokens,response_tokens\n5,100\n6,300\n")
    spec = {
        "jobs": [
            {
                "name": "a",
                "tenant": "t",
                "response_tokens": {"dist": "trace", "path": "l.csv", "format": "csv"},
                "prompt_tokens": {"dist": "trace", "path": "l.csv", "column": "prompt"},
            }
        ]
    }
    path = write(tmp_path, "w.yaml", yaml.safe_dump(spec))
    job = load_workload(path).jobs[0]
    assert job.response_tokens.mean() == 200 and job.prompt_tokens.mean() == 5.5
    (tmp_path / "l.csv").write_text("prompt_tokens,response_tokens\n5,100\n6,oops\n")
    with pytest.raises(WorkloadError, match=r"l\.csv: line 3: response_tokens: 'oops'"):
        load_workload(path)


# ----------------------------------------------------------------------------- arrivals


def test_load_arrivals_seconds_and_timestamps(tmp_path):
    path = write(tmp_path, "a.csv", "tenant,submit_s,size\nx,0,5\ny,12.5,\n")
    rows = load_arrivals(path)
    assert [(r.tenant, r.submit_s, r.size, r.line) for r in rows] == [
        ("x", 0.0, 5, 2),
        ("y", 12.5, None, 3),
    ]
    stamped = write(
        tmp_path,
        "b.csv",
        "job,tenant,submit_time\nj1,x,2017-10-03 10:00:30\nj2,y,2017-10-03 10:00:00\n",
    )
    assert [r.submit_s for r in load_arrivals(stamped)] == [30.0, 0.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tenant,submit_s\nx,-1\n", "line 2: submit_s: '-1' is not a non-negative number"),
        ("tenant,submit_s,size\nx,1,0\n", "line 2: size: a job needs at least 1"),
        ("tenant,submit_s,size\nx,1,big\n", "line 2: size: 'big' is not"),
        ("tenant,when\nx,1\n", "line 2: needs a submit_s [s] or a submit_time column"),
        ("tenant,submit_time\nx,yesterday\n", "line 2: submit_time: 'yesterday' is not"),
        ("submit_s\n1\n", "line 1: missing column(s) ['tenant']"),
        ("tenant,submit_s,submit_time\nx,1,2024-01-01T00:00:00\n", "line 2: has both submit_s"),
        ("tenant,submit_s,Size\nx,1,4\nx,2,\n", "line 1: column 'Size' is not one an arrivals"),
    ],
)
def test_bad_arrivals(tmp_path, text, message):
    path = write(tmp_path, "a.csv", text)
    with pytest.raises(TraceError) as err:
        load_arrivals(path)
    assert message in str(err.value)


def test_a_traces_own_columns_near_size_or_job_are_ignored(tmp_path):
    # a column one edit from size that holds no step counts, and columns near job (which
    # match: tenant reads none of, and match: job finds missing): c11a48e refused 'site'
    path = write(tmp_path, "a.csv", "tenant,submit_s,site,side,jobs,Job,bob\nt,0,eu-1,left,3,x,y\n")
    assert [(row.job, row.size) for row in load_arrivals(path)] == [(None, None)]


def _workload(tmp_path: Path, arrivals: dict, csv: str) -> Path:
    (tmp_path / "arr.csv").write_text(csv)
    jobs = [
        {"name": "a1", "tenant": "alice"},
        {"name": "b1", "tenant": "bob", "arrival_s": 7},
        {"name": "a2", "tenant": "alice", "rl": {"steps": 3}},
    ]
    spec = {"jobs": jobs, "arrivals": {"path": "arr.csv", **arrivals}}
    return write(tmp_path, "w.yaml", yaml.safe_dump(spec))


def test_arrivals_by_tenant(tmp_path):
    path = _workload(tmp_path, {"match": "tenant"}, "tenant,submit_s,size\nalice,5,2\nalice,9,\n")
    w = load_workload(path)
    assert [j.arrival_s for j in w.jobs] == [5.0, 7.0, 9.0]  # bob has no row: keeps his
    assert [j.rl.steps for j in w.jobs] == [2, 20, 3]
    assert w.arrivals.path == str((tmp_path / "arr.csv").resolve())
    # survives overrides, and time_scale rescales (0 = all at once)
    assert [j.arrival_s for j in apply_overrides(w, {"arrivals.time_scale": 0.5}).jobs] == [
        2.5,
        7.0,
        4.5,
    ]


def test_arrivals_by_job(tmp_path):
    path = _workload(tmp_path, {"match": "job"}, "job,tenant,submit_s\nb1,bob,30\n")
    assert [j.arrival_s for j in load_workload(path).jobs] == [0.0, 30.0, 0.0]


def test_arrivals_written_by_excel_with_a_byte_order_mark(tmp_path):
    path = _workload(tmp_path, {"match": "job"}, "\ufeffjob,tenant,submit_s\nb1,bob,30\n")
    assert [j.arrival_s for j in load_workload(path).jobs] == [0.0, 30.0, 0.0]


@pytest.mark.parametrize(
    ("match", "csv", "message"),
    [
        ("job", "job,tenant,submit_s\nzz,bob,1\n", "line 2: job 'zz' is not in the workload"),
        ("job", "job,tenant,submit_s\nb1,bob,1\nb1,bob,2\n", "line 3: job 'b1' appears twice"),
        ("job", "tenant,submit_s\nbob,1\n", "line 2: match: job needs a 'job' column"),
        ("job", "job,tenant,submit_s\nb1,alice,1\n", "line 2: job 'b1' is tenant 'bob'"),
        ("tenant", "tenant,submit_s\ncarol,1\n", "line 2: tenant 'carol' has no job"),
        ("tenant", "tenant,submit_s\nbob,1\nbob,2\n", "line 3: tenant 'bob' has 1 job(s)"),
        # within the bound alone, beyond it scaled: the file's line, not jobs[1].arrival_s
        ("tenant", "tenant,submit_s\nalice,2e7\n", "line 2: 2e+07 s x time_scale 10 is later"),
    ],
)
def test_bad_arrivals_in_workload(tmp_path, match, csv, message):
    path = _workload(tmp_path, {"match": match, "time_scale": 10}, csv)
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert message in str(err.value) and "arr.csv" in str(err.value)


def test_bad_arrivals_section(tmp_path):
    path = _workload(tmp_path, {"match": "nearest"}, "tenant,submit_s\nbob,1\n")
    with pytest.raises(WorkloadError, match=r"arrivals\.match: Input should be 'job' or 'tenant'"):
        load_workload(path)


def test_bundled_staggered_workload():
    staggered = load_workload(TRACES / "paper-32-staggered.yaml")
    at_once = load_workload(TRACES / "paper-32.yaml")
    arrivals = [j.arrival_s for j in staggered.jobs]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals) and arrivals[-1] > 1000
    assert [j.rl.steps for j in staggered.jobs] == [j.rl.steps for j in at_once.jobs]
    same = apply_overrides(staggered, {"arrivals.time_scale": 0})
    assert [j.model_dump() for j in same.jobs] == [j.model_dump() for j in at_once.jobs]


# ----------------------------------------------------------------------------- formats

MOONCAKE = (
    '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}\n'
    "\n"
    '{"timestamp": 3052, "input_length": 7319, "output_length": 490}\n'
)


def test_mooncake_jsonl(tmp_path):
    got = load_length_trace(write(tmp_path, "m.jsonl", MOONCAKE), "mooncake")
    assert got["prompt"].tolist() == [6755, 7319] and got["response"].tolist() == [500, 490]


def test_mooncake_jsonl_written_with_a_byte_order_mark(tmp_path):
    path = write(tmp_path, "m.jsonl", "\ufeff" + MOONCAKE)  # as CSV files may start
    assert load_length_trace(path, "mooncake")["prompt"].tolist() == [6755, 7319]
    assert [t for _, t in load_request_times(path, "mooncake", 2)] == [0.0, 3.052]


def test_plain_csv_with_timestamps(tmp_path):
    path = write(tmp_path, "p.csv", "timestamp_s,prompt_tokens,response_tokens\n0.5,10,20\n")
    assert load_length_trace(path, "csv")["prompt"].tolist() == [10]


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        # a file of another format: one line naming the missing column, the file and line
        ("azure", MOONCAKE, "line 1: missing column(s) ['ContextTokens', 'GeneratedTokens']"),
        ("burstgpt", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n", "['Request tokens',"),
        ("csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n", "['prompt_tokens',"),
        ("mooncake", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "line 1: not a JSON object"),
        ("mooncake", '{"timestamp": 1, "input_length": 5}\n', "line 1: missing field(s) ['output_"),
        ("mooncake", '{"input_length": 5, "output_length": [1]}\n', "output_length: [1] is not a"),
        ("mooncake", '{"input_length": 1e30, "output_length": 1}\n', "'1e+30' is more than 1,048,"),
        ("mooncake", '{"input_length": NaN, "output_length": 1}\n', "'nan' is not a non-negative"),
        ("mooncake", "[" * 100_000 + "\n", "line 1: not a JSON object"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\nx,inf,3\n", "(0 to 1,048,576)"),
    ],
)
def test_wrong_format_is_one_line(tmp_path, fmt, text, message):
    path = write(tmp_path, "t.txt", text)
    with pytest.raises(TraceError) as err:
        load_length_trace(path, fmt)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
    assert message in str(err.value)


# ----------------------------------------------------------------------------- arrivals from
# a request trace's timestamps

AZURE_2023 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55\n"
)
AZURE_2024 = (  # the 2024 trace: the same columns, times with a UTC offset
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2024-05-10 00:00:00.009930+00:00,2162,5\n"
    "2024-05-10 00:00:01.509930+00:00,1100,90\n"
)


@pytest.mark.parametrize(
    ("fmt", "text", "times"),
    [
        ("azure", AZURE_2023, [0.0, 4.314579, 4.541877]),
        ("azure", AZURE_2024, [0.0, 1.5]),
        (
            "burstgpt",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,x\n45,ChatGPT,1087,0,1087,x\n",
            [0.0, 40.0],
        ),
        ("mooncake", MOONCAKE, [0.0, 3.052]),
        ("csv", "prompt_tokens,response_tokens,timestamp_s\n1,2,7\n1,2,3\n", [4.0, 0.0]),
    ],
)
def test_request_times(tmp_path, fmt, text, times):
    path = write(tmp_path, "t.txt", text)
    got = load_request_times(path, fmt, len(times))
    assert [t for _, t in got] == pytest.approx(times, abs=1e-6)
    assert load_request_times(path, fmt, 1) == [(got[0][0], 0.0)]  # relative to the first used


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("csv", "prompt_tokens,response_tokens,timestamp_s\n1,2,1717000000\n1,2,1717000010.5\n"),
        ("mooncake", '{"timestamp": 1717000000000, "input_length": 5, "output_length": 3}\n'
                     '{"timestamp": 1717000010500, "input_length": 5, "output_length": 3}\n'),
    ],
)  # fmt: skip
def test_request_times_may_be_unix_timestamps(tmp_path, fmt, text):
    """Only their distance from the earliest request is bounded (1e8 s), as the docs say."""
    path = write(tmp_path, "t.txt", text)
    assert [t for _, t in load_request_times(path, fmt, 2)] == pytest.approx([0.0, 10.5])
    late = text.replace("1717000010", "1817000010")  # 3 years later: more than 1e8 s apart
    with pytest.raises(TraceError, match="after the earliest request; at most 1e"):
        load_request_times(write(tmp_path, "late.txt", late), fmt, 2)


def _request_workload(tmp_path: Path, arrivals: dict, jobs: int = 3) -> Path:
    spec = {
        "jobs": [{"name": f"j{i}", "tenant": f"t{i % 2}"} for i in range(jobs)],
        "arrivals": arrivals,
    }
    return write(tmp_path, "w.yaml", yaml.safe_dump(spec))


def test_arrivals_from_request_timestamps(tmp_path):
    write(tmp_path, "az.csv", AZURE_2023)
    path = _request_workload(tmp_path, {"path": "az.csv", "format": "azure", "time_scale": 10})
    w = load_workload(path)
    assert [j.arrival_s for j in w.jobs] == pytest.approx([0.0, 43.14579, 45.41877])
    assert w.arrivals.format == "azure"
    again = apply_overrides(w, {"arrivals.time_scale": 0})
    assert [j.arrival_s for j in again.jobs] == [0.0, 0.0, 0.0]


def test_bundled_azure_conv_arrivals():
    """16 jobs at the conversation trace's first 16 request times, x 100."""
    times = load_request_times(TRACES / "azure/AzureLLMInferenceTrace_conv.csv", "azure", 16)
    assert times[0] == (2, 0.0) and times[-1][0] == 17
    assert times[-1][1] == pytest.approx(11.157911)  # 18:15:57.8385010 - 18:15:46.6805900
    assert [t for _, t in times] == sorted(t for _, t in times)


@pytest.mark.parametrize(
    ("arrivals", "text", "message"),
    [
        (
            {"format": "azure"},
            AZURE_2023.splitlines()[0] + "\n2023-11-16 x,1,2\n",
            "line 2: TIMESTAMP: '2023-11-16 x' is not an ISO 8601 date and time",
        ),
        ({"format": "azure"}, AZURE_2023[:75], "1 request(s); the workload has 3 jobs"),
        ({"format": "mooncake"}, '{"timestamp": -1}\n' * 3, "line 1: timestamp: '-1' is not a"),
        ({"format": "mooncake"}, '{"timestamp": 1e300}\n' * 3, "timestamp: '1e+300' is more than"),
        ({"format": "csv"}, "prompt_tokens,response_tokens\n1,2\n", "missing column(s) ['timest"),
        ({"format": "azure", "match": "tenant"}, AZURE_2023, "match: 'tenant' is for an arriv"),
        ({"format": "excel"}, AZURE_2023, "arrivals.format: Input should be 'jobs', 'azure'"),
        (
            {"format": "burstgpt", "time_scale": 1e6},
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "0,a,1,1,2,x\n1,a,1,1,2,x\n1000,a,1,1,2,x\n",
            "line 4: 1000 s x time_scale 1e+06 is later than 1e+08 s",
        ),
    ],
)
def test_bad_request_arrivals(tmp_path, arrivals, text, message):
    write(tmp_path, "r.txt", text)
    path = _request_workload(tmp_path, {"path": "r.txt", **arrivals})
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_overrides_set_defaulted_fields_and_read_the_traces_they_name(tmp_path, monkeypatch):
    """``--set`` applies to the validated workload: a field the file leaves to its default
    can be set, and a trace distribution given in an override is read (relative to the
    working folder); the caller's overrides are left as they were."""
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"jobs": [{"name": "a", "tenant": "t"}]}))
    write(tmp_path, "t.csv", "prompt_tokens,response_tokens\n10,20\n30,40\n")
    monkeypatch.chdir(tmp_path)
    trace = {"dist": "trace", "path": "t.csv"}
    overrides = {"jobs.*.prompt_tokens.value": 64, "jobs.*.response_tokens": trace}
    [job] = load_workload(tmp_path / "w.yaml", overrides).jobs
    assert job.prompt_tokens.value == 64  # the file has no prompt_tokens: its default's
    assert job.response_tokens.values == [20.0, 40.0]
    assert trace == {"dist": "trace", "path": "t.csv"}
