"""The shipped worked-steps policy (tiny-worked): it loads offline (and the first one, tiny-steps, by its name), its
card is what `sft --task worked` writes, it lands in its bands on a quick check, and every algorithm trains on the
worked task end to end."""

import json
from contextlib import nullcontext

import pytest
import torch

from minirl import RLConfig, evaluate, load_policy
from minirl.card import worked_card
from minirl.cli import main
from minirl.plots import WORKED_METRICS, plot_runs
from minirl.policy import WORKED_POLICY
from minirl.tasks import WorkedCountdown, task_budget
from minirl.trainer import train

CARD = json.loads((WORKED_POLICY / "minirl_card.json").read_text())
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def worked_policy():
    return load_policy("tiny-worked", device="cpu")


def test_loads_offline_by_short_name_and_by_its_name(worked_policy):
    assert worked_policy.name == "minirl/tiny-worked"
    assert load_policy("minirl/tiny-worked", device="cpu").num_parameters == worked_policy.num_parameters
    first = load_policy("tiny-steps", device="cpu")  # the first worked-steps policy stays loadable by its name
    assert first.name == "minirl/tiny-steps" and first.identity() != worked_policy.identity()
    assert worked_policy.num_parameters == CARD["num_parameters"]
    assert "|" in worked_policy.tokenizer.get_vocab()  # the restart mark is one token
    assert worked_policy.model.config.max_position_embeddings >= 16 + task_budget(WorkedCountdown())["max_new_tokens"]


def test_folder_is_small_and_card_is_what_sft_writes():
    size = sum(f.stat().st_size for f in WORKED_POLICY.iterdir() if f.is_file())
    assert size <= 8 * 1024 * 1024
    readme = (WORKED_POLICY / "README.md").read_text()
    assert readme == worked_card(**CARD)
    assert "python -m minirl sft --task worked" in CARD["command"]


def test_card_numbers_are_in_the_bands_the_course_needs():
    three, four = CARD["evaluations"]
    assert (three["label"], four["label"]) == ("3 numbers", "4 numbers")
    assert 0.10 <= three["sampled"]["accuracy"] <= 0.35
    assert 0.02 <= four["sampled"]["accuracy"] < three["sampled"]["accuracy"]
    assert three["sampled"]["mean_length"] >= 14
    assert three["sampled"]["n_problems"] >= 300 and three["sampled"]["k"] >= 2
    # the budget leaves room to reason: at most 2 % cut, and DAPO's overlong ramp starts beyond 99 % of the answers
    budget = task_budget(WorkedCountdown())
    assert three["sampled"]["truncation_rate"] <= 0.02
    assert three["sampled"]["length_p99"] <= budget["max_new_tokens"] - budget["overlong_cache"]
    assert three["sampled"]["rate/attempts"] > 1.0  # it already retries sometimes


def test_quick_check_lands_in_the_bands(worked_policy):
    """100 held-out problems x 2 samples (a quick, noisier version of the card's measurement)."""
    three = evaluate(worked_policy, WorkedCountdown(num_count=3), n=100, greedy=False, k=2, seed=1)
    assert 0.05 <= three["accuracy"] <= 0.45
    assert three["mean_length"] >= 14 and three["format_rate"] > 0.8
    assert three["rate/attempts"] > 1.0


@pytest.mark.parametrize("algo", ["ppo", "grpo", "dapo"])
def test_every_algorithm_trains_on_the_worked_task(algo, tmp_path):
    policy = load_policy("tiny-worked", device="cpu")
    config = RLConfig.preset(algo, steps=2, batch_size=2, group_size=4, max_new_tokens=64, overlong_cache=16,
                             eval_every=0, eval_n=8, max_gen_batches=20)
    run = train(policy, WorkedCountdown(), config, run_dir=tmp_path / algo, progress=False)
    row = run.history[-1]
    assert row["step"] == 2 and row["completion_len_mean"] > 5
    assert {"reward/attempts", "reward/steps", "reward/arithmetic_ok", "reward/valid_steps"} <= set(row)
    assert row["reward/attempts"] >= 1.0
    # the lengths of right and wrong answers apart, weighted to the mean length
    assert {"completion_len_correct", "completion_len_incorrect", "truncation_rate"} <= set(row)
    right = row["reward/correct"]
    if 0 < right < 1:
        assert row["completion_len_mean"] == pytest.approx(
            right * row["completion_len_correct"] + (1 - right) * row["completion_len_incorrect"])
    fig = plot_runs(run, WORKED_METRICS)
    attempts = [ax.get_title() for ax in fig.axes].index("attempts per completion")
    assert type(fig.axes[attempts].yaxis.get_major_formatter()).__name__ != "PercentFormatter"  # a count, not a share


@pytest.mark.parametrize("name", ["worked", "steps"])  # its first name still works, with a warning
def test_cli_selects_the_worked_task_and_its_policy(name, tmp_path, capsys):
    args = ["train", "--task", name, "--algo", "grpo", "--steps", "1", "--batch-size", "2", "--group-size", "4",
            "--eval-n", "4", "--eval-every", "0", "--run-dir", str(tmp_path / "run"), "--quiet"]
    with pytest.warns(FutureWarning, match="'steps' is now called 'worked'") if name == "steps" else nullcontext():
        assert main(args) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["max_new_tokens"] == 80 and config["overlong_cache"] == 32  # the task's budget
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["policy"] == "minirl/tiny-worked" and "WorkedCountdown" in meta["task"]
    assert "grpo: 1 steps" in capsys.readouterr().out


def test_per_step_reward_runs_through_the_trainer(tmp_path):
    policy = load_policy("tiny-worked", device="cpu")
    config = RLConfig.preset("grpo", steps=1, batch_size=2, group_size=4, max_new_tokens=64, eval_every=0, eval_n=4)
    run = train(policy, WorkedCountdown(reward_scheme="per_step"), config, progress=False)
    row = run.history[-1]
    # per_step pays 0.1 per right step on top of 1 for a solution: the mean reward is above the correct rate
    assert row["reward_mean"] >= row["reward/correct"] and torch.isfinite(torch.tensor(row["reward_mean"]))
