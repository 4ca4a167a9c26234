"""Tests for the Task protocol, the hash split and FunctionTask."""

from __future__ import annotations

import doctest
import hashlib
import os
import random
import subprocess
import sys

import pytest

import minirl.tasks.base as base
from minirl.tasks import Countdown, FunctionTask, Problem, Score, Task, in_test_split


# --------------------------------------------------------------------------- a 10-line custom task
def make_addition(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a}+{b}=", a + b, str(a + b)


def addition_reward(answer: int, completion: str) -> float:
    return 1.0 if completion.strip() == str(answer) else 0.0


def addition_task(**kwargs) -> FunctionTask:
    return FunctionTask("addition", make_addition, addition_reward, **kwargs)


# --------------------------------------------------------------------------- Problem / Score / Task
def test_score_correct_property() -> None:
    assert Score(1.0, {"correct": 1.0}).correct
    assert not Score(1.0, {"correct": 0.0}).correct
    assert not Score(5.0, {}).correct  # no "correct" component means not correct


def test_problem_is_frozen() -> None:
    p = Problem(prompt="p", answer=1, solution=None, key="p")
    with pytest.raises(Exception):
        p.prompt = "q"  # type: ignore[misc]


def test_tasks_satisfy_protocol() -> None:
    assert isinstance(Countdown(), Task)
    assert isinstance(addition_task(), Task)
    assert not isinstance(object(), Task)


# --------------------------------------------------------------------------- in_test_split
def test_in_test_split_matches_sha256_rule() -> None:
    for key in ["", "a", "3,5,7|26", "ünïcode"]:
        u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        assert in_test_split(key, 0.3) == (u < 0.3)


def test_in_test_split_fraction_is_roughly_right() -> None:
    keys = [f"k{i}" for i in range(20_000)]
    share = sum(in_test_split(k, 0.1) for k in keys) / len(keys)
    assert 0.09 < share < 0.11


def test_in_test_split_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; our split must not be.
    keys = [f"k{i}" for i in range(200)]
    here = "".join("1" if in_test_split(k, 0.5) else "0" for k in keys)
    # Load base.py by path: importing the minirl package would pull in torch (slow).
    code = (
        "import importlib.util as u, sys;"
        f"s = u.spec_from_file_location('b', {base.__file__!r}); b = u.module_from_spec(s);"
        "sys.modules['b'] = b; s.loader.exec_module(b);"
        "print(''.join('1' if b.in_test_split(f'k{i}', 0.5) else '0' for i in range(200)))"
    )
    env_out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"}
    ).stdout.strip()
    assert env_out == here


def test_docstring_example_runs() -> None:
    result = doctest.testmod(base, verbose=False)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------- FunctionTask
def test_function_task_end_to_end() -> None:
    task = addition_task()
    train = task.problems("train", 50, seed=0)
    assert len(train) == 50
    for p in train:
        assert p.key == p.prompt
        good, bad = task.score(p, p.solution), task.score(p, "0")
        assert good.correct and good.reward == 1.0
        assert not bad.correct and bad.reward == 0.0


def test_function_task_is_deterministic_and_seed_dependent() -> None:
    task = addition_task()
    assert task.problems("train", 20, seed=3) == task.problems("train", 20, seed=3)
    assert task.problems("train", 20, seed=3) != task.problems("train", 20, seed=4)
    assert task.problems("test", 20, seed=3) == task.problems("test", 20, seed=3)


def test_function_task_splits_never_overlap_and_test_is_distinct() -> None:
    task = addition_task()
    train = {p.key for seed in range(3) for p in task.problems("train", 1000, seed=seed)}
    test = [p.key for seed in range(3) for p in task.problems("test", 200, seed=seed)]
    assert not train & set(test)
    keys = [p.key for p in task.problems("test", 500)]
    assert len(keys) == len(set(keys))
    assert all(in_test_split(k, task.test_fraction) for k in keys)


def test_function_task_small_test_split_raises_clearly() -> None:
    # 90*90 prompts, ~10% are test: there are far fewer than 5000 distinct test prompts.
    task = addition_task(max_tries=2000)
    with pytest.raises(ValueError, match=r"split='test', n=5000\) found only \d+ distinct"):
        task.problems("test", 5000)


def test_function_task_reward_return_types() -> None:
    p = Problem(prompt="x", answer=None, solution=None, key="x")

    def task_with(value):
        return FunctionTask("t", lambda rng: ("x", None, None), lambda a, c: value)

    assert task_with(1.0).score(p, "").correct
    assert task_with(True).score(p, "").reward == 1.0
    assert not task_with(0.5).score(p, "").correct
    s = task_with({"reward": 0.3, "format_ok": 1}).score(p, "")
    assert s.reward == 0.3 and s.components == {"format_ok": 1.0, "correct": 0.0}
    assert task_with({"reward": 0.0, "correct": 1.0}).score(p, "").correct
    given = Score(2.0, {"correct": 1.0})
    assert task_with(given).score(p, "") is given
    with pytest.raises(TypeError, match="without 'reward'"):
        task_with({"r": 1.0}).score(p, "")
    with pytest.raises(TypeError, match="returned str"):
        task_with("1.0").score(p, "")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"name": ""}, "name"),
        ({"make_problem": 3}, "make_problem"),
        ({"reward": None}, "reward"),
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"max_tries": 0}, "max_tries"),
    ],
)
def test_function_task_validation(kwargs: dict, field: str) -> None:
    args = {"name": "t", "make_problem": make_addition, "reward": addition_reward} | kwargs
    with pytest.raises(ValueError, match=rf"FunctionTask\.{field}="):
        FunctionTask(**args)


def test_function_task_bad_problems_arguments() -> None:
    task = addition_task()
    with pytest.raises(ValueError, match="split='valid'"):
        task.problems("valid", 3)
    with pytest.raises(ValueError, match="n=-1"):
        task.problems("train", -1)
    assert task.problems("train", 0) == []


def test_function_task_bad_make_problem_output() -> None:
    task = FunctionTask("bad", lambda rng: ("only two", 1), addition_reward)
    with pytest.raises(TypeError, match="make_problem must return"):
        task.problems("train", 1)
    task = FunctionTask("bad", lambda rng: (42, 1, None), addition_reward)
    with pytest.raises(TypeError, match="prompt must be a str"):
        task.problems("train", 1)
