"""minirl's names in TRL and verl (minirl/translate.py): every field in the table, and `to_trl` checked by TRL
itself: a real `trl.GRPOConfig` from each preset it can express, a clear refusal for the rest, and a GRPOTrainer
that trains the shipped policy with one (skipped, with the reason, where TRL is not installed)."""

import dataclasses
from pathlib import Path

import pytest

from minirl.config import PRESETS, ConfigError, RLConfig
from minirl.translate import NAMES, names_table, to_trl

# what TRL's GRPOTrainer cannot do for each preset that it refuses
REFUSED = {"ppo": ["advantage='gae'", "whiten_advantages=True"], "rloo": ["advantage='rloo'"],
           "dapo": ["dynamic_sampling=True", "overlong_punishment=True"], "dapo_nods": ["overlong_punishment=True"]}


def trl_or_skip():
    try:
        import trl
    except Exception as exc:  # noqa: BLE001 - a TRL that fails to import is as absent as a missing one
        pytest.skip(f"TRL is not importable ({exc}); the dev extra installs it: pip install -e '.[dev]'")
    return trl


def test_every_field_has_its_row_and_the_readme_shows_the_table():
    assert list(NAMES) == [f.name for f in dataclasses.fields(RLConfig)]
    readme = (Path(__file__).parents[1] / "minirl" / "README.md").read_text()
    table = readme.split("<!-- trl-verl-table -->\n")[1].split("\n<!-- /trl-verl-table -->")[0]
    assert table == names_table(), "minirl/README.md's TRL/verl table is stale: paste minirl.translate.names_table()"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_trl_cannot_express_is_refused_by_name(name):
    with pytest.raises(ConfigError) as err:
        to_trl(RLConfig.preset(name))
    for part in REFUSED[name]:
        assert part in str(err.value)


@pytest.mark.parametrize("name", sorted(set(PRESETS) - set(REFUSED)) + ["dapo_nods-without-overlong"])
def test_each_expressible_preset_is_a_real_grpo_config(name, tmp_path):
    trl = trl_or_skip()
    config = (RLConfig.preset("dapo_nods", overlong_punishment=False) if name == "dapo_nods-without-overlong"
              else RLConfig.preset(name))
    args = trl.GRPOConfig(output_dir=str(tmp_path), report_to="none", **to_trl(config))
    assert args.num_generations == config.group_size and args.beta == config.kl_coef
    assert args.learning_rate == config.lr and args.max_completion_length == config.max_new_tokens
    # one generation is one minibatch per optimiser step, `minibatches` steps per rollout
    assert args.generation_batch_size == config.samples_per_step
    assert args.steps_per_generation // args.gradient_accumulation_steps == config.minibatches
    assert args.num_iterations == config.epochs
    expected = {"grpo": ("grpo", "token", 0.2, 0.2), "dr_grpo": ("dr_grpo", "token", 0.2, 0.2),
                "gspo": ("grpo", "sequence", 3e-4, 4e-4), "cispo": ("cispo", "token", 1.0, 5.0),
                "dapo_nods-without-overlong": ("dapo", "token", 0.2, 0.28)}[name]
    assert (args.loss_type, args.importance_sampling_level, args.epsilon, args.epsilon_high) == expected


def test_micro_batches_and_processes_become_gradient_accumulation(tmp_path):
    trl = trl_or_skip()
    config = RLConfig.preset("grpo", micro_batch_size=16)  # 64 completions, one update, rows 16 at a time
    kwargs = to_trl(config, num_processes=2)
    assert (kwargs["per_device_train_batch_size"], kwargs["gradient_accumulation_steps"]) == (16, 2)
    trl.GRPOConfig(output_dir=str(tmp_path), report_to="none", **kwargs)
    with pytest.raises(ConfigError, match="minibatches=4 .*do not split into 4 minibatches on 3 processes"):
        to_trl(RLConfig.preset("cispo"), num_processes=3)


def test_trl_trains_the_shipped_policy_with_a_translated_config(tmp_path):
    """The real tool: GRPOTrainer takes the cispo preset's arguments and makes 2 optimiser steps from the
    shipped policy with the Countdown reward."""
    trl = trl_or_skip()
    datasets = pytest.importorskip("datasets", reason="GRPOTrainer needs a datasets.Dataset")
    import torch

    from minirl import Countdown, load_policy

    torch.set_num_threads(1)
    task = Countdown()
    problems = task.problems("train", 8, seed=0)
    answers = {p.prompt: p for p in problems}

    def countdown_reward(prompts, completions, **kwargs):
        return [task.score(answers[p], c).reward for p, c in zip(prompts, completions)]

    config = RLConfig.preset("cispo", batch_size=2, group_size=4, minibatches=2, steps=1)
    args = trl.GRPOConfig(output_dir=str(tmp_path), report_to="none", logging_steps=1, save_strategy="no",
                          use_cpu=True, dataloader_num_workers=0, **to_trl(config))
    policy = load_policy(device="cpu")
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = trl.GRPOTrainer(model=policy.model, reward_funcs=countdown_reward, args=args,
                              train_dataset=datasets.Dataset.from_list([{"prompt": p.prompt} for p in problems]),
                              processing_class=policy.tokenizer)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any((a - b).abs().max() > 0 for a, b in zip(policy.model.parameters(), before))
    assert any("cispo_clip_ratio" in row for row in trainer.state.log_history)


def test_a_kl_term_in_the_reward_is_refused():
    """GRPOTrainer's KL is a loss term: a GRPO config with the KL in the reward would translate into another run."""
    with pytest.raises(ConfigError, match="kl_placement='reward'"):
        to_trl(RLConfig.preset("grpo", kl_placement="reward"))
    assert to_trl(RLConfig.preset("grpo"))["beta"] == 0.04  # in the loss, as the preset has it
