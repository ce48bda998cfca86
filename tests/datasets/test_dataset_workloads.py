"""A dataset in a workload file: a path relative to the file, the environment that checks its
answers, and the refusals (a bad file, a dataset an environment cannot use, a service job)."""

from __future__ import annotations

import json

import pytest

from marlaas.core.workload import WorkloadError
from marlaas.envs.answer import ExactMatchEnv
from marlaas.workload_file import load_workload
from tests.episode_fakes import CharFormat, OneTokenEngine

WORKLOAD = """
name: data
jobs:
  - name: words
    tenant: ann
    env: {{name: {env}, args: {{}}}}
{dataset}
"""


def write(tmp_path, env="exact_match", dataset="    dataset: {path: data/p.jsonl}"):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    rows = [{"prompt": f"Say {w}", "answer": w} for w in ("red", "green", "blue", "gold")]
    (folder / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD.format(env=env, dataset=dataset))
    return path


def test_a_relative_dataset_path_is_from_the_workload_file(tmp_path, monkeypatch):
    monkeypatch.chdir("/")
    workload = load_workload(write(tmp_path))
    assert workload.jobs[0].dataset.path == str((tmp_path / "data" / "p.jsonl").resolve())
    assert workload.jobs[0].dataset.heldout == 0.1
    again = load_workload(write(tmp_path), {"jobs.0.rl.steps": 3})  # overrides keep it
    assert again.jobs[0].dataset.path == workload.jobs[0].dataset.path


def test_a_bad_dataset_file_names_the_job_file_row_and_column(tmp_path):
    path = write(tmp_path, dataset="    dataset: {path: data/p.jsonl, answer_column: gold}")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value).startswith(f"{path}: jobs[0].dataset: ")
    assert "no column 'gold'" in str(err.value)
    with pytest.raises(WorkloadError) as err:  # the file's fault, with an innocent --set
        load_workload(path, {"jobs.0.rl.steps": 3})
    assert str(err.value).startswith(f"{path} with --set: jobs[0].dataset: ")


def test_a_regex_answer_that_is_no_regex_is_refused_on_load_naming_its_row(tmp_path):
    """A ``regex`` job's answer that does not compile is refused when the workload loads (as
    ``simulate`` and ``train`` load it), naming the file, row and column and the regex error;
    it was refused only when first scored, in the middle of a run. The other answer
    environments take the same text as an answer."""
    path = write(tmp_path, env="regex")
    rows = [{"prompt": "Say red", "answer": "red|crimson"}, {"prompt": "Open", "answer": "(a"},
            {"prompt": "Say blue", "answer": "blue"}]  # fmt: skip
    data = tmp_path / "data" / "p.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (
        f"{path}: jobs[0].dataset: {data.resolve()}, row 2, column 'answer': not a regular "
        "expression (missing ), unterminated subpattern at position 0)"
    )
    path.write_text(path.read_text().replace("name: regex", "name: exact_match"))
    assert load_workload(path).jobs[0].env.name == "exact_match"


def test_a_regex_answer_the_engine_cannot_compile_is_refused_on_load_too(tmp_path):
    """A pattern ``re`` refuses with OverflowError or RecursionError, not re.error, is the
    same WorkloadError (it was a traceback from ``simulate``)."""
    path = write(tmp_path, env="regex")
    data = tmp_path / "data" / "p.jsonl"
    rows = [{"prompt": "Say red", "answer": "red"}, {"prompt": "Many", "answer": "a{4294967296}"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(WorkloadError, match=r"row 2, column 'answer': not a regular "
                       "expression this engine compiles"):  # fmt: skip
        load_workload(path)


class OwnCheckAnswer(ExactMatchEnv):
    """An environment with a scoring helper of its own named ``check_answer``."""

    def check_answer(self, response: str, answer: str) -> bool:
        return response == answer


class BrokenCheck(ExactMatchEnv):
    """An environment whose answer check itself fails (no classmethod)."""

    def check_reference_answer(self, answer: str) -> None:
        return None


def test_an_environment_of_ones_own_loads_and_its_broken_answer_check_is_named(tmp_path):
    path = write(tmp_path, env=f"{__name__}:OwnCheckAnswer")
    assert load_workload(path).jobs[0].env.name.endswith(":OwnCheckAnswer")
    path = write(tmp_path, env=f"{__name__}:BrokenCheck")
    with pytest.raises(WorkloadError, match=r"row 1, column 'answer': BrokenCheck."
                       r"check_reference_answer failed: TypeError: "):  # fmt: skip
        load_workload(path)


def test_an_answer_environment_needs_a_dataset_and_others_refuse_one(tmp_path):
    with pytest.raises(WorkloadError, match=r"jobs\[0\].dataset: environment 'math' checks"):
        load_workload(write(tmp_path, env="math", dataset=""))
    with pytest.raises(WorkloadError, match="'arithmetic' draws its own prompts"):
        load_workload(write(tmp_path, env="arithmetic"))


def test_a_service_tenant_cannot_name_a_dataset():
    pytest.importorskip("fastapi")
    from marlaas.service.config import ServiceConfig
    from marlaas.service.requests import JobRequestError, job_from_request

    for body in (
        {"name": "j", "dataset": {"path": "/etc/passwd"}},
        {"name": "j", "dataset": {"heldout": "/etc/passwd"}},
    ):
        with pytest.raises(JobRequestError, match="cannot name a file on the server"):
            job_from_request(body, "ann", ServiceConfig())


def test_a_service_refuses_an_environment_that_needs_a_dataset():
    pytest.importorskip("fastapi")
    from marlaas.service.config import ServiceConfig
    from marlaas.service.requests import JobRequestError, job_from_request

    config = ServiceConfig.model_validate({"service": {"environments": ["math", "arithmetic"]}})
    with pytest.raises(JobRequestError, match="'math' checks a dataset's answers"):
        job_from_request({"name": "j", "env": {"name": "math"}}, "ann", config)
    assert job_from_request({"name": "j"}, "ann", config).env.name == "arithmetic"


def test_a_run_keeps_the_rows_it_first_read_when_the_file_is_edited(tmp_path):
    """A dataset is read again once edited (a notebook's next load_workload sees the change),
    but a run draws every group of a job from the rows it first read: a file edited while it
    trains does not change its problems half-way."""
    import asyncio

    from marlaas.core.work import Generate
    from marlaas.executors.episode_runner import EpisodeRunner

    workload = load_workload(write(tmp_path))
    spec = workload.jobs[0]
    runner = EpisodeRunner({spec.name: spec}, CharFormat(), max_model_len=4096, seed=0)
    runner.admit(spec.name, 0)

    def prompt_of(group: int) -> str:
        work = Generate(group, spec.name, 0, group, 0, "e", 0, 2, 0, 4)
        asyncio.run(runner.generate(work, OneTokenEngine("length")))
        return runner._episodes[(spec.name, group)].prompt

    first = [prompt_of(g) for g in range(3)]
    rows = [{"prompt": f"Spell {w}", "answer": w} for w in ("cyan", "lime", "plum", "rose")]
    (tmp_path / "data" / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    later = [prompt_of(g) for g in range(3, 40)]
    assert all(p.startswith("Say ") for p in first + later)


def test_a_dataset_edited_after_loading_is_checked_again_when_the_run_reads_it(tmp_path):
    """A ``regex`` job's dataset edited after its workload loaded (a run going on) was read
    again by the job's first group, and by ``evaluate``'s held-out problems, without the
    answer check loading makes: a bad row was found only when scored, mid-run. Every read is
    now checked as loading checks it, naming the file, row and column, before a prompt of
    the file is generated from."""
    import asyncio

    from marlaas.core.work import Generate
    from marlaas.datasets import DatasetError
    from marlaas.executors.episode_runner import EpisodeRunner
    from marlaas.executors.evaluate import held_out

    spec = load_workload(write(tmp_path, env="regex")).jobs[0]
    data = tmp_path / "data" / "p.jsonl"
    rows = [{"prompt": "Say red", "answer": "red|crimson"}, {"prompt": "Open", "answer": "(a"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    told = (f"^{data.resolve()}, row 2, column 'answer': not a regular expression "
            r"\(missing \), unterminated subpattern at position 0\)$")  # fmt: skip
    runner = EpisodeRunner({spec.name: spec}, CharFormat(), max_model_len=4096, seed=0)
    runner.admit(spec.name, 0)
    work = Generate(0, spec.name, 0, 0, 0, "e", 0, 2, 0, 4)
    with pytest.raises(DatasetError, match=told):
        asyncio.run(runner.generate(work, OneTokenEngine("length")))
    assert not runner._episodes  # no group was started from the file
    with pytest.raises(DatasetError, match=told):
        held_out(spec, None)


def test_a_dataset_read_again_unchanged_is_not_checked_again(tmp_path, monkeypatch):
    """job_prompt_set ran the environment's answer check on every call, though
    load_prompt_set kept the read (the files unchanged): seconds for 100,000 ``regex`` rows,
    at every workload load, in the event loop at a job's first group and again in
    ``evaluate``. A read is checked once; a file edited is read and checked again, and so is
    checked, when it fails, at every read."""
    from marlaas.datasets import DatasetError
    from marlaas.envs.answer import RegexEnv
    from marlaas.envs.job_dataset import job_prompt_set

    checked = []
    check = RegexEnv.check_reference_answer.__func__
    monkeypatch.setattr(RegexEnv, "check_reference_answer",
                        classmethod(lambda cls, a: (checked.append(a), check(cls, a))))  # fmt: skip
    spec = load_workload(write(tmp_path, env="regex")).jobs[0]
    assert len(checked) == 4
    first = job_prompt_set(spec)
    assert job_prompt_set(spec) is first and len(checked) == 4
    data = tmp_path / "data" / "p.jsonl"
    rows = [{"prompt": "Say red", "answer": "red|crimson"}, {"prompt": "Open", "answer": "(a"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match=r"row 2, column 'answer': not a regular expression"):
        job_prompt_set(spec)
    with pytest.raises(DatasetError, match=r"row 2, column 'answer': not a regular expression"):
        job_prompt_set(spec)  # refused again: a read that failed its check is not kept


def test_resume_refuses_a_dataset_edited_since_the_run_started(tmp_path):
    """--resume read a job's dataset again without noticing it had changed since the run
    started: the resumed steps drew other problems, in another order, under the same run.
    The run's journal now records the SHA-256 of each job's rows (its identity), and a
    resume on other rows is refused, naming the file; the same rows moved elsewhere, and a
    run from before the digest was recorded, resume as before."""
    import copy
    import shutil

    from marlaas.executors.resume import ResumeError, check_same_workload, identity

    path = write(tmp_path)
    data = tmp_path / "data" / "p.jsonl"
    recorded = json.loads(json.dumps(identity(load_workload(path))))  # as journaled
    job = load_workload(path).jobs[0].name
    assert recorded["jobs"][job]["dataset"]["path"] == str(data.resolve())
    check_same_workload(recorded, load_workload(path))
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "data", moved / "data")
    check_same_workload(recorded, load_workload(write(moved)))  # the same rows elsewhere
    rows = [{"prompt": f"Say {w}", "answer": w} for w in ("red", "green", "blue", "pink")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    edited = load_workload(path)
    told = (rf"{job}: its dataset {data.resolve()} is not the one the run started with \(the "
            r"SHA-256 of its rows '[0-9a-f]{12}\.\.\.' -> '[0-9a-f]{12}\.\.\.': edited "
            r"since\? put it back as it was\)")  # fmt: skip
    with pytest.raises(ResumeError, match=told):
        check_same_workload(recorded, edited)
    heldout = load_workload(path, {f"jobs.{job}.dataset.heldout": 0.5})  # another split
    with pytest.raises(ResumeError, match="is not the one the run started with"):
        check_same_workload(identity(edited), heldout)
    older = copy.deepcopy(recorded)
    del older["jobs"][job]["dataset"]  # a run from before the digest was recorded
    check_same_workload(older, edited)


def test_a_dataset_prompt_longer_than_the_context_names_its_row(tmp_path):
    """A row whose prompt leaves no room under max_model_len said 'JOB: the prompt does not
    fit max_model_len', naming neither the environment, the file nor the row."""
    import asyncio

    from marlaas.core.work import Generate
    from marlaas.executors.episode_runner import EpisodeError, EpisodeRunner

    spec = load_workload(write(tmp_path)).jobs[0]
    runner = EpisodeRunner({spec.name: spec}, CharFormat(), max_model_len=5, seed=0)
    runner.admit(spec.name, 0)
    with pytest.raises(EpisodeError) as err:
        asyncio.run(runner.generate(Generate(0, spec.name, 0, 0, 0, "e", 0, 2, 0, 4),
                                    OneTokenEngine()))  # fmt: skip
    problem = runner._prompt_sets[spec.name].train_problem(0, 0)  # group 0's, seed 0
    assert problem.source.startswith(f"{(tmp_path / 'data' / 'p.jsonl').resolve()}, row ")
    assert str(err.value).startswith(
        f"{spec.name}: group 0's prompt is {len(problem.prompt)} tokens (environment "
        f"exact_match's reset_problem() of {problem.source}), "
    ), str(err.value)
    assert str(err.value).endswith("), and max_model_len is 5 tokens: no room to generate")
