"""A job's dataset as its environment scores it: read and split (:mod:`marlaas.datasets`),
and every reference answer one the environment can score
(:meth:`Environment.check_reference_answer`).

Every reader of a job's dataset goes through :func:`job_prompt_set`: loading the workload,
a run's first group of the job, and ``evaluate``'s held-out problems. A dataset is read again
once its file changes (a notebook's next load sees the edit), so a file edited while a run
goes on is checked as loading checked it: a bad row is refused, naming its file, row and
column, before a prompt is generated from the file, not found when first scored. A read
that :func:`marlaas.datasets.load_prompt_set` keeps (the files as they were) is not checked
again: the check compiles every answer (seconds for 100,000 ``regex`` rows), and a run's
first group of a job ran it in the event loop.
"""

from __future__ import annotations

import hashlib

from marlaas.core.job_spec import DatasetSpec, JobSpec
from marlaas.datasets import DatasetError, PromptSet, load_prompt_set
from marlaas.datasets.split import MAX_KEPT_DATASETS
from marlaas.envs.base import Environment
from marlaas.envs.registry import resolve_env


def job_prompt_set(spec: JobSpec) -> PromptSet:
    """``spec``'s dataset read and split, every answer (training and held-out) checked by the
    job's environment; a DatasetError naming the file, row and column otherwise (the
    reading's own, or the check's). ``spec`` must have a dataset."""
    if spec.dataset is None:
        raise ValueError(f"job {spec.name!r} has no dataset")
    prompts = load_prompt_set(spec.dataset)
    env_class = resolve_env(spec.env.name)
    key = (spec.dataset, env_class)
    if _CHECKED.get(key) is not prompts:  # a new read (its files changed), or a new pair
        check_answers(env_class, prompts, spec.dataset.answer_column)
        _CHECKED.pop(key, None)
        _CHECKED[key] = prompts
        while len(_CHECKED) > MAX_KEPT_DATASETS:
            del _CHECKED[next(iter(_CHECKED))]  # the oldest check
    return prompts


def dataset_digest(spec: JobSpec) -> str | None:
    """The SHA-256 (hex) of ``spec``'s dataset as a run trains on it: its training problems
    in the file's order, then its held-out ones (each prompt and answer), read and checked
    by :func:`job_prompt_set`; None for a job with no dataset. What a resumed run compares
    (:func:`marlaas.executors.resume.identity`): another file, another ``heldout`` or the
    rows edited changes the problems each group draws. Kept per read, as the check is."""
    if spec.dataset is None:
        return None
    prompts = job_prompt_set(spec)
    kept = _DIGESTS.get(spec.dataset)
    if kept is not None and kept[0] is prompts:
        return kept[1]
    digest = hashlib.sha256(f"{len(prompts.train)} {len(prompts.heldout)}\n".encode())
    for problem in (*prompts.train, *prompts.heldout):
        for text in (problem.prompt, problem.answer):
            data = text.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
    _DIGESTS.pop(spec.dataset, None)
    _DIGESTS[spec.dataset] = prompts, digest.hexdigest()
    while len(_DIGESTS) > MAX_KEPT_DATASETS:
        del _DIGESTS[next(iter(_DIGESTS))]
    return digest.hexdigest()


_DIGESTS: dict[DatasetSpec, tuple[PromptSet, str]] = {}
"""Each dataset's latest read and its :func:`dataset_digest`."""

_CHECKED: dict[tuple[DatasetSpec, type[Environment]], PromptSet] = {}
"""Each (dataset, environment class)'s read whose answers passed that class's check: the
very object :func:`load_prompt_set` returned (a new one when a file changed)."""


def check_answers(env_class: type[Environment], prompts: PromptSet, column: str) -> None:
    """Every answer of ``prompts`` (training and held-out) is one ``env_class`` can score,
    when the class overrides :meth:`Environment.check_reference_answer` (the default accepts
    every answer); else a DatasetError naming the problem's file and row, and ``column``.
    Whatever else the check raises is named as the check's failure."""
    check = env_class.check_reference_answer
    if getattr(check, "__func__", None) is Environment.check_reference_answer.__func__:
        return
    for problem in (*prompts.train, *prompts.heldout):
        try:
            check(problem.answer)
        except ValueError as err:
            raise DatasetError(f"{problem.source}, column {column!r}: {_one_line(err)}") from None
        except Exception as err:
            raise DatasetError(f"{problem.source}, column {column!r}: {env_class.__name__}."
                               f"check_reference_answer failed: {type(err).__name__}: "
                               f"{_one_line(err)}") from None  # fmt: skip


def _one_line(err: Exception) -> str:
    """An error's text on one line."""
    return " ".join(str(err).split())
