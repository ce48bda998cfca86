"""Prompt datasets: a job's problems (prompt, reference answer) from a local file or folder,
split into training and held-out problems, in an order the workload's seed fixes."""

from marlaas.datasets.files import DatasetError, read_problems
from marlaas.datasets.problems import Problem
from marlaas.datasets.split import PromptSet, load_prompt_set

__all__ = [
    "DatasetError",
    "Problem",
    "PromptSet",
    "load_prompt_set",
    "read_problems",
]
