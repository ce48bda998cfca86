"""Prompt datasets: every format reads to the same problems, malformed files get one line
naming the file, row and column, the held-out split and the training order."""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest
from pydantic import ValidationError

from marlaas.core.job_spec import DatasetSpec
from marlaas.datasets import DatasetError, Problem, load_prompt_set, read_problems

ROWS = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(20)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def files(tmp_path):
    """The same 20 problems as JSONL, Parquet, CSV and a save_to_disk folder."""
    out = {"jsonl": write_jsonl(tmp_path / "p.jsonl", ROWS)}
    (out.setdefault("json", tmp_path / "p.json")).write_text(json.dumps(ROWS))
    frame = pd.DataFrame(ROWS)
    frame.to_parquet(out.setdefault("parquet", tmp_path / "p.parquet"))
    frame.to_csv(out.setdefault("csv", tmp_path / "p.csv"), index=False)
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(ROWS).save_to_disk(out.setdefault("saved", tmp_path / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(
        out.setdefault("saved_dict", tmp_path / "saved_dict")
    )
    return out


def test_every_format_reads_the_same_problems(files):
    expected = [(r["prompt"], r["answer"]) for r in ROWS]
    for kind, path in files.items():
        got = [(p.prompt, p.answer) for p in read_problems(path, "prompt", "answer")]
        assert got == expected, kind
    first = read_problems(files["csv"], "prompt", "answer")[0]
    assert first.source == f"{files['csv']}, row 1"


def test_numbers_become_text_and_csv_keeps_what_is_written(tmp_path):
    path = write_jsonl(tmp_path / "n.jsonl", [{"q": "a", "a": 42}, {"q": "b", "a": 0.5}])
    assert [p.answer for p in read_problems(path, "q", "a")] == ["42", "0.5"]
    csv = tmp_path / "n.csv"
    csv.write_text('q,a\n"x, y",007\nz,1/2\n')
    assert [(p.prompt, p.answer) for p in read_problems(csv, "q", "a")] == [
        ("x, y", "007"),
        ("z", "1/2"),
    ]


def test_a_jsonl_string_may_hold_the_separators_json_leaves_unescaped(tmp_path):
    """U+2028, U+2029 and U+0085 are text inside a JSON string (json.dumps with
    ensure_ascii=False writes them as they are); only a newline ends a row. str.splitlines
    split rows at them: 'line 1: not valid JSON (Unterminated string ...)'."""
    rows = [{"prompt": f"a{c}b", "answer": "1"} for c in ("\u2028", "\u2029", "\x85", "\x0c")]
    path = tmp_path / "sep.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows),
                    encoding="utf-8")  # fmt: skip
    assert [p.prompt for p in read_problems(path, "prompt", "answer")] == [
        r["prompt"] for r in rows
    ]


def test_parquet_float32_and_decimal_answers_are_the_numbers_written(tmp_path):
    """A float32 0.1 is the answer '0.1' (it was '0.10000000149011612', the float64 it holds:
    an answer no response gives), and a decimal column is a number too (it was refused: 'a
    Decimal, expected text'), 3.00 as '3' as a float 3.0 is."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "prompt": ["a", "b", "c", "d"],
        "f32": pa.array([0.1, 2.5, 3.0, 0.3], type=pa.float32()),
        "f16": pa.array([0.1, 2.5, 3.0, 0.3], type=pa.float16()),
        "dec": pa.array([Decimal("0.10"), Decimal("2.50"), Decimal("3.00"), Decimal("0.30")],
                        type=pa.decimal128(5, 2)),
    })  # fmt: skip
    path = tmp_path / "n.parquet"
    pq.write_table(table, path)
    expected = {"f32": ["0.1", "2.5", "3", "0.3"], "f16": ["0.1", "2.5", "3", "0.3"],
                "dec": ["0.1", "2.5", "3", "0.3"]}  # fmt: skip
    for column, answers in expected.items():
        assert [p.answer for p in read_problems(path, "prompt", column)] == answers, column
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(table).save_to_disk(tmp_path / "saved")
    got = [p.answer for p in read_problems(tmp_path / "saved", "prompt", "f32")]
    assert got == expected["f32"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"prompt": "a", "answer": "1"}\n{"prompt": "b",\n',
         "line 2: not valid JSON"),
        ("list.jsonl", '["a", "1"]\n', "line 1: a JSON list, expected an object"),
        ("gap.jsonl", '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": null}\n',
         "row 2, column 'answer': empty"),
        ("blank.csv", "prompt,answer\na,1\n  ,2\n", "row 2, column 'prompt': empty"),
        ("short.csv", "prompt,answer\na,1\nb\n", "row 2, column 'answer': empty"),
        ("nested.jsonl", '{"prompt": "a", "answer": [1]}\n', "row 1, column 'answer': a list"),
        ("flag.jsonl", '{"prompt": "a", "answer": true}\n', "row 1, column 'answer': a boolean"),
        ("cols.csv", "question,solution\na,1\n", "no column 'prompt' (it has ['question', "),
        ("empty.jsonl", "", "has no rows"),
        ("huge.csv", "prompt,answer\na,1\nb,2\n" + "x" * 200_000 + ",3\n",
         "line 4: not a readable CSV file (field larger than field limit"),
        ("nan.jsonl", '{"prompt": "a", "answer": NaN}\n',
         "row 1, column 'answer': nan, not a finite number, expected text"),
        ("inf.jsonl", '{"prompt": "a", "answer": 1e400}\n',
         "row 1, column 'answer': inf, not a finite number"),
        ("other.jsonl", '{"prompt": "a", "answer": "1"}\n{"q": "b", "a": "2"}\n',
         "row 2: no column 'prompt' (it has ['a', 'q'])"),
        ("surrogate.jsonl", '{"prompt": "ab\\ud800", "answer": "1"}\n',
         "row 1, column 'prompt': a lone surrogate '\\ud800' at character 2, not Unicode"),
        ("mixed.json", '[{"prompt": "a", "answer": "1"}, 3]', "row 2: a JSON int, expected"),
        ("data.txt", "a,1\n", "unknown dataset format '.txt'"),
        ("bad.parquet", "not parquet", "not a readable Parquet file"),
    ],
)  # fmt: skip
def test_malformed_files_get_one_line_naming_file_row_and_column(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DatasetError) as err:
        read_problems(path, "prompt", "answer")
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_file_or_a_folder_that_is_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset file or folder"):
        read_problems(tmp_path / "gone.jsonl", "prompt", "answer")
    os.mkfifo(tmp_path / "pipe.jsonl")  # reading it would wait for a writer forever
    with pytest.raises(DatasetError, match=r"not a regular file \(a device or a pipe\?\)"):
        read_problems(tmp_path / "pipe.jsonl", "prompt", "answer")
    pytest.importorskip("datasets")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DatasetError, match="not a folder that datasets' save_to_disk wrote"):
        read_problems(tmp_path / "folder", "prompt", "answer")


def test_heldout_fraction_is_disjoint_and_the_files_own(files):
    spec = DatasetSpec(path=str(files["jsonl"]), heldout=0.25)
    split = load_prompt_set(spec)
    assert len(split.heldout) == 5 and len(split.train) == 15
    assert not set(split.heldout) & set(split.train)
    assert set(split.heldout) | set(split.train) == set(read_problems(files["jsonl"], "prompt",
                                                                      "answer"))  # fmt: skip
    other = load_prompt_set(DatasetSpec(path=str(files["parquet"]), heldout=0.25))
    assert [p.prompt for p in other.heldout] == [p.prompt for p in split.heldout]


def test_heldout_file(files, tmp_path):
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt": "x", "answer": "1"}])
    split = load_prompt_set(DatasetSpec(path=str(files["csv"]), heldout=str(held)))
    assert len(split.train) == 20
    assert [(p.prompt, p.answer) for p in split.heldout] == [("x", "1")]


@pytest.mark.parametrize("value", [1, 0, -0.5, 1.5, 0.95, True, float("nan"), [0.1], None])
def test_a_bad_heldout_is_one_problem_saying_what_is_allowed(value):
    with pytest.raises(ValidationError) as err:
        DatasetSpec(path="p.jsonl", heldout=value)
    [problem] = err.value.errors()
    assert problem["loc"] == ("heldout",)
    assert problem["msg"] == (
        "Value error, a fraction of the rows (above 0, at most 0.9) or a file path"
    )


def test_a_heldout_fraction_that_leaves_nothing_to_train_on(tmp_path):
    path = write_jsonl(tmp_path / "one.jsonl", ROWS[:1])
    with pytest.raises(DatasetError, match="leave none for training"):
        load_prompt_set(DatasetSpec(path=str(path), heldout=0.5))


def test_training_order_is_the_seeds_and_covers_every_problem_each_epoch(files):
    split = load_prompt_set(DatasetSpec(path=str(files["jsonl"]), heldout=0.25))
    n = len(split.train)
    first = [split.train_problem(g, seed=7) for g in range(n)]
    assert sorted(first, key=lambda p: p.prompt) == sorted(split.train, key=lambda p: p.prompt)
    assert first == [split.train_problem(g, seed=7) for g in range(n)]
    assert first != [split.train_problem(g, seed=8) for g in range(n)]
    second = [split.train_problem(n + g, seed=7) for g in range(n)]
    assert set(second) == set(first) and second != first
    assert isinstance(first[0], Problem)


@pytest.mark.parametrize("kind", ["jsonl", "saved"])
def test_a_dataset_edited_since_it_was_read_is_read_again(files, kind):
    """A notebook that fixes its file and loads the workload again gets the new rows (a file
    read once per process used to keep the old ones, and a file made bad passed its check)."""
    path = files[kind]
    spec = DatasetSpec(path=str(path), heldout=0.25)
    before = load_prompt_set(spec)
    assert load_prompt_set(spec) is before  # unchanged: read once
    fixed = [{**row, "answer": row["answer"] + "0"} for row in ROWS]
    if kind == "jsonl":
        write_jsonl(path, fixed)
    else:
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_list(fixed).save_to_disk(str(path.with_name("next")))
        shutil.rmtree(path)
        os.replace(path.with_name("next"), path)
    after = load_prompt_set(spec)
    assert sorted(p.answer for p in after.train) == sorted(p.answer + "0" for p in before.train)


def test_a_dataset_edited_many_times_is_kept_once(tmp_path):
    """Only the latest read of a dataset is kept: a notebook editing a large file must not
    hold a copy of each version (a cache keyed on the files' stamps kept sixteen)."""
    import gc
    import weakref

    path = write_jsonl(tmp_path / "p.jsonl", ROWS)
    spec = DatasetSpec(path=str(path), heldout=0.25)
    reads = []
    for edit in range(5):
        write_jsonl(path, [{**row, "answer": row["answer"] + str(edit)} for row in ROWS])
        reads.append(weakref.ref(load_prompt_set(spec)))
    gc.collect()
    assert [read() is not None for read in reads] == [False] * 4 + [True]


def test_an_edited_file_that_became_bad_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", ROWS)
    spec = DatasetSpec(path=str(path), heldout=0.25)
    load_prompt_set(spec)
    path.write_text('{"prompt": "1+1", "answer": ""}\n')
    with pytest.raises(DatasetError, match="row 1, column 'answer': empty"):
        load_prompt_set(spec)


@pytest.mark.parametrize("name", ["p.csv", "p.jsonl", "p.json"])
def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path, name):
    """Excel's "CSV UTF-8" starts the file with a BOM: it was read into the first column's
    name ('\\ufeffprompt': no column 'prompt'), or made line 1 not valid JSON."""
    path = tmp_path / name
    if name.endswith(".csv"):
        text = "prompt,answer\n" + "".join(f"{r['prompt']},{r['answer']}\n" for r in ROWS[:3])
    elif name.endswith(".json"):
        text = json.dumps(ROWS[:3])
    else:
        text = "".join(json.dumps(r) + "\n" for r in ROWS[:3])
    path.write_text("\ufeff" + text, encoding="utf-8")
    problems = read_problems(path, "prompt", "answer")
    assert [(p.prompt, p.answer) for p in problems] == [
        (r["prompt"], r["answer"]) for r in ROWS[:3]
    ]
