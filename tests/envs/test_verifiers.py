"""Verifiers as environments: math answers by math-verify (LaTeX, fractions, boxed, plain
numbers), exact match, regex, reasoning-gym tasks by their own score_answer, and the format
reward every one of them takes."""

from __future__ import annotations

import asyncio

import pytest

from marlaas.datasets import Problem
from marlaas.envs import EnvLoadError, check_env, make_env
from marlaas.envs.base import Environment, StepResult


def score(name: str, answer: str, response: str, **args):
    env = make_env(name, args)
    prompt = asyncio.run(env.reset_problem(Problem("Q?", answer, "data.jsonl, row 3")))
    result = asyncio.run(env.step(response))
    return prompt, result


@pytest.mark.parametrize(
    ("answer", "response", "correct"),
    [
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{1}{2}", "The answer is $0.5$.", True),
        ("$\\frac{3}{4}$", "so we get \\boxed{\\frac{3}{4}}", True),
        ("72", "Natalia sold 48 + 24 = 72 clips. \\boxed{72}", True),
        ("72", "\\boxed{71}", False),
        ("\\sqrt{2}", "$2^{1/2}$", True),
        ("x^2+2x+1", "$(x+1)^2$", True),
        ("18", "I don't know", False),
        ("3", "", False),
    ],
)  # fmt: skip
def test_math_checks_answers_in_unusual_formats(answer, response, correct):
    pytest.importorskip("math_verify")
    _, result = score("math", answer, response)
    assert result.info["correct"] is correct
    assert result.reward == float(correct) and result.done


def test_math_names_the_row_of_an_answer_it_cannot_read():
    pytest.importorskip("math_verify")
    with pytest.raises(ValueError, match=r"data\.jsonl, row 3: math-verify cannot read"):
        score("math", "}{", "1")


def test_exact_match_ignores_case_and_spacing_and_can_extract():
    assert score("exact_match", "Paris", "  paris ")[1].info["correct"]
    assert not score("exact_match", "Paris", "paris", case_sensitive=True)[1].info["correct"]
    assert not score("exact_match", "Paris", "It is Paris.")[1].info["correct"]
    extract = r"answer:\s*(\w+)"
    last = score("exact_match", "Paris", "answer: x... answer: Paris", extract=extract)
    assert last[1].reward == 1
    assert score("exact_match", "Paris", "Paris", extract=extract)[1].reward == 0


def test_regex_reads_the_answer_as_a_pattern():
    assert score("regex", r"\d{3}-\d{4}", " 555-1234 ")[1].info["correct"]
    assert not score("regex", r"\d{3}-\d{4}", "call 555-1234")[1].info["correct"]
    assert score("regex", r"\d{3}-\d{4}", "call 555-1234", search=True)[1].info["correct"]
    with pytest.raises(ValueError, match="row 3: the answer is not a regular expression"):
        score("regex", "(", "x")


def test_format_reward_and_instruction():
    prompt, result = score(
        "exact_match", "7", "<answer>7</answer>", extract=r"<answer>(.*?)</answer>",
        format_pattern=r"<answer>\S+</answer>", format_reward=0.2, instruction="Use tags.",
    )  # fmt: skip
    assert prompt == "Q?\n\nUse tags."
    assert result.reward == pytest.approx(1.2) and result.info["formatted"]
    _, wrong = score("exact_match", "7", "8", format_pattern=r"\d+", format_reward=0.2)
    assert wrong.reward == pytest.approx(0.2) and not wrong.info["correct"]
    with pytest.raises(ValueError, match="format_reward needs a format_pattern"):
        make_env("regex", {"format_reward": 0.5})
    with pytest.raises(ValueError, match="not a regular expression"):
        make_env("exact_match", {"format_pattern": "("})


def test_answer_environments_take_their_prompts_from_a_dataset():
    with pytest.raises(TypeError, match="from the job's dataset"):
        asyncio.run(make_env("exact_match").reset(0))
    with pytest.raises(TypeError, match="takes no dataset"):
        asyncio.run(make_env("arithmetic").reset_problem(Problem("q", "1")))
    with pytest.raises(EnvLoadError, match="unknown option"):
        check_env("math", {"tolerance": 0.1})


class OneOption(Environment):
    options = "target"  # written ("target"): the comma forgotten, a string, not a tuple

    async def reset(self, seed: int) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        return StepResult("", 1.0, True)


def test_options_that_are_no_tuple_of_names_are_refused_saying_so():
    """options = ("target") is the string 'target': its option names were taken to be 't',
    'a', 'r', ..., and 'target' itself refused: "unknown option(s) ['target']; it takes ['a',
    'e', 'g', 'r', 't', 't']"."""
    says = r"OneOption: its options is str 'target', not a tuple of option names \(one name is "
    with pytest.raises(EnvLoadError, match=says):
        check_env(f"{__name__}:OneOption", {"target": "a"})


def test_reasoning_gym_task_by_name_scored_by_its_own_score_answer():
    pytest.importorskip("reasoning_gym")
    env = make_env("reasoning_gym", {"task": "chain_sum", "min_terms": 2, "max_terms": 2,
                                     "format_pattern": r"-?\d+", "format_reward": 0.1})  # fmt: skip
    prompt = asyncio.run(env.reset(11))
    again = make_env("reasoning_gym", {"task": "chain_sum", "min_terms": 2, "max_terms": 2})
    assert asyncio.run(again.reset(11)) == prompt  # the seed fixes the question
    answer = env.entry["answer"]
    assert asyncio.run(env.step(answer)).reward == pytest.approx(1.1)
    assert asyncio.run(env.step(f"think... <answer>{answer}</answer>")).info["correct"]
    wrong = asyncio.run(env.step(str(int(answer) + 1)))
    assert wrong.reward == pytest.approx(0.1) and not wrong.info["correct"]


def test_reasoning_gym_scores_what_extract_finds():
    """extract (the last match's group) picks the answer out of a sentence or an equation
    before the task's score_answer; a response without a match scores 0."""
    pytest.importorskip("reasoning_gym")
    env = make_env("reasoning_gym", {"task": "chain_sum", "min_terms": 2, "max_terms": 2,
                                     "extract": r"(-?\d+)\D*$"})  # fmt: skip
    asyncio.run(env.reset(11))
    answer = env.entry["answer"]
    expression = env.entry["question"].rsplit(":", 1)[1].strip()
    assert asyncio.run(env.step(f"{expression} {answer}.")).info["correct"]
    assert asyncio.run(env.step(f"The answer is {answer}")).reward == pytest.approx(1.0)
    assert asyncio.run(env.step(f"{answer} or {int(answer) + 1}")).reward == 0.0
    assert asyncio.run(env.step("no idea")).reward == 0.0
    with pytest.raises(ValueError, match="'extract' needs a group"):
        check_env("reasoning_gym", {"task": "chain_sum", "extract": r"\d+"})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "option 'task' is required"),
        ({"task": "no_such_task"}, "'no_such_task' not registered"),
        ({"task": "chain_sum", "colour": 1}, "unexpected keyword argument 'colour'"),
        ({"task": "chain_sum", "min_terms": 5, "max_terms": 2}, "max_terms must be >= min_terms"),
    ],
)
def test_reasoning_gym_refuses_a_bad_task_or_configuration(args, message):
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ValueError, match=message):
        check_env("reasoning_gym", args)
