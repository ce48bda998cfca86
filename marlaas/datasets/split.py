"""A job's prompt dataset split into training and held-out problems, in the seed's order.

The held-out split depends on the file only (``SPLIT_SEED``): every run of a dataset, with
any seed, is scored on the same problems. The training order depends on the run's seed and
the group's number only, not on the job's place in the workload: a tenant trained alone sees
the same problems in the same order as when it trains beside others.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from marlaas.core.job_spec import DatasetSpec
from marlaas.datasets.files import DatasetError, read_problems
from marlaas.datasets.problems import Problem


@dataclass(frozen=True)
class PromptSet:
    """The training and held-out problems of one dataset, and the order training draws in."""

    train: tuple[Problem, ...]
    heldout: tuple[Problem, ...]

    def train_problem(self, group: int, seed: int) -> Problem:
        """The problem of a job's ``group``-th prompt group in a run seeded ``seed``: every
        training problem once per epoch, each epoch in an order of its own."""
        epoch, index = divmod(group, len(self.train))
        return self.train[_order(seed, epoch, len(self.train))[index]]


@functools.lru_cache(maxsize=64)
def _order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    return tuple(int(i) for i in np.random.default_rng([seed, epoch, 1]).permutation(n))


SPLIT_SEED = 0
"""Seed of the held-out split by fraction (fixed: the split is the file's, not the run's)."""


def load_prompt_set(spec: DatasetSpec) -> PromptSet:
    """Read ``spec``'s file(s) (paths as given: the workload file's loader made them
    absolute) and split them, or raise a DatasetError naming the file, row and column; a
    dataset is read once per process while its files stay as they are (one edited, in a
    notebook say, is read again)."""
    heldout = _stamp(spec.heldout) if isinstance(spec.heldout, str) else None
    stamps = (_stamp(spec.path), heldout)
    kept = _READ.get(spec)
    if kept is not None and kept[0] == stamps:
        return kept[1]
    prompt_set = _load_prompt_set(spec)
    _READ.pop(spec, None)
    _READ[spec] = stamps, prompt_set
    while len(_READ) > MAX_KEPT_DATASETS:
        del _READ[next(iter(_READ))]  # the oldest read
    return prompt_set


MAX_KEPT_DATASETS = 16
"""Datasets kept read in a process (the latest read of each; older ones dropped first)."""
_READ: dict[DatasetSpec, tuple[tuple, PromptSet]] = {}
"""Each dataset spec's files' stamps when last read, and what was read."""


def _stamp(path: str) -> tuple:
    """What changes when the file or folder ``path`` (a save_to_disk folder: each file in
    it) is written again: each file's path, size, modification time [ns] and inode; () when
    it is not there (reading it names the problem)."""
    paths = [path]
    if os.path.isdir(path):
        paths = sorted(os.path.join(root, name) for root, _, names in os.walk(path)
                       for name in names)  # fmt: skip
    stamps = []
    for name in paths:
        try:
            stat = os.stat(name)
        except OSError:
            continue
        stamps.append((name, stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(stamps)


def _load_prompt_set(spec: DatasetSpec) -> PromptSet:
    """``spec``'s files read and split (:func:`load_prompt_set` keeps the latest)."""
    if isinstance(spec.heldout, str) and _same_file(spec.path, spec.heldout):
        raise DatasetError(
            f"{spec.heldout}: heldout is the file of path ({spec.path}): held-out accuracy "
            "would be measured on the training prompts; give another file or a fraction of "
            "the rows"
        )
    rows = read_problems(spec.path, spec.prompt_column, spec.answer_column)
    if isinstance(spec.heldout, str):
        heldout = read_problems(spec.heldout, spec.prompt_column, spec.answer_column)
        return PromptSet(tuple(rows), tuple(heldout))
    shuffled = np.random.default_rng(SPLIT_SEED).permutation(len(rows))
    held = math.ceil(spec.heldout * len(rows))
    if held >= len(rows):
        raise DatasetError(f"{spec.path}: {len(rows)} row(s) leave none for training after "
                           f"holding out {spec.heldout:g} of them")  # fmt: skip
    heldout = tuple(rows[i] for i in sorted(shuffled[:held]))
    train = tuple(rows[i] for i in sorted(shuffled[held:]))
    return PromptSet(train, heldout)


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (``./``, ``..``, a link); False when either is not
    there (reading it names the problem)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
