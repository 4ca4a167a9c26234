"""The task registry: every command finds a task by name there, so a new task is one entry plus its class."""

import json
import random
from dataclasses import dataclass

import pytest

from minirl.cli import main
from minirl.tasks import TASKS, FunctionTask, TaskEntry, WorkedCountdown, get_task, register_task, task_budget


def double_problem(rng: random.Random):
    a = rng.randint(1, 499)
    return f"{a}=", 2 * a, str(2 * a)


def double_reward(answer: int, completion: str) -> float:
    return 1.0 if completion.strip() == str(answer) else 0.0


@dataclass
class Doubling(FunctionTask):
    """A toy task in the tiny Countdown policy's alphabet: write twice the given number."""

    max_new_tokens: int = 6  # its budget: up to four digits and an end


def make_doubling(reward_scheme: str = "binary") -> Doubling:
    return Doubling("doubling", double_problem, double_reward)


@pytest.fixture
def toy_task():
    entry = register_task(TaskEntry("doubling", "write twice the number", make_doubling, policy="tiny-countdown",
                                    title="doubling", compare_steps=2, compare_eval_every=1, options=("reward_scheme",)))
    yield entry
    del TASKS["doubling"]


def test_a_registered_toy_task_trains_two_steps_from_the_cli(toy_task, tmp_path, one_thread, capsys):
    assert main(["train", "--task", "doubling", "--algo", "grpo", "--steps", "2", "--batch-size", "2",
                 "--group-size", "2", "--eval-n", "4", "--eval-every", "0", "--run-dir", str(tmp_path), "--quiet"]) == 0
    assert "grpo: 2 steps" in capsys.readouterr().out
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["max_new_tokens"], config["overlong_cache"]) == (6, 1)  # the task's own budget
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["policy"] == "minirl/tiny-countdown" and "Doubling" in meta["task"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval/accuracy_sampled" in rows[-1]


def test_the_cli_refuses_an_option_the_task_does_not_take(toy_task, capsys):
    assert main(["train", "--task", "doubling", "--num-count", "4", "--steps", "1"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --num-count is not allowed with --task doubling: it takes "
                                               "--reward")
    assert main(["train", "--task", "worked", "--prompt-style", "chat", "--steps", "1"]) == 2
    assert "--prompt-style is not allowed with --task worked" in capsys.readouterr().err


def test_unknown_names_and_clashes_get_one_clear_error(toy_task, capsys):
    assert main(["evaluate", "--task", "chess"]) == 2
    assert capsys.readouterr().err.strip() == "error: task='chess' is not allowed: choose one of 'compact', 'worked', " \
                                              "'doubling'"
    with pytest.raises(ValueError, match="name 'steps' is not allowed: it already names task 'worked'"):
        register_task(TaskEntry("steps", "", make_doubling, policy="tiny-countdown", title="", compare_steps=1,
                                compare_eval_every=1))


def test_the_shipped_tasks_name_their_policy_and_budget():
    assert {name: (e.policy, e.budget) for name, e in TASKS.items()} == {
        "compact": ("tiny-countdown", {"max_new_tokens": 16, "overlong_cache": 4}),
        "worked": ("tiny-worked", {"max_new_tokens": 80, "overlong_cache": 32})}
    with pytest.warns(FutureWarning, match="'steps' is now called 'worked'"):
        assert get_task("steps") is TASKS["worked"]
    assert isinstance(TASKS["worked"].make(num_count=4), WorkedCountdown)
    # a task without a budget of its own gets 64 tokens and a quarter of them as DAPO's overlong zone
    assert task_budget(FunctionTask("plain", double_problem, double_reward)) == {"max_new_tokens": 64,
                                                                                 "overlong_cache": 16}


@pytest.mark.parametrize("name", ["compact", "worked"])
def test_heldout_n_is_the_whole_held_out_split(name):
    """compare's final evaluation takes every held-out problem: exactly heldout_n of them exist."""
    entry = TASKS[name]
    task = entry.make()
    assert len({p.key for p in task.problems("test", entry.heldout_n, seed=1)}) == entry.heldout_n
    with pytest.raises(ValueError, match=f"found only {entry.heldout_n} distinct problems"):
        task.problems("test", entry.heldout_n + 1, seed=1)
