"""The shipped worked-steps policy (tiny-steps): it loads offline, its card is what `sft --task steps` writes,
it lands in its bands on a quick check, and every algorithm trains on the steps task end to end."""

import json

import pytest
import torch

from minirl import RLConfig, evaluate, load_policy
from minirl.card import steps_card
from minirl.cli import main
from minirl.plots import STEPS_METRICS, plot_runs
from minirl.policy import STEPS_POLICY
from minirl.tasks import CountdownSteps
from minirl.trainer import train

CARD = json.loads((STEPS_POLICY / "minirl_card.json").read_text())
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def steps_policy():
    return load_policy("tiny-steps", device="cpu")


def test_loads_offline_by_short_name_and_by_its_name(steps_policy):
    assert steps_policy.name == "minirl/tiny-steps"
    assert load_policy("minirl/tiny-steps", device="cpu").num_parameters == steps_policy.num_parameters
    assert steps_policy.num_parameters == CARD["num_parameters"]
    assert "|" in steps_policy.tokenizer.get_vocab()  # the restart mark is one token
    assert steps_policy.model.config.max_position_embeddings >= 16 + CountdownSteps().max_new_tokens


def test_folder_is_small_and_card_is_what_sft_writes():
    size = sum(f.stat().st_size for f in STEPS_POLICY.iterdir() if f.is_file())
    assert size <= 8 * 1024 * 1024
    readme = (STEPS_POLICY / "README.md").read_text()
    assert readme == steps_card(**CARD)
    assert "python -m minirl sft --task steps" in CARD["command"]


def test_card_numbers_are_in_the_bands_the_course_needs():
    three, four = CARD["evaluations"]
    assert (three["label"], four["label"]) == ("3 numbers", "4 numbers")
    assert 0.10 <= three["sampled"]["accuracy"] <= 0.35
    assert 0.02 <= four["sampled"]["accuracy"] < three["sampled"]["accuracy"]
    assert three["sampled"]["mean_length"] >= 14
    assert three["sampled"]["n_problems"] >= 300 and three["sampled"]["k"] >= 2
    assert three["sampled"]["truncation_rate"] < 0.1  # 64 tokens leave room to grow
    assert three["sampled"]["rate/attempts"] > 1.0  # it already retries sometimes


def test_quick_check_lands_in_the_bands(steps_policy):
    """100 held-out problems x 2 samples (a quick, noisier version of the card's measurement)."""
    three = evaluate(steps_policy, CountdownSteps(num_count=3), n=100, greedy=False, k=2, seed=1)
    assert 0.05 <= three["accuracy"] <= 0.45
    assert three["mean_length"] >= 14 and three["format_rate"] > 0.8
    assert three["rate/attempts"] > 1.0


@pytest.mark.parametrize("algo", ["ppo", "grpo", "dapo"])
def test_every_algorithm_trains_on_the_steps_task(algo, tmp_path):
    policy = load_policy("tiny-steps", device="cpu")
    config = RLConfig.preset(algo, steps=2, batch_size=2, group_size=4, max_new_tokens=64, overlong_cache=16,
                             eval_every=0, eval_n=8, max_gen_batches=20)
    run = train(policy, CountdownSteps(), config, run_dir=tmp_path / algo, progress=False)
    row = run.history[-1]
    assert row["step"] == 2 and row["completion_len_mean"] > 5
    assert {"reward/attempts", "reward/steps", "reward/arithmetic_ok", "reward/valid_steps"} <= set(row)
    assert row["reward/attempts"] >= 1.0
    fig = plot_runs(run, STEPS_METRICS)
    assert [ax.get_title() for ax in fig.axes][4] == "attempts per completion"
    assert type(fig.axes[4].yaxis.get_major_formatter()).__name__ != "PercentFormatter"  # a count, not a share


def test_cli_selects_the_steps_task_and_its_policy(tmp_path, capsys):
    args = ["train", "--task", "steps", "--algo", "grpo", "--steps", "1", "--batch-size", "2", "--group-size", "4",
            "--eval-n", "4", "--eval-every", "0", "--run-dir", str(tmp_path / "run"), "--quiet"]
    assert main(args) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["max_new_tokens"] == 64 and config["overlong_cache"] == 16  # the task's budget
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["policy"] == "minirl/tiny-steps" and "CountdownSteps" in meta["task"]
    assert "grpo: 1 steps" in capsys.readouterr().out


def test_per_step_reward_runs_through_the_trainer(tmp_path):
    policy = load_policy("tiny-steps", device="cpu")
    config = RLConfig.preset("grpo", steps=1, batch_size=2, group_size=4, max_new_tokens=64, eval_every=0, eval_n=4)
    run = train(policy, CountdownSteps(reward_scheme="per_step"), config, progress=False)
    row = run.history[-1]
    # per_step pays 0.1 per right step on top of 1 for a solution: the mean reward is above the correct rate
    assert row["reward_mean"] >= row["reward/correct"] and torch.isfinite(torch.tensor(row["reward_mean"]))
